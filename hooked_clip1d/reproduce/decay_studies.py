"""Two follow-ups of the dynamics study on Fig. 13's share (beyond the paper; each pre-registered in
docs/fidelity.md before it was read): ``x14-exposure``, is the share a function of the decay exposure? and
``x15-decay-rate``, does it follow the weight decay w, and does some w give Fig. 13 (``decay_rate_table``)?

The dynamics study's end points put the Fig. 13 share (XW_QKX^T's part of the CLS-row std) at 0.10-0.15, 0.37-0.47
and 0.79-0.92 in arms of decay exposure lr x w x steps 4.4, 8.8 and 1.0; end points confound the exposure with the
training time and the lr schedule. This figure reads the same runs' snapshots at equal exposure (``E_STARS``) and at
equal epoch (the epoch at which arm (a) reaches that exposure) and compares the arms' spreads.

Example:
    >>> rows = [{"epoch": 0, "exposure": 0.0, "xwx_share": [0.2, 0.4], "probe": 0.9},
    ...         {"epoch": 100, "exposure": 1.0, "xwx_share": [0.6, 0.8], "probe": 0.95}]
    >>> round(share_at(rows, "exposure", 0.25), 3)  # a quarter of the way from 0.3 to 0.7
    0.4
    >>> share_at(rows, "exposure", 2.0) is None  # not reached
    True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.analysis.mechanism.dynamics import DYNAMICS_CHECKS, run_emergence
from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.dynamics_studies import ARMS, CHECK_SHORT, run_emergences
from hooked_clip1d.reproduce.mechanism_figs import PAPER_XWX_SHARE

E_STARS = (0.25, 0.5, 0.9)  # every run of the four arms reaches each; arm (c) reaches 0.9 at epoch 9,000
EXPOSURE_ARMS = (
    "cls-exempt-init002",
    "cls-exempt-init002-cosine",
    "cls-exempt-init002-exposure1",
    "cls-exempt-init002-embdrop",
)  # arm (e) has no decoupled decay, so no exposure
REFERENCE_ARM = "cls-exempt-init002"  # arm (a): the epoch-matched reading uses the epoch at which it reaches E*
KEEP_PROBE = 0.8  # a run's share counts at a point only where it generalizes (probe accuracy at both snapshots)
MAX_SPREAD = 0.10
PAPER_RANGE = (min(PAPER_XWX_SHARE), max(PAPER_XWX_SHARE))  # Fig. 13's 0.76-0.91, shaded on the figures


def _head_mean(row: dict[str, Any]) -> float:
    return float(np.mean(row["xwx_share"]))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _bracket(pts: list[dict[str, Any]], key: str, x: float | int) -> tuple[dict, dict, float] | None:
    """The two consecutive snapshots of ``pts`` (ordered by ``key``) around ``key`` = ``x`` and x's fraction of the
    way from the first to the second; None if ``x`` is outside them."""
    for a, b in zip(pts, pts[1:], strict=False):
        if a[key] <= x <= b[key]:
            return a, b, 0.0 if b[key] == a[key] else (x - a[key]) / (b[key] - a[key])
    return None


def share_at(rows: list[dict[str, Any]], key: str, x: float | int) -> float | None:
    """One run's head-mean XW_QKX^T share at ``key`` (``"exposure"`` or ``"epoch"``) = ``x``, interpolated linearly
    between the two snapshots around it; None where the run never reaches ``x`` or does not generalize at both of
    those snapshots (probe accuracy < ``KEEP_PROBE``)."""
    pts = sorted((r for r in rows if r.get(key) is not None and r.get("xwx_share")), key=lambda r: r[key])
    found = _bracket(pts, key, x)
    if found is None or min(found[0]["probe"], found[1]["probe"]) < KEEP_PROBE:
        return None
    a, b, t = found
    return (1 - t) * _head_mean(a) + t * _head_mean(b)


def epoch_at(rows: list[dict[str, Any]], exposure: float | int) -> float | None:
    """The (interpolated) epoch at which a run's decay exposure reaches ``exposure``; None if it never does."""
    found = _bracket(
        sorted((r for r in rows if r.get("exposure") is not None), key=lambda r: r["epoch"]), "exposure", exposure
    )
    return None if found is None else found[0]["epoch"] + found[2] * (found[1]["epoch"] - found[0]["epoch"])


def _arm_values(runs: dict[tuple[str, int], list[dict[str, Any]]], key: str, x: float) -> dict[str, float | None]:
    """Each arm's mean over its kept runs of the share at ``key`` = ``x`` (None: no kept run)."""
    out: dict[str, float | None] = {}
    for arm in EXPOSURE_ARMS:
        vals = [v for (a, _), rows in runs.items() if a == arm and (v := share_at(rows, key, x)) is not None]
        out[arm] = float(np.mean(vals)) if vals else None
    return out


def _spread(values: dict[str, float | None]) -> float | None:
    got = list(values.values())
    return None if not got or any(v is None for v in got) else max(got) - min(got)  # type: ignore[type-var]


def exposure_collapse(runs: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per ``E_STARS`` value: each arm's share at that exposure and at arm (a)'s epoch for it, both spreads, and
    whether each pre-registered check holds there (a spread that is undefined fails both)."""
    ref = [rows for (a, _), rows in sorted(runs.items()) if a == REFERENCE_ARM]
    points = []
    for e in E_STARS:
        epoch = epoch_at(ref[0], e) if ref else None
        by_exposure = _arm_values(runs, "exposure", e)
        by_epoch = _arm_values(runs, "epoch", epoch) if epoch is not None else dict.fromkeys(EXPOSURE_ARMS)
        s_exp, s_ep = _spread(by_exposure), _spread(by_epoch)
        points.append(
            {
                "exposure": e,
                "epoch_of_a": epoch,
                "by_exposure": by_exposure,
                "by_epoch": by_epoch,
                "spread_exposure": s_exp,
                "spread_epoch": s_ep,
                "collapses": s_exp is not None and s_exp <= MAX_SPREAD,
                "beats_epoch": s_exp is not None and s_ep is not None and s_exp < s_ep,
            }
        )
    return {"points": points}


def _plot(runs: dict[tuple[str, int], list[dict[str, Any]]]) -> plt.Figure:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    colors = dict(zip(EXPOSURE_ARMS, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for (arm, seed), rows in sorted(runs.items()):
        pts = [r for r in rows if r.get("exposure") and r.get("xwx_share")]
        for ax, key in zip(axes, ("exposure", "epoch"), strict=True):
            ax.plot(
                [r[key] for r in pts],
                [_head_mean(r) for r in pts],
                color=colors[arm],
                lw=0.9,
                alpha=0.8,
                label=ARMS[arm] if seed == min(s for a, s in runs if a == arm) else None,
            )
    for e in E_STARS:
        axes[0].axvline(e, color="grey", lw=0.6, ls=":")
    # untrained runs have nothing past epoch 0 (exposure 0): a log axis would raise on them
    drawn = any(r.get("exposure") and r.get("xwx_share") for rows in runs.values() for r in rows)
    scale = "log" if drawn else "linear"
    axes[0].set(xscale=scale, xlabel="decay exposure lr x w x steps", ylabel="XW_QKX^T share (mean over heads)")
    axes[1].set(xscale=scale, xlabel="epoch")
    for ax in axes:
        ax.axhspan(*PAPER_RANGE, color="tab:green", alpha=0.08)
    axes[0].legend(fontsize=7)
    fig.suptitle("Fig. 13's share over training, by decay exposure (left) and by epoch (right)", fontsize=10)
    fig.tight_layout()
    return fig


def _x_exposure(rows: list[dict[str, Any]]) -> Outcome:
    em = run_emergences([r for r in rows if r["recipe"] in EXPOSURE_ARMS])
    runs = {k: e.rows for k, e in em.items()}
    res = exposure_collapse(runs)
    pts = res["points"]
    checks = [
        (
            f"at every exposure {', '.join(map(str, E_STARS))}, the arms' shares at equal exposure differ by <= "
            f"{MAX_SPREAD} (max - min of the arm means)",
            all(p["collapses"] for p in pts),
        ),
        (
            "at every one of them, the arms differ less at equal exposure than at equal epoch (ties fail)",
            all(p["beats_epoch"] for p in pts),
        ),
    ]
    reading = (
        "the share is a function of the decay exposure"
        if all(ok for _, ok in checks)
        else "exposure explains more than time, not all"
        if checks[1][1]
        else "the share is not a function of the decay exposure"
    )

    summary = f"{reading}. " + "; ".join(
        f"exposure {p['exposure']}: arms "
        + " / ".join(_fmt(p["by_exposure"][a]) for a in EXPOSURE_ARMS)
        + f" (spread {_fmt(p['spread_exposure'])}); at arm (a)'s epoch "
        + ("-" if p["epoch_of_a"] is None else f"{p['epoch_of_a']:.0f}")
        + ": "
        + " / ".join(_fmt(p["by_epoch"][a]) for a in EXPOSURE_ARMS)
        + f" (spread {_fmt(p['spread_epoch'])})"
        for p in pts
    )
    notes = (
        "Arms in order: " + ", ".join(ARMS[a] for a in EXPOSURE_ARMS) + f"; {len(runs)} runs. A run's share at a point "
        "is the head-mean XW_QKX^T share interpolated between the two snapshots around it, kept where the run "
        f"generalizes there (probe accuracy >= {KEEP_PROBE} at both); '-': no kept run, so the checks fail there."
    )
    numbers = {"e_stars": list(E_STARS), "arms": list(EXPOSURE_ARMS), "points": pts, "reading": reading}
    return Outcome(numbers, summary + ".", checks, {"share": _plot(runs)}, notes)


DECAY_ARMS = {"cls-exempt-init002", "cls-exempt-init002-exposure1"}  # the dynamics study's arms (a), (c): w 0.2, 0.0227
#: the pre-registered grid of w (sweep decay-rate and the two arms): named in the order check's sentence, which is its
#: id, so the sentence must not depend on which runs are present (a re-judging from the record, or the untrained
#: null on the sweep's own cells, would otherwise compute another check)
DECAY_WS = (0.01, 0.0227, 0.05, 0.1, 0.2)


def _weight_decay(row: dict[str, Any]) -> float:
    """A sweep row's w, from its run folder's recorded training config."""
    return float(json.loads((Path(row["path"]) / "config.json").read_text())["train_config"]["weight_decay"])


def decay_rate_table(finals: dict[tuple[float, int], dict[str, Any]]) -> dict[str, Any]:
    """x15's pre-registered reading of each run's epoch-10,000 emergence row, keyed by (w, seed): per w the mean
    head-mean share over the seeds that generalize, and the seeds at which Fig. 13's check and the whole picture hold;
    the three checks (the share strictly falls as w rises, ties fail; Fig. 13 at >= 2 seeds of some w; the picture at
    >= 2 seeds of some w).

    Example:
        >>> row = lambda share, gen: {"xwx_share": [share] * 4, "checks": {"generalizes": gen, "fig13_split": False,
        ...                                                              "picture": False}}
        >>> t = decay_rate_table({(0.01, 0): row(0.9, True), (0.2, 0): row(0.4, True), (0.1, 0): row(0.5, False)})
        >>> t["mean_share"], t["falls_with_w"]  # w = 0.1 has no generalizing seed: the order check fails
        ({0.01: 0.9, 0.1: None, 0.2: 0.4}, False)
    """
    ws = sorted({w for w, _ in finals})
    mean: dict[float, float | None] = {}
    fig13: dict[float, int] = {}
    picture: dict[float, int] = {}
    for w in ws:
        rows = [r for (w2, _), r in finals.items() if w2 == w]
        gen = [_head_mean(r) for r in rows if r["checks"]["generalizes"]]
        mean[w] = round(float(np.mean(gen)), 4) if gen else None
        fig13[w] = sum(bool(r["checks"]["fig13_split"]) for r in rows)
        picture[w] = sum(bool(r["checks"]["picture"]) for r in rows)
    vals = [mean[w] for w in ws]
    falls = len(vals) >= 2 and None not in vals and all(a > b for a, b in zip(vals, vals[1:], strict=False))  # type: ignore[operator]
    return {
        "w": ws,
        "mean_share": mean,
        "fig13_seeds": fig13,
        "picture_seeds": picture,
        "falls_with_w": falls,
        "fig13_somewhere": any(n >= 2 for n in fig13.values()),
        "picture_somewhere": any(n >= 2 for n in picture.values()),
    }


def _x_decay_rate(rows: list[dict[str, Any]]) -> Outcome:
    keep = [r for r in rows if r.get("sweep", "decay-rate") != "dynamics" or r.get("recipe") in DECAY_ARMS]
    em = {(_weight_decay(r), int(r["seed"])): run_emergence(r["path"]) for r in keep}
    finals = {k: e.rows[-1] for k, e in em.items()}
    t = decay_rate_table(finals)
    checks = [
        (
            "the XW_QKX^T share (head mean, seeds that generalize) strictly falls as w rises over "
            + ", ".join(f"{w:g}" for w in DECAY_WS)
            + " (ties fail)",
            t["falls_with_w"] and set(DECAY_WS) <= set(t["w"]),  # every w of the grid read
        ),
        (
            "at some w, Fig. 13's check (every head in [0.76, 0.91], spread >= 0.10) holds at >= 2 of 3 seeds",
            t["fig13_somewhere"],
        ),
        (
            "at some w, the paper's whole picture (the dynamics study's five checks) holds at >= 2 of 3 seeds",
            t["picture_somewhere"],
        ),
    ]

    per_w = " / ".join(f"{w:g}" for w in t["w"])
    summary = (
        f"at epoch 10,000, for w = {per_w}: head-mean XW_QKX^T share (mean over the seeds that generalize) "
        + " / ".join(_fmt(t["mean_share"][w]) for w in t["w"])
        + "; seeds (of 3) where Fig. 13's check holds "
        + " / ".join(str(t["fig13_seeds"][w]) for w in t["w"])
        + "; where the whole picture holds "
        + " / ".join(str(t["picture_seeds"][w]) for w in t["w"])
    )
    names = (*DYNAMICS_CHECKS, "picture")
    table = [
        "| w | seed | probe acc | share per head | spread | " + " | ".join(CHECK_SHORT[c] for c in names) + " |",
        "|---|---|---|---|---|" + "---|" * len(names),
    ]
    for (w, seed), r in sorted(finals.items()):
        sh = r["xwx_share"]
        marks = " | ".join("y" if r["checks"][c] else "" for c in names)
        table.append(
            f"| {w:g} | {seed} | {r['probe']:.2f} | {' / '.join(f'{x:.2f}' for x in sh)} | "
            f"{max(sh) - min(sh):.2f} | {marks} |"
        )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for (w, _seed), r in sorted(finals.items()):
        axes[0].scatter([w], [_head_mean(r)], color="k" if r["checks"]["generalizes"] else "tab:red", s=14)
    got = [w for w in t["w"] if t["mean_share"][w] is not None]
    axes[0].plot(got, [t["mean_share"][w] for w in got], color="tab:blue", lw=1)
    axes[0].axhspan(*PAPER_RANGE, color="tab:green", alpha=0.1)
    axes[0].set(
        xscale="log",
        xlabel="weight decay w",
        ylabel="XW_QKX^T share at epoch 10,000 (head mean)",
        title="per seed (red: does not generalize) and mean",
    )
    for w in t["w"]:
        runs = [e.rows for (w2, _), e in em.items() if w2 == w]
        epochs = [r["epoch"] for r in runs[0] if r["epoch"] > 0]
        share = [np.mean([_head_mean(r) for rr in runs for r in rr if r["epoch"] == ep]) for ep in epochs]
        axes[1].plot(epochs, share, label=f"w {w:g}")
    axes[1].axhspan(*PAPER_RANGE, color="tab:green", alpha=0.1)
    axes[1].set(xscale="log", xlabel="epoch", title="mean over seeds, over training")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    notes = (
        f"{len(finals)} runs: sweep decay-rate (w 0.01, 0.05, 0.1) and the dynamics study's arms (a) (w 0.2) and (c) "
        "(w 0.0227), the same recipe but for w; probe set of every unseen pair at every position pair."
    )
    numbers = {**t, "finals": {f"{w:g}/{s}": r for (w, s), r in sorted(finals.items())}}
    return Outcome(numbers, summary + ".", checks, {"decay_rate": fig}, notes, table=tuple(table))


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x14-exposure",
        "Is Fig. 13's XW_QKX^T share a function of the decay exposure? (the dynamics study's snapshots; beyond the "
        "paper)",
        "Question: the dynamics study's end points put Fig. 13's share at 0.10-0.15, 0.37-0.47 and 0.79-0.92 in arms "
        "of decay exposure 4.4, 8.8 and 1.0. Read at equal exposure (0.25, 0.5, 0.9) rather than at the end, do the "
        "four arms with decoupled decay agree (within 0.10), and better than at equal epoch?",
        (),
        _x_exposure,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="dynamics",
        data="a probe set of 900 unseen-pair images per snapshot",
    ),
    FigureSpec(
        "x15-decay-rate",
        "Does Fig. 13's share follow the weight decay w, and does some w give Fig. 13? (beyond the paper)",
        "Question: x14 found the share's level follows w, not the decay exposure. At the protocol's lr and 10,000 "
        "epochs, over w = 0.01, 0.0227, 0.05, 0.1, 0.2 x 3 seeds, does the share fall as w rises, and does some w give "
        "Fig. 13's check or the paper's whole picture at >= 2 of 3 seeds?",
        (),
        _x_decay_rate,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="decay-rate",
        extra_sweeps=("dynamics",),
        data="a probe set of 900 unseen-pair images per run",
    ),
)
