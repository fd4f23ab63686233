"""The commands that train or read many runs: ``sweep``, ``pack`` / ``unpack`` (runs between machines),
``reproduce`` (the paper's figures) and ``results-page``. Their parsers are in ``cli.commands``; like it, this
module imports torch only when a command runs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from hooked_clip1d.cli.util import dumps as _dumps
from hooked_clip1d.cli.util import progress as _progress


def cmd_sweep(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.runner import format_results, run_sweep

    if a.status:
        from hooked_clip1d.sweeps.status import format_status, sweep_status

        st = sweep_status(a.spec, a.out)
        print(_dumps(st) if a.json else format_status(st))
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
    )
    print(_dumps(rows) if a.json else format_results(rows))
    return 0


def cmd_pack(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.transfer import pack_runs

    archives = pack_runs(a.src, a.dest, max_mib=a.max_mib, weights_dtype=a.weights_dtype)
    rows = [{"archive": str(p), "mib": round(p.stat().st_size / 2**20, 2)} for p in archives]
    if a.json:
        print(_dumps(rows))
    else:
        for r in rows:
            print(f"{r['archive']}  {r['mib']} MiB")
    return 0


def cmd_unpack(a: argparse.Namespace) -> int:
    from hooked_clip1d.sweeps.transfer import unpack_runs

    names = unpack_runs(a.archives, a.into)
    print(_dumps(names) if a.json else f"{len(names)} runs in {os.path.join(a.into, 'runs')}: " + ", ".join(names))
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


def _without_null(figure: str, records_dir: str) -> bool:
    """A sweep figure whose kept record in ``records_dir`` exists and has no null control."""
    from hooked_clip1d.reproduce import FIGURES

    path = Path(records_dir) / f"{figure}.json"
    if FIGURES[figure].sweep is None or not path.is_file():
        return False
    rec = json.loads(path.read_text())
    return bool(rec.get("checks")) and "null_control" not in rec


def cmd_reproduce(a: argparse.Namespace) -> int:
    from hooked_clip1d.reproduce import FIGURES, rejudge_record, reproduce

    if a.figure != "all" and a.figure not in FIGURES:
        raise ValueError(f"unknown figure {a.figure!r}; known: {', '.join(sorted(FIGURES))}, all")
    figures = sorted(FIGURES) if a.figure == "all" else [a.figure]
    if a.model and a.figure == "all":
        raise ValueError("--model names one figure's model: give a figure key, not all")
    if a.rejudge_record is not None:
        if a.model or a.no_controls:
            raise ValueError("--rejudge-record judges a kept record under the null control: no --model, --no-controls")
        figures = [f for f in figures if a.figure != "all" or _without_null(f, a.rejudge_record)]
        if not figures:
            print(f"nothing to re-judge: every sweep figure's record in {a.rejudge_record} has a null control")
            return 0
    records = []
    for fig in _progress(figures, desc="reproduce", disable=len(figures) == 1):
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
    if a.json:
        print(_dumps(records))
    else:
        for r in records:
            print(f"{r['figure']:<8} {r['verdict']:<15} {r['title']}")
            print(f"         {r['summary']}")
            for c in r["checks"]:
                null = f"  (untrained: {c['null_passes']}/{c['null_n']} pass" if "null_n" in c else ""
                if null:
                    null += ", absence check" if c.get("absence") else ""
                    null += ", counted)" if c.get("counted") else ", not counted)"
                print(f"         [{'x' if c['holds'] else ' '}] {c['check']}{null}")
        where = ", ".join(f"{a.out}/{r['figure']}/" for r in records)
        page = "results-page" + ("" if a.out == "results" else f" --results {shlex.quote(str(a.out))}")
        print(f"wrote {where} (JSON + PNG); `hooked-clip1d {page}` builds docs/results.md")
    if a.compare_to:
        from hooked_clip1d.reproduce.compare import compare_records

        diffs = {k: v for k, v in compare_records(a.compare_to, a.out).items() if k in figures}
        for fig, d in diffs.items():
            state = "no record" if d is None else "same numbers" if not d else f"{len(d)} differences"
            print(f"{fig:<22} {state}", file=sys.stderr)
            for line in (d or [])[:10]:
                print(f"    {line}", file=sys.stderr)
        return 1 if any(diffs.values()) else 0
    return 0


def cmd_results_page(a: argparse.Namespace) -> int:
    from hooked_clip1d.reproduce.results_page import build_results_page

    path = build_results_page(a.results, a.out)
    print(_dumps({"page": str(path)}) if a.json else f"wrote {path}")
    return 0
