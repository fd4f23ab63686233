"""The false-negatives study (issue 48; beyond the paper; pre-registered in docs/fidelity.md before its runs).

``x17-negatives``: standard CLIP's loss counts an identical caption elsewhere in the batch as a negative
(``TrainConfig.negatives="all"``). Four arms ((a') identical captions masked out, the temperature learned and
decayed; (b') the same, not decayed; (c') the same, held at 100; (d') multi-positive, held at 100) x study seeds 0-2
(they decide) and fresh seeds 6-8 (they confirm), each read at its 43 snapshots by the restated checks M1-M4, beside
its control: the temperature study's arm with the same temperature and the standard loss (record
``x16-temperature``, same seeds, engine and schedule). ``negatives_decision`` is the pre-registered rule;
``m2_lifetime`` and ``lifetime_test`` the reported lifetime comparison; ``dynamics.mechanism_at`` the threshold
grid.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.analysis.mechanism.dynamics import BIAS_GRID, STD_GRID, mechanism_at
from hooked_clip1d.reproduce.core import FLAGSHIP, FigureSpec, Outcome, register
from hooked_clip1d.reproduce.temperature_study import FRESH_SEEDS, STUDY_SEEDS, untrained_rows

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
    for k, e in em.items():  # the grid's default point is the row's own checks: one rule, read two ways
        for r in e.rows:
            got = mechanism_at(r)
            if any(got[c] != bool(r["checks"][c]) for c in got):
                raise ValueError(f"x17-negatives: mechanism_at disagrees with {k}'s row at epoch {r['epoch']}")
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
    grid = {
        f"std {t} / bias {b}": {
            a: sum(any(mechanism_at(r, t, b)["mechanism_v2"] for r in em[(a, s)].rows) for s in seeds if (a, s) in em)
            for a in arms
        }
        for t in STD_GRID
        for b in BIAS_GRID
    }
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


LATE = 3000  # x18's "late in training": every snapshot from this epoch on (pre-registered)


def best_arm_run(sweeps_root: str | Path) -> tuple[str, Path] | None:
    """The study's best-scoring arm (``negatives_decision``'s ``best``; ties: the longest mean M2 lifetime at the
    study seeds) and its seed-0 run under ``sweeps_root/negatives``; None while the study's runs are not all there."""
    from hooked_clip1d.analysis.mechanism.dynamics import run_emergence

    runs = {}
    for run in sorted((Path(sweeps_root) / "negatives" / "runs").glob("*")):
        if not (run / "summary.json").exists():
            continue
        cfg = json.loads((run / "config.json").read_text())["train_config"]
        recipe = next((a for a in ARMS if all(cfg.get(k) == v for k, v in _recipe_train(a).items())), None)
        if recipe is not None:
            runs[(recipe, int(cfg["seed"]))] = run
    if any((a, s) not in runs for a in ARMS for s in STUDY_SEEDS):
        return None
    em = {k: run_emergence(p) for k, p in runs.items() if k[1] in STUDY_SEEDS}
    finals = {k: e.rows[-1]["checks"] for k, e in em.items()}
    life = {k: m2_lifetime(e.rows) for k, e in em.items()}
    scores = negatives_decision(finals, life, COUNTED)["scores"]
    best = max(ARMS, key=lambda a: (scores[a], np.mean([life[(a, s)] for s in STUDY_SEEDS]), -TIE_ORDER.index(a)))
    return best, runs[(best, 0)]


def _recipe_train(recipe: str) -> dict[str, Any]:
    from hooked_clip1d.settings import RECIPES

    fields = RECIPES[recipe].fields()["train"]
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()}


def _trajectory_split(checkpoints: Sequence[tuple[int, Any]], negatives: str) -> list[dict[str, Any]]:
    """``caption_split`` at every checkpoint ``(epoch, model)`` of one run (its own seed's data order)."""
    from hooked_clip1d.analysis.mechanism.dissolution import caption_split
    from hooked_clip1d.data.dataset import EpochPermutations, build_dataset

    out, orders, ds = [], None, None
    for epoch, model in checkpoints:
        if ds is None:
            ds = build_dataset(model.data_config)
            seed = int(model.manifest.get("train_config", {}).get("seed", 0))
            orders = EpochPermutations(len(ds.training_pairs()[0]), ds.config.batch_size, seed)
        out.append(caption_split(model, ds, 0, epoch, negatives=negatives, orders=orders))
    return out


def dissolution_checks(split: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pre-registered hypotheses (1)-(3) of x18 on one run: its ``caption_split`` rows and emergence rows (the
    same epochs). A hypothesis read "at every snapshot from epoch 3,000" fails where there is none.

    Example:
        >>> sp = [{"epoch": e, "loss": 1.0, "loss_shared": 0.9, "share": {"W_pos": {"shared": 0.8},
        ...        "W_K.0": {"shared": 0.7}, "W_K.1": {"shared": 0.1}}} for e in (1000, 3000)]
        >>> rows = [{"epoch": 1000, "checks": {"fig4c_split": True}, "kp_std": [0.5, 0.05]},
        ...         {"epoch": 3000, "checks": {"fig4c_split": False}, "kp_std": [2.0, 0.04]}]
        >>> c = dissolution_checks(sp, rows); c["dominant"], c["h1"], c["h2"], c["h3"]
        (0, True, True, True)
        >>> dissolution_checks(sp[:1], rows[:1])["h1"]  # no snapshot from epoch 3,000: not shown
        False
    """
    late = [r for r in split if r["epoch"] >= LATE]
    dominant = int(np.argmax(rows[-1]["kp_std"])) if rows and rows[-1].get("kp_std") else None
    h1 = bool(late) and all(r["loss_shared"] > 0.5 * r["loss"] for r in late)
    h2 = (
        bool(late)
        and dominant is not None
        and all(
            (r["share"]["W_pos"]["shared"] or 0) > 0.5 and (r["share"][f"W_K.{dominant}"]["shared"] or 0) > 0.5
            for r in late
        )
    )
    m2_end = m2_lifetime(rows) if rows else 0
    after = [r for r in rows if m2_end and r["epoch"] >= m2_end]
    h3 = (
        bool(after)
        and dominant is not None
        and after[-1]["kp_std"][dominant] > after[0]["kp_std"][dominant]
        and all(v < 0.1 for r in after for h, v in enumerate(r["kp_std"]) if h != dominant)
    )
    return {
        "dominant": dominant,
        "m2_end": m2_end,
        "h1": h1,
        "h2": h2,
        "h3": h3,
        "dominant_kp_std_end": rows[-1]["kp_std"][dominant] if dominant is not None else None,
    }


def _x_dissolution(models: dict[str, Any]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.dynamics import emergence, run_emergence
    from hooked_clip1d.pretrained import list_trajectories, load_trajectory, trajectory_emergence
    from hooked_clip1d.sweeps.runner import sweeps_home

    name, model = next(iter(models.items()))
    shipped = model.manifest.get("name") == name and name in list_trajectories()
    ckpts = load_trajectory(name) if shipped else [(int(model.manifest.get("epochs") or 0), model)]
    rows = trajectory_emergence(name, recompute=True).rows if shipped else emergence(ckpts).rows
    split = _trajectory_split(ckpts, "all")
    std = dissolution_checks(split, rows)
    numbers: dict[str, Any] = {
        "standard": {"run": name, "split": split, "kp_std": [[r["epoch"], r["kp_std"]] for r in rows], **std}
    }
    found = best_arm_run(sweeps_home())
    arm_c: dict[str, Any] = {"h1": False, "h2": False, "h3": False, "dominant_kp_std_end": None}
    if found is not None:
        from hooked_clip1d.model.checkpoint import load_model_file

        arm, run = found
        snaps = sorted(run.glob("snapshots/epoch_*.safetensors"))
        arm_ckpts = [(int(p.stem.split("_")[1]), load_model_file(p).eval()) for p in snaps]
        negatives = _recipe_train(arm)["negatives"]
        arm_split = _trajectory_split(arm_ckpts, negatives)
        arm_rows = run_emergence(run).rows
        arm_c = dissolution_checks(arm_split, arm_rows)
        numbers["arm"] = {
            "recipe": arm,
            "run": run.name,
            "split": arm_split,
            "kp_std": [[r["epoch"], r["kp_std"]] for r in arm_rows],
            **arm_c,
        }
    end_std, end_arm = std["dominant_kp_std_end"], arm_c["dominant_kp_std_end"]
    checks = [
        (
            "(1) standard loss: the items that share their caption carry more than half of the loss at every snapshot "
            f"from epoch {LATE:,}",
            std["h1"],
        ),
        (
            "(2) standard loss: they carry more than half of the gradient (<g_shared, g> / <g, g>) on W_pos and on the "
            f"dominant head's W_K at every snapshot from epoch {LATE:,}",
            std["h2"],
        ),
        (
            "(3) standard loss: the dominant head's key-position row std grows from M2's end to the last snapshot "
            "while every other head's stays below 0.1",
            std["h3"],
        ),
        (
            "(4) the study's best arm: its dominant head's key-position row std at the last snapshot is smaller than "
            "the standard loss run's",
            end_std is not None and end_arm is not None and end_arm < end_std,
        ),
    ]
    late = [r for r in split if r["epoch"] >= LATE]
    loss_share = [r["loss_shared"] / r["loss"] for r in late]
    pos_share = [r["share"]["W_pos"]["shared"] for r in late]
    summary = (
        f"standard loss ({name}, {len(split)} checkpoints): from epoch {LATE:,} the shared items carry "
        + (
            f"{min(loss_share):.2f}-{max(loss_share):.2f} of the loss ({np.mean([r['shared_items'] for r in late]):.2f}"
            f" of the items), {min(pos_share):.2f}-{max(pos_share):.2f} of the W_pos gradient"
            if late
            else "nothing (no checkpoint that late)"
        )
        + f"; dominant head {std['dominant']}, key-position std {end_std}; M2 ends at epoch {std['m2_end']}"
        + (
            f"; best arm {ARMS[numbers['arm']['recipe']]} (seed 0): dominant head {arm_c['dominant']} at std {end_arm}"
            if found is not None
            else "; the study's arms are not all on this machine: (4) not read"
        )
    )
    notes = (
        "Hypotheses (1)-(4) pre-registered in docs/fidelity.md (x18) before any was computed; descriptive: they "
        "decide nothing about the default. The loss and gradients over one training epoch in each run's own data "
        "order, eval mode (no dropout)."
    )
    return Outcome(numbers, summary + ".", checks, {"split": _plot_split(numbers)}, notes)


def _plot_split(numbers: Mapping[str, Any]) -> plt.Figure:
    """The shared items' share of the loss and of the W_pos gradient, and each head's key-position std, over
    training: the standard-loss run (solid) and the best arm (dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, style in (("standard", "-"), ("arm", "--")):
        if key not in numbers:
            continue
        sp = numbers[key]["split"]
        ep = [max(r["epoch"], 1) for r in sp]
        axes[0].plot(
            ep,
            [r["loss_shared"] / r["loss"] if r["loss"] else np.nan for r in sp],
            style,
            color="C0",
            label=f"{key}: loss share",
        )
        axes[0].plot(
            ep, [r["share"]["W_pos"]["shared"] for r in sp], style, color="C1", label=f"{key}: W_pos gradient share"
        )
        for h in range(len(numbers[key]["kp_std"][-1][1] or [])):
            pts = [(max(e, 1), v[h]) for e, v in numbers[key]["kp_std"] if v]
            axes[1].plot(*zip(*pts, strict=True), style, color=f"C{h}", lw=1, label=f"{key}: head {h}")
    axes[0].set(xscale="log", xlabel="epoch", ylabel="shared items' share", title="where the signal comes from")
    axes[1].set(xscale="log", yscale="symlog", xlabel="epoch", ylabel="key-position row std", title="per head")
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=5, ncol=2)
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
    FigureSpec(
        "x18-dissolution",
        "Why the paper's mechanism dissolves: the loss and gradient of the items whose caption is shared in a batch "
        "(beyond the paper)",
        "Question: every standard-loss run ends on one loss floor, set by captions shared by two items of a batch. "
        "Does the late gradient come from those items, and does it feed the one positional head that remains "
        "(hypotheses pre-registered in docs/fidelity.md)?",
        (FLAGSHIP,),
        _x_dissolution,
        beyond_paper=True,
        data="one training epoch in each run's own data order per checkpoint; the flagship's shipped trajectory and "
        "the study's best arm (seed 0)",
    ),
)
