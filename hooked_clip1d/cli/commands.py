"""The ``hooked-clip1d`` command line: ``train`` (its flags and configs in ``cli.train``), ``eval``, ``demo``,
``list``, ``export``, ``ship-trajectory``, ``analyze``, ``sweep``, ``pack``, ``unpack``, ``reproduce`` and
``results-page``. ``eval`` and ``analyze`` take ``--checkpoint-index`` / ``--checkpoint-value`` (an epoch) to load a
checkpoint of a shipped trajectory or of a run directory's snapshots; ``list --checkpoints NAME`` lists them.

Each command is ``add_<command>_parser(sub)`` (its subcommand, flags and the function it runs) beside
``cmd_<command>``; ``build_parser`` calls them in order. The commands over many runs (``sweep``, ``pack``,
``unpack``, ``reproduce``, ``results-page``) live in ``cli.many_runs``, the train command's flags in ``cli.train``.
Every command prints a human-readable table and, with ``--json``, a machine-readable JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from hooked_clip1d._version import DEFAULT_MODEL, __version__
from hooked_clip1d.cli.many_runs import (  # sweeps, transfers and figures (torch-free at import too)
    add_pack_parser,
    add_reproduce_parser,
    add_results_page_parser,
    add_sweep_parser,
    add_unpack_parser,
)
from hooked_clip1d.cli.train import add_train_parser, train_configs  # the parser is built without torch
from hooked_clip1d.cli.util import dumps


def cmd_train(a: argparse.Namespace) -> int:
    from hooked_clip1d.evaluation import format_metrics
    from hooked_clip1d.training.run_config import RunConfig
    from hooked_clip1d.training.trainer import train

    cfg, data_cfg, tc, init = train_configs(a)
    if (
        a.engine == "batched"
    ):  # the stacked engine (hooked_clip1d.training.batched): same files, same trajectory, faster
        from hooked_clip1d.training.batched import train_fast

        # compiled steps draw dropout from one group stream ("fast"): the same distribution, not the same masks;
        # so do attention and embedding dropout, which matched masks do not cover
        extra_dropout = any(t.attn_dropout or t.embed_dropout for t in (cfg.vision, cfg.text))
        rng = "fast" if a.compile or extra_dropout else "matched"
        run = train_fast(
            RunConfig(cfg, data_cfg, tc),
            a.out,
            resume=a.resume,
            progress=not a.no_progress,
            compile=a.compile,
            dropout_rng=rng,
            init_model=init,
        )
    else:
        run = train(RunConfig(cfg, data_cfg, tc), a.out, resume=a.resume, progress=not a.no_progress, init_model=init)
    res = {
        "out_dir": str(run.out_dir),
        "epochs": run.epoch,
        "steps": run.step,
        "seconds": round(run.seconds, 1),
        "metrics": run.final_metrics,
    }
    if a.json:
        print(dumps(res))
    else:
        print(f"trained {run.epoch} epochs ({run.step} steps) in {run.seconds:.0f} s -> {run.out_dir}")
        print(format_metrics(run.final_metrics))
    return 0


def _load(spec: str, a: argparse.Namespace | None = None):
    """A pretrained name or a path to a .safetensors model / training run directory (``pretrained.resolve_model``),
    at the checkpoint that ``a.checkpoint_index`` / ``a.checkpoint_value`` name, if any."""
    from hooked_clip1d.pretrained import resolve_model

    index, value = getattr(a, "checkpoint_index", None), getattr(a, "checkpoint_value", None)
    return resolve_model(spec, checkpoint_index=index, checkpoint_value=value)


def _checkpointed(a: argparse.Namespace) -> bool:
    return getattr(a, "checkpoint_index", None) is not None or getattr(a, "checkpoint_value", None) is not None


def _add_checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint-index`` / ``--checkpoint-value``: TransformerLens's checkpoint arguments, one or the other."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "--checkpoint-index",
        type=int,
        default=None,
        metavar="I",
        help="load checkpoint I of the model's trajectory (-1: the last; `list --checkpoints NAME` lists them)",
    )
    g.add_argument(
        "--checkpoint-value",
        type=int,
        default=None,
        metavar="EPOCH",
        help="load the checkpoint of the model's trajectory at this epoch",
    )


def add_eval_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``eval`` command: retrieval accuracy of a model (or a checkpoint of its trajectory)."""
    p = sub.add_parser("eval", help="retrieval accuracy of a model on its dataset splits")
    p.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    _add_checkpoint_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_eval)
    return p


def cmd_eval(a: argparse.Namespace) -> int:
    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.evaluation import evaluate, format_metrics

    model = _load(a.model, a)
    if model.data_config is None:
        raise ValueError(f"{a.model} carries no data config")
    res = evaluate(model, build_dataset(model.data_config))
    print(dumps(res) if a.json else format_metrics(res))
    return 0


def add_demo_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``demo`` command: the README's accuracies, head bias and term ablations."""
    p = sub.add_parser("demo", help="accuracies, per-head left/right bias and term ablations, with a PNG plot")
    p.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    p.add_argument("--out", default="results/demo", help="where demo.png and demo.json go")
    p.set_defaults(out_is_folder=True)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_demo)
    return p


def cmd_demo(a: argparse.Namespace) -> int:
    from hooked_clip1d.cli.demo import format_demo, run_demo

    model = _load(a.model)
    res = run_demo(a.model, a.out, model=model)
    print(dumps(res) if a.json else format_demo(res))
    return 0


def add_list_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``list`` command: the shipped models, the zoo tables, a trajectory's checkpoints."""
    p = sub.add_parser("list", help="list the shipped pretrained models")
    form = p.add_mutually_exclusive_group()  # --json --markdown printed markdown, the JSON flag dropped
    form.add_argument("--json", action="store_true", help="print JSON")
    form.add_argument("--markdown", action="store_true", help="print the zoo tables of docs/zoo.md")
    p.add_argument(
        "--update",
        metavar="PAGE",
        default=None,
        help="with --markdown: write the tables into PAGE (docs/zoo.md) in place of its own, the rest kept",
    )
    p.add_argument(
        "--checkpoints",
        metavar="NAME",
        default=None,
        help="list the checkpoints (index, epoch, accuracy) of NAME's trajectory, or of a run directory's snapshots",
    )
    p.set_defaults(func=cmd_list)
    return p


def _list_checkpoints(a: argparse.Namespace) -> int:
    """``list --checkpoints NAME``: the checkpoints of a shipped trajectory (or of a run directory's snapshots)."""
    from hooked_clip1d.pretrained import list_checkpoints, list_pretrained, manifest, trajectory_manifest
    from hooked_clip1d.pretrained.precision import snapshot_metrics, stored_metrics

    epochs = list_checkpoints(a.checkpoints)
    if a.checkpoints not in list_pretrained():  # a run directory: its snapshots
        rows = [{"index": i, "epoch": e} for i, e in enumerate(epochs)]
        print(
            dumps({"run": a.checkpoints, "checkpoints": rows})
            if a.json
            else "\n".join(f"{i:>4}  epoch {e}" for i, e in enumerate(epochs))
        )
        return 0
    man = trajectory_manifest(a.checkpoints)
    final = manifest(a.checkpoints)
    rows = []
    for i, e in enumerate(epochs):
        last = e == man["final_epoch"]  # the shipped model: its manifest's accuracies
        acc = final["metrics"] if last else stored_metrics(man, e)
        dtype = f"{final.get('weights_dtype', 'float32')} (shipped model)" if last else man["dtypes"][str(e)]
        rows.append({"index": i, "epoch": e, "dtype": dtype, "unseen": acc["val_unseen"]["acc"]})
    only = [{"epoch": e, "unseen": m["val_unseen"]["acc"]} for e, m in sorted(snapshot_metrics(man).items())]
    if a.json:
        out = {"name": a.checkpoints, "dtype": man["dtype"], "checkpoints": rows}
        print(dumps({**out, "snapshot_accuracies": only} if only else out))
        return 0
    print(f"{a.checkpoints}: {len(rows)} checkpoints, stored as {man['dtype']}; the last is the shipped model")
    print(f"{'index':>5}  {'epoch':>6}  {'unseen-pair acc':>15}  stored as")
    for r in rows:
        print(f"{r['index']:>5}  {r['epoch']:>6}  {r['unseen']:>15.3f}  {r['dtype']}")
    if only:  # measured at shipping on run snapshots whose weights are not shipped
        print(f"and {len(only)} snapshots' accuracies recorded at shipping (accuracies only, no weights):")
        for r in only:
            print(f"{'-':>5}  {r['epoch']:>6}  {r['unseen']:>15.3f}  (accuracies only)")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained import list_pretrained, list_trajectories, manifest

    if a.update is not None and (not a.markdown or a.checkpoints):
        raise ValueError("--update PAGE writes the markdown tables: give it with --markdown, without --checkpoints")
    if a.checkpoints:
        return _list_checkpoints(a)
    rows = [manifest(n) for n in list_pretrained()]
    if a.markdown and a.update is not None:
        from hooked_clip1d.pretrained import update_zoo_tables

        changed = update_zoo_tables(a.update)  # a missing page or table: user_error's one line
        print(f"{a.update}: {'tables updated' if changed else 'already up to date'}")
        return 0
    if a.markdown:
        from hooked_clip1d.pretrained import registry_table, trajectory_table

        print(registry_table())
        print("\nTraining trajectories (`hooked-clip1d list --checkpoints NAME`):\n")
        print(trajectory_table())
        return 0
    trajectories: dict[str, Any] = {}
    stale: dict[str, str] = {}  # a listing still lists: a stale trajectory is marked, its loaders refuse it
    for n in list_trajectories():
        from hooked_clip1d.pretrained import StaleTrajectoryError, list_checkpoints

        try:
            trajectories[n] = list_checkpoints(n)
        except StaleTrajectoryError as err:
            stale[n] = str(err)
    if a.json:
        keys = ("name", "description", "epochs", "metrics")
        out = []
        for r in rows:
            row = {**{k: r[k] for k in keys}, "checkpoints": trajectories.get(r["name"])}
            if r["name"] in stale:
                row["trajectory_stale"] = stale[r["name"]]
            out.append(row)
        print(dumps(out))
    else:
        for r in rows:
            u = r["metrics"]["val_unseen"]["acc"]
            ck = trajectories.get(r["name"])
            mark = f"  [trajectory: {len(ck)} checkpoints]" if ck else ""
            mark = "  [trajectory: stale, ship it again]" if r["name"] in stale else mark
            print(f"{r['name']:<32} {r['epochs']:>6} epochs  unseen-pair acc {u:.3f}{mark}  {r['description']}")
    return 0


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``export`` command: a finished run shipped as a pretrained model."""
    p = sub.add_parser("export", help="ship a finished training run as a pretrained model (maintainers)")
    p.add_argument("run", help="training run directory")
    p.add_argument("--name", required=True)
    p.add_argument("--description", required=True)
    p.add_argument("--weights-dtype", default="float32", choices=["float32", "float16"], help="float16: half the file")
    p.add_argument(
        "--no-xz",
        dest="compress",
        action="store_false",
        help="keep the weights file plain (default: xz-compressed, <name>.safetensors.xz, ~0.78 of the bytes)",
    )
    p.set_defaults(func=cmd_export)
    return p


def cmd_export(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained.ship import export_run

    target = export_run(a.run, a.name, a.description, weights_dtype=a.weights_dtype, compress=a.compress)
    print(f"exported {a.run} -> {target}")
    return 0


def add_ship_trajectory_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``ship-trajectory`` command: a finished run's snapshots as a zoo model's trajectory."""
    p = sub.add_parser(
        "ship-trajectory",
        help="ship a finished run's snapshots as the training trajectory of a zoo model (maintainers)",
        description="ship RUN's snapshots as the trajectory of the zoo's NAME, which must have been exported from RUN "
        "(hooked-clip1d export RUN --name NAME ...): the last checkpoint is the shipped model, each other one is "
        "stored at the first of --dtypes that keeps its accuracies (measured and recorded)",
    )
    p.add_argument("run", help="finished training run directory with snapshots/ and model.safetensors")
    p.add_argument("--name", required=True, help="the zoo model exported from this run")
    p.add_argument(
        "--epochs", default=None, help="comma-separated epochs (default: 0, 1, 2, 5, ..., 700, 1000, every 500)"
    )
    p.add_argument("--dtypes", default="float16,bfloat16,float32", help="precisions to try, in order")
    _add_budget_argument(p)
    p.add_argument(
        "--tolerance-images",
        type=int,
        default=0,
        help="keep a precision whose accuracies differ from float32's by at most this many images (default 0: equal)",
    )
    p.add_argument(
        "--metrics-epochs",
        default="",
        help="snapshots measured, not stored: their float32 accuracies recorded (comma-separated epochs, or 'all')",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_ship_trajectory)
    return p


def _add_budget_argument(p: argparse.ArgumentParser) -> None:
    """``--budget-mb``, shared by the commands that write trajectories (``pretrained.ship`` imports no torch)."""
    from hooked_clip1d.pretrained.ship import TRAJECTORY_BUDGET_MB

    p.add_argument(
        "--budget-mb",
        type=float,
        default=TRAJECTORY_BUDGET_MB,
        help=f"refuse if all shipped trajectories would exceed this (MB; default {TRAJECTORY_BUDGET_MB:g})",
    )


def add_repack_trajectory_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``repack-trajectory`` command: a shipped trajectory rewritten (today's format, fewer checkpoints)."""
    p = sub.add_parser(
        "repack-trajectory",
        help="rewrite a shipped trajectory in today's format, optionally keeping fewer checkpoints (maintainers)",
        description="rewrite the shipped trajectory of the zoo's NAME as xz-compressed parts, keeping the checkpoints "
        "at --epochs (default: all; the last, the shipped model, always) bit for bit with their recorded rows; no "
        "training run needed",
    )
    p.add_argument("name", help="a zoo model that ships a trajectory")
    p.add_argument("--epochs", default=None, help="comma-separated epochs to keep (default: all)")
    _add_budget_argument(p)
    p.set_defaults(func=cmd_repack_trajectory)
    return p


def cmd_repack_trajectory(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained import trajectory_manifest
    from hooked_clip1d.pretrained.ship import repack_trajectory

    target = repack_trajectory(a.name, epochs=_epoch_list(a.epochs), budget_mb=a.budget_mb)
    man = trajectory_manifest(a.name)
    dropped = man["source"]["repacked"]["dropped"]
    print(f"repacked {len(man['epochs'])} checkpoints of {a.name} -> {target} ({man['bytes'] / 1e6:.2f} MB)")
    print("dropped epochs: " + (", ".join(map(str, dropped)) or "none"))
    return 0


def _epoch_list(text: str | None, flag: str = "--epochs") -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"{flag} must be a comma-separated list of epochs, e.g. 0,1,2,5,10000; got {text!r}") from None


def cmd_ship_trajectory(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained import trajectory_manifest
    from hooked_clip1d.pretrained.ship import ship_trajectory

    dtypes = [d for d in a.dtypes.split(",") if d]
    target = ship_trajectory(
        a.run,
        a.name,
        epochs=_epoch_list(a.epochs),
        dtypes=dtypes,
        budget_mb=a.budget_mb,
        tolerance_images=a.tolerance_images,
        metrics_epochs="all"
        if a.metrics_epochs == "all"
        else (_epoch_list(a.metrics_epochs, "--metrics-epochs") or []),
    )
    man = trajectory_manifest(a.name)
    res = {k: man[k] for k in ("name", "epochs", "dtype", "dtypes", "bytes", "sha256")}
    if a.json:
        print(dumps({**res, "file": str(target)}))
    else:
        print(f"shipped {len(man['epochs'])} checkpoints of {a.name} -> {target} ({man['bytes'] / 1e6:.2f} MB)")
        tol = f", within {a.tolerance_images} images" if a.tolerance_images else ""
        print(f"stored as {man['dtype']} (each at the first of {', '.join(dtypes)} that keeps its accuracies{tol})")
        print("epochs: " + ", ".join(map(str, man["epochs"])))
        print("update docs/zoo.md: `hooked-clip1d list --markdown --update docs/zoo.md`")
    return 0


def add_analyze_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``analyze`` command: one family of analyses on a model (``-o KEY=VALUE`` options)."""
    p = sub.add_parser(
        "analyze",
        help="run one family of analyses on a model: table + PNG + JSON",
        description="run one family of analyses (an unknown name lists them, with what each does)",
    )
    p.add_argument("analysis", help="analysis family, e.g. heads, decompose, patching (list: all, with options)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    p.add_argument("--out", default=None, help="output folder (default results/analyze/<model>)")
    p.set_defaults(out_is_folder=True)
    _add_checkpoint_flags(p)
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="analysis option, e.g. layer=1 (`analyze list` shows every family's options)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (e.g. pruning's retraining)")
    p.set_defaults(func=cmd_analyze)
    return p


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["layer=1", "center=true"]`` -> ``{"layer": 1, "center": True}`` (values parsed as JSON when they can be;
    ``True`` / ``False`` / ``None`` as Python spells them too, so ``center=False`` is not the string "False"): the
    ``analyze`` command's ``-o KEY=VALUE`` options.

    Example:
        >>> parse_options(["layer=1", "center=False", "kept=[1,2]", "image=C . 1"])
        {'layer': 1, 'center': False, 'kept': [1, 2], 'image': 'C . 1'}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad option {item!r}: expected KEY=VALUE, e.g. layer=1")
        try:
            out[key] = json.loads({"True": "true", "False": "false", "None": "null"}.get(value, value))
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_analyze(a: argparse.Namespace) -> int:
    from hooked_clip1d.cli.analyze import check_options, describe_analyses, run_analysis

    if a.analysis == "list":
        print("analysis families (hooked-clip1d analyze NAME [-o KEY=VALUE ...]):\n" + describe_analyses())
        return 0
    options = parse_options(a.option)
    check_options(a.analysis, options)  # here too: -o model=... would collide with run_analysis's own arguments
    model: Any = a.model
    out = a.out or f"results/analyze/{Path(a.model).name}"
    if _checkpointed(a):  # a checkpoint of a trajectory: loaded here, named with its epoch by run_analysis
        model = _load(a.model, a)
        epoch = (getattr(model, "manifest", None) or {}).get("checkpoint", {}).get("epoch")
        if epoch is None:  # a run directory's snapshot
            from hooked_clip1d.pretrained import checkpoint_epoch, list_checkpoints

            epoch = checkpoint_epoch(list_checkpoints(a.model), a.checkpoint_index, a.checkpoint_value)
        out = a.out or f"results/analyze/{Path(a.model).name}-epoch{epoch}"
    res = run_analysis(a.analysis, model, out_dir=out, progress=not a.no_progress, **options)
    if a.json:
        print(dumps({k: v for k, v in res.items() if k != "table"}))
    else:
        print(res["table"])
        print("\nwrote " + ", ".join(res["files"]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one ``add_<command>_parser(sub)`` per command, each adding its subcommand, its flags and
    the function it runs. It imports no torch: defaults come from the torch-free ``settings``, and analysis and
    figure names are checked when a command runs, so ``--help`` and argument errors answer at once.

    Example:
        >>> build_parser().parse_args(["eval", "--checkpoint-index", "-1"]).checkpoint_index
        -1
    """
    p = argparse.ArgumentParser(
        prog="hooked-clip1d",
        description="Train, load, hook, dissect and visualise the tiny 1D CLIP models of arXiv 2601.12809.",
    )
    p.add_argument("--version", action="version", version=f"hooked-clip1d {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_train_parser(sub).set_defaults(func=cmd_train)
    for add in (  # in the order `--help` lists them
        add_eval_parser,
        add_demo_parser,
        add_list_parser,
        add_analyze_parser,
        add_sweep_parser,
        add_reproduce_parser,
        add_results_page_parser,
        add_pack_parser,
        add_unpack_parser,
        add_export_parser,
        add_ship_trajectory_parser,
        add_repack_trajectory_parser,
    ):
        add(sub)
    return p


def user_error(e: BaseException) -> str | None:
    """The one-line message for an error a user can cause, or None for a bug of ours (it keeps its traceback).

    A user causes a bad value or name (``ValueError``), a busy or used run folder, a diverged run, and a path that is
    missing, in the way, not a folder or not writable; an error the system raised on a path names that path, never
    as a raw ``[Errno N]``. Anything else (a ``TypeError``, a ``KeyError``, ...) is a bug of ours.

    Example:
        >>> user_error(PermissionError(13, "Permission denied", "/zoo/trajectories"))
        '/zoo/trajectories: Permission denied'
        >>> user_error(TypeError("unsupported operand")) is None
        True
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "afile"; _ = f.write_text("")
        >>> user_error(NotADirectoryError(20, "Not a directory", str(f / "fig6"))).endswith("choose another path")
        True
    """
    from hooked_clip1d.training.rundir import RunDirBusy

    if isinstance(e, (FileExistsError, NotADirectoryError)) and e.filename is not None and e.strerror:
        in_way = _file_in_the_way(Path(str(e.filename)))  # mkdir over a file: name the file, not the errno
        if in_way is not None:
            inside = "" if str(in_way) == str(e.filename) else f" (to hold {str(e.filename)!r})"
            return f"{str(in_way)!r} is a file, where a folder is needed{inside}: move it or choose another path"
    if isinstance(e, OSError) and e.filename is not None and e.strerror:  # raised by the system, on a path
        return " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None) + f": {e.strerror}"
    path_errors = (FileExistsError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
    if isinstance(e, (ValueError, RunDirBusy, FloatingPointError, *path_errors)):
        return str(e)
    return None


def _file_in_the_way(path: Path) -> Path | None:
    """The path itself or its nearest existing ancestor, where that is a file (not a folder); else None."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            return p if not p.is_dir() else None
    return None


def main(argv: list[str] | None = None) -> int:
    """The ``hooked-clip1d`` command: parse ``argv`` and run its command. A user's mistake (``user_error``) is one
    line on stderr and exit code 2; a stopped training exits 128 + its signal; a bug keeps its traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(args)
    from hooked_clip1d.training.rundir import TrainingInterrupted

    try:
        if getattr(a, "out_is_folder", False) and a.out is not None and _file_in_the_way(Path(a.out)) is not None:
            raise NotADirectoryError(20, "Not a directory", a.out)  # before any work (user_error names the file)
        return a.func(a)
    except TrainingInterrupted as e:  # SIGTERM / Ctrl-C: the training checkpointed and stopped
        print(f"hooked-clip1d {a.command}: {e}", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:  # e.g. `hooked-clip1d list | head`: the reader left; not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (python would flush the dead pipe again at exit)
        except OSError:
            pass
        return 0
    except Exception as e:
        message = user_error(e)
        if message is None:
            raise
        print(f"hooked-clip1d {a.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
