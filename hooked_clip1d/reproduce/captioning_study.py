"""The captioning study (beyond the paper: its Open Question 4; pre-registered in docs/fidelity.md, 2026-12-02,
before its runs).

``x22-captioning``: the flagship's towers, data and recipe with the text tower trained as an autoregressive captioner
of the image (``CLIPConfig(objective="captioning")``, model.captioning), seeds 0-2 deciding and 6-8 confirming, read
at epoch 10,000 by the restated checks M1-M4 (``emergence_row``, the code x17 read its arms with) beside x17's arm
(b'), the same recipe, data and seeds under CLIP's loss (its rows from ``docs/records/x17-negatives.json``, not
rerun). ``captioning_decision`` is the pre-registered rule: Q1 generalization (M1), Q2 the mechanism (M1-M4, and
each of M2-M4 by the same rule), Q3 the objective per check (``fisher_exact``, two-sided, captioner against (b')).
Reported, not counted: each run's M2 lifetime from the vision tower alone at every snapshot (``m2_by_snapshot``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.negatives_study import COUNTED, SHORT, lifetime_test
from hooked_clip1d.reproduce.temperature_study import FRESH_SEEDS, STUDY_SEEDS, untrained_rows

RECIPE = "cls-exempt-init002-temp-nodecay-distinct"  # the default recipe: x17's (b')
EPOCHS = 10_000
WHOLE = "mechanism_v2"  # M1-M4 together
QUESTIONS = {  # check -> (its answer when it holds by the rule, when it does not)
    "generalizes": ("generalizes", "does not generalize"),
    "fig4c_split": ("forms", "does not form"),
    "fig14_whole_query": ("forms", "does not form"),
    "invariant_ablation": ("forms", "does not form"),
    WHOLE: ("forms", "does not form"),
}
X17_RECORD = Path(__file__).resolve().parents[2] / "docs" / "records" / "x17-negatives.json"
CHECKS = (
    "the captioner generalizes to unseen pairs (M1 at >= 2 of the 3 deciding seeds and >= 2 of the 3 fresh seeds)",
    "the captioner's vision tower forms the paper's mechanism (M1-M4 together at >= 2 of the 3 deciding seeds and "
    ">= 2 of the 3 fresh seeds)",
)


def fisher_exact(a: int, n: int, b: int, m: int) -> float:
    """Two-sided Fisher exact p of ``a`` successes of ``n`` against ``b`` of ``m``: the probability, with the margins
    fixed, of every table no more likely than the one observed (the usual two-sided definition).

    Example:
        >>> round(fisher_exact(6, 6, 1, 6), 4), round(fisher_exact(6, 6, 2, 6), 4), fisher_exact(3, 6, 3, 6)
        (0.0152, 0.0606, 1.0)
    """
    for name, v in (("a", a), ("n", n), ("b", b), ("m", m)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"fisher_exact: {name} must be a count (an int >= 0), got {v!r}")
    if a > n or b > m:
        raise ValueError(f"fisher_exact: {a} of {n} and {b} of {m}: more successes than trials")
    k = a + b

    def prob(x: int) -> float:  # P(x of the k successes fall in the first group | margins)
        return math.comb(n, x) * math.comb(m, k - x) / math.comb(n + m, k)

    observed = prob(a)
    support = range(max(0, k - m), min(k, n) + 1)
    return min(1.0, sum(p for p in map(prob, support) if p <= observed * (1 + 1e-9)))


def by_rule(deciding: int, fresh: int, answers: tuple[str, str]) -> str:
    """The rule of Q1 and Q2 on the number of deciding and fresh seeds (of 3 each) where a check holds: its answer
    when >= 2 of 3 in both, its negation when <= 1 of 3 in both, ``"mixed"`` otherwise.

    Example:
        >>> by_rule(3, 2, ("generalizes", "does not generalize")), by_rule(2, 1, ("forms", "does not form"))
        ('generalizes', 'mixed')
    """
    if deciding >= 2 and fresh >= 2:
        return answers[0]
    if deciding <= 1 and fresh <= 1:
        return answers[1]
    return "mixed"


def captioning_decision(
    captioner: Mapping[int, Mapping[str, bool]],
    contrastive: Mapping[int, Mapping[str, bool]],
    counted: Sequence[str],
) -> dict[str, Any]:
    """The pre-registered rule on each run's checks at epoch 10,000 (``{seed: {check: bool}}`` for the captioner and
    for (b'), seeds 0-2 and 6-8 each; a missing seed or check is an error). ``counted``: the checks (of M1-M4 and
    ``mechanism_v2``) that no untrained draw passes; the others are answered ``"not counted"``.

    Example:
        >>> yes = {c: True for c in QUESTIONS}
        >>> no = dict(yes, fig14_whole_query=False, mechanism_v2=False)
        >>> d = captioning_decision({s: no for s in (0, 1, 2, 6, 7, 8)}, {s: yes for s in (0, 1, 2, 6, 7, 8)},
        ...                         tuple(QUESTIONS))
        >>> d["answers"]["generalizes"], d["answers"]["mechanism_v2"], d["objective"]["mechanism_v2"]["verdict"]
        ('generalizes', 'does not form', 'differs')
    """
    seeds = (*STUDY_SEEDS, *FRESH_SEEDS)
    for who, runs in (("the captioner", captioner), ("(b')", contrastive)):
        missing = [s for s in seeds if s not in runs]
        if missing:
            raise ValueError(f"the rule reads {who} at seeds {seeds}; missing: {missing}")
        gaps = sorted({c for s in seeds for c in QUESTIONS if c not in runs[s]})
        if gaps:
            raise ValueError(f"{who}'s runs lack the checks {gaps}")
    unknown = sorted(set(counted) - set(QUESTIONS))
    if unknown:
        raise ValueError(f"counted checks {unknown} are not the study's ({list(QUESTIONS)})")
    answers, objective = {}, {}
    for c, words in QUESTIONS.items():
        deciding = sum(bool(captioner[s][c]) for s in STUDY_SEEDS)
        fresh = sum(bool(captioner[s][c]) for s in FRESH_SEEDS)
        answers[c] = by_rule(deciding, fresh, words) if c in counted else "not counted"
        n_cap, n_con = deciding + fresh, sum(bool(contrastive[s][c]) for s in seeds)
        p = fisher_exact(n_cap, len(seeds), n_con, len(seeds))
        verdict = ("differs" if p <= 0.05 else "no difference shown") if c in counted else "not counted"
        objective[c] = {"captioner": n_cap, "contrastive": n_con, "of": len(seeds), "p": p, "verdict": verdict}
    return {"answers": answers, "objective": objective, "counted": list(counted)}


def m2_by_snapshot(run_dir: str | Path) -> list[dict[str, Any]]:
    """Fig. 4c's split (M2) at every kept snapshot of a run, from the vision tower alone: each head's P(left) and
    P(right) on the unseen-pair probe (``heads.cls_object_bias``, what ``mechanism_report`` reads them with), no
    caption scored. Rows ``{"epoch", "p_left", "p_right", "checks": {"fig4c_split": bool}}``, by epoch."""
    from hooked_clip1d.analysis.mechanism.dynamics import fig4c_split
    from hooked_clip1d.analysis.mechanism.heads import cls_object_bias
    from hooked_clip1d.analysis.mechanism.report import PROBE, unseen_probe
    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.model.checkpoint import load_model_file

    snaps = sorted((int(p.stem.split("_")[1]), p) for p in (Path(run_dir) / "snapshots").glob("epoch_*.safetensors"))
    if not snaps:
        raise FileNotFoundError(f"{str(run_dir)!r} has no snapshots/ (the study keeps 43)")
    rows, probe = [], None
    for epoch, path in snaps:
        model = load_model_file(path).eval()
        if probe is None:
            probe = unseen_probe(build_dataset(model.data_config)).splits[PROBE]
        bias = cls_object_bias(model.vision, probe)
        left, right = bias["left"][0].tolist(), bias["right"][0].tolist()
        rows.append(
            {"epoch": epoch, "p_left": left, "p_right": right, "checks": {"fig4c_split": fig4c_split(left, right)}}
        )
    return rows


def contrastive_rows(record: Path = X17_RECORD) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """(b')'s final rows (``{seed: row}``) and M2 lifetimes (``{seed: epoch}``) from x17's committed record."""
    numbers = json.loads(Path(record).read_text())["numbers"]
    finals = {int(k.split("/")[1]): v for k, v in numbers["final"].items() if k.split("/")[0] == RECIPE}
    lives = {int(k.split("/")[1]): int(v) for k, v in numbers["lifetimes"].items() if k.split("/")[0] == RECIPE}
    return finals, lives


def untrained_draw(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``rows`` are a null-control draw (``controls.null_rows``: every run untrained, at epoch 0)."""
    return bool(rows) and all(int(r["epochs"]) == 0 for r in rows)


def _not_run(rows: Sequence[Mapping[str, Any]]) -> Outcome | None:
    """A *not run* Outcome unless every study seed has exactly one run, finished at epoch 10,000 (or, for a null
    draw, untrained at epoch 0)."""
    seeds = (*STUDY_SEEDS, *FRESH_SEEDS)
    mine = [r for r in rows if r.get("recipe") == RECIPE and int(r["seed"]) in seeds]
    keys = [int(r["seed"]) for r in mine]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    if doubled:
        raise ValueError(f"x22-captioning: more than one run for seeds {doubled}")
    at = 0 if untrained_draw(mine) else EPOCHS
    done = sorted(int(r["seed"]) for r in mine if int(r["epochs"]) == at and r.get("finished", True))
    if done == sorted(seeds):
        return None
    return Outcome(
        {"finished_seeds": done},
        f"{len(done)} of the study's {len(seeds)} runs have finished; the record is written with all six",
        [(c, False) for c in CHECKS],
        {},
        not_run=f"{len(seeds) - len(done)} of the six captioning runs have not finished epoch {EPOCHS:,}",
    )


def _finite_row(seed: int, row: Mapping[str, Any]) -> None:
    """Refuse a run whose loss or accuracy at the epoch read is not a finite number (the pre-registration: the record
    is written only with all six runs finished and finite)."""
    for key in ("loss", "probe", "single", "seen", "unseen"):
        v = row.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"x22-captioning: seed {seed}'s {key} at epoch {row.get('epoch')} is {v!r}, not finite")


def _final_rows(path: Mapping[int, str], epoch: int, read: Any) -> dict[int, dict[str, Any]]:
    """Each run's emergence row at ``epoch`` (``read``: ``dynamics.run_emergence``), computed once per distinct
    snapshot file: a null draw's six runs hold the same untrained weights (one init seed per draw), which score the
    same (~75 s each at this size)."""
    import hashlib

    rows: dict[int, dict[str, Any]] = {}
    by_bytes: dict[str, dict[str, Any]] = {}
    for s, p in sorted(path.items()):
        digest = hashlib.sha256(Path(p, "snapshots", f"epoch_{epoch:05d}.safetensors").read_bytes()).hexdigest()
        if digest not in by_bytes:
            by_bytes[digest] = read(p, epochs=[epoch]).rows[-1]
        rows[s] = by_bytes[digest]
    return rows


def _unseen_curve(run_dir: str | Path) -> list[tuple[int, float]]:
    lines = Path(run_dir, "metrics.jsonl").read_text().splitlines()
    evals = [json.loads(ln) for ln in lines if ln.strip()]
    return [(int(e["epoch"]), float(e["eval"]["val_unseen"]["acc"])) for e in evals if e.get("eval")]


def _x_captioning(rows: list[dict[str, Any]]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.dynamics import run_emergence
    from hooked_clip1d.reproduce.negatives_study import m2_lifetime

    pending = _not_run(rows)
    if pending is not None:
        return pending
    mine = [r for r in rows if r.get("recipe") == RECIPE]
    path = {int(r["seed"]): r["path"] for r in mine}
    # a null-control draw (controls.null_rows) is read at its epoch 0 by the same code, with no null of its own
    draw = untrained_draw(mine)
    final = _final_rows(path, 0 if draw else EPOCHS, run_emergence)
    for s, row in final.items():
        _finite_row(s, row)
    life = {s: m2_lifetime(m2_by_snapshot(p)) for s, p in sorted(path.items())}
    null = [] if draw else untrained_rows(path[STUDY_SEEDS[0]])
    null_passes = {c: sum(bool(n["checks"][c]) for n in null) for c in QUESTIONS}
    counted = [c for c in QUESTIONS if null_passes[c] == 0]
    b_final, b_life = contrastive_rows()
    d = captioning_decision(
        {s: r["checks"] for s, r in final.items()}, {s: r["checks"] for s, r in b_final.items()}, counted
    )
    d["lifetime_p"] = {  # both ways, not counted
        "captioner_longer": lifetime_test(list(life.values()), list(b_life.values())),
        "contrastive_longer": lifetime_test(list(b_life.values()), list(life.values())),
    }
    checks = [(CHECKS[0], d["answers"]["generalizes"] == "generalizes"), (CHECKS[1], d["answers"][WHOLE] == "forms")]
    floor = max((max(n["kp_std"]) for n in null), default=math.nan)  # a null draw has no null of its own
    table = _table(final, b_final, life, b_life, null_passes, floor, len(null))
    summary = (
        "pre-registered reading: Q1 "
        + d["answers"]["generalizes"]
        + "; Q2 "
        + d["answers"][WHOLE]
        + " ("
        + ", ".join(f"{SHORT[c]} {d['answers'][c]}" for c in COUNTED[1:])
        + "); Q3 against (b'): "
        + ", ".join(
            f"{SHORT[c]} {o['captioner']}/6 vs {o['contrastive']}/6 (p {o['p']:.3f}, {o['verdict']})"
            for c, o in d["objective"].items()
        )
        + f"; M2 lifetimes {[life[s] for s in sorted(life)]} vs (b') {[b_life[s] for s in sorted(b_life)]}"
    )
    numbers = {
        "decision": d,
        "null_passes": null_passes,
        "null": null,
        "m3_null_floor": floor,
        "lifetimes": {str(s): v for s, v in sorted(life.items())},
        "contrastive_lifetimes": {str(s): v for s, v in sorted(b_life.items())},
        "final": {str(s): r for s, r in sorted(final.items())},
        "unseen_curves": {str(s): _unseen_curve(p) for s, p in sorted(path.items())},
    }
    notes = (
        "Seeds 0-2 decide, 6-8 confirm. The contrastive comparison is x17's (b') (same recipe, data and seeds, the "
        "batched engine in groups of 12; the captioners in one batched group of six): counts over runs, "
        "not paired seeds. M1-M4 as in the temperature study, on the final snapshot; a captioner's unseen-pair "
        "accuracy ranks every caption of the table by its log-likelihood. Ten untrained captioners are the null. Not "
        "counted: the M2 lifetimes (vision tower only, every snapshot) and their permutation p both ways, Fig. 13's "
        "shares, M3 at the null's floor. Nothing of the paper's tally or the default recipe moves (docs/fidelity.md)."
    )
    fig = _plot(numbers["unseen_curves"])
    return Outcome(numbers, summary + ".", checks, {"unseen_accuracy": fig}, notes, table=tuple(table))


def _table(
    final: Mapping[int, Mapping[str, Any]],
    b_final: Mapping[int, Mapping[str, Any]],
    life: Mapping[int, int],
    b_life: Mapping[int, int],
    null_passes: Mapping[str, int],
    floor: float,
    n_null: int,
) -> list[str]:
    """One row per run at epoch 10,000 (captioners, then (b')), then the untrained null's."""
    names = (*COUNTED, WHOLE)
    table = [
        "| objective | seed | probe acc | "
        + " | ".join(SHORT[c] for c in names)
        + " | M2 lifetime | P(left) / P(right) per head | Fig. 13 shares | M3 at null floor |",
        "|---|---|---|" + "---|" * len(names) + "---|---|---|---|",
    ]
    for label, runs, lives in (("captioning", final, life), ("contrastive (b'), x17", b_final, b_life)):
        for s in sorted(runs):
            r = runs[s]
            cells = " | ".join("yes" if r["checks"][c] else "no" for c in names)
            sides = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(r["p_left"], r["p_right"], strict=True))
            shares = ", ".join(f"{v:.2f}" for v in r["xwx_share"])
            m3 = sum(abs(q) >= 0.9 and v > floor for q, v in zip(r["kp_spearman"], r["kp_std"], strict=True))
            fresh = " (fresh)" if s in FRESH_SEEDS else ""
            table.append(
                f"| {label} | {s}{fresh} | {r['probe']:.2f} | {cells} | {lives[s]} | {sides} | {shares} | "
                f"{'yes' if m3 >= 3 else 'no'} ({m3}) |"
            )
    table.append(
        f"| untrained captioners ({n_null} init seeds) | 0-{n_null - 1} | - | "
        + " | ".join(f"{null_passes[c]}/{n_null}" for c in names)
        + " | - | - | - | - |"
    )
    return table


def _plot(curves: Mapping[str, Sequence[tuple[int, float]]]) -> plt.Figure:
    """Each captioner's unseen-pair accuracy at every evaluation (deciding seeds solid, fresh dashed)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for s, curve in curves.items():
        epochs, acc = zip(*curve, strict=True) if curve else ((), ())
        ax.plot(epochs, acc, "-" if int(s) in STUDY_SEEDS else "--", label=f"seed {s}")
    ax.axhline(0.8, color="0.6", lw=0.8)
    ax.set(xlabel="epoch", ylabel="unseen-pair accuracy (captions ranked by log-likelihood)", ylim=(-0.02, 1.02))
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x22-captioning",
        "An autoregressive captioner on the paper's data: does it generalize and form the mechanism? (Open Question "
        "4; beyond the paper)",
        "Question: the flagship's towers, data and recipe, the text tower trained as a captioner of the image instead "
        "of by CLIP's loss (the paper's Open Question 4): does it generalize to unseen pairs, does its vision tower "
        "form the paper's mechanism (M1-M4), and where does it differ from the contrastive model (x17's (b'))? "
        "Pre-registered in docs/fidelity.md.",
        (),
        _x_captioning,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="captioning",
        data="each run's snapshot at epoch 10,000 (a probe of 900 unseen-pair images, every caption scored) and its 43 "
        "snapshots' vision attention; 10 untrained captioners (init seeds 0-9)",
    ),
)
