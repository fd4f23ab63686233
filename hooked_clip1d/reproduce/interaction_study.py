"""The RoPE interaction study (beyond the paper; pre-registered in docs/fidelity.md, 2026-12-01, before its runs).

``x21-rope-interaction``: x19 found the RoPE model's late swing in unseen-pair accuracy only where masked negatives
meet an inverse temperature at 100 (6 of 6 runs; 0 of 9 with one of the two). H-I, the interaction: the swing needs
both. Four arms with the temperature held (``ARMS``: i25, i50, i100 masked at T = 25, 50, 100; s100 standard
negatives at 100) at fresh seeds 6-8 (``DECIDING_SEEDS``), read with x19's measures and thresholds, unchanged
(``oscillation_study.classify_run``, ``arm_class``); ``interaction_decision`` is the pre-registered rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.oscillation_study import (
    CLASSES,
    LEVEL,
    arm_class,
    late_runs,
    plot_late_unseen,
)

ARMS = {
    "cls-exempt-init002-temp25-distinct": "i25",
    "cls-exempt-init002-temp50-distinct": "i50",
    "cls-exempt-init002-temp100-distinct": "i100",
    "cls-exempt-init002-temp100": "s100",
}
ARM_TEXT = {
    "i25": "i25 masked, T held at 25",
    "i50": "i50 masked, T held at 50",
    "i100": "i100 masked, T held at 100",
    "s100": "s100 standard negatives, T held at 100",
}
DECIDING_SEEDS = (6, 7, 8)  # seeds 1-3 (x19) chose the question
CHECKS = (
    "the swing replicates at fresh seeds: masked negatives at T = 100 (i100) oscillate at >= 2 of seeds 6-8",
    "H-I: masked negatives oscillate at T = 100 and are steady at T = 25, and standard negatives at T = 100 are "
    "steady (>= 2 of 3 seeds each)",
)


def interaction_decision(classes_by_run: Mapping[tuple[str, int], str]) -> dict[str, Any]:
    """The pre-registered rule on ``classes_by_run[(arm, seed)]`` (``classify_run``'s class) for every arm and
    deciding seed (a missing run or an unknown class is an error).

    Example:
        >>> hi = {"i25": "steady", "i50": "between", "i100": "oscillates", "s100": "steady"}
        >>> interaction_decision({(a, s): c for a, c in hi.items() for s in DECIDING_SEEDS})["verdict"]
        'H-I supported'
        >>> hi["i25"] = "oscillates"
        >>> interaction_decision({(a, s): c for a, c in hi.items() for s in DECIDING_SEEDS})["verdict"]
        'not supported: masked negatives oscillate at T = 25 too'
    """
    missing = [(a, s) for a in ARM_TEXT for s in DECIDING_SEEDS if (a, s) not in classes_by_run]
    if missing:
        raise ValueError(f"the rule reads every arm at seeds {DECIDING_SEEDS}; missing: {missing}")
    bad = {k: c for k, c in classes_by_run.items() if c not in CLASSES}
    if bad:
        raise ValueError(f"runs {bad}: each needs a class of {CLASSES}")
    arms = {a: arm_class([classes_by_run[(a, s)] for s in DECIDING_SEEDS]) for a in ARM_TEXT}
    n100 = sum(classes_by_run[("i100", s)] == "oscillates" for s in DECIDING_SEEDS)
    if arms["i100"] != "oscillates":
        verdict = f"the swing did not replicate at seeds 6-8 ({n100} of 3)"
    elif arms["i25"] == "oscillates":
        verdict = "not supported: masked negatives oscillate at T = 25 too"
    elif arms["s100"] == "oscillates":
        verdict = "not supported: standard negatives oscillate at T = 100 too"
    elif arms["i25"] == arms["s100"] == "steady":
        verdict = "H-I supported"
    else:
        verdict = "not decided by these arms"
    return {"arm_classes": arms, "i100_oscillating_seeds": n100, "verdict": verdict, "i50": arms["i50"]}


def _x_interaction(rows: list[dict[str, Any]]) -> Outcome:
    runs = late_runs(rows, ARMS, DECIDING_SEEDS, CHECKS, "x21")
    if isinstance(runs, Outcome):
        return runs
    d = interaction_decision({k: r["class"] for k, r in runs.items()})
    # the amendment of 2026-12-01 (before any run): the docs may say T held at 25 gave a steady generalization only if
    # i25's late mean is >= 0.8 at 2 of 3 seeds ("steady" alone allows a mean of 0.5)
    d["i25_generalizes_steadily"] = sum(runs[("i25", s)]["mean"] >= LEVEL - 1e-9 for s in DECIDING_SEEDS) >= 2
    checks = [(CHECKS[0], d["i100_oscillating_seeds"] >= 2), (CHECKS[1], d["verdict"] == "H-I supported")]
    table = ["| arm | seed | O (range) | mean | troughs | class | T at 10,000 |", "|---|---|---|---|---|---|---|"]
    for a, s in sorted(runs):
        r = runs[(a, s)]
        table.append(
            f"| {ARM_TEXT[a]} | {s} | {r['range']:.2f} | {r['mean']:.2f} | {len(r['troughs'])} | {r['class']} | "
            f"{r['t_late'][-1]:.1f} |"
        )
    summary = (
        f"pre-registered reading: {d['verdict']}; arms: "
        + ", ".join(f"{a} {c}" for a, c in d["arm_classes"].items())
        + f" (i50, not deciding: {d['i50']})"
    )
    numbers = {"decision": d, "runs": {f"{a}/{s}": r for (a, s), r in sorted(runs.items())}}
    notes = (
        "Seeds 6-8 decide (x19's seeds 1-3 chose the question). x19's measures and thresholds, unchanged. One data "
        "draw (data seed 0). The untrained null's weights do not move: it never oscillates. No verdict and not the "
        "default recipe are moved by this study (docs/fidelity.md)."
    )
    fig = plot_late_unseen(runs, ARM_TEXT, DECIDING_SEEDS)
    return Outcome(numbers, summary + ".", checks, {"late_unseen": fig}, notes, table=tuple(table))


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x21-rope-interaction",
        "The RoPE model's swing: masked negatives and the temperature's level together? (beyond the paper)",
        "Question: x19 found the RoPE model's late swing only where masked negatives meet an inverse temperature at "
        "100. With the temperature held at 25, 50 and 100 (masked) and at 100 (standard negatives), at fresh seeds: "
        "does the swing need both (pre-registered in docs/fidelity.md)?",
        (),
        _x_interaction,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="rope-interaction",
        data="each run's 20 evaluations at epochs 8,100-10,000 (100 unseen-pair items) and its late snapshots",
    ),
)
