"""The false-negatives study (issue 48; beyond the paper; pre-registered in docs/fidelity.md before its runs).

``x17-negatives``: standard CLIP's loss counts an identical caption elsewhere in the batch as a negative
(``TrainConfig.negatives="all"``). Four arms ((a') identical captions masked out, the temperature learned and
decayed; (b') the same, not decayed; (c') the same, held at 100; (d') multi-positive, held at 100) x study seeds 0-2
(they decide) and fresh seeds 6-8 (they confirm), each read at its 43 snapshots by the restated checks M1-M4, beside
its control: the temperature study's arm with the same temperature and the standard loss (record
``x16-temperature``, same seeds, engine and schedule). ``negatives_decision`` is the pre-registered rule;
``m2_lifetime`` and ``lifetime_test`` the reported lifetime comparison; ``temperature_study.threshold_grid`` the
threshold grid.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.temperature_study import FRESH_SEEDS, STUDY_SEEDS, threshold_grid, untrained_rows

ARMS = {
    "cls-exempt-init002-distinct": "(a') distinct, decayed",
    "cls-exempt-init002-temp-nodecay-distinct": "(b') distinct, not decayed",
    "cls-exempt-init002-temp100-distinct": "(c') distinct, held at 100",
    "cls-exempt-init002-temp100-shared": "(d') shared, held at 100",
}
# each arm's control: the temperature study's arm with the same temperature and the standard loss
CONTROL = {
    "cls-exempt-init002-distinct": "cls-exempt-init002",
    "cls-exempt-init002-temp-nodecay-distinct": "cls-exempt-init002-temp-nodecay",
    "cls-exempt-init002-temp100-distinct": "cls-exempt-init002-temp100",
    "cls-exempt-init002-temp100-shared": "cls-exempt-init002-temp100",
}
CONTROL_NAME = {
    "cls-exempt-init002": "(a)",
    "cls-exempt-init002-temp-nodecay": "(b)",
    "cls-exempt-init002-temp100": "(c)",
}
BASELINE = "cls-exempt-init002"  # today's default
TIE_ORDER = tuple(ARMS)  # (a') one change from today, (b') CLIP's temperature practice, (c'), (d')
COUNTED = ("generalizes", "fig4c_split", "fig14_whole_query", "invariant_ablation")  # M1-M4
SHORT = {
    "generalizes": "M1",
    "fig4c_split": "M2",
    "fig14_whole_query": "M3",
    "invariant_ablation": "M4",
    "mechanism_v2": "M1-4",
    "fig13_split": "S1",
    "ep_only_ablation": "S2",
}
# the controls' rows: the temperature study's record (its runs are not shipped)
X16_RECORD = Path(__file__).resolve().parents[2] / "docs" / "records" / "x16-temperature.json"


def m2_lifetime(rows: Sequence[Mapping[str, Any]]) -> int:
    """The last snapshot epoch at which M2 (Fig. 4c's split) holds; 0 if it never does.

    Example:
        >>> m2_lifetime([{"epoch": e, "checks": {"fig4c_split": e in (1000, 2500)}} for e in (0, 1000, 2500, 3000)])
        2500
    """
    held = [int(r["epoch"]) for r in rows if r["checks"]["fig4c_split"]]
    return max(held, default=0)


def lifetime_test(arm: Sequence[float | int], control: Sequence[float | int]) -> float:
    """One-sided exact permutation p of ``mean(arm) - mean(control)`` over every relabeling of the pooled values.

    Example:
        >>> lifetime_test([6000, 6500, 7000], [2000, 2500, 3000])  # every arm run outlasts every control run
        0.05
        >>> lifetime_test([2000, 2500, 3000], [2000, 2500, 3000])  # the same: no evidence (ties count against)
        0.7
    """
    a, c = [float(v) for v in arm], [float(v) for v in control]
    if not a or not c or not all(np.isfinite(a + c)):
        raise ValueError(f"lifetime_test needs finite lifetimes on both sides, got {a} and {c}")
    pooled, k = a + c, len(a)
    stat = np.mean(a) - np.mean(c)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), k):
        rest = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += bool(np.mean([pooled[i] for i in idx]) - np.mean(rest) >= stat - 1e-9)
    return float(hits / total)


def negatives_decision(
    finals: Mapping[tuple[str, int], Mapping[str, bool]],
    lifetimes: Mapping[tuple[str, int], int],
    counted: Sequence[str],
) -> dict[str, Any]:
    """The pre-registered rule (docs/fidelity.md) on the runs' checks at epoch 10,000 (``finals[(recipe, seed)]``:
    check -> holds, the arms' and their controls'), their M2 lifetimes, and the checks that count.

    Score: (study seed, counted check) passes. *Supported*: some arm has the whole mechanism at >= 2 of 3 study
    seeds and its control at <= 1; *partly*: some arm scores more than its control, or every study seed of it
    outlasts (M2) every study seed of its control; else *refuted*. The default becomes the best-scoring arm (ties in
    ``TIE_ORDER``) if it scores >= 2 more than (a) and every counted check on which it beats (a) at the study seeds
    holds at >= 2 of 3 of its fresh seeds.

    Example:
        >>> ok = {c: True for c in COUNTED} | {"mechanism_v2": True}
        >>> two = {c: c in ("generalizes", "invariant_ablation") for c in COUNTED} | {"mechanism_v2": False}
        >>> recipes = [*ARMS, *set(CONTROL.values())]
        >>> finals = {(r, s): ok if r == "cls-exempt-init002-temp100-distinct" else two
        ...           for r in recipes for s in (0, 1, 2, 6, 7, 8)}
        >>> life = {k: 0 for k in finals}
        >>> d = negatives_decision(finals, life, COUNTED)
        >>> arm = "cls-exempt-init002-temp100-distinct"
        >>> d["verdict"], d["default"], d["scores"][arm], d["control_scores"][BASELINE]
        ('supported', 'cls-exempt-init002-temp100-distinct', 12, 6)
        >>> negatives_decision({k: two for k in finals}, life, COUNTED)["default"]  # nothing moves: today's stays
        'cls-exempt-init002'
    """
    counted = [c for c in COUNTED if c in counted]

    def score(recipe: str, seeds: Sequence[int]) -> int:
        return sum(bool(finals[(recipe, s)].get(c)) for s in seeds if (recipe, s) in finals for c in counted)

    def whole(recipe: str) -> int:
        return sum(bool(finals[(recipe, s)].get("mechanism_v2")) for s in STUDY_SEEDS if (recipe, s) in finals)

    arms = [a for a in ARMS if any(k[0] == a for k in finals)]
    scores = {a: score(a, STUDY_SEEDS) for a in arms}
    controls = sorted({CONTROL[a] for a in arms} | {BASELINE})
    control_scores = {c: score(c, STUDY_SEEDS) for c in controls}
    outlasts = {}
    for a in arms:
        mine = [lifetimes[(a, s)] for s in STUDY_SEEDS if (a, s) in lifetimes]
        theirs = [lifetimes[(CONTROL[a], s)] for s in STUDY_SEEDS if (CONTROL[a], s) in lifetimes]
        outlasts[a] = bool(mine and theirs and min(mine) > max(theirs))
    if any(whole(a) >= 2 and whole(CONTROL[a]) <= 1 for a in arms):
        verdict = "supported"
    elif any(scores[a] > control_scores[CONTROL[a]] or outlasts[a] for a in arms):
        verdict = "partly"
    else:
        verdict = "refuted"
    best = max(arms, key=lambda a: (scores[a], -TIE_ORDER.index(a)), default=None)
    fresh = {
        a: {
            c: sum(bool(finals[(a, s)].get(c)) for s in FRESH_SEEDS if (a, s) in finals)
            for c in (*counted, "mechanism_v2")
        }
        for a in arms
    }
    base = control_scores[BASELINE]
    confirmed = False
    if best is not None and scores[best] >= base + 2:
        beats = [c for c in counted if score_one(finals, best, c) > score_one(finals, BASELINE, c)]
        confirmed = all(fresh[best][c] >= 2 for c in beats)
    default = best if confirmed else BASELINE
    return {
        "verdict": verdict,
        "default": default,
        "scores": scores,
        "control_scores": control_scores,
        "whole_mechanism": {a: whole(a) for a in [*arms, *controls]},
        "outlasts": outlasts,
        "fresh": fresh,
        "counted": counted,
        "best": best,
        "fresh_confirms": confirmed,
    }


def score_one(finals: Mapping[tuple[str, int], Mapping[str, bool]], recipe: str, check: str) -> int:
    """Study seeds at which ``recipe`` holds ``check`` at epoch 10,000."""
    return sum(bool(finals[(recipe, s)].get(check)) for s in STUDY_SEEDS if (recipe, s) in finals)


def control_rows(record: str | Path = X16_RECORD) -> tuple[dict[tuple[str, int], dict], dict[tuple[str, int], int]]:
    """The controls' checks at epoch 10,000 and M2 lifetimes (``m2_lifetime``: the last snapshot at which M2 holds)
    from the temperature study's record, by (recipe, seed)."""
    path = Path(record)
    if not path.is_file():
        raise FileNotFoundError(
            f"the controls' record {str(path)!r} is missing (`hooked-clip1d reproduce x16-temperature` writes it)"
        )
    num = json.loads(path.read_text())["numbers"]
    finals, life = {}, {}
    for key, row in num["final"].items():
        recipe, seed = key.rsplit("/", 1)
        finals[(recipe, int(seed))] = dict(row["checks"])
        last = num["windows"][key]["fig4c_split"]["last"]
        life[(recipe, int(seed))] = int(last or 0)
    return finals, life


def _negatives_checks(d: Mapping[str, Any], arms: Sequence[str]) -> list[tuple[str, bool]]:
    """x17's pre-registered checks from ``negatives_decision``'s result ``d``."""
    checks = [
        (
            "the hypothesis is supported: an arm has the whole mechanism (M1-M4) at >= 2 of 3 study seeds at "
            "epoch 10,000 and its control at <= 1",
            d["verdict"] == "supported",
        )
    ]
    for a in arms:
        c = CONTROL[a]
        checks.append(
            (
                f"arm {ARMS[a]} scores more (study seed, counted check) passes than its control "
                f"{CONTROL_NAME[c]} at epoch 10,000",
                d["scores"][a] > d["control_scores"][c],
            )
        )
        checks.append(
            (
                f"arm {ARMS[a]}: M2 lasts longer than in {CONTROL_NAME[c]} at every study seed (exact "
                "permutation p = 0.05)",
                d["outlasts"][a],
            )
        )
    return checks


def _negatives_summary(
    d: Mapping[str, Any],
    arms: Sequence[str],
    seeds: Sequence[int],
    life: Mapping[tuple[str, int], int],
    p: tuple[Mapping[str, float], Mapping[str, float]],
    null_passes: Mapping[str, int],
) -> str:
    """x17's summary: the decision, each arm's score and lifetimes against its control's, the null's passes."""
    p_study, p_all = p
    summary = (
        f"pre-registered reading: {d['verdict']}; scores (study seeds, counted checks of "
        + ", ".join(SHORT[c] for c in d["counted"])
        + "): "
        + ", ".join(
            f"{ARMS[a]} {d['scores'][a]} (control {CONTROL_NAME[CONTROL[a]]} {d['control_scores'][CONTROL[a]]})"
            for a in arms
        )
        + "; whole mechanism at study seeds: "
        + ", ".join(f"{ARMS[a]} {d['whole_mechanism'][a]}/3" for a in arms)
        + f"; the default by the rule: {d['default']}"
        + "; M2 lifetimes (last snapshot with Fig. 4c's split, per seed "
        + ", ".join(str(s) for s in seeds)
        + "): "
        + "; ".join(
            f"{ARMS[a]} {[life[(a, s)] for s in seeds if (a, s) in life]} vs "
            f"{CONTROL_NAME[CONTROL[a]]} {[life[(CONTROL[a], s)] for s in seeds if (CONTROL[a], s) in life]}"
            f" (p {p_study[a]:.2f} study seeds, {p_all[a]:.4f} all)"
            for a in arms
        )
        + "; untrained models passing each check (of 10): "
        + ", ".join(f"{SHORT[c]} {null_passes[c]}" for c in null_passes)
    )
    return summary


def _x_negatives(rows: list[dict[str, Any]]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.dynamics import run_emergence

    em = {(r["recipe"], int(r["seed"])): run_emergence(r["path"]) for r in rows if r["recipe"] in ARMS}
    if not em:
        raise ValueError("x17-negatives: no finished run of the study's arms in the sweep")
    null = untrained_rows(next(r["path"] for r in rows if r["recipe"] in ARMS))
    null_passes = {c: sum(bool(n["checks"][c]) for n in null) for c in (*COUNTED, "mechanism_v2")}
    counted = [c for c in COUNTED if null_passes[c] == 0]
    c_finals, c_life = control_rows()
    finals = {**c_finals, **{k: e.rows[-1]["checks"] for k, e in em.items()}}
    life = {**c_life, **{k: m2_lifetime(e.rows) for k, e in em.items()}}
    d = negatives_decision(finals, life, counted)
    arms = [a for a in ARMS if any(k[0] == a for k in em)]
    seeds = sorted({k[1] for k in em})
    floor = max(max(n["kp_std"]) for n in null)
    p_study, p_all = {}, {}
    for a in arms:
        c = CONTROL[a]
        p_study[a] = lifetime_test(
            [life[(a, s)] for s in STUDY_SEEDS if (a, s) in life], [life[(c, s)] for s in STUDY_SEEDS if (c, s) in life]
        )
        p_all[a] = lifetime_test(
            [life[(a, s)] for s in seeds if (a, s) in life], [life[(c, s)] for s in seeds if (c, s) in life]
        )
    grid = threshold_grid(em, arms, seeds, "x17-negatives")  # also checks the rows against mechanism_at
    table = _table(em, arms, seeds, life, floor, null_passes)
    checks = _negatives_checks(d, arms)
    summary = _negatives_summary(d, arms, seeds, life, (p_study, p_all), null_passes)
    numbers = {
        "arms": arms,
        "seeds": seeds,
        "decision": d,
        "null_passes": null_passes,
        "null": null,
        "m3_null_floor": floor,
        "lifetimes": {f"{a}/{s}": v for (a, s), v in sorted(life.items())},
        "lifetime_p": {"study_seeds": p_study, "all_seeds": p_all},
        "threshold_grid": grid,
        "windows": {f"{a}/{s}": e.windows for (a, s), e in sorted(em.items())},
        "final": {f"{a}/{s}": e.rows[-1] for (a, s), e in sorted(em.items())},
    }
    notes = (
        "M1-M4 as in the temperature study (docs/fidelity.md). Controls: x16-temperature's arms (a)-(c), the same "
        "seeds, engine and schedule with the standard loss. Not counted: S1, S2, M3 at the untrained null's floor "
        f"(std > {floor:.4f}), the M2 lifetimes' permutation p over all six seeds, the threshold grid. Seeds 0-2 "
        "decide, 6-8 confirm."
    )
    return Outcome(numbers, summary + ".", checks, {"lifetimes": _plot(life, arms, seeds)}, notes, table=tuple(table))


def _table(
    em: Mapping[tuple[str, int], Any],
    arms: Sequence[str],
    seeds: Sequence[int],
    life: Mapping[tuple[str, int], int],
    floor: float,
    null_passes: Mapping[str, int],
) -> list[str]:
    """One row per run at epoch 10,000: the checks, 1/T, probe accuracy, M3 at the null's floor, M2's lifetime and
    Fig. 13's shares; then the untrained null's row."""
    names = (*COUNTED, "mechanism_v2")
    table = [
        "| arm | seed | 1/T | probe acc | "
        + " | ".join(SHORT[c] for c in names)
        + " | M3 at null floor | M2 lifetime | Fig. 13 shares |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for a in arms:
        for s in seeds:
            if (a, s) not in em:
                continue
            last = em[(a, s)].rows[-1]
            m3 = sum(abs(r) >= 0.9 and v > floor for r, v in zip(last["kp_spearman"], last["kp_std"], strict=True))
            cells = " | ".join("yes" if last["checks"][c] else "no" for c in names)
            shares = ", ".join(f"{v:.2f}" for v in last["xwx_share"])
            fresh = " (fresh)" if s in FRESH_SEEDS else ""
            table.append(
                f"| {ARMS[a]} | {s}{fresh} | {last['temperature']:.1f} | {last['probe']:.2f} | {cells} | "
                f"{'yes' if m3 >= 3 else 'no'} ({m3}) | {life[(a, s)]} | {shares} |"
            )
    table.append(
        "| untrained (10 init seeds) | 0-9 | - | - | "
        + " | ".join(f"{null_passes[c]}/10" for c in names)
        + " | - | - | - |"
    )
    return table


def _plot(life: Mapping[tuple[str, int], int], arms: Sequence[str], seeds: Sequence[int]) -> plt.Figure:
    """Each arm's M2 lifetimes beside its control's, per seed (study seeds filled, fresh seeds open)."""
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(arms), 3.6))
    for j, a in enumerate(arms):
        for k, (recipe, dx) in enumerate(((CONTROL[a], -0.15), (a, 0.15))):
            for s in seeds:
                if (recipe, s) in life:
                    ax.plot(
                        j + dx,
                        life[(recipe, s)],
                        "o",
                        color=f"C{k}",
                        mfc=f"C{k}" if s in STUDY_SEEDS else "none",
                        label=("standard loss (control)" if k == 0 else "arm") if j == 0 and s == seeds[0] else None,
                    )
    ax.set_xticks(range(len(arms)), [ARMS[a] for a in arms], fontsize=7, rotation=15)
    ax.set(ylabel="M2 lifetime (last epoch with Fig. 4c's split)", ylim=(-200, 10_500))
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x17-negatives",
        "CLIP's false negatives and the paper's mechanism (the false-negatives study; beyond the paper)",
        "Question: standard CLIP's loss counts an identical caption elsewhere in the batch as a negative (~18 % of "
        "our batch items share theirs). With such pairs masked out or made positives, does Fig. 4c's split last "
        "longer and the paper's mechanism (the restated checks M1-M4) hold at epoch 10,000 (pre-registered in "
        "docs/fidelity.md)?",
        (),
        _x_negatives,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="negatives",
        data="a probe set of 900 unseen-pair images per snapshot; 10 untrained models (init seeds 0-9)",
    ),
)
