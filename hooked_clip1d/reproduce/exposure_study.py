"""``x14-exposure``: is the Fig. 13 share a function of the decay exposure? (beyond the paper; pre-registered in
docs/fidelity.md before any share was read at matched exposures).

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

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.studies import ARMS, _emergences

E_STARS = (0.25, 0.5, 0.9)  # every run of the four arms reaches each; arm (c) reaches 0.9 at epoch 9,000
EXPOSURE_ARMS = ("cls-exempt-init002", "cls-exempt-init002-cosine", "cls-exempt-init002-exposure1",
                 "cls-exempt-init002-embdrop")  # fmt: skip  # arm (e) has no decoupled decay, so no exposure
REFERENCE_ARM = "cls-exempt-init002"  # arm (a): the epoch-matched reading uses the epoch at which it reaches E*
KEEP_PROBE = 0.8  # a run's share counts at a point only where it generalizes (probe accuracy at both snapshots)
MAX_SPREAD = 0.10


def _head_mean(row: dict[str, Any]) -> float:
    return float(np.mean(row["xwx_share"]))


def share_at(rows: list[dict[str, Any]], key: str, x: float | int) -> float | None:
    """One run's head-mean XW_QKX^T share at ``key`` (``"exposure"`` or ``"epoch"``) = ``x``, interpolated linearly
    between the two snapshots around it; None where the run never reaches ``x`` or does not generalize at both of
    those snapshots (probe accuracy < ``KEEP_PROBE``)."""
    pts = sorted((r for r in rows if r.get(key) is not None and r.get("xwx_share")), key=lambda r: r[key])
    for a, b in zip(pts, pts[1:], strict=False):
        if a[key] <= x <= b[key]:
            if min(a["probe"], b["probe"]) < KEEP_PROBE:
                return None
            t = 0.0 if b[key] == a[key] else (x - a[key]) / (b[key] - a[key])
            return (1 - t) * _head_mean(a) + t * _head_mean(b)
    return None


def epoch_at(rows: list[dict[str, Any]], exposure: float | int) -> float | None:
    """The (interpolated) epoch at which a run's decay exposure reaches ``exposure``; None if it never does."""
    pts = sorted((r for r in rows if r.get("exposure") is not None), key=lambda r: r["epoch"])
    for a, b in zip(pts, pts[1:], strict=False):
        if a["exposure"] <= exposure <= b["exposure"]:
            t = 0.0 if b["exposure"] == a["exposure"] else (exposure - a["exposure"]) / (b["exposure"] - a["exposure"])
            return a["epoch"] + t * (b["epoch"] - a["epoch"])
    return None


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
        points.append({
            "exposure": e, "epoch_of_a": epoch, "by_exposure": by_exposure, "by_epoch": by_epoch,
            "spread_exposure": s_exp, "spread_epoch": s_ep,
            "collapses": s_exp is not None and s_exp <= MAX_SPREAD,
            "beats_epoch": s_exp is not None and s_ep is not None and s_exp < s_ep,
        })  # fmt: skip
    return {"points": points}


def _plot(runs: dict[tuple[str, int], list[dict[str, Any]]]) -> plt.Figure:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    colors = dict(zip(EXPOSURE_ARMS, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for (arm, seed), rows in sorted(runs.items()):
        pts = [r for r in rows if r.get("exposure") and r.get("xwx_share")]
        for ax, key in zip(axes, ("exposure", "epoch"), strict=True):
            ax.plot([r[key] for r in pts], [_head_mean(r) for r in pts], color=colors[arm], lw=0.9, alpha=0.8,
                    label=ARMS[arm] if seed == min(s for a, s in runs if a == arm) else None)  # fmt: skip
    for e in E_STARS:
        axes[0].axvline(e, color="grey", lw=0.6, ls=":")
    # untrained runs have nothing past epoch 0 (exposure 0): a log axis would raise on them
    drawn = any(r.get("exposure") and r.get("xwx_share") for rows in runs.values() for r in rows)
    scale = "log" if drawn else "linear"
    axes[0].set(xscale=scale, xlabel="decay exposure lr x w x steps", ylabel="XW_QKX^T share (mean over heads)")
    axes[1].set(xscale=scale, xlabel="epoch")
    for ax in axes:
        ax.axhspan(0.76, 0.91, color="tab:green", alpha=0.08)  # the paper's Fig. 13 range
    axes[0].legend(fontsize=7)
    fig.suptitle("Fig. 13's share over training, by decay exposure (left) and by epoch (right)", fontsize=10)
    fig.tight_layout()
    return fig


def _x_exposure(rows: list[dict[str, Any]]) -> Outcome:
    em = _emergences([r for r in rows if r["recipe"] in EXPOSURE_ARMS])
    runs = {k: e.rows for k, e in em.items()}
    res = exposure_collapse(runs)
    pts = res["points"]
    checks = [
        (f"at every exposure {', '.join(map(str, E_STARS))}, the arms' shares at equal exposure differ by <= "
         f"{MAX_SPREAD} (max - min of the arm means)", all(p["collapses"] for p in pts)),
        ("at every one of them, the arms differ less at equal exposure than at equal epoch (ties fail)",
         all(p["beats_epoch"] for p in pts)),
    ]  # fmt: skip
    reading = (
        "the share is a function of the decay exposure"
        if all(ok for _, ok in checks)
        else "exposure explains more than time, not all"
        if checks[1][1]
        else "the share is not a function of the decay exposure"
    )

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    summary = f"{reading}. " + "; ".join(
        f"exposure {p['exposure']}: arms " + " / ".join(fmt(p["by_exposure"][a]) for a in EXPOSURE_ARMS)
        + f" (spread {fmt(p['spread_exposure'])}); at arm (a)'s epoch "
        + ("-" if p["epoch_of_a"] is None else f"{p['epoch_of_a']:.0f}") + ": "
        + " / ".join(fmt(p["by_epoch"][a]) for a in EXPOSURE_ARMS) + f" (spread {fmt(p['spread_epoch'])})"
        for p in pts
    )  # fmt: skip
    notes = (
        "Arms in order: " + ", ".join(ARMS[a] for a in EXPOSURE_ARMS) + f"; {len(runs)} runs. A run's share at a point "
        "is the head-mean XW_QKX^T share interpolated between the two snapshots around it, kept where the run "
        f"generalizes there (probe accuracy >= {KEEP_PROBE} at both); '-': no kept run, so the checks fail there."
    )
    numbers = {"e_stars": list(E_STARS), "arms": list(EXPOSURE_ARMS), "points": pts, "reading": reading}
    return Outcome(numbers, summary + ".", checks, {"share": _plot(runs)}, notes)


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
)
