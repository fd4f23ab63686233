"""The RoPE oscillation study (beyond the paper; pre-registered in docs/fidelity.md, 2026-12-01, before its runs).

``x19-rope-oscillation``: the zoo's RoPE model (default recipe, seed 0) swings between unseen-pair accuracies of
0.35 and 1.00 over its last 20 evaluations, with its inverse temperature at the clamp of 100. Five arms on its config
(``ARMS``: r0 the default; r1 the temperature decayed; r2 standard negatives; r3 held at 100; r4 standard negatives
held at 100) at seeds 1-3 (``DECIDING_SEEDS``). ``late_unseen`` reads a run's 20 late evaluations,
``classify_run`` names what they do, ``late_temperatures`` reads T at the late snapshots, and
``oscillation_decision`` is the pre-registered rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register

ARMS = {
    "cls-exempt-init002-temp-nodecay-distinct": "r0",
    "cls-exempt-init002-distinct": "r1",
    "cls-exempt-init002-temp-nodecay": "r2",
    "cls-exempt-init002-temp100-distinct": "r3",
    "cls-exempt-init002-temp100": "r4",
}
ARM_TEXT = {
    "r0": "r0 default (masked, T learned, not decayed)",
    "r1": "r1 masked, T decayed",
    "r2": "r2 standard negatives, T not decayed",
    "r3": "r3 masked, T held at 100",
    "r4": "r4 standard negatives, T held at 100",
}
DECIDING_SEEDS = (1, 2, 3)  # seed 0's zoo run showed the oscillation: it chose the question
LATE_EPOCHS = tuple(range(8100, 10001, 100))  # the 20 evaluations read
LATE_SNAPSHOTS = (8000, 8500, 9000, 9500, 10000)  # where T is read
N_UNSEEN = 100  # the split's items (20 ordered pairs x 5), the same in every run (data seed 0)
OSCILLATES, STEADY, LEVEL, LOW = 0.30, 0.15, 0.8, 0.5  # O thresholds, the trough level, the "low" mean
T_MOVED, T_CLAMP = 50.0, 99.0  # r1 moved T: below 50 at every late snapshot; "at the clamp": at or above 99
CLASSES = ("oscillates", "steady", "low", "between")  # a run's class (classify_run)


def late_unseen(run_dir: str | Path) -> tuple[list[float], list[float]]:
    """The unseen-pair accuracy (``eval.val_unseen.acc``) and the recorded training loss (the mean over the 100
    epochs before it) at the 20 evaluations of epochs 8,100-10,000 in ``run_dir/metrics.jsonl``. Exactly one line
    per epoch with ``n`` = 100, each accuracy a number in [0, 1]: anything else is an error naming the run.

    Example:
        >>> import json, tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> lines = [{"epoch": e, "loss": 0.1, "eval": {"val_unseen": {"n": 100, "acc": 0.9}}} for e in LATE_EPOCHS]
        >>> _ = (d / "metrics.jsonl").write_text("\\n".join(json.dumps(x) for x in lines))
        >>> acc, loss = late_unseen(d)
        >>> len(acc), acc[0], loss[-1]
        (20, 0.9, 0.1)
    """
    from hooked_clip1d.pretrained.precision import is_accuracy

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r}: no metrics history to read the late evaluations from")
    from hooked_clip1d.training.rundir import read_metrics  # the one reader: a line it cannot read is an error

    found: dict[int, list[dict[str, Any]]] = {}
    for row in read_metrics(path):
        if int(row["epoch"]) in LATE_EPOCHS:
            found.setdefault(int(row["epoch"]), []).append(row)
    wrong = {e: len(found.get(e, [])) for e in LATE_EPOCHS if len(found.get(e, [])) != 1}
    if wrong:
        raise ValueError(f"{str(path)!r}: needs one evaluation at each of epochs 8,100-10,000; lines by epoch: {wrong}")
    rows = [found[e][0] for e in LATE_EPOCHS]
    split = [r.get("eval", {}).get("val_unseen", {}) for r in rows]
    bad = [
        e for e, s in zip(LATE_EPOCHS, split, strict=True) if s.get("n") != N_UNSEEN or not is_accuracy(s.get("acc"))
    ]
    if bad:
        raise ValueError(f"{str(path)!r}: no unseen-pair accuracy of {N_UNSEEN} items at epochs {bad}")
    loss = [r.get("loss") for r in rows]
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in loss):
        raise ValueError(f"{str(path)!r}: a late evaluation without a finite training loss: {loss}")
    return [float(s["acc"]) for s in split], [float(v) for v in loss]


def classify_run(acc: Sequence[float]) -> dict[str, Any]:
    """The pre-registered reading of 20 late unseen-pair accuracies: O (max - min), their mean, the troughs (an
    evaluation below 0.8 followed by one at or above it: their indices) and the class: ``"oscillates"`` (O >= 0.30
    and >= 2 troughs), ``"steady"`` (O <= 0.15, mean >= 0.5), ``"low"`` (mean < 0.5, not oscillating) or
    ``"between"``.

    Example:
        >>> classify_run([1.0, 0.4] * 10)["class"], classify_run([0.95, 0.97] * 10)["class"]
        ('oscillates', 'steady')
        >>> r = classify_run([0.9] * 10 + [0.3] * 10)  # one collapse: a range, no repeated trough
        >>> r["class"], r["troughs"]
        ('between', [])
    """
    a = [float(v) for v in acc]
    if len(a) != len(LATE_EPOCHS):
        raise ValueError(f"classify_run needs {len(LATE_EPOCHS)} accuracies, got {len(a)}")
    o, mean = max(a) - min(a), sum(a) / len(a)
    troughs = [i for i in range(len(a) - 1) if a[i] < LEVEL <= a[i + 1]]
    if o >= OSCILLATES - 1e-9 and len(troughs) >= 2:
        cls = "oscillates"
    elif mean < LOW - 1e-9:  # a mean of exactly 0.5 (k/100 readings) is not low, whatever the float sum gives
        cls = "low"
    elif o <= STEADY + 1e-9:
        cls = "steady"
    else:
        cls = "between"
    return {"range": o, "mean": mean, "troughs": troughs, "class": cls}


def late_temperatures(run_dir: str | Path) -> dict[int, tuple[float, float]]:
    """The inverse temperature at the late snapshots (``LATE_SNAPSHOTS``) of a run: ``{epoch: (as clamped in the
    forward, raw exp(logit_scale))}``. A missing snapshot is an error naming it."""
    from hooked_clip1d.model.checkpoint import load_model_file

    out = {}
    for e in LATE_SNAPSHOTS:
        path = Path(run_dir) / "snapshots" / f"epoch_{e:05d}.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{str(path)!r}: the study reads T at the snapshots of epochs {LATE_SNAPSHOTS}")
        out[e] = _temperature(load_model_file(path), str(path))
    return out


def _temperature(model: Any, where: str) -> tuple[float, float]:
    """``(T as clamped in the forward, raw exp(logit_scale))``; a value that is not finite is an error naming
    ``where`` (skipped, a NaN would read as "T not below 50" and "not at the clamp")."""
    t = (float(model.temperature_scale().detach()), float(model.logit_scale.detach().exp()))
    if not all(math.isfinite(v) for v in t):
        raise ValueError(f"{where}: the inverse temperature is not finite: {t}")
    return t


def arm_class(classes: Sequence[str]) -> str:
    """An arm's class from its deciding seeds' classes: ``"oscillates"`` / ``"steady"`` where >= 2 of 3 are,
    else ``"mixed"``.

    Example:
        >>> arm_class(["oscillates", "between", "oscillates"]), arm_class(["steady", "low", "oscillates"])
        ('oscillates', 'mixed')
    """
    for c in ("oscillates", "steady"):
        if sum(x == c for x in classes) >= 2:
            return c
    return "mixed"


def oscillation_decision(runs: Mapping[tuple[str, int], Mapping[str, Any]]) -> dict[str, Any]:
    """The pre-registered rule on ``runs[(arm, seed)] = {"class": ..., "t_late": [T at the 5 late snapshots]}`` for
    every arm r0-r4 and deciding seed (a missing one is an error).

    Example:
        >>> def run(c, t):
        ...     return {"class": c, "t_late": [t] * 5}
        >>> ht = {"r0": ("oscillates", 100), "r1": ("steady", 20), "r2": ("steady", 30), "r3": ("oscillates", 100),
        ...       "r4": ("oscillates", 100)}
        >>> oscillation_decision({(a, s): run(*v) for a, v in ht.items() for s in DECIDING_SEEDS})["verdict"]
        'H-T supported'
        >>> ht["r0"] = ("between", 100)
        >>> oscillation_decision({(a, s): run(*v) for a, v in ht.items() for s in DECIDING_SEEDS})["verdict"]
        'not shown to replicate (0 of 3)'
    """
    missing = [(a, s) for a in ARM_TEXT for s in DECIDING_SEEDS if (a, s) not in runs]
    if missing:
        raise ValueError(f"the rule reads every arm at seeds {DECIDING_SEEDS}; missing: {missing}")
    bad = [
        k
        for k in runs
        if runs[k].get("class") not in CLASSES
        or len(runs[k].get("t_late", ())) != len(LATE_SNAPSHOTS)
        or not all(isinstance(t, int | float) and math.isfinite(t) for t in runs[k]["t_late"])
    ]
    if bad:
        raise ValueError(f"runs {bad}: each needs a class of {CLASSES} and {len(LATE_SNAPSHOTS)} finite late T values")
    classes = {a: arm_class([runs[(a, s)]["class"] for s in DECIDING_SEEDS]) for a in ARM_TEXT}
    n_r0 = sum(runs[("r0", s)]["class"] == "oscillates" for s in DECIDING_SEEDS)
    moved = sum(all(t < T_MOVED for t in runs[("r1", s)]["t_late"]) for s in DECIDING_SEEDS) >= 2
    out: dict[str, Any] = {"arm_classes": classes, "r0_oscillating_seeds": n_r0, "r1_moved_t": moved}
    pair = None
    if n_r0 < 2:
        verdict = f"not shown to replicate ({n_r0} of 3)"
    elif moved:
        r2_ok = all(
            runs[("r2", s)]["class"] != "oscillates" or all(t >= T_CLAMP for t in runs[("r2", s)]["t_late"])
            for s in DECIDING_SEEDS
        )
        osc = {a for a, c in classes.items() if c == "oscillates"}
        if {"r3", "r4"} <= osc and classes["r1"] == "steady" and r2_ok:
            verdict = "H-T supported"
        elif {"r1", "r3"} <= osc and classes["r2"] == classes["r4"] == "steady":
            verdict = "H-N supported"
        else:
            verdict = "not explained by these arms"
    else:
        verdict = "r1 did not move T"
        if classes["r3"] == "oscillates" and classes["r4"] == "steady":
            pair = "at T = 100, the masked negatives are needed"
        elif classes["r3"] == classes["r4"] == "oscillates":
            pair = "at T = 100, they are not"
    return {**out, "verdict": verdict, "pair_reading": pair}


def read_run(row: Mapping[str, Any]) -> dict[str, Any]:
    """One run's measures; an untrained draw (the null control's rows: 0 epochs) is read as what it is, a model whose
    weights do not move: its one evaluation at every late epoch, its T at init at every late snapshot."""
    from hooked_clip1d.pretrained.precision import is_accuracy

    path = Path(row["path"])
    loss: list[float] | None
    if _untrained(row):
        from hooked_clip1d.model.checkpoint import load_model_file

        acc = row.get("val_unseen.acc")
        if not is_accuracy(acc):
            raise ValueError(f"{str(path)!r}: the untrained draw has no unseen-pair accuracy: {acc!r}")
        t = _temperature(load_model_file(path / "model.safetensors"), str(path))
        late, loss, temps = [float(acc)] * len(LATE_EPOCHS), None, dict.fromkeys(LATE_SNAPSHOTS, t)
    else:
        (late, loss), temps = late_unseen(path), late_temperatures(path)
    c = classify_run(late)
    median = float(np.median(loss)) if loss is not None else None
    return {
        **c,
        "acc": late,
        "loss": loss,
        "t_late": [temps[e][0] for e in LATE_SNAPSHOTS],
        "t_raw": [temps[e][1] for e in LATE_SNAPSHOTS],
        "troughs_above_median_loss": 0 if loss is None else sum(loss[i] > median for i in c["troughs"]),
    }


def _untrained(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` is one of the null control's untrained draws (``controls.null_rows``: no step trained, no
    ``finished`` key) rather than a run of the sweep."""
    return int(row["epochs"]) == 0 and int(row.get("steps", -1)) == 0 and "finished" not in row


def late_runs(
    rows: list[dict[str, Any]], arms: Mapping[str, str], seeds: Sequence[int], checks: Sequence[str], study: str
) -> dict[tuple[str, int], dict[str, Any]] | Outcome:
    """A late-swing study's runs (``rows`` of its sweep, those of recipes ``arms`` at ``seeds``) read by ``read_run``:
    ``{(arm, seed): measures}``, or a *not run* Outcome (``checks`` failing) while any run is short of epoch 10,000.
    Two runs of one (arm, seed) are an error naming ``study``.

    Example:
        >>> out = late_runs([{"recipe": "a", "seed": 1, "epochs": 500, "path": "."}], {"a": "r0"}, (1,), ("c",), "x")
        >>> out.not_run, out.checks
        ('the runs have not reached epoch 10,000', [('c', False)])
    """
    mine = [r for r in rows if r["recipe"] in arms and int(r["seed"]) in seeds]
    reached = sorted({int(r["epochs"]) for r in mine})
    if any(0 < e < LATE_EPOCHS[-1] for e in reached):
        return Outcome(
            {"epochs_reached": reached},
            f"the runs are at epochs {reached}; the study reads epochs 8,100-10,000",
            [(c, False) for c in checks],
            {},
            not_run=f"the runs have not reached epoch {LATE_EPOCHS[-1]:,}",
        )
    keys = [(arms[r["recipe"]], int(r["seed"])) for r in mine]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    if doubled:
        raise ValueError(f"{study}: more than one run for (arm, seed) {doubled}")
    return {(arms[r["recipe"]], int(r["seed"])): read_run(r) for r in mine}


def _x_oscillation(rows: list[dict[str, Any]]) -> Outcome:
    from hooked_clip1d.analysis.circuits.scores import rank_correlation

    checks_text = (
        "the oscillation replicates: the default recipe (r0) oscillates at >= 2 of seeds 1-3",
        "the arms explain it: H-T (the temperature at its clamp) or H-N (the masked negatives) is supported",
    )
    runs = late_runs(rows, ARMS, DECIDING_SEEDS, checks_text, "x19")
    if isinstance(runs, Outcome):
        return runs
    d = oscillation_decision(runs)
    # "what it can move": under H-T, docs/configs.md speaks of r1 only if its late mean is >= 0.8 at 2 of 3 seeds
    d["r1_generalizes_steadily"] = sum(runs[("r1", s)]["mean"] >= LEVEL - 1e-9 for s in DECIDING_SEEDS) >= 2
    keys = sorted(runs)
    t_end = [runs[k]["t_late"][-1] for k in keys]
    rho = rank_correlation([runs[k]["range"] for k in keys], t_end)
    troughs = sum(len(runs[k]["troughs"]) for k in keys)
    above = sum(runs[k]["troughs_above_median_loss"] for k in keys)
    checks = [
        (checks_text[0], d["r0_oscillating_seeds"] >= 2),
        (checks_text[1], d["verdict"] in ("H-T supported", "H-N supported")),
    ]
    table = [
        "| arm | seed | O (range) | mean | troughs | class | T at 10,000 (raw) | T at 8,000-10,000 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a, s in keys:
        r = runs[(a, s)]
        table.append(
            f"| {ARM_TEXT[a]} | {s} | {r['range']:.2f} | {r['mean']:.2f} | {len(r['troughs'])} | {r['class']} | "
            f"{r['t_late'][-1]:.1f} ({r['t_raw'][-1]:.1f}) | {min(r['t_late']):.1f}-{max(r['t_late']):.1f} |"
        )
    summary = (
        f"pre-registered reading: {d['verdict']}"
        + (f" ({d['pair_reading']})" if d["pair_reading"] else "")
        + "; arms: "
        + ", ".join(f"{a} {c}" for a, c in d["arm_classes"].items())
        + f"; r1 moved T: {'yes' if d['r1_moved_t'] else 'no'}; Spearman(O, T at epoch 10,000) over {len(keys)} runs "
        + ("undefined (a constant)" if math.isnan(rho) else f"{rho:.2f}")
        + f"; troughs at a loss above the late median: {above} of {troughs}"
    )
    numbers = {
        "decision": d,
        "runs": {f"{a}/{s}": r for (a, s), r in sorted(runs.items())},
        "spearman_range_t": None if math.isnan(rho) else rho,
        "troughs_above_median_loss": [above, troughs],
        "thresholds": {"oscillates": OSCILLATES, "steady": STEADY, "level": LEVEL, "low": LOW, "t_moved": T_MOVED},
    }
    notes = (
        "Seeds 1-3 decide (seed 0's zoo run chose the question). One data draw (data seed 0): the same 100 unseen-pair "
        "items in every run. The untrained null's weights do not move: it never oscillates. Fig. 18's verdict and "
        "the default recipe are not moved by this study (docs/fidelity.md)."
    )
    fig = plot_late_unseen(runs)
    return Outcome(numbers, summary + ".", checks, {"late_unseen": fig}, notes, table=tuple(table))


def plot_late_unseen(
    runs: Mapping[tuple[str, int], Mapping[str, Any]],
    arm_text: Mapping[str, str] = ARM_TEXT,
    seeds: Sequence[int] = DECIDING_SEEDS,
) -> plt.Figure:
    """Each arm's late unseen-pair accuracy, a line per seed, with the trough level (x19's arms, or another
    study's: ``arm_text``, ``seeds``)."""
    fig, axes = plt.subplots(1, len(arm_text), figsize=(3.0 * len(arm_text), 3.0), sharey=True)
    for ax, a in zip(axes, arm_text, strict=True):
        for s in seeds:
            if (a, s) in runs:
                ax.plot(LATE_EPOCHS, runs[(a, s)]["acc"], marker=".", label=f"seed {s}")
        ax.axhline(LEVEL, color="grey", ls=":", lw=1)
        ax.set(title=arm_text[a], xlabel="epoch", ylim=(0, 1.05))
        ax.title.set_fontsize(7)
    axes[0].set_ylabel("unseen-pair accuracy")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x19-rope-oscillation",
        "The RoPE model's oscillating generalization (the RoPE oscillation study; beyond the paper)",
        "Question: the RoPE model under the default recipe swings between unseen-pair accuracies of 0.35 and 1.00 "
        "late in training, its inverse temperature at the clamp of 100. Does this replicate at fresh seeds, and is it "
        "the temperature at its clamp or the masked negatives (pre-registered in docs/fidelity.md)?",
        (),
        _x_oscillation,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="rope-oscillation",
        data="each run's 20 evaluations at epochs 8,100-10,000 (100 unseen-pair items) and its late snapshots",
    ),
)
