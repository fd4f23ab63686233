"""The ``hooked-clip1d`` command line: ``train``, ``eval``, ``demo``, ``list``, ``export``, ``reproduce``,
``results-page`` (and, from their modules, ``analyze`` and ``sweep``).

Every command prints a human-readable table and, with ``--json``, a machine-readable JSON object instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d._version import DEFAULT_MODEL, __version__

if TYPE_CHECKING:  # the parser is built without torch: --help and argument errors answer at once
    from hooked_clip1d.clip import CLIP1D, CLIPConfig
    from hooked_clip1d.data import DataConfig


def _dumps(obj: Any) -> str:
    """JSON for the terminal: indented, floats to 7 significant digits (float32's precision, so 0.93 is not printed
    as 0.9300000071525574), tensors and numpy scalars as numbers."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, float):
            return float(f"{x:.7g}")
        return x

    return json.dumps(clean(json.loads(json.dumps(obj, default=float))), indent=2)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--preset", default="simplified", help="preset of both towers: simplified | full")
    g.add_argument("--vision-preset", default=None, help="preset of the vision tower (default: --preset)")
    g.add_argument("--text-preset", default=None, help="preset of the text tower (default: --preset)")
    g.add_argument("--vision-layers", type=int, default=None, help="override n_layers of the vision tower")
    g.add_argument("--text-layers", type=int, default=None, help="override n_layers of the text tower")
    g.add_argument("--vision-heads", type=int, default=None, help="override n_heads of the vision tower")
    g.add_argument("--positional", default=None, choices=["learned", "rope", "none"], help="vision positional type")
    g.add_argument("--text-positional", default=None, choices=["learned", "rope", "none"], help="text positional type")
    g.add_argument(
        "--init-std", type=float, default=None, help="std of the W_E / W_pos init (default 0.02; 1.0 is nn.Embedding's)"
    )
    g.add_argument(
        "--prune-vision-heads",
        default=None,
        metavar="L:H,...",
        help="vision heads to prune (zeroed output), e.g. 0:1,0:3 keeps heads 0 and 2 of layer 0 (App. K)",
    )
    g.add_argument(
        "--ablate-vision-terms",
        default=None,
        metavar="T,...",
        help="layer-0 vision attention terms removed in every forward pass, training included, e.g. EP "
        "(training-time ablation, beyond the paper; standard engine only)",
    )
    g.add_argument("--dropout", type=float, default=None, help="dropout p (paper: 0.1)")
    g.add_argument(
        "--init-from",
        default=None,
        metavar="MODEL",
        help="start from these weights (pretrained name, model .safetensors or run dir) instead of a fresh init; "
        "the architecture is the loaded model's; with --prune-vision-heads: App. K's prune-and-retrain",
    )


def _add_data_args(p: argparse.ArgumentParser, load: bool = True) -> None:
    if load:
        from hooked_clip1d.data import DataConfig

        d: Any = DataConfig()
    else:
        d = argparse.Namespace(n_labels=None, n_heldout=None, n1=None, n2=None, n_val=None, caption_mode="left")
    g = p.add_argument_group("data")
    g.add_argument("--n-labels", type=int, default=d.n_labels, help="Ntot (paper Fig. 4: 20)")
    g.add_argument("--n-heldout", type=int, default=d.n_heldout, help="Nval held-out labels (paper: 5)")
    g.add_argument("--n1", type=int, default=d.n1, help="single-object images per label (paper: 5)")
    g.add_argument("--n2", type=int, default=d.n2, help="images per ordered training pair (paper Fig. 4: 10)")
    g.add_argument("--n-val", type=int, default=d.n_val, help="validation images per label / pair (paper: 5)")
    g.add_argument("--caption-mode", default=d.caption_mode, choices=["left", "left_right"])
    g.add_argument("--data-seed", type=int, default=None, help="dataset seed (default: --seed)")


def parse_heads(spec: str) -> tuple[tuple[int, int], ...]:
    """``"0:1,0:3"`` -> ``((0, 1), (0, 3))``: (layer, head) pairs.

    Example:
        >>> parse_heads("0:1, 1:3")
        ((0, 1), (1, 3))
    """
    out = []
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(x.strip().isdigit() for x in parts):
            raise ValueError(f"bad head {item!r} in {spec!r}: expected LAYER:HEAD, e.g. 0:1,0:3")
        out.append((int(parts[0]), int(parts[1])))
    return tuple(out)


def _model_cfg(a: argparse.Namespace) -> CLIPConfig:
    from hooked_clip1d.clip import CLIPConfig

    v_over: dict[str, Any] = {}
    t_over: dict[str, Any] = {}
    if a.vision_layers:
        v_over["n_layers"] = a.vision_layers
    if a.text_layers:
        t_over["n_layers"] = a.text_layers
    if a.vision_heads:
        v_over["n_heads"] = a.vision_heads
    if a.positional:
        v_over["positional"] = a.positional
    if a.text_positional:
        t_over["positional"] = a.text_positional
    if a.prune_vision_heads:
        v_over["pruned_heads"] = parse_heads(a.prune_vision_heads)
    if a.ablate_vision_terms:
        v_over["ablated_terms"] = tuple(t.strip() for t in a.ablate_vision_terms.split(",") if t.strip())
    shared: dict[str, Any] = {} if a.init_std is None else {"init_std": a.init_std}
    return CLIPConfig.from_preset(
        a.vision_preset or a.preset,
        a.text_preset or a.preset,
        n_labels=a.n_labels,
        dropout=0.1 if a.dropout is None else a.dropout,
        **shared,
        vision_overrides=v_over,
        text_overrides=t_over,
    )


def _data_cfg(a: argparse.Namespace) -> DataConfig:
    from hooked_clip1d.data import DataConfig

    return DataConfig(
        n_labels=a.n_labels,
        n_heldout=a.n_heldout,
        n1=a.n1,
        n2=a.n2,
        n_val=a.n_val,
        caption_mode=a.caption_mode,
        seed=a.seed if a.data_seed is None else a.data_seed,
    )


_SHAPE_FLAGS = ("vision_preset", "text_preset", "vision_layers", "text_layers", "vision_heads", "positional",
                "text_positional", "init_std", "dropout", "ablate_vision_terms")  # fmt: skip


def _init_model(a: argparse.Namespace) -> CLIP1D | None:
    """The ``--init-from`` model (a pretrained name, a model .safetensors or a run directory), pruned as asked."""
    if a.init_from is None:
        return None
    from hooked_clip1d.analysis.pruning import prune_heads
    from hooked_clip1d.checkpoint import load_model_file
    from hooked_clip1d.pretrained import list_pretrained, load_model

    given = [f"--{f.replace('_', '-')}" for f in _SHAPE_FLAGS if getattr(a, f) is not None]
    if given or a.preset != "simplified":
        raise ValueError(f"--init-from takes the architecture from the loaded model; drop {given or ['--preset']}")
    src = Path(a.init_from)
    if a.init_from in list_pretrained():
        model = load_model(a.init_from)
    elif src.is_dir():
        model = load_model_file(src / "model.safetensors")
    elif src.is_file():
        model = load_model_file(src)
    else:
        raise ValueError(f"--init-from {a.init_from!r} is neither a pretrained name ({list_pretrained()}) nor a file")
    if model.cfg.n_labels != a.n_labels:
        raise ValueError(f"--init-from model has n_labels={model.cfg.n_labels} but --n-labels is {a.n_labels}")
    if a.prune_vision_heads:
        model = prune_heads(model, vision=parse_heads(a.prune_vision_heads))
    return model


def _given(a: argparse.Namespace) -> set[str]:
    """The train flags given on the command line (their value differs from the parser's default)."""
    defaults = vars(build_parser("train").parse_args(["train", "--out", str(a.out)]))
    return {k for k, v in vars(a).items() if k in defaults and v != defaults[k] and k not in ("func", "command")}


def _resume_configs(a: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``--resume``: the run's own configs from ``config.json``; flags given must agree (an error names the field
    and both values), except the execution settings (epochs, eval/checkpoint every, device, threads)."""
    from hooked_clip1d.clip import CLIPConfig
    from hooked_clip1d.data import DataConfig
    from hooked_clip1d.training import TrainConfig

    path = Path(a.out) / "config.json"
    saved = json.loads(path.read_text())
    model_cfg = CLIPConfig.from_dict(saved["model_config"])
    data_cfg = DataConfig.from_dict(saved["data_config"])
    tc = TrainConfig.from_dict(saved["train_config"])
    given = _given(a)
    diffs = []
    for flag, field in (("lr", "lr"), ("weight_decay", "weight_decay"), ("batch_size", "batch_size"),
                        ("seed", "seed")):  # fmt: skip
        if flag in given and getattr(a, flag) != getattr(tc, field):
            diffs.append(f"train_config.{field}: the run has {getattr(tc, field)!r}, --{flag.replace('_', '-')} "
                         f"says {getattr(a, flag)!r}")  # fmt: skip
    if given & {"recipe", "no_decay", "frozen"}:
        no_decay, frozen, init_std = _recipe_fields(a)
        for f, v in (("no_decay", no_decay), ("frozen", frozen)):
            if tuple(sorted(set(v))) != getattr(tc, f):
                diffs.append(f"train_config.{f}: the run has {list(getattr(tc, f))}, the flags say {sorted(set(v))}")
        if init_std is not None and init_std != model_cfg.vision.init_std:
            diffs.append(f"model_config.vision.init_std: the run has {model_cfg.vision.init_std!r}, the flags say "
                         f"{init_std!r}")  # fmt: skip
    data_flags = {"n_labels", "n_heldout", "n1", "n2", "n_val", "caption_mode", "data_seed"}
    if given & data_flags:
        want = _data_cfg(argparse.Namespace(**{**vars(a), "seed": a.seed if "seed" in given else tc.seed}))
        for f in ("n_labels", "n_heldout", "n1", "n2", "n_val", "caption_mode", "seed"):
            if getattr(want, f) != getattr(data_cfg, f) and (({"seed", "data_seed"} if f == "seed" else {f}) & given):
                diffs.append(
                    f"data_config.{f}: the run has {getattr(data_cfg, f)!r}, the flags say {getattr(want, f)!r}"
                )
    if given & {*_SHAPE_FLAGS, "preset", "prune_vision_heads"}:
        want = _model_cfg(a).to_dict()
        have = model_cfg.to_dict()
        for tower in ("vision", "text"):
            for f, v in want[tower].items():
                if f not in ("init_seed", "n_labels") and have[tower].get(f) != v:
                    diffs.append(f"model_config.{tower}.{f}: the run has {have[tower].get(f)!r}, the flags say {v!r}")
    if diffs:
        raise ValueError(f"--resume {str(a.out)!r}: flags disagree with the run: " + "; ".join(diffs))
    tc = dataclasses.replace(
        tc,
        epochs=a.epochs if "epochs" in given else tc.epochs,
        eval_every=a.eval_every if "eval_every" in given else tc.eval_every,
        checkpoint_every=a.checkpoint_every if "checkpoint_every" in given else tc.checkpoint_every,
        device=a.device,
        threads=a.threads,
    )
    return model_cfg, data_cfg, tc


def _recipe_fields(a: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...], float | None]:
    """``(no_decay, frozen, init_std)`` asked for by ``--recipe`` / ``--no-decay`` / ``--frozen`` / ``--init-std``
    (explicit flags override the recipe; None init_std = the config default)."""
    from hooked_clip1d.param_groups import RECIPES
    from hooked_clip1d.training import TrainConfig

    rec = RECIPES[a.recipe] if a.recipe else {}
    default = TrainConfig()

    def groups(flag: str | None, key: str, dflt: tuple[str, ...]) -> tuple[str, ...]:
        if flag is not None:
            return tuple(g.strip() for g in flag.split(",") if g.strip())
        return tuple(rec.get(key, dflt))

    init_std = a.init_std if a.init_std is not None else rec.get("model.init_std")
    return (
        groups(a.no_decay, "train.no_decay", default.no_decay),
        groups(a.frozen, "train.frozen", default.frozen),
        init_std,
    )


def cmd_train(a: argparse.Namespace) -> int:
    from hooked_clip1d.evaluation import format_metrics
    from hooked_clip1d.training import TrainConfig, train

    if a.resume and (Path(a.out) / "config.json").exists():
        if a.init_from:
            raise ValueError("--init-from starts a new run; it cannot be combined with --resume")
        cfg, data_cfg, tc = _resume_configs(a)
        init = None
    else:
        no_decay, frozen, init_std = _recipe_fields(a)
        tc = TrainConfig(
            lr=a.lr,
            weight_decay=a.weight_decay,
            no_decay=no_decay,
            frozen=frozen,
            epochs=a.epochs,
            batch_size=a.batch_size,
            seed=a.seed,
            eval_every=a.eval_every,
            checkpoint_every=a.checkpoint_every,
            device=a.device,
            threads=a.threads,
        )
        init = _init_model(a)
        cfg = _model_cfg(argparse.Namespace(**{**vars(a), "init_std": init_std})) if init is None else init.cfg
        data_cfg = _data_cfg(a)
    if a.engine == "batched":  # the stacked engine (hooked_clip1d.batched): same files, same trajectory, faster
        from hooked_clip1d.batched import train_fast

        # compiled steps draw dropout from one group stream ("fast"): the same distribution, not the same masks
        rng = "fast" if a.compile else "matched"
        run = train_fast(
            cfg, data_cfg, tc, a.out, resume=a.resume, progress=not a.no_progress, compile=a.compile,
            dropout_rng=rng, init_model=init,
        )  # fmt: skip
    else:
        run = train(cfg, data_cfg, tc, a.out, resume=a.resume, progress=not a.no_progress, init_model=init)
    res = {
        "out_dir": str(run.out_dir),
        "epochs": run.epoch,
        "steps": run.step,
        "seconds": round(run.seconds, 1),
        "metrics": run.final_metrics,
    }
    if a.json:
        print(_dumps(res))
    else:
        print(f"trained {run.epoch} epochs ({run.step} steps) in {run.seconds:.0f} s -> {run.out_dir}")
        print(format_metrics(run.final_metrics))
    return 0


def _load(spec: str):
    """A pretrained name or a path to a .safetensors model / training run directory (``pretrained.resolve_model``)."""
    from hooked_clip1d.pretrained import resolve_model

    return resolve_model(spec)


def cmd_eval(a: argparse.Namespace) -> int:
    from hooked_clip1d.data import build_dataset
    from hooked_clip1d.evaluation import evaluate, format_metrics

    model = _load(a.model)
    if model.data_config is None:
        raise ValueError(f"{a.model} carries no data config")
    res = evaluate(model, build_dataset(model.data_config))
    print(_dumps(res) if a.json else format_metrics(res))
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from hooked_clip1d.demo import format_demo, run_demo

    model = _load(a.model)
    res = run_demo(a.model, a.out, model=model)
    print(_dumps(res) if a.json else format_demo(res))
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained import list_pretrained, manifest

    rows = [manifest(n) for n in list_pretrained()]
    if a.markdown:
        from hooked_clip1d.pretrained import registry_table

        print(registry_table())
        return 0
    if a.json:
        print(_dumps([{k: r[k] for k in ("name", "description", "epochs", "metrics")} for r in rows]))
    else:
        for r in rows:
            u = r["metrics"]["val_unseen"]["acc"]
            print(f"{r['name']:<32} {r['epochs']:>6} epochs  unseen-pair acc {u:.3f}  {r['description']}")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from hooked_clip1d.pretrained import export_run

    target = export_run(a.run, a.name, a.description, weights_dtype=a.weights_dtype)
    print(f"exported {a.run} -> {target}")
    return 0


def _parse_options(items: list[str]) -> dict[str, Any]:
    """``["layer=1", "center=true"]`` -> ``{"layer": 1, "center": True}`` (values parsed as JSON when they can be)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad option {item!r}: expected KEY=VALUE, e.g. layer=1")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_analyze(a: argparse.Namespace) -> int:
    from hooked_clip1d.analyze import run_analysis

    out = a.out or f"results/analyze/{Path(a.model).name}"
    res = run_analysis(a.analysis, a.model, out_dir=out, **_parse_options(a.option))
    if a.json:
        print(_dumps({k: v for k, v in res.items() if k != "table"}))
    else:
        print(res["table"])
        print("\nwrote " + ", ".join(res["files"]))
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweep import format_results, run_sweep

    rows = run_sweep(
        a.spec,
        a.out,
        device=a.device,
        progress=not a.no_progress,
        runner=a.runner,
        max_steps=a.max_steps,
        compile=True if a.compile else None,
        workers=a.workers,
        threads=a.threads,
        max_seconds=a.max_seconds,
        cudagraphs=True if a.cudagraphs else None,
    )
    print(_dumps(rows) if a.json else format_results(rows))
    return 0


def cmd_pack(a: argparse.Namespace) -> int:
    from hooked_clip1d.transfer import pack_runs

    archives = pack_runs(a.src, a.dest, max_mib=a.max_mib, weights_dtype=a.weights_dtype)
    rows = [{"archive": str(p), "mib": round(p.stat().st_size / 2**20, 2)} for p in archives]
    if a.json:
        print(_dumps(rows))
    else:
        for r in rows:
            print(f"{r['archive']}  {r['mib']} MiB")
    return 0


def cmd_unpack(a: argparse.Namespace) -> int:
    from hooked_clip1d.transfer import unpack_runs

    names = unpack_runs(a.archives, a.into)
    print(_dumps(names) if a.json else f"{len(names)} runs in {os.path.join(a.into, 'runs')}: " + ", ".join(names))
    return 0


def cmd_reproduce(a: argparse.Namespace) -> int:
    from hooked_clip1d.reproduce import FIGURES, reproduce

    if a.figure != "all" and a.figure not in FIGURES:
        raise ValueError(f"unknown figure {a.figure!r}; known: {', '.join(sorted(FIGURES))}, all")
    figures = sorted(FIGURES) if a.figure == "all" else [a.figure]
    records = []
    for fig in _progress(figures, desc="reproduce", disable=len(figures) == 1):
        records.append(
            reproduce(
                fig,
                out_dir=a.out,
                train_sweeps=not a.no_sweeps,
                compile_sweeps=True if a.compile else None,
                sweep_device=a.device,
                sweep_workers=a.workers,
                sweeps_dir=a.sweeps_dir,
                sweep_max_seconds=a.max_seconds,
            )
        )
    if a.json:
        print(_dumps(records))
    else:
        for r in records:
            print(f"{r['figure']:<8} {r['verdict']:<15} {r['title']}")
            print(f"         {r['summary']}")
            for c in r["checks"]:
                print(f"         [{'x' if c['holds'] else ' '}] {c['check']}")
        where = ", ".join(f"{a.out}/{r['figure']}/" for r in records)
        print(f"wrote {where} (JSON + PNG); `hooked-clip1d results-page` builds docs/results.md")
    return 0


def cmd_results_page(a: argparse.Namespace) -> int:
    from hooked_clip1d.results_page import build_results_page

    path = build_results_page(a.results, a.out)
    print(_dumps({"page": str(path)}) if a.json else f"wrote {path}")
    return 0


def _progress(items: list[str], desc: str, disable: bool = False):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=disable)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the subcommand being run (``command``) loads what its arguments need (config
    defaults, analysis and figure names), so ``--help`` and argument errors answer without importing torch."""
    p = argparse.ArgumentParser(
        prog="hooked-clip1d",
        description="Train, load, hook, dissect and visualise the tiny 1D CLIP models of arXiv 2601.12809.",
    )
    p.add_argument("--version", action="version", version=f"hooked-clip1d {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser(
        "train",
        help="train one model with the paper's hyperparameters",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_model_args(t)
    _add_data_args(t, load=command == "train")
    if command == "train":
        from hooked_clip1d.training import TrainConfig

        tc = TrainConfig()
    else:
        tc = argparse.Namespace(epochs=None, lr=None, weight_decay=None, seed=None, eval_every=None,
                                checkpoint_every=None)  # fmt: skip
    g = t.add_argument_group("training")
    g.add_argument("--out", required=True, help="run directory (metrics.jsonl, checkpoints, model.safetensors)")
    g.add_argument("--epochs", type=int, default=tc.epochs, help="paper: 10000")
    g.add_argument("--lr", type=float, default=tc.lr, help="paper: 1e-4")
    g.add_argument("--weight-decay", type=float, default=tc.weight_decay, help="paper: 0.2")
    g.add_argument("--batch-size", type=int, default=None, help="paper: 50 (left) / 100 (left_right)")
    g.add_argument("--seed", type=int, default=tc.seed)
    recipes = None
    if command == "train":
        from hooked_clip1d.param_groups import DEFAULT_RECIPE, RECIPES

        recipes = sorted(RECIPES)
    g.add_argument(
        "--recipe",
        default=None,
        choices=recipes,
        help="a named recipe of the recipe study (which parameters are decayed or frozen, embedding init); "
        f"default: the package's defaults (= {DEFAULT_RECIPE if command == 'train' else 'the reproducing recipe'}); "
        "--no-decay / --frozen / --init-std override it",
    )
    g.add_argument(
        "--no-decay",
        default=None,
        metavar="G,...",
        help="parameter groups exempt from weight decay: cls, embeddings, biases, norms, logit_scale ('' = none)",
    )
    g.add_argument(
        "--frozen", default=None, metavar="G,...", help="parameter groups held at their init: qk_bias ('' = none)"
    )
    g.add_argument("--eval-every", type=int, default=tc.eval_every, help="epochs between metric lines")
    g.add_argument("--checkpoint-every", type=int, default=tc.checkpoint_every, help="epochs between checkpoints")
    g.add_argument("--device", default="cpu")
    g.add_argument("--threads", type=int, default=None, help="torch threads")
    g.add_argument("--resume", action="store_true", help="continue the run in --out")
    g.add_argument(
        "--engine",
        default="standard",
        choices=["standard", "batched"],
        help="standard: the hooked model (Trainer); batched: the stacked fast engine (same trajectory, 3-6x faster)",
    )
    g.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the batched engine's step (dropout then draws from one group stream; "
        "pass it again with --resume)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="retrieval accuracy of a model on its dataset splits")
    e.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    e.add_argument("--json", action="store_true", help="print JSON")
    e.set_defaults(func=cmd_eval)

    d = sub.add_parser("demo", help="accuracies, per-head left/right bias and term ablations, with a PNG plot")
    d.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    d.add_argument("--out", default="results/demo", help="where demo.png and demo.json go")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.set_defaults(func=cmd_demo)

    ls = sub.add_parser("list", help="list the shipped pretrained models")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument("--markdown", action="store_true", help="print the zoo table of docs/zoo.md")
    ls.set_defaults(func=cmd_list)

    an = sub.add_parser(
        "analyze",
        help="run one family of analyses on a model: table + PNG + JSON",
        description="run one family of analyses (an unknown name lists them, with what each does)",
    )
    an.add_argument("analysis", help="analysis family, e.g. heads, decompose, ablate, patching")
    an.add_argument("--model", default=DEFAULT_MODEL, help="pretrained name, model file or run directory")
    an.add_argument("--out", default=None, help="output folder (default results/analyze/<model>)")
    an.add_argument(
        "--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="analysis option, e.g. layer=1"
    )
    an.add_argument("--json", action="store_true", help="print JSON")
    an.set_defaults(func=cmd_analyze)

    sw = sub.add_parser("sweep", help="train a grid of models from a TOML spec, batched; resumable")
    sw.add_argument("spec", help="sweep spec (.toml), e.g. examples/sweeps/fig3_small.toml")
    sw.add_argument("--out", default=None, help=f"output folder (default {_SWEEPS_HOME}/<spec name>); rerun to resume")
    sw.add_argument("--device", default="cpu", help="cpu | cuda")
    sw.add_argument("--runner", default="local", choices=["local", "ray"], help="ray: groups as Ray tasks")
    sw.add_argument("--max-steps", type=int, default=None, help="stop each group after this many steps (resumable)")
    sw.add_argument(
        "--max-seconds", type=float, default=None, help="checkpoint and stop after this long (resumable; GPU chunks)"
    )
    sw.add_argument("--no-progress", action="store_true", help="no progress bars")
    sw.add_argument("--compile", action="store_true", help="torch.compile each group's step (overrides run.compile)")
    sw.add_argument("--cudagraphs", action="store_true", help="with --compile on a GPU: replay steps as CUDA graphs")
    sw.add_argument("--workers", type=int, default=1, help="train up to this many groups at once (local processes)")
    sw.add_argument(
        "--threads", type=int, default=None, help="torch threads per group (default: the spec's; use 1 on shared cores)"
    )
    sw.add_argument("--json", action="store_true", help="print JSON")
    sw.set_defaults(func=cmd_sweep)

    r = sub.add_parser("reproduce", help="rerun one of the paper's figures on the shipped models (PNG + JSON)")
    r.add_argument("figure", help="figure key (fig3, fig4a, ..., x8-recipe; an unknown key lists them) or all")
    r.add_argument("--out", default="results", help="results folder (one subfolder per figure)")
    r.add_argument(
        "--no-sweeps", action="store_true", help="do not train sweeps: read their finished runs (else the zoo's cells)"
    )
    r.add_argument("--compile", action="store_true", help="torch.compile the sweeps' training step (faster on CPU)")
    r.add_argument("--device", default="cpu", help="device the sweeps train on, e.g. cuda (an execution setting)")
    r.add_argument("--workers", type=int, default=1, help="sweeps: train up to this many groups at once (processes)")
    r.add_argument("--sweeps-dir", default=None, help=f"where the sweeps live (default {_SWEEPS_HOME})")
    r.add_argument("--max-seconds", type=float, default=None, help="sweeps: checkpoint and stop after this long")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=cmd_reproduce)

    rp = sub.add_parser("results-page", help="generate docs/results.md from the reproduce records")
    rp.add_argument("--results", default="results", help="folder that reproduce wrote")
    rp.add_argument("--out", default="docs/results.md")
    rp.add_argument("--json", action="store_true", help="print JSON")
    rp.set_defaults(func=cmd_results_page)

    pk = sub.add_parser("pack", help="finished runs -> tar archives of at most --max-mib (to carry them elsewhere)")
    pk.add_argument("src", help="a run directory, a folder of runs or a sweep folder")
    pk.add_argument("dest", help="folder for runs-000.tar, runs-001.tar, ...")
    pk.add_argument("--max-mib", type=float, default=16.0, help="largest archive, MiB")
    pk.add_argument("--weights-dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    pk.add_argument("--json", action="store_true", help="print JSON")
    pk.set_defaults(func=cmd_pack)

    up = sub.add_parser("unpack", help="put runs packed by `pack` into a folder's runs/ (e.g. a sweep folder)")
    up.add_argument("archives", nargs="+", help="runs-NNN.tar files")
    up.add_argument("--into", required=True, help="destination folder (runs go to <into>/runs/<run>)")
    up.add_argument("--json", action="store_true", help="print JSON")
    up.set_defaults(func=cmd_unpack)

    x = sub.add_parser("export", help="ship a finished training run as a pretrained model (maintainers)")
    x.add_argument("run", help="training run directory")
    x.add_argument("--name", required=True)
    x.add_argument("--description", required=True)
    x.add_argument("--weights-dtype", default="float32", choices=["float32", "float16"], help="float16: half the file")
    x.set_defaults(func=cmd_export)
    return p


_SWEEPS_HOME = "$HOOKED_CLIP1D_SWEEPS or ~/.local/share/hooked_clip1d/sweeps"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    command = next((x for x in args if not x.startswith("-")), None)
    parser = build_parser(command)
    a = parser.parse_args(args)
    from hooked_clip1d.rundir import RunDirBusy

    try:
        return a.func(a)
    except BrokenPipeError:  # e.g. `hooked-clip1d list | head`: the reader left; not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (python would flush the dead pipe again at exit)
        except OSError:
            pass
        return 0
    except (
        ValueError,
        TypeError,
        FileExistsError,
        FileNotFoundError,
        NotADirectoryError,
        KeyError,
        RunDirBusy,
        FloatingPointError,
    ) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"hooked-clip1d {a.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
