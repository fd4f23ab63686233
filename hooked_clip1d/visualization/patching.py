"""Figures of the causal analyses (``hooked_clip1d.analysis.interventions.patching``, ``probes``, ``spatial_ids``),
matplotlib.

- ``plot_patching_map``: recovered fraction per hook/depth x position set (per head: one panel per set);
  ``plot_fraction_map`` draws any 2-D fraction array (e.g. ``tl_patching`` output) the same way.
- ``plot_recovery_bars``: the same fractions as grouped bars; ``plot_interchange`` and ``plot_knockout`` for the
  text interchange and attention-knockout results.
- ``plot_probe_accuracy``: held-out probe accuracy per depth, with chance and the shuffled-label control.
- ``plot_steering_curves``: fraction of the belief shift vs steering strength alpha; ``plot_spatial_ids``: the
  IDs projected on their horizontal direction per depth.

Every function returns the ``Figure`` (and draws into ``ax`` when given one).

Example:
    >>> import os, tempfile
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.interventions.patching import mirror_swap_patching
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> res = mirror_swap_patching(m, img, cap)
    >>> plot_patching_map(res).savefig(os.path.join(tempfile.mkdtemp(), "map.png"))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.analysis.interventions.interchange import InterchangeResult
from hooked_clip1d.analysis.interventions.knockout import KnockoutResult
from hooked_clip1d.analysis.interventions.patching import PatchSweep
from hooked_clip1d.analysis.interventions.probes import ProbeSweep
from hooked_clip1d.analysis.mechanism.spatial_ids import SpatialIDs, SteeringResult
from hooked_clip1d.visualization.style import bars, legend_outside, reference_line


def _axes(ax: plt.Axes | None, figsize: tuple[float, float]) -> tuple[Figure, plt.Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = plt.figure(figsize=figsize)
    return fig, fig.add_subplot()


def plot_fraction_map(
    values: torch.Tensor | np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str = "",
    ax: plt.Axes | None = None,
    annotate: bool = True,
) -> Figure:
    """Heat map of recovered fractions [rows, cols] (diverging colours, -1..1 clipped, values written in cells).

    >>> fig = plot_fraction_map(torch.tensor([[1.0, 0.0], [0.5, 1.0]]), ["embed", "after L0"], ["all", "cls"])
    """
    v = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if v.ndim != 2:
        raise ValueError(f"values must be 2-D [rows, cols], got shape {v.shape}")
    if v.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values {v.shape} do not match {len(row_labels)} row and {len(col_labels)} column labels")
    fig, ax = _axes(ax, (1.2 + 0.9 * v.shape[1], 1.0 + 0.55 * v.shape[0]))
    im = ax.imshow(v, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(v.shape[1]), list(col_labels), rotation=30, ha="right")
    ax.set_yticks(range(v.shape[0]), list(row_labels))
    if annotate and v.size <= 400:
        for i in range(v.shape[0]):
            for j in range(v.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{v[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if abs(v[i, j]) > 0.6 else "black",
                )
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="fraction of shift recovered")
    return fig


def plot_patching_map(sweep: PatchSweep, title: str | None = None) -> Figure:
    """Recovered fraction per hook/depth (rows) x position set (columns); per-head sweeps get one panel per set
    with heads as columns.

    >>> from hooked_clip1d.analysis.interventions.patching import PatchSweep
    >>> sw = PatchSweep("vision", ["h"], ["embed"], ["all", "cls"], False, torch.tensor([[[0.0], [1.0]]]),
    ...                 torch.tensor([1.0]), torch.tensor([0.0]))
    >>> fig = plot_patching_map(sw)
    """
    if not isinstance(sweep, PatchSweep):
        raise TypeError(f"expected a PatchSweep, got {type(sweep).__name__}")
    frac = sweep.fraction()
    title = title or f"{sweep.tower}: fraction of the belief shift recovered"
    if not sweep.per_head:
        return plot_fraction_map(frac, sweep.labels, sweep.set_names, title)
    n_sets, H = frac.shape[1], frac.shape[2]
    fig, axes = plt.subplots(1, n_sets, figsize=(1.8 + 0.7 * H * n_sets, 1.2 + 0.5 * frac.shape[0]), squeeze=False)
    for j, name in enumerate(sweep.set_names):
        plot_fraction_map(frac[:, j], sweep.labels, [f"H{h}" for h in range(H)], f"set: {name}", ax=axes[0, j])
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_recovery_bars(sweep: PatchSweep, ax: plt.Axes | None = None) -> Figure:
    """Grouped bars: one group per position set, one bar per hook/depth (for sweeps without per-head patching).

    >>> from hooked_clip1d.analysis.interventions.patching import PatchSweep
    >>> sw = PatchSweep("vision", ["a", "b"], ["embed", "after L0"], ["all", "cls"], False,
    ...                 torch.tensor([[[0.0], [1.0]], [[0.0], [0.0]]]), torch.tensor([1.0]), torch.tensor([0.0]))
    >>> fig = plot_recovery_bars(sw)
    """
    if not isinstance(sweep, PatchSweep):
        raise TypeError(f"expected a PatchSweep, got {type(sweep).__name__}")
    if sweep.per_head:
        raise ValueError("plot_recovery_bars takes a sweep without per-head patching; use plot_patching_map")
    frac = sweep.fraction().numpy()
    fig, ax = _axes(ax, (1.5 + 1.1 * len(sweep.set_names), 3.2))
    x = np.arange(len(sweep.set_names))
    w = 0.8 / len(sweep.labels)
    for i, lab in enumerate(sweep.labels):
        bars(ax, x + (i - (len(sweep.labels) - 1) / 2) * w, frac[i], width=w, label=lab)
    reference_line(ax, 1.0, "full recovery", color="k", ls=":")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(x.tolist(), sweep.set_names)
    ax.set_ylabel("fraction recovered")
    ax.set_title(f"{sweep.tower}: recovery by position set")
    legend_outside(ax)
    return fig


def plot_interchange(result: InterchangeResult, ax: plt.Axes | None = None) -> Figure:
    """Bars of the text interchange fractions: slot swap per layer, position-ID swap, EOT pattern per layer.

    >>> r = InterchangeResult(torch.tensor([1.0]), torch.tensor([-1.0]), torch.tensor([[1.0]]), None,
    ...                       torch.tensor([[0.0]]), torch.tensor([[[0.0], [0.0]]]))
    >>> fig = plot_interchange(r)
    """
    if not isinstance(result, InterchangeResult):
        raise TypeError(f"expected an InterchangeResult, got {type(result).__name__}")
    fr = result.fractions()
    names, vals = [], []
    for layer, v in enumerate(fr["slot_swap"]):
        names.append(f"slot swap\nbefore L{layer}")
        vals.append(v)
    if fr["position_id_swap"] is not None:
        names.append("position-ID\nswap")
        vals.append(fr["position_id_swap"])
    for layer, v in enumerate(fr["eot_pattern"]):
        names.append(f"EOT pattern\nL{layer}")
        vals.append(v)
    fig, ax = _axes(ax, (1.5 + 1.0 * len(names), 3.2))
    bars(ax, range(len(names)), vals, color="tab:purple", label="fraction of the shift")
    reference_line(ax, 1.0, "the whole shift", color="k", ls=":")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_ylabel("fraction of the swap's shift")
    ax.set_title("text interchange: subject by position or identity?")
    legend_outside(ax)
    return fig


def plot_knockout(result: KnockoutResult, ax: plt.Axes | None = None) -> Figure:
    """Bars per knocked-out edge set: belief retained and pairwise accuracy (base accuracy as a dashed line).

    >>> r = KnockoutResult("vision", ["CLS->left"], torch.tensor([[0.5, -0.2]]), torch.tensor([1.0, 1.0]))
    >>> fig = plot_knockout(r)
    """
    if not isinstance(result, KnockoutResult):
        raise TypeError(f"expected a KnockoutResult, got {type(result).__name__}")
    fig, ax = _axes(ax, (1.5 + 1.2 * len(result.names), 3.2))
    x = np.arange(len(result.names))
    bars(ax, x - 0.2, result.retained().numpy(), width=0.4, label="belief retained")
    bars(ax, x + 0.2, result.accuracy().numpy(), width=0.4, label="pair accuracy")
    reference_line(ax, float((result.base > 0).float().mean()), "base accuracy", color="tab:orange")
    reference_line(ax, 0.5, "0.5 (order at chance)", ls=":")
    ax.set_xticks(x.tolist(), result.names, rotation=20, fontsize=8)
    ax.set_title(f"{result.tower}: attention knockout")
    legend_outside(ax)
    return fig


def plot_probe_accuracy(sweeps: Mapping[str, ProbeSweep], ax: plt.Axes | None = None) -> Figure:
    """Held-out accuracy per depth for each named probe sweep; dotted: chance, dashed: shuffled-label control.

    >>> s = ProbeSweep("vision", "readout", ["embed", "after L0"], torch.tensor([0.2, 0.9]), torch.tensor([0.2, 1.0]),
    ...                0.1, torch.tensor([0.1, 0.1]), 0.1, 10, 30)
    >>> fig = plot_probe_accuracy({"left_pos @ CLS": s})
    """
    if not sweeps:
        raise ValueError("no probe sweeps to plot")
    fig, ax = _axes(ax, (5.0, 3.4))
    for i, (name, s) in enumerate(sweeps.items()):
        if not isinstance(s, ProbeSweep):
            raise TypeError(f"{name!r} is not a ProbeSweep")
        c = f"C{i % 10}"
        x = np.arange(len(s.labels))
        ax.plot(x, s.test_acc.numpy(), "o-", color=c, label=name)
        reference_line(ax, s.chance, f"{name}: chance", color=c, ls=":")
        if s.control_acc is not None:
            ax.plot(x, s.control_acc.numpy(), "x--", color=c, lw=0.8, alpha=0.7, label=f"{name}: shuffled labels")
    longest = max((list(s.labels) for s in sweeps.values()), key=len)  # the x axis names depths: one naming for all
    other = {n: list(s.labels) for n, s in sweeps.items() if list(s.labels) != longest[: len(s.labels)]}
    if other:
        raise ValueError(
            f"the sweeps name their depths differently ({other} against {longest}): plot them on separate axes"
        )
    ax.set_xticks(range(len(longest)), longest)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out accuracy")
    ax.set_title("linear probes (dotted: chance, dashed: shuffled labels)")
    legend_outside(ax)
    return fig


def plot_steering_curves(
    results: Sequence[SteeringResult] | Mapping[str, SteeringResult], ax: plt.Axes | None = None
) -> Figure:
    """Fraction of the belief shift reached vs steering strength alpha, one curve per result.

    >>> r = SteeringResult("vision", "embed", "object", torch.tensor([0.0, 1.0]), torch.tensor([[1.0], [-1.0]]),
    ...                    torch.tensor([1.0]), torch.tensor([-1.0]))
    >>> fig = plot_steering_curves([r])
    """
    items = list(results.items()) if isinstance(results, Mapping) else [(None, r) for r in results]
    if not items:
        raise ValueError("no steering results to plot")
    fig, ax = _axes(ax, (4.8, 3.4))
    for name, r in items:
        if not isinstance(r, SteeringResult):
            raise TypeError(f"expected SteeringResult, got {type(r).__name__}")
        label = name or f"{r.tower} {r.site} @ {r.depth}"
        ax.plot(r.alphas.numpy(), r.fraction().numpy(), "o-", label=label)
    reference_line(ax, 1.0, "the whole shift", color="k", ls=":")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xlabel("alpha (multiple of the ID difference)")
    ax.set_ylabel("fraction of the swap's shift")
    ax.set_title("steering with spatial-ID differences")
    legend_outside(ax)
    return fig


def plot_spatial_ids(ids: SpatialIDs, ax: plt.Axes | None = None) -> Figure:
    """Universal IDs projected on their horizontal direction (Eq. 5), one line per depth.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.mechanism.spatial_ids import vision_spatial_ids
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=3), seed=0).eval()
    >>> fig = plot_spatial_ids(vision_spatial_ids(m.vision))
    """
    if not isinstance(ids, SpatialIDs):
        raise TypeError(f"expected SpatialIDs, got {type(ids).__name__}")
    fig, ax = _axes(ax, (4.8, 3.4))
    skipped = []
    for d, lab in enumerate(ids.labels):
        try:
            proj = (ids.ids[d] @ ids.direction(d)).numpy()
        except ValueError:  # no horizontal direction at this depth (e.g. all IDs equal)
            skipped.append(lab)
            continue
        ax.plot(ids.positions, proj, "o-", label=lab)
    ax.set_xlabel("pixel" if ids.tower == "vision" else "caption slot")
    ax.set_ylabel("projection on the horizontal direction")
    ax.set_title(f"{ids.tower} spatial IDs ({ids.site})")
    if skipped:
        note = f"no horizontal direction at: {', '.join(skipped)}"
        ax.text(0.02, 0.02, note, transform=ax.transAxes, fontsize=7, color="dimgray")
    if len(skipped) < len(ids.labels):
        legend_outside(ax)
    return fig


__all__ = [
    "plot_fraction_map",
    "plot_interchange",
    "plot_knockout",
    "plot_patching_map",
    "plot_probe_accuracy",
    "plot_recovery_bars",
    "plot_spatial_ids",
    "plot_steering_curves",
]
