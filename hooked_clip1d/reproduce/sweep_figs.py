"""The figures built on a sweep of trained models (Fig. 3, 4a, 10, 21a, 21b) and how an unfinished sweep is judged.

Each figure function takes the sweep's result rows (``sweep.results_table``, or ``sweep.progress_table`` for an
interim reading) and measures the trend the paper claims: unseen-pair accuracy over label diversity Ntot and layout
diversity n2 (``fig4a_outcome``, also fig3 and beyond's x2), over weight decay (``_fig10``, ``_fig21``) and over the
head dimension of a single-head vision encoder (``_fig21b``).

While a sweep is unfinished, ``grid_cell`` finds the zoo models that are cells of its grid and the ``_fig*_cells``
functions check them (the spec's ``cell_checks``); ``runner.reproduce`` turns that into an "at most partly" verdict.

Fig. 21 and 21b keep the paper's "stays <= 0.6" as an absence check (untrained models meet it) and add the restated
check of docs/fidelity.md ("Verdicts v2"): the runs stay <= 0.6 *while recognising the label set* (a positive
requirement untrained models fail), i.e. their failure is left/right, as the paper reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from hooked_clip1d.model.checkpoint import canonical_config
from hooked_clip1d.pretrained import manifest
from hooked_clip1d.reproduce.core import (
    FLAGSHIP,
    FULL,
    NO_QK_BIAS,
    NONGEN,
    NONGEN_NO_QK_BIAS,
    FigureSpec,
    Outcome,
    register,
)
from hooked_clip1d.reproduce.readings import at_least, at_most
from hooked_clip1d.reproduce.replicates import OWN_CONTROLS, OwnControl
from hooked_clip1d.settings import TrainConfig, field_names
from hooked_clip1d.settings.checks import check_int

PERMUTATIONS = 10_000  # the permutation null's draws (docs/fidelity.md, "Sweep figures under a permutation null")


def trend_test(
    x: Any,  # numbers (a sequence or an array)
    y: Any,
    blocks: Sequence[Any] | None = None,
    n_perm: int = PERMUTATIONS,
    seed: int = 0,
) -> tuple[float, float]:
    """Seed-level trend of ``y`` with ``x``: the mean over ``blocks`` of Spearman's rho within each block (one
    block if None), and its one-sided permutation p-value, ``x`` permuted within each block (``n_perm`` draws of
    numpy's default generator seeded with ``seed``): p = (1 + #{T* >= T}) / (1 + n_perm). Fewer than 3 runs cannot
    show a trend: (0.0, 1.0), so a check on it fails (a sweep read on a few finished runs or zoo cells). A non-finite
    value (a diverged run), a block list of another length or ``n_perm < 1`` is refused with ``ValueError``: the
    verdict machinery never reads a trend over them.

    Example:
        >>> rho, p = trend_test([10, 10, 20, 20, 30, 30], [0.5, 0.55, 0.7, 0.72, 0.9, 0.95])
        >>> round(rho, 3), p < 0.05  # two seeds per x: ties in x keep rho below 1
        (0.956, True)
        >>> trend_test([1, 1, 2, 2], [0.5, 0.5, 0.5, 0.5])[0]  # no trend: a flat y has rho 0
        0.0
        >>> trend_test([1, 2], [0.1, 0.9])  # two runs: no evidence either way
        (0.0, 1.0)
        >>> trend_test([1, 2, 3], [0.1, float("nan"), 0.9])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: trend_test: runs [1] have a non-finite x or y ([2.0], [nan]); a verdict is not read over ...
    """
    import numpy as np

    n_perm = check_int(n_perm, "trend_test: n_perm")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"trend_test needs paired values, got {x.shape} x and {y.shape} y")
    if isinstance(blocks, str | bytes):  # a 0-d array: every run one block, whatever the letters said
        raise ValueError(f"trend_test: blocks must be a list of block labels (one per run), got the string {blocks!r}")
    if blocks is not None and len(blocks) != len(x):
        raise ValueError(f"trend_test: {len(blocks)} block labels for {len(x)} runs (one label per run)")
    bad = np.flatnonzero(~(np.isfinite(x) & np.isfinite(y)))
    if len(bad):  # a NaN would rank below every value and move p: a diverged run is an error, never a reading
        raise ValueError(
            f"trend_test: runs {bad.tolist()} have a non-finite x or y ({x[bad].tolist()}, "
            f"{y[bad].tolist()}); a verdict is not read over a diverged or missing run"
        )
    if len(x) < 3:
        return 0.0, 1.0
    keys = np.zeros(len(x), dtype=int) if blocks is None else np.unique(np.asarray(blocks), return_inverse=True)[1]
    groups = [np.flatnonzero(keys == k) for k in np.unique(keys)]
    rng = np.random.default_rng(seed)
    t, null = 0.0, np.zeros(n_perm)
    for g in groups:
        b = _avg_ranks(y[g])
        b = b - b.mean()
        xs = np.vstack([x[g], rng.permuted(np.tile(x[g], (n_perm, 1)), axis=1)])  # row 0: as observed
        a = _avg_ranks(xs)
        a = a - a.mean(-1, keepdims=True)
        d = np.sqrt((a * a).sum(-1) * (b * b).sum())
        r = np.where(d > 0, (a * b).sum(-1) / np.where(d > 0, d, 1.0), 0.0)  # Spearman per row, ties averaged
        t += r[0] / len(groups)
        null += r[1:] / len(groups)
    return float(t), float((1 + (null >= t - 1e-12).sum()) / (1 + n_perm))


def _avg_ranks(v: Any) -> Any:
    """Ranks along the last axis, ties given their average rank (0-based)."""
    import numpy as np

    v = np.asarray(v, dtype=float)
    below = (v[..., None, :] < v[..., :, None]).sum(-1)
    equal = (v[..., None, :] == v[..., :, None]).sum(-1)
    return below + (equal - 1) / 2


FIG4A_TREND = "unseen-pair accuracy rises with Ntot at seed level (permutation p < 0.05)"
FIG4A_MORE = "Ntot moves accuracy more than n2 at seed level (T_Ntot > |T_n2|, and the Ntot trend holds)"
# Fig. 4a's (and Fig. 3's) counted checks have no trained control (issue 50's rule: a reproduced figure's record says
# why; written 2026-12-02, session 48, after Fig. 4a's record under the default recipe was read: docs/fidelity.md)
NO_TREND_CONTROL = (
    "a trend of unseen-pair accuracy over a trained grid, judged against a permutation null over the grid's own runs; "
    "the order-blind control is at chance on unseen pairs in every cell (0.42-0.51), so it fails the trend by "
    "construction, an identity rather than a control; the confound a control could test, more training steps with "
    "more labels at equal epochs, is x12-fig4a-steps' question (label diversity still drives at equal steps, under "
    "the recipe of 2026-11-26; not yet rerun under the default)"
)
OWN_CONTROLS["fig4a"] = OwnControl(
    "none trained for a sweep trend",
    unguarded={FIG4A_TREND: NO_TREND_CONTROL, FIG4A_MORE: NO_TREND_CONTROL},
    trained=False,
)


def fig4a_outcome(rows: list[dict[str, Any]], title: str = "Fig. 4a sweep") -> Outcome:
    import numpy as np

    from hooked_clip1d.analysis.mechanism.report import spearman_position

    ntot = sorted({r["n_labels"] for r in rows})
    n2s = sorted({r["n2"] for r in rows})
    mean = np.full((len(ntot), len(n2s)), np.nan)
    for i, nt in enumerate(ntot):
        for j, n2 in enumerate(n2s):
            acc = [r["val_unseen.acc"] for r in rows if r["n_labels"] == nt and r["n2"] == n2]
            if acc:
                mean[i, j] = float(np.mean(acc))
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for j, n2 in enumerate(n2s):
        ax.plot(ntot, mean[:, j], marker="o", label=f"n2 = {n2}")
    ax.set(xlabel="Ntot (label diversity)", ylabel="unseen-pair accuracy", ylim=(0, 1.05), title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    by_ntot = np.nanmax(mean, axis=1) - np.nanmin(mean, axis=1)  # spread over n2 at fixed Ntot
    by_n2 = np.nanmax(mean, axis=0) - np.nanmin(mean, axis=0)  # spread over Ntot at fixed n2
    rho = [float(spearman_position(torch.tensor(mean[:, j]))) for j in range(len(n2s))]
    old = [
        ("unseen-pair accuracy rises with Ntot at every n2 (rank correlation >= 0.8)", min(rho) >= 0.8),
        ("Ntot moves accuracy more than n2 does (mean spread)", float(by_n2.mean()) > float(by_ntot.mean())),
    ]
    # seed level, against a permutation null over the trained runs (docs/fidelity.md, "Sweep figures under a
    # permutation null")
    acc = [float(r["val_unseen.acc"]) for r in rows]
    t_n, p_n = trend_test([r["n_labels"] for r in rows], acc, blocks=[r["n2"] for r in rows])
    t_2, p_2 = trend_test([r["n2"] for r in rows], acc, blocks=[r["n_labels"] for r in rows])
    a, b = FIG4A_TREND, FIG4A_MORE
    checks = [(a, p_n < 0.05), (b, p_n < 0.05 and t_n > abs(t_2)), *old]
    permutation = {a: p_n, b: p_n}
    # why a cell-mean check is shown, not counted (worded for the old record's saturated cells until 2026-12-02)
    why = (
        "over cell means, each of three seeds that saturate near 1.00 in some grids and spread widely in others: "
        "cannot test the claim (the seed-level checks replace it)"
    )
    secondary = {name: why for name, _ in old}
    summary = (
        "mean unseen-pair accuracy [Ntot x n2]: "
        + "; ".join(f"Ntot {nt}: " + "/".join(f"{v:.2f}" for v in mean[i]) for i, nt in enumerate(ntot))
        + f" (n2 = {n2s}); rank correlation with Ntot per n2 {[round(r, 2) for r in rho]}"
    )
    summary += f"; seed level: T_Ntot = {t_n:+.2f} (permutation p = {p_n:.4f}), T_n2 = {t_2:+.2f} (p = {p_2:.4f})"
    numbers = {
        "ntot": ntot,
        "n2": n2s,
        "mean_unseen_acc": mean.tolist(),
        "rows": rows,
        "permutation": {"T_ntot": t_n, "p_ntot": p_n, "T_n2": t_2, "p_n2": p_2, "draws": PERMUTATIONS},
    }
    epochs = sorted({r["epochs"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})

    def seed_range(nt: int, n2: int) -> str:
        a = [r["val_unseen.acc"] for r in rows if r["n_labels"] == nt and r["n2"] == n2]
        return f"{min(a):.2f}-{max(a):.2f}" if a else "-"  # a cell without runs keeps its place

    ranges = "; ".join(f"Ntot {nt}: " + "/".join(seed_range(nt, n2) for n2 in n2s) for nt in ntot)
    notes = (
        f"{len(rows)} runs trained {epochs} epochs each (the paper: 10,000), seeds {seeds}; unseen-pair accuracy "
        f"range over seeds [Ntot x n2]: {ranges}."
    )
    return Outcome(numbers, summary + ".", checks, {"sweep": fig}, notes, secondary=secondary, permutation=permutation)


def _weight_decay_rows(rows: list[dict[str, Any]], title: str) -> tuple[list[float], list[float], Figure]:
    """Mean unseen-pair accuracy per weight decay over a sweep's runs, and its plot."""
    wds = sorted({float(r["weight_decay"]) for r in rows})
    acc = [
        float(torch.tensor([r["val_unseen.acc"] for r in rows if float(r["weight_decay"]) == w]).mean()) for w in wds
    ]
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    seeds = sorted({r.get("seed") for r in rows}, key=str)
    ax.plot(range(len(wds)), acc, marker="o", label="mean over seeds" if len(seeds) > 1 else None)
    if len(seeds) > 1:  # every run too: a mean over seeds hides a run above 0.6 beside two below it
        for k, seed in enumerate(seeds):
            pts = [(wds.index(float(r["weight_decay"])), r["val_unseen.acc"]) for r in rows if r.get("seed") == seed]
            ax.scatter(*zip(*pts, strict=True), s=14, alpha=0.7, marker="x", color=f"C{k + 1}", label=f"seed {seed}")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(wds)), [f"{w:g}" for w in wds])
    ax.set(xlabel="weight decay", ylabel="unseen-pair accuracy", ylim=(0, 1.05), title=title)
    fig.tight_layout()
    return wds, acc, fig


def _fig10(rows: list[dict[str, Any]]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.report import spearman_position

    wds, acc, fig = _weight_decay_rows(rows, "Fig. 10: full model, weight decay")
    rho = float(spearman_position(torch.tensor(acc)))
    t_w, p_w = trend_test([float(r["weight_decay"]) for r in rows], [float(r["val_unseen.acc"]) for r in rows])
    seed_level = "unseen-pair accuracy rises with weight decay at seed level (permutation p < 0.05)"
    old = ("unseen-pair accuracy rises with weight decay (rank correlation >= 0.8)", rho >= 0.8)
    checks = [
        (seed_level, p_w < 0.05),
        old,
        ("the largest weight decay beats no weight decay by >= 0.1", acc[-1] - acc[0] >= 0.1),
    ]
    summary = (
        "mean unseen-pair accuracy per weight decay: "
        + ", ".join(f"{w:g}: {a:.2f}" for w, a in zip(wds, acc, strict=True))
        + f"; seed level T_w = {t_w:+.2f} (permutation p = {p_w:.4f})"
    )
    epochs = sorted({r["epochs"] for r in rows})
    numbers = {
        "weight_decay": wds,
        "unseen_acc": acc,
        "rows": rows,
        "permutation": {"T_w": t_w, "p_w": p_w, "draws": PERMUTATIONS},
    }
    return Outcome(
        numbers,
        summary + ".",
        checks,
        {"sweep": fig},
        f"{len(rows)} runs, {epochs} epochs each.",
        permutation={seed_level: p_w},
        secondary={old[0]: "over cell means: the seed-level check replaces it"},
    )


def one_sided(m: dict[str, float]) -> bool:
    """An ``analysis.mechanism.report.single_head_mechanism`` reading whose head attends most to one side on >= 90 % of
    unseen pairs, with a monotonic EP row (|Spearman| >= 0.9)."""
    return at_least(max(m["left"], m["right"]), 0.9) and abs(m["ep_spearman"]) >= 0.9


def head_readings(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, float] | None]]:
    """Each single-head run's reading (``single_head_mechanism``: from its weights, or the one its row carries) and
    the rows with it attached as ``mechanism``, so that a record's rows keep it for a later re-judging from rows (a
    re-judging on a machine without the weights had silently dropped x7's readings, turning a counted check that held
    into a failing one). A reading is None where neither the weights nor the row have it.

    Example:
        >>> rows, got = head_readings([{"weight_decay": 0.2, "path": "/no/such/run"}])
        >>> got, "mechanism" in rows[0]
        ([None], False)
    """
    from hooked_clip1d.analysis.mechanism.report import single_head_mechanism

    got = [single_head_mechanism(r) for r in rows]
    kept = [
        {**r, "mechanism": {k: m[k] for k in ("left", "right", "ep_spearman")}} if m is not None else r
        for r, m in zip(rows, got, strict=True)
    ]
    return kept, got


LABEL_SET_STEPS = (0.6, 0.7, 0.8, 0.9)  # the label-set threshold of the restated check; 0.8 decides


def _fails_at_order(rows: list[dict[str, Any]], label_set: float = 0.8) -> bool:
    """The restated single-head check (docs/fidelity.md, "Verdicts v2"): every run stays <= 0.6 on unseen pairs while
    it recognises their label set (>= ``label_set``): its failure is left/right, not the labels. Untrained models
    recognise no label set, so they fail it."""
    return bool(rows) and all(
        at_most(r["val_unseen.acc"], 0.6) and at_least(r.get("val_unseen.label_set") or 0.0, label_set) for r in rows
    )


def _order_given_labels(rows: list[dict[str, Any]]) -> str:
    """Accuracy / label-set per run (how often a recognised pair is also put in the right order), for the notes."""
    ratio = [r["val_unseen.acc"] / r["val_unseen.label_set"] for r in rows if r.get("val_unseen.label_set")]
    if not ratio:
        return ""
    ls = [r.get("val_unseen.label_set") or 0.0 for r in rows]
    return (
        f" Unseen-pair accuracy / label-set (a recognised pair put in the right order): {min(ratio):.2f}-"
        f"{max(ratio):.2f} over {len(ratio)} runs; label-set {min(ls):.2f}-{max(ls):.2f}."
    )


def _fig21(rows: list[dict[str, Any]]) -> Outcome:
    wds, acc, fig = _weight_decay_rows(rows, "Fig. 21a: single-head vision, weight decay")
    restated = (
        "every single-head model stays <= 0.6 on unseen pairs while recognising their label set (label-set >= 0.8): "
        "it fails at left/right, not at the labels"
    )
    every_run = max(float(r["val_unseen.acc"]) for r in rows)  # every model: each run, not a mean over seeds
    checks = [
        ("every single-head model stays around or below 0.5 (<= 0.6)", at_most(every_run, 0.6)),
        (restated, _fails_at_order(rows)),
    ]
    sensitivity = {restated: [(t, _fails_at_order(rows, t)) for t in LABEL_SET_STEPS]}
    summary = "single-head vision encoder, mean unseen-pair accuracy per weight decay: " + ", ".join(
        f"{w:g}: {a:.2f}" for w, a in zip(wds, acc, strict=True)
    )
    rows, readings = head_readings(rows)
    mech = [m for m in readings if m is not None]
    if mech:
        summary += (
            ". Its one head on unseen pairs (CLS attends most to the left / right object; EP CLS-row Spearman): "
            + "; ".join(
                (f"seed {r.get('seed')}, " if len({x.get("seed") for x in rows}) > 1 else "")
                + f"wd {m['weight_decay']:g}: {m['left']:.2f} / {m['right']:.2f}, {m['ep_spearman']:+.2f}"
                for r, m in zip(rows, readings, strict=True)
                if m is not None
            )
        )
    epochs = sorted({r["epochs"] for r in rows})
    notes = f"{len(rows)} runs ({len({r.get('seed') for r in rows})} seed(s)), {epochs} epochs each."
    if len(mech) < len(rows):  # said, not dropped: the head readings need the runs' weights or rows that carry them
        notes += f" The single head's readings are missing for {len(rows) - len(mech)} of {len(rows)} runs."
    several = len({r.get("seed") for r in rows}) > 1

    def run_name(r: dict[str, Any]) -> str:
        return f"{float(r['weight_decay']):g}" + (f" seed {r.get('seed')}" if several else "")

    above = [r for r in rows if r["val_unseen.acc"] > 0.6]
    if above:
        notes += (
            " Where we differ: with weight decay "
            + ", ".join(f"{run_name(r)} ({r['val_unseen.acc']:.2f})" for r in above)
            + " unseen-pair accuracy is above 0.6"
        )
        sided = [m for r, m in zip(rows, readings, strict=True) if m is not None and at_least(r["val_unseen.acc"], 0.8)]
        if sided and all(one_sided(m) for m in sided):
            notes += (
                "; where it is >= 0.8 the head's CLS row attends most to one side on >= 90 % of unseen pairs, with a "
                "monotonic EP gradient: "
                "one head suffices to break the symmetry (the other object still gets a smaller softmax weight)"
            )
    poor = [r for r in rows if r["val_unseen.acc"] <= 0.6]
    if poor:
        notes += ". Unseen-pair accuracy / label-set where it stays low: " + ", ".join(
            f"wd {run_name(r)}: {r['val_unseen.acc']:.2f} / {r['val_unseen.label_set'] or 0:.2f}" for r in poor
        )
    numbers = {"weight_decay": wds, "unseen_acc": acc, "rows": rows, "mechanism": mech, "sensitivity": sensitivity}
    return Outcome(
        numbers,
        summary + ".",
        checks,
        {"sweep": fig},
        notes + "." + _order_given_labels(rows),
        absence=(checks[0][0],),
        sensitivity=sensitivity,
    )


def _fig21b(rows: list[dict[str, Any]]) -> Outcome:
    """Fig. 21b: unseen-pair accuracy of the single-head vision encoder over its head dimension, per seed."""
    import numpy as np

    dims = sorted({int(r["vision.d_head"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows})
    acc = {(int(r["vision.d_head"]), int(r["seed"])): float(r["val_unseen.acc"]) for r in rows}
    mean = [float(np.mean([a for (d, _), a in acc.items() if d == dim])) for dim in dims]
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for s in seeds:
        ax.plot(
            range(len(dims)),
            [acc.get((d, s), float("nan")) for d in dims],
            marker=".",
            lw=0.8,
            alpha=0.6,
            label=f"seed {s}",
        )
    ax.plot(range(len(dims)), mean, marker="o", color="k", label="mean")
    ax.axhline(0.6, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(dims)), [str(d) for d in dims])
    ax.set(
        xlabel="vision d_head (one head)",
        ylabel="unseen-pair accuracy",
        ylim=(0, 1.05),
        title="Fig. 21b: single-head vision, d_head",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    restated = (
        "every single-head model stays <= 0.6 on unseen pairs while recognising their label set (label-set >= 0.8), "
        "whatever its d_head: it fails at left/right, not at the labels"
    )
    checks = [
        (
            "every single-head model stays around or below 0.5 (<= 0.6), whatever its d_head",
            at_most(max(acc.values()), 0.6),
        ),
        (restated, _fails_at_order(rows)),
    ]
    sensitivity = {restated: [(t, _fails_at_order(rows, t)) for t in LABEL_SET_STEPS]}
    summary = "single-head vision encoder at weight decay 0.2, unseen-pair accuracy per d_head (mean; seeds " + (
        ", ".join(map(str, seeds))
        + "): "
        + "; ".join(
            f"{d}: {m:.2f} (" + " / ".join(f"{acc[(d, s)]:.2f}" if (d, s) in acc else "-" for s in seeds) + ")"
            for d, m in zip(dims, mean, strict=True)
        )
    )
    above = [k for k, a in acc.items() if a > 0.6]
    epochs = sorted({r["epochs"] for r in rows})
    notes = f"{len(rows)} runs ({len(seeds)} seeds), {epochs} epochs each; d_model 128 throughout."
    if above:
        notes += (
            f" Where we differ: {len(above)} of {len(rows)} runs are above 0.6 ("
            + ", ".join(f"d_head {d} seed {s}: {acc[(d, s)]:.2f}" for d, s in sorted(above))
            + ")."
        )
    notes += _order_given_labels(rows)
    numbers = {"d_head": dims, "seeds": seeds, "unseen_acc_mean": mean, "rows": rows, "sensitivity": sensitivity}
    return Outcome(
        numbers, summary + ".", checks, {"sweep": fig}, notes, absence=(checks[0][0],), sensitivity=sensitivity
    )


_NOT_PROTOCOL = ("init_seed", "device", "dtype")  # model-config fields set per run or per machine, not the recipe


def grid_cell(name: str, sweep: str | Path) -> dict[str, Any] | None:
    """The grid parameters of the run of sweep spec ``sweep`` that zoo model ``name`` is a cell of, else None.

    A cell has the run's model and data configs (up to init seed, device and dtype) and its training recipe (lr,
    weight decay and which parameters it spares or freezes, batch, Adam settings, seed, planned epochs); engine and
    evaluation cadence may differ.

    Example:
        >>> from hooked_clip1d.reproduce.core import SWEEPS_DIR
        >>> grid_cell("simplified-ntot20-n2-10-no-qk-bias", SWEEPS_DIR / "fig4a.toml")
        {'n_labels': 20, 'n2': 10, 'seed': 0}
    """
    from hooked_clip1d.sweeps.runner import load_spec
    from hooked_clip1d.training.run_config import comparable_train_config

    def recipe(model: dict[str, Any], data: dict[str, Any], train: dict[str, Any], epochs: int) -> Any:
        model, data = canonical_config("model_config", model), canonical_config("data_config", data)
        towers = {t: {k: v for k, v in model[t].items() if k not in _NOT_PROTOCOL} for t in ("vision", "text")}
        keys = set(field_names(TrainConfig, results=True)) - {"epochs"}  # every field that changes results
        protocol = {k: v for k, v in comparable_train_config(train).items() if k in keys}
        return {**model, **towers}, data, protocol, epochs

    m = manifest(name)
    mine = recipe(m["model_config"], m["data_config"], m["train_config"], m.get("epochs_planned", m["epochs"]))
    for run in load_spec(sweep).runs:
        t = run.train_cfg.to_dict()
        if recipe(run.model_cfg.to_dict(), run.data_cfg.to_dict(), t, run.train_cfg.epochs) == mine:
            return dict(run.params)
    return None


def _cell_acc(manifests: dict[str, dict[str, Any]], name: str, split: str = "val_unseen") -> float:
    return float(manifests[name]["metrics"][split]["acc"])


def _fig3_cells(manifests: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
    acc = {s: _cell_acc(manifests, FULL, s) for s in ("val_single", "val_seen", "val_unseen")}
    return [
        (
            "the grid's cell Ntot = 20, n2 = 10 (the model of Fig. 3's right panels) reaches >= 0.9 single-object, "
            "seen-pair and unseen-pair accuracy",
            at_least(min(acc.values()), 0.9),
        )
    ]


def _fig4a_cell_checks(high: str, low: str) -> Any:
    """Fig. 4a's checks of its two zoo cells (read while its sweep is unfinished): ``high`` the cell Ntot = 20,
    n2 = 10, ``low`` the cell Ntot = 10, n2 = 5."""

    def checks(manifests: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
        lo, hi = _cell_acc(manifests, low), _cell_acc(manifests, high)
        return [
            ("the cell Ntot = 10, n2 = 5 shows little unseen-pair generalization (App. F; < 0.5)", lo < 0.5),
            ("the cell Ntot = 20, n2 = 10 (Fig. 4's model) generalizes (unseen-pair >= 0.6)", at_least(hi, 0.6)),
        ]

    return checks


# the figures of this module: each reads the finished runs of its sweep (hooked_clip1d/sweeps/<sweep>.toml)
SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "fig4a",
        "Label diversity vs layout diversity (Fig. 3, 4a)",
        "Unseen-pair accuracy rises with the number of labels Ntot; the number of layouts per pair n2 matters "
        "much less.",
        (FLAGSHIP, NONGEN),  # the zoo's cells of the grid, checked while the sweep is unfinished
        fig4a_outcome,  # type: ignore[arg-type]
        # the default recipe since all 36 runs finished (docs/fidelity.md, Fig. 4a's pre-registration of 2026-12-02)
        sweep="fig4a-distinct",
        cell_checks=_fig4a_cell_checks(FLAGSHIP, NONGEN),
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig4a-no-qk-bias",
        "Fig. 4a without query/key biases and with the standard CLIP loss (Fig. 4a's record until 2026-12-02)",
        "Question: Fig. 4a's grid (Ntot 10-25 x n2 5-15 x seeds 0-2, 10,000 epochs) trained with the recipe "
        "cls-exempt-no-qk-bias-init002 (no query/key biases: a part of the paper's model removed; the standard CLIP "
        "loss; the temperature decayed): does unseen-pair accuracy rise with Ntot, with n2 mattering much less? Fig. "
        "4a's record under the default recipe replaced it; it is kept, judged by the same checks, as the "
        "pre-registration of 2026-12-02 (docs/fidelity.md) says.",
        (NO_QK_BIAS, NONGEN_NO_QK_BIAS),  # the zoo's cells of this grid
        fig4a_outcome,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="fig4a",
        cell_checks=_fig4a_cell_checks(NO_QK_BIAS, NONGEN_NO_QK_BIAS),
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig3",
        "Label diversity vs layout diversity, full model (Fig. 3)",
        "With the full model (4 pre-LN blocks with MLPs), all three generalization types improve with the "
        "number of labels Ntot; the layout diversity n2 has little effect.",
        (FULL,),  # the zoo's cell of the grid, reported while the sweep is unfinished
        lambda rows: fig4a_outcome(rows, "Fig. 3: full model"),  # type: ignore[arg-type,misc]
        sweep="fig3",
        cell_checks=_fig3_cells,
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig10",
        "Weight decay helps generalization (Fig. 10, App. B)",
        "Unseen-pair accuracy of the full model improves with weight decay regularization.",
        (FULL,),  # the zoo's cell (weight decay 0.2), reported while the sweep is unfinished; no trend from one
        _fig10,  # type: ignore[arg-type]
        sweep="fig10",
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig21",
        "A single-head vision encoder does not learn left/right (Fig. 21a, App. K)",
        "Across weight decays, a single-head single-layer vision encoder stays around or below 0.5 unseen-pair "
        "accuracy.",
        (),
        _fig21,  # type: ignore[arg-type]
        # the default recipe at seeds 0-2 since 2026-11-30 (docs/fidelity.md, App. K amendment of 2026-11-29)
        sweep="fig21-distinct",
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig21-all-decay",
        "Fig. 21a under the all-decay recipe (Fig. 21's record until 2026-11-30)",
        "Question: Fig. 21a's grid (a single-head single-layer vision encoder across weight decays) trained with the "
        "package's first recipe (all-decay: every parameter decayed, the standard CLIP loss; seed 0): does it stay "
        "around or below 0.5 unseen-pair accuracy, as the paper's App. K says? Fig. 21's record under the default "
        "recipe replaced it; it is kept, judged by the same checks, as the App. K amendment (docs/fidelity.md) says.",
        (),
        _fig21,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="fig21",
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig21b",
        "A single-head vision encoder over head dimension (Fig. 21b, App. K)",
        "At weight decay 0.2, a single-head single-layer vision encoder stays around or below 0.5 unseen-pair "
        "accuracy whatever its head dimension d_head.",
        (),
        _fig21b,  # type: ignore[arg-type]
        # the default recipe at seeds 0-2 once all 12 runs finished (docs/fidelity.md, amendment of 2026-11-29)
        sweep="fig21b-distinct",
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "fig21b-all-decay",
        "Fig. 21b under the all-decay recipe (Fig. 21b's record until its default-recipe grid finished)",
        "Question: Fig. 21b's grid (a single-head single-layer vision encoder over d_head at weight decay 0.2) trained "
        "with the package's first recipe (all-decay: every parameter decayed, the standard CLIP loss; seeds 0-2): does "
        "it stay around or below 0.5 unseen-pair accuracy whatever d_head, as the paper's App. K says? Fig. 21b's "
        "record under the default recipe replaced it; it is kept, judged by the same checks, as the amendment of "
        "2026-11-29 (docs/fidelity.md) says.",
        (),
        _fig21b,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="fig21b",
        data="each run's last evaluation on its own validation splits",
    ),
)
