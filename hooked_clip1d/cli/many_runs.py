"""The commands that train or read many runs: ``sweep``, ``pack`` / ``unpack`` (runs between machines),
``reproduce`` (the paper's figures) and ``results-page``, each as ``add_<command>_parser(sub)`` (its flags and the
function it runs; ``cli.commands.build_parser`` calls them) beside ``cmd_<command>``. Like ``cli.commands``, this
module imports torch only when a command runs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from hooked_clip1d.cli.util import dumps, progress

SWEEPS_HOME = "$HOOKED_CLIP1D_SWEEPS or ~/.local/share/hooked_clip1d/sweeps"  # where sweeps go (the help says it)


def add_sweep_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``sweep`` command: a grid of runs from a TOML spec, batched and resumable (or its status)."""
    p = sub.add_parser("sweep", help="train a grid of models from a TOML spec, batched; resumable")
    p.add_argument("spec", help="sweep spec (.toml), e.g. examples/sweeps/fig3_small.toml")
    p.add_argument("--out", default=None, help=f"output folder (default {SWEEPS_HOME}/<spec name>); rerun to resume")
    p.set_defaults(out_is_folder=True)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--runner", default="local", choices=["local", "ray"], help="ray: groups as Ray tasks")
    p.add_argument("--max-steps", type=int, default=None, help="stop each group after this many steps (resumable)")
    p.add_argument(
        "--max-seconds", type=float, default=None, help="checkpoint and stop after this long (resumable; GPU chunks)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile each group's step, or not (--no-compile); default: the spec's run.compile",
    )
    p.add_argument(
        "--cudagraphs", action="store_true", help="compiled (--compile or the spec's), on a GPU: steps as CUDA graphs"
    )
    p.add_argument(
        "--graph-step",
        action="store_true",
        help="on a GPU: each whole step replayed as one CUDA graph (replaces the spec's compile; with --compile, "
        "inductor's fused kernels inside it; not with --cudagraphs)",
    )
    p.add_argument("--workers", type=int, default=1, help="train up to this many groups at once (local processes)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads per group (default: the spec's; use 1 on shared cores)"
    )
    p.add_argument(
        "--groups",
        nargs="+",
        default=None,
        metavar="GROUP",
        help="train only these groups of the plan (names as in the sweep folder's plan.json or --status); the others "
        "wait for a later call (to train a sweep's groups in an order of your choosing, one call per group)",
    )
    p.add_argument(
        "--status",
        action="store_true",
        help="train nothing: say how far the sweep in --out has come (safe beside a running sweep)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_sweep)
    return p


def cmd_sweep(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.runner import format_results, run_sweep

    if a.status:
        from hooked_clip1d.sweeps.status import format_status, sweep_status

        st = sweep_status(a.spec, a.out)
        print(dumps(st) if a.json else format_status(st))
        return 0
    rows = run_sweep(
        a.spec,
        a.out,
        device=a.device,
        progress=not a.no_progress,
        runner=a.runner,
        max_steps=a.max_steps,
        compile=a.compile,
        workers=a.workers,
        threads=a.threads,
        max_seconds=a.max_seconds,
        cudagraphs=True if a.cudagraphs else None,
        graph_step=True if a.graph_step else None,
        groups=a.groups,
    )
    print(dumps(rows) if a.json else format_results(rows))
    return 0


def add_pack_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``pack`` command: finished runs into tar archives of a size limit."""
    p = sub.add_parser("pack", help="finished runs -> tar archives of at most --max-mib (to carry them elsewhere)")
    p.add_argument("src", help="a run directory, a folder of runs or a sweep folder")
    p.add_argument("dest", help="folder for runs-000.tar, runs-001.tar, ...")
    p.add_argument("--max-mib", type=float, default=16.0, help="largest archive, MiB")
    p.add_argument("--weights-dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_pack)
    return p


def cmd_pack(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.transfer import pack_runs

    archives = pack_runs(a.src, a.dest, max_mib=a.max_mib, weights_dtype=a.weights_dtype)
    rows = [{"archive": str(p), "mib": round(p.stat().st_size / 2**20, 2)} for p in archives]
    if a.json:
        print(dumps(rows))
    else:
        for r in rows:
            print(f"{r['archive']}  {r['mib']} MiB")
    return 0


def add_unpack_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``unpack`` command: packed runs into a folder's ``runs/``."""
    p = sub.add_parser("unpack", help="put runs packed by `pack` into a folder's runs/ (e.g. a sweep folder)")
    p.add_argument("archives", nargs="+", help="runs-NNN.tar files")
    p.add_argument("--into", required=True, help="destination folder (runs go to <into>/runs/<run>)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_unpack)
    return p


def cmd_unpack(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.transfer import unpack_runs

    names = unpack_runs(a.archives, a.into)
    print(dumps(names) if a.json else f"{len(names)} runs in {os.path.join(a.into, 'runs')}: " + ", ".join(names))
    return 0


def _model_substitutes(items: list[str] | None) -> dict[str, str] | str | None:
    """``--model`` values: one bare SPEC, or NAME=SPEC pairs (a bare SPEC with '=' in a path is read as a pair)."""
    if not items:
        return None
    if len(items) == 1 and "=" not in items[0]:
        return items[0]
    pairs = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec:
            raise ValueError(f"--model {item!r}: with several --model options each is NAME=SPEC")
        pairs[name] = spec
    return pairs


def records_to_rejudge(records_dir: str | Path) -> list[str]:
    """``reproduce all --rejudge-record DIR``: the sweep figures whose kept record in ``DIR`` has no null control.
    A ``DIR`` that is no folder, or holds no record of any sweep figure, is an error naming it (nothing could be
    judged there: that is not "every record has a null control"); an unreadable record is an error naming its file.

    Example:
        >>> records_to_rejudge("no/such/folder")
        Traceback (most recent call last):
        FileNotFoundError: --rejudge-record 'no/such/folder' is not a folder (the kept records, e.g. docs/records)
    """
    from hooked_clip1d.reproduce import FIGURES

    root = Path(records_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"--rejudge-record {str(records_dir)!r} is not a folder (the kept records, e.g. docs/records)"
        )
    sweep_figures = sorted(f for f, spec in FIGURES.items() if spec.sweep is not None)
    kept = [f for f in sweep_figures if (root / f"{f}.json").is_file()]
    if not kept:
        raise FileNotFoundError(
            f"--rejudge-record {str(records_dir)!r} holds no record of a sweep figure (looked for "
            f"{', '.join(f + '.json' for f in sweep_figures)})"
        )
    return [f for f in kept if _without_null(root / f"{f}.json")]


def _without_null(path: Path) -> bool:
    """A kept record that has checks and no null control (one that is not a JSON object, or that is another
    figure's record under this figure's name, is taken, for ``rejudge_record`` to refuse by name: it was skipped as
    "has a null control" without a word)."""
    try:
        rec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"record {path} is not valid JSON ({e})") from e
    if not isinstance(rec, dict) or rec.get("figure") != path.stem:
        return True
    return bool(rec.get("checks")) and "null_control" not in rec


def add_reproduce_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``reproduce`` command: one of the paper's figures (or all), on the zoo or other models."""
    p = sub.add_parser("reproduce", help="rerun one of the paper's figures on the shipped models (PNG + JSON)")
    p.add_argument("figure", help="figure key (fig3, fig4a, ..., x8-recipe; an unknown key lists them) or all")
    p.add_argument("--out", default="results", help="results folder (one subfolder per figure)")
    p.set_defaults(out_is_folder=True)
    p.add_argument(
        "--no-sweeps", action="store_true", help="do not train sweeps: read their finished runs (else the zoo's cells)"
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the sweeps' training step (faster on CPU), or not (--no-compile); default: each spec's",
    )
    p.add_argument("--device", default="cpu", help="device the sweeps train on, e.g. cuda (an execution setting)")
    p.add_argument("--workers", type=int, default=1, help="sweeps: train up to this many groups at once (processes)")
    p.add_argument("--sweeps-dir", default=None, help=f"where the sweeps live (default {SWEEPS_HOME})")
    p.add_argument("--max-seconds", type=float, default=None, help="sweeps: checkpoint and stop after this long")
    p.add_argument(
        "--compare-to",
        default=None,
        metavar="DIR",
        help="then compare the records' numbers with DIR's (e.g. docs/records); exit 1 if any differs",
    )
    p.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="[NAME=]SPEC",
        help="run the figure on another model: a run folder, a model file, a zoo name or untrained:SEED[:INIT_STD] "
        "(the figure's model's config, untrained); NAME=SPEC replaces zoo model NAME of a figure with several "
        "(repeatable)",
    )
    p.add_argument(
        "--no-controls",
        action="store_true",
        help="skip the null control (the checks on 10 untrained models) and the seed replicates",
    )
    p.add_argument(
        "--rejudge-record",
        default=None,
        metavar="DIR",
        help="judge a sweep figure's kept record in DIR (e.g. docs/records) again under the null control, without "
        "its sweep's runs (its checks as recorded); with all: every sweep figure whose record has no null control",
    )
    p.add_argument(
        "--guard-record",
        default=None,
        metavar="DIR",
        help="judge a figure's kept record in DIR again under its trained control pre-registered after the record "
        "(its checks, null control and seeds as recorded; the control computed now)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (the sweeps a figure trains, ...)")
    p.set_defaults(func=cmd_reproduce)
    return p


def cmd_reproduce(a: argparse.Namespace) -> int:
    from hooked_clip1d.settings.progress import no_bars

    with no_bars(on=a.no_progress):
        return _reproduce(a)


def _reproduce(a: argparse.Namespace) -> int:
    from hooked_clip1d.reproduce import FIGURES, guard_record, rejudge_record, reproduce

    if a.figure != "all" and a.figure not in FIGURES:
        raise ValueError(f"unknown figure {a.figure!r}; known: {', '.join(sorted(FIGURES))}, all")
    figures = sorted(FIGURES) if a.figure == "all" else [a.figure]
    if a.model and a.figure == "all":
        raise ValueError("--model names one figure's model: give a figure key, not all")
    if a.guard_record is not None:
        if a.model or a.no_controls or a.rejudge_record is not None or a.figure == "all":
            raise ValueError(
                "--guard-record judges one figure's kept record under its trained control: give a figure key, and no "
                "--model, --no-controls or --rejudge-record"
            )
        records = [guard_record(a.figure, a.guard_record, a.out, a.sweeps_dir)]
        print(dumps(records) if a.json else _format_records(records, a.out))
        return _compare_records(a.compare_to, a.out, figures) if a.compare_to else 0
    if a.rejudge_record is not None:
        if a.model or a.no_controls:
            raise ValueError("--rejudge-record judges a kept record under the null control: no --model, --no-controls")
        if a.figure == "all":
            figures = records_to_rejudge(a.rejudge_record)
        if not figures:
            print(f"nothing to re-judge: every sweep figure's record in {a.rejudge_record} has a null control")
            return 0
    records = []
    for fig in progress(figures, desc="reproduce", disable=len(figures) == 1):
        if a.rejudge_record is not None:
            records.append(rejudge_record(fig, a.rejudge_record, a.out))
            continue
        records.append(
            reproduce(
                fig,
                out_dir=a.out,
                train_sweeps=not a.no_sweeps,
                compile_sweeps=a.compile,
                sweep_device=a.device,
                sweep_workers=a.workers,
                sweeps_dir=a.sweeps_dir,
                sweep_max_seconds=a.max_seconds,
                models=_model_substitutes(a.model),
                controls=not a.no_controls,
            )
        )
    print(dumps(records) if a.json else _format_records(records, a.out))
    return _compare_records(a.compare_to, a.out, figures) if a.compare_to else 0


def _format_records(records: list[dict], out: str) -> str:
    """``reproduce``'s table: each figure's verdict, summary and checks (with their null control), then where the
    records went."""
    lines = []
    for r in records:
        lines += [f"{r['figure']:<8} {r['verdict']:<15} {r['title']}", f"         {r['summary']}"]
        for c in r["checks"]:
            null = f"  (untrained: {c['null_passes']}/{c['null_n']} pass" if "null_n" in c else ""
            if null:
                null += ", absence check" if c.get("absence") else ""
                null += ", counted)" if c.get("counted") else ", not counted)"
            lines.append(f"         [{'x' if c['holds'] else ' '}] {c['check']}{null}")
    where = ", ".join(f"{out}/{r['figure']}/" for r in records)
    page = "results-page" + ("" if out == "results" else f" --results {shlex.quote(str(out))}")
    lines.append(f"wrote {where} (JSON + PNG); `hooked-clip1d {page}` builds docs/results.md")
    return "\n".join(lines)


def _compare_records(compare_to: str, out: str, figures: list[str]) -> int:
    """``--compare-to DIR``: each figure's numbers against DIR's record, on stderr; 1 if any differs."""
    from hooked_clip1d.reproduce.compare import compare_records

    diffs = {k: v for k, v in compare_records(compare_to, out).items() if k in figures}
    for fig, d in diffs.items():
        state = "no record" if d is None else "same numbers" if not d else f"{len(d)} differences"
        print(f"{fig:<22} {state}", file=sys.stderr)
        for line in (d or [])[:10]:
            print(f"    {line}", file=sys.stderr)
    return 1 if any(diffs.values()) else 0


def add_results_page_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``results-page`` command: docs/results.md from the reproduce records."""
    p = sub.add_parser("results-page", help="generate docs/results.md from the reproduce records")
    p.add_argument("--results", default="results", help="folder that reproduce wrote")
    p.add_argument("--out", default="docs/results.md")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_results_page)
    return p


def cmd_results_page(a: argparse.Namespace) -> int:
    from hooked_clip1d.reproduce.results_page import build_results_page

    path = build_results_page(a.results, a.out)
    print(dumps({"page": str(path)}) if a.json else f"wrote {path}")
    return 0
