"""How far a sweep has come, read from its folder without training it or taking its lock.

``hooked-clip1d sweep SPEC --status`` (or ``sweep_status``) answers the questions of a sweep that runs for hours or
across sessions: is it running now (and which process), how many of its model-steps are done, which groups are still
training, with how many members, and at what rate so far. Everything comes from the files a sweep writes
(``plan.json``, each run's ``metrics.jsonl`` and ``summary.json``, the metadata of each group checkpoint or, for a
run trained alone by ``training.Trainer``, of its own checkpoint, the folder's ``.lock``), so it is safe to run
beside the sweep, from another shell.

Example:
    >>> import tempfile, pathlib
    >>> from hooked_clip1d.sweeps.runner import run_sweep
    >>> from hooked_clip1d.sweeps.spec import TINY_SPEC
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = run_sweep(TINY_SPEC, d / "out", progress=False, max_steps=2)  # stopped before the end
    >>> st = sweep_status(TINY_SPEC, d / "out")
    >>> st["model_steps"], st["model_steps_planned"], st["runs_finished"], st["running"]
    (8, 14, 0, None)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hooked_clip1d.sweeps.runner import group_cost, load_spec, planned_steps, sweeps_home
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, read_group_state, read_train_state
from hooked_clip1d.training.rundir import RunLock, read_metrics


def sweep_status(spec_path: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """The state of the sweep of ``spec_path`` in ``out_dir`` (default: where ``run_sweep`` puts it).

    Returns ``out``, ``running`` (the lock holder ``{"pid", "host", "since"}``, or None), ``model_steps`` done and
    ``model_steps_planned`` (summed over runs), ``runs_finished`` / ``runs``, ``groups`` (per group: ``group``,
    ``runs``, ``active`` (members still training), ``step`` (its group checkpoint's, or its last metrics line's if
    newer), ``steps`` (its longest
    member's), ``elapsed_s``, ``steps_per_s`` so far, ``left_s``: the time still to train, estimated with the
    planner's cost model (``sweep.group_cost``, which counts the members still training) at this group's own pace so
    far, None before it has trained) and ``rows`` (per run: ``run``, ``group``, ``epoch`` /
    ``epochs``, ``step`` / ``steps``, ``finished``, ``unseen`` (the latest unseen-pair accuracy)). Groups that
    have not started show step 0; runs a grown spec added and no start has planned yet are in group ``None``.
    """
    spec = load_spec(spec_path)
    out = Path(out_dir) if out_dir is not None else sweeps_home() / spec.name
    if not (out / "spec.toml").exists():
        raise FileNotFoundError(
            f"{str(out)!r} holds no sweep (no spec.toml): start it with `hooked-clip1d sweep {spec_path}"
            + (f" --out {out_dir}`" if out_dir is not None else "`")
        )
    held = load_spec(out / "spec.toml").name
    if held != spec.name:
        raise ValueError(f"{str(out)!r} holds the sweep {held!r}, not {spec.name!r}: pass its --out")
    plan = json.loads((out / "plan.json").read_text()) if (out / "plan.json").exists() else []
    group_of = {name: gname for gname, names in plan for name in names}
    saved = {gname: read_group_state(out / "groups" / gname / GROUP_CHECKPOINT) for gname, _ in plan}
    rows = []
    for r in spec.runs:
        d = out / "runs" / r.name
        lines = [ln for ln in read_metrics(d / "metrics.jsonl") if "step" in ln]
        last = lines[-1] if lines else {}
        planned, finished = planned_steps(r), (d / "summary.json").exists()
        step, elapsed = last.get("step", 0), last.get("elapsed_s")
        gs = saved.get(group_of.get(r.name, ""))
        if gs is None and not finished:  # a run training.Trainer trains alone (a captioner): its own checkpoint
            gs = read_train_state(d / "checkpoint.safetensors")
        if gs is not None and gs["step"] >= step:  # the checkpoint is newer than the last metrics line
            step, elapsed = min(gs["step"], planned), float(gs.get("elapsed_s") or 0.0)
        rows.append(
            {
                "run": r.name,
                "group": group_of.get(r.name),
                "epoch": r.train_cfg.epochs if finished else last.get("epoch", 0),  # the last evaluated epoch
                "epochs": r.train_cfg.epochs,
                "step": planned if finished else step,
                "steps": planned,
                "elapsed_s": elapsed,
                "finished": finished,
                "unseen": (last.get("eval") or {}).get("val_unseen", {}).get("acc"),
            }
        )
    groups = []
    for gname in [g for g, _ in plan] + ([None] if any(r["group"] is None for r in rows) else []):
        mine = [r for r in rows if r["group"] == gname]
        if not mine:
            continue
        gs = saved.get(gname)
        if gs is not None and isinstance(gs.get("names"), list):  # runs finished before this group started (e.g.
            mine = [r for r in mine if r["run"] in gs["names"]] or mine  # carried from another machine) are not its
        step = max(r["step"] for r in mine)
        elapsed = max((r["elapsed_s"] or 0.0 for r in mine), default=0.0)
        # time left: the planner's cost model (sweep.group_cost: a group step costs its members still training plus
        # a fixed overhead), timed by this group's own seconds per unit of cost so far
        done = group_cost([min(r["step"], r["steps"]) for r in mine])
        left = group_cost([r["steps"] for r in mine]) - done
        groups.append(
            {
                "group": gname,
                "runs": len(mine),
                "active": sum(not r["finished"] for r in mine),
                "step": step,
                "steps": max(r["steps"] for r in mine),
                "elapsed_s": round(elapsed, 1),
                "steps_per_s": round(step / elapsed, 2) if elapsed > 0 else None,
                "left_s": 0.0 if left <= 0 else (round(left * elapsed / done, 1) if done and elapsed else None),
            }
        )
    return {
        "sweep": spec.name,
        "out": str(out),
        # the runs no start has planned yet (group None) have no group folder to hold
        "running": _holder(out, [g["group"] for g in groups if g["group"] is not None], [r["run"] for r in rows]),
        "model_steps": sum(min(r["step"], r["steps"]) for r in rows),
        "model_steps_planned": sum(r["steps"] for r in rows),
        "runs_finished": sum(r["finished"] for r in rows),
        "runs": len(rows),
        "groups": groups,
        "rows": rows,
    }


def _holder(out: Path, groups: list[str], runs: list[str]) -> dict[str, Any] | None:
    """Who trains the sweep now: the folder's lock holder, else that of a group's or a run's folder (a call with
    ``groups`` holds the folder's lock only around its plan and results; each group's trainer holds its own)."""
    dirs = [out, *(out / "groups" / g for g in groups), *(out / "runs" / r for r in runs)]
    return next((h for h in map(RunLock.holder, dirs) if h is not None), None)


def format_status(st: dict[str, Any]) -> str:
    """``sweep_status`` as text: one line for the sweep, then one per group.

    Example:
        >>> st = {"sweep": "s", "out": "/x", "running": None, "model_steps": 5, "model_steps_planned": 10,
        ...       "runs_finished": 1, "runs": 2, "groups": [{"group": "g000", "runs": 2, "active": 1, "step": 4,
        ...       "steps": 6, "elapsed_s": 2.0, "steps_per_s": 2.0, "left_s": 1.0}], "rows": []}
        >>> print(format_status(st))
        sweep s in /x: not running; 5 of 10 model-steps (50.0 %), 1/2 runs finished
        group  runs  active  step / steps  elapsed  steps/s     left
        g000      2       1         4 / 6    0.0 h     2.00    0.0 h
        left: at each group's own pace so far, one core per group (groups of one worker run in turn)
    """
    run = st["running"]
    state = "not running" if run is None else f"running (pid {run.get('pid')} on {run.get('host')})"
    pct = 100 * st["model_steps"] / st["model_steps_planned"] if st["model_steps_planned"] else 100.0
    lines = [
        f"sweep {st['sweep']} in {st['out']}: {state}; {st['model_steps']:,} of {st['model_steps_planned']:,} "
        f"model-steps ({pct:.1f} %), {st['runs_finished']}/{st['runs']} runs finished"
    ]
    if not st["groups"]:
        return lines[0]
    w = max(5, *(len(str(g["group"] or "(new)")) for g in st["groups"]))
    cells = [(f"{g['step']:,} / {g['steps']:,}", g) for g in st["groups"]]
    sw = max(12, *(len(c) for c, _ in cells))
    lines.append(f"{'group':<{w}}  runs  active  {'step / steps':>{sw}}  elapsed  steps/s     left")
    for c, g in cells:
        rate = "-" if g["steps_per_s"] is None else f"{g['steps_per_s']:.2f}"
        left = "-" if g.get("left_s") is None else f"{g['left_s'] / 3600:.1f} h"
        lines.append(
            f"{str(g['group'] or '(new)'):<{w}}  {g['runs']:>4}  {g['active']:>6}  {c:>{sw}}  "
            f"{g['elapsed_s'] / 3600:>5.1f} h  {rate:>7}  {left:>7}"
        )
    if any(g.get("left_s") for g in st["groups"]):
        lines.append("left: at each group's own pace so far, one core per group (groups of one worker run in turn)")
    return "\n".join(lines)
