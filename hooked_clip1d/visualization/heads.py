"""Figures of head roles: Δlabel vs Δp.e. (Fig. 5c), relational / label-specific shares (Fig. 5d), the text
EOT bias (Fig. 6) and head-pruning sweeps (Fig. 22a). Inputs are the outputs of
``hooked_clip1d.analysis.mechanism.heads``
and ``.pruning``, as tensors or as their ``to_jsonable`` lists.

Example:
    >>> import os, tempfile, torch
    >>> d = {"delta_label": torch.randn(20, 2), "delta_pe": torch.randn(20, 2)}
    >>> d["attends_right"] = torch.rand(20, 2) > 0.5
    >>> fig = plot_label_pe_scatter(d)
    >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "scatter.png"))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.data.dataset import SPLIT_TITLES
from hooked_clip1d.settings.checks import check_index, check_int
from hooked_clip1d.visualization.style import bars, legend_outside, metric_label, reference_line, require_keys


def _np(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def plot_label_pe_scatter(deltas: Mapping[str, Any], max_cols: int = 4) -> Figure:
    """One scatter per head of Δp.e. (x) against Δlabel (y), ``label_pe_deltas`` output (Fig. 5c).

    Points are coloured by the side the CLS row actually prefers; the dashed lines ``|Δlabel| = |Δp.e.|`` bound
    the relational region (|Δp.e.| larger: left and right wedges).
    """
    max_cols = check_int(max_cols, "max_cols")
    require_keys(deltas, ("delta_label", "delta_pe"), "plot_label_pe_scatter", "label_pe_deltas' output")
    dl, dp = _np(deltas["delta_label"]), _np(deltas["delta_pe"])
    if dl.ndim != 2 or dl.shape != dp.shape:
        raise ValueError(f"delta_label and delta_pe must both be [n, n_heads]; got {dl.shape}, {dp.shape}")
    right = _np(deltas["attends_right"]).astype(bool) if "attends_right" in deltas else None
    H = dl.shape[1]
    cols = min(H, max_cols)
    rows = (H + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.8 * rows), squeeze=False)
    lim = float(max(np.abs(dl).max(), np.abs(dp).max(), 1e-6)) * 1.1
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.axis("off")
            continue
        if right is None:
            ax.scatter(dp[:, h], dl[:, h], s=8, alpha=0.7)
        else:
            ax.scatter(dp[right[:, h], h], dl[right[:, h], h], s=8, alpha=0.7, c="tab:orange", label="attends right")
            ax.scatter(dp[~right[:, h], h], dl[~right[:, h], h], s=8, alpha=0.7, c="tab:blue", label="attends left")
        ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.6)
        ax.plot([-lim, lim], [lim, -lim], "k--", lw=0.6)
        ax.axhline(0, color="grey", lw=0.4)
        ax.axvline(0, color="grey", lw=0.4)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xlabel("Δp.e. (right − left)", fontsize=8)
        if h % cols == 0:
            ax.set_ylabel("Δlabel (right − left)", fontsize=8)
        if h == 0 and right is not None:
            ax.legend(fontsize=6)
    fig.suptitle("Label-specific vs positional CLS→object logit differences")
    fig.tight_layout()
    return fig


def _side(direction: float | np.floating) -> str:
    """A head's side for a tick label: R, L, or "pruned" for NaN (``classify_head_roles`` of a pruned head)."""
    return "pruned" if np.isnan(direction) else ("R" if direction > 0 else "L")


def plot_head_roles(roles: Mapping[str, Any], ax: plt.Axes | None = None) -> Figure:
    """Stacked bars of the relational / label-specific shares per head (``classify_head_roles``, Fig. 5d), with
    ``|P(right) - P(left)|`` of the same images as markers (Sec. 5: they should roughly agree)."""
    # e.g. label_pe_deltas' output, which classify_head_roles turns into roles
    require_keys(roles, ("relational", "label_specific"), "plot_head_roles", "classify_head_roles' output")
    fig = ax.figure if ax is not None else plt.figure(figsize=(4.5, 3.2))
    ax = ax or fig.add_subplot()
    rel, lab = _np(roles["relational"]), _np(roles["label_specific"])
    direction = _np(roles["direction"]) if "direction" in roles else np.ones_like(rel)
    x = np.arange(len(rel))
    bars(ax, x, rel, label="relational", color="tab:green")
    ax.bar(x, lab, bottom=rel, label="label-specific", color="tab:gray")
    if "prefer_gap" in roles:
        ax.plot(x, _np(roles["prefer_gap"]), "kD", ms=5, label="|P(right) − P(left)|")
    ax.set_xticks(x.tolist(), [f"head {h}\n({_side(d)})" for h, d in enumerate(direction)])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of images")
    ax.set_title("Relational vs label-specific attention")
    legend_outside(ax)
    fig.tight_layout()
    return fig


def plot_eot_bias(
    bias: Mapping[str, Any],
    layer: int = 0,
    token_labels: Sequence[str] = ("X (subject)", "relation", "Y", "EOT"),
    ax: plt.Axes | None = None,
) -> Figure:
    """Grouped bars, per head, of the mean EOT-row attention to each caption token with its standard deviation
    over captions (``text_eot_bias``, Fig. 6b, c)."""
    n_layers = len(_np(bias["mean"]))
    layer = check_index(layer, n_layers, "layer", f" (the bias has {n_layers} layer(s))")
    fig = ax.figure if ax is not None else plt.figure(figsize=(5.5, 3.2))
    ax = ax or fig.add_subplot()
    mean, std = _np(bias["mean"])[layer], _np(bias["std"])[layer]  # [h, p]
    H, P = mean.shape
    x = np.arange(H)
    w = 0.8 / P
    for p in range(P):
        name = token_labels[p] if p < len(token_labels) else f"pos {p}"
        bars(ax, x + (p - (P - 1) / 2) * w, mean[:, p], width=w, yerr=std[:, p], capsize=2, label=name)
    ax.set_xticks(x.tolist(), [f"head {h}" for h in range(H)])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("EOT attention")
    ax.set_title(f"Text EOT→word attention, layer {layer}")
    legend_outside(ax)
    fig.tight_layout()
    return fig


def plot_pruning(
    sweep: Mapping[str, Any], split: str = "val_unseen", metric: str = "acc", ax: plt.Axes | None = None
) -> Figure:
    """Bars of ``metric`` on ``split`` for each kept-head subset of ``head_subset_sweep``, before and after
    retraining, with the unpruned model as a dashed line (Fig. 22a)."""
    runs = list(sweep["runs"])
    if not runs:
        raise ValueError("the sweep has no runs")
    fig = ax.figure if ax is not None else plt.figure(figsize=(max(4.5, 0.45 * len(runs) + 2), 3.4))
    ax = ax or fig.add_subplot()
    x = np.arange(len(runs))
    before = [r["before"][split][metric] for r in runs]
    after = [r["after"][split][metric] if r.get("after") else np.nan for r in runs]
    has_after = not all(np.isnan(after))
    w = 0.4 if has_after else 0.8
    bars(ax, x - (w / 2 if has_after else 0), before, width=w, label="pruned")
    if has_after:
        bars(ax, x + w / 2, after, width=w, label=f"retrained ({sweep.get('epochs', '?')} epochs)")
    reference_line(ax, sweep["baseline"][split][metric], "all heads (unpruned)", color="k")
    reference_line(ax, 0.5, "0.5 (order at chance)", ls=":")
    names = [",".join(str(h) if lyr == 0 else f"{lyr}.{h}" for lyr, h in r["kept"]) for r in runs]
    ax.set_xticks(x.tolist(), names, rotation=60, fontsize=7)
    ax.set_xlabel("kept heads")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(metric_label(metric))
    ax.set_title(f"Head pruning: {SPLIT_TITLES.get(split, split)}")
    legend_outside(ax)
    fig.tight_layout()
    return fig
