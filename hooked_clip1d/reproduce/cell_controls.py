"""The null control of a sweep figure's zoo cells (``FigureSpec.cell_checks``), read while its sweep is unfinished.

A cell check reads the accuracies a zoo model's manifest records (e.g. Fig. 3's cell Ntot = 20, n2 = 10 reaching
>= 0.9 on every split). Until 2026-12-01 it ran with no control, so the results page showed it and counted it in no
verdict. Here each of ``controls.NULL_SEEDS``' untrained draws of every cell (its own architecture, init and data
config) is evaluated on the same splits and the figure's ``cell_checks`` read those accuracies; the checks count by
``controls.counted_checks``' rule, as every other check does (a draw that cannot be evaluated is re-drawn, never a
pass or a fail; an error in the checks themselves is raised, and so is a null in which no draw could be evaluated).

Example:
    >>> from hooked_clip1d.reproduce.core import FIGURES
    >>> null = cell_null(FIGURES["fig3"], ["full-ntot20-n2-10"])  # doctest: +SKIP
    >>> null["complete"], sum(any(v["checks"].values()) for v in null["variants"])  # doctest: +SKIP
    (True, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.pretrained import load_model, manifest
from hooked_clip1d.reproduce.controls import NULL_ATTEMPTS, NULL_SEEDS, UNTRAINED, counted_checks, untrained_like
from hooked_clip1d.reproduce.core import FULL, FigureSpec, Outcome, verdict_of
from hooked_clip1d.reproduce.replicates import SHUFFLED_DISTINCT, apply_own_control_table

SPLITS = ("val_single", "val_seen", "val_unseen")  # what the cell checks read
# the trained control of a figure's cell checks: the order-blind model whose recorded accuracies stand in the cell's
# place (a check it passes does not count). Fig. 3's, stated 2026-12-01 (session 45) after the cell's accuracies were
# known: the order-blind control Fig. 11a declared for the full model before it finished (the simplified one; no
# full-model control is trained), whose recorded unseen-pair accuracy (0.46) could not pass a 0.9 check: it shows the
# check is not met by a model blind to the order, no more. A cell reading is shown, not tallied (results_page)
CELL_CONTROLS: dict[str, dict[str, str]] = {"fig3": {FULL: SHUFFLED_DISTINCT}}


def cell_null(spec: FigureSpec, cells: Sequence[str]) -> dict[str, Any]:
    """``spec.cell_checks`` on untrained draws of the zoo ``cells``: ``controls.null_control``'s format (variants
    with their checks and ids, failed draws, ``complete``), for ``controls.counted_checks``."""
    if spec.cell_checks is None:
        raise ValueError(f"{spec.key} has no cell checks")
    zoo = {m: load_model(m) for m in cells}
    missing = [m for m, z in zoo.items() if getattr(z, "data_config", None) is None]
    if missing:
        raise ValueError(f"the cells {missing} have no data config: their untrained draws cannot be evaluated")
    data = {m: build_dataset(z.data_config) for m, z in zoo.items()}
    variants: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    for seed in range(NULL_ATTEMPTS):
        if len(variants) == len(NULL_SEEDS):
            break
        name = f"{UNTRAINED}:{seed}"
        try:  # a draw that cannot be evaluated is a failed control run: reported and re-drawn
            manifests = {
                m: {"name": name, "epochs": 0, "metrics": evaluate(untrained_like(z, seed), data[m], SPLITS)}
                for m, z in zoo.items()
            }
        except (RuntimeError, ValueError, FloatingPointError) as e:
            failed.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            continue
        # the checks read the draws' accuracies as they read the cells': an error there is a bug in the checks, raised
        # (it was caught as a failed draw until 2026-12-02, so it read as an incomplete null: "inconclusive")
        checks = spec.cell_checks(manifests)
        variants.append({"model": name, "checks": dict(checks), "values": {}})
    if not variants:  # no draw of any seed could be evaluated: a bug, not bad luck (it would read "inconclusive")
        raise RuntimeError(
            f"{spec.key}: none of {len(failed)} untrained draws of {list(cells)} could be evaluated: "
            f"{failed[0]['error']}"
        )
    return {
        "variants": variants,
        "failed": failed,
        "complete": len(variants) == len(NULL_SEEDS),
        "absence": [],
        "secondary": {},
    }


def cell_reading(spec: FigureSpec, manifests: dict[str, dict[str, Any]], controls: bool = True) -> dict[str, Any]:
    """The record's verdict, checks and controls from the zoo cells' ``manifests`` alone: at most *partly* (a few
    cells do not measure the sweep's trend); with ``controls``, each check counts by ``counted_checks``' rule on the
    cells' untrained draws (``cell_null``) and, where the figure has one (``CELL_CONTROLS``), not where its trained
    control passes it; without, the raw checks (shown, never tallied: ``results_page``)."""
    if spec.cell_checks is None:
        raise ValueError(f"{spec.key} has no cell checks")
    checks = spec.cell_checks(manifests)
    if not controls:
        verdict = verdict_of(checks)
        return {
            "checks": [{"check": c, "holds": bool(ok)} for c, ok in checks],
            "verdict": "partly" if verdict == "reproduced" else verdict,
        }
    control = CELL_CONTROLS.get(spec.key)
    uncovered = sorted(set(manifests) - set(control)) if control is not None else []
    if uncovered:  # a cell in its own place would be its own control (refused before the draws are evaluated)
        raise ValueError(f"{spec.key}: CELL_CONTROLS names no control for the cells {uncovered}")
    null = cell_null(spec, list(manifests))
    rows = counted_checks(Outcome({}, "", checks, {}), null)
    out: dict[str, Any] = {
        "null_control": {
            "models": [v["model"] for v in null["variants"]],
            "errors": {v["model"]: v["error"] for v in null["failed"]},
            "complete": bool(null["complete"]),
        }
    }
    if control is not None:  # the order-blind model's recorded accuracies in each cell's place
        got = dict(spec.cell_checks({m: manifest(control[m]) for m in manifests}))
        label = ", ".join(sorted(set(control.values())))
        entry = apply_own_control_table(rows, {c: {label: bool(ok)} for c, ok in got.items()}) or {}
        out["trained_control"] = {**entry, "status": f"1 run of {label!r} (its manifest's accuracies)"}
    counted = [(r.text, r.counted_holds) for r in rows if r.counted]
    verdict = verdict_of(counted) if counted else "inconclusive"
    out.update(checks=[r.to_row() for r in rows], verdict="partly" if verdict == "reproduced" else verdict)
    return out
