"""Figures of circuit discovery: how each method ranks a ground-truth circuit, and what it costs.

``plot_attribution_vs_exact(result, exact)`` draws one method's scores against exact patching's, item by item (the
diagonal: agreement; the shaded quadrants: wrong signs). ``plot_circuit_benchmark(rows)`` draws, per method, the ROC
AUC of its node and edge rankings against the ground-truth circuits (bar: the mean over models; dots: each model;
dashed line: chance) and its wall time (log scale), from the rows ``reproduce x-circuits`` records.

Example:
    >>> rows = [{"model": "m", "method": "AtP", "node_auc": 1.0, "edge_auc": None, "seconds": 0.1},
    ...         {"model": "m", "method": "EAP", "node_auc": 0.5, "edge_auc": 0.75, "seconds": 0.2}]
    >>> fig = plot_circuit_benchmark(rows)
    >>> [ax.get_title() for ax in fig.axes]
    ['nodes (heads, MLPs)', 'edges', 'wall time']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from hooked_clip1d.visualization.style import bars, legend_outside, reference_line, require_keys


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def plot_circuit_benchmark(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Node AUC, edge AUC and wall time per method (module docstring). ``rows``: one per (model, method) with keys
    ``model``, ``method``, ``node_auc``, ``edge_auc`` (None where the method has no such ranking) and ``seconds``."""
    keys = ("model", "method", "node_auc", "edge_auc", "seconds")
    for i, r in enumerate(rows):  # a row without edge_auc gave a bare KeyError; None marks a missing ranking
        require_keys(r, keys, f"plot_circuit_benchmark (row {i})", "benchmark rows (a missing ranking: None)")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    if not methods:
        raise ValueError("no benchmark rows to plot")
    fig, axes = plt.subplots(1, 3, figsize=(12.5, 3.6), gridspec_kw={"width_ratios": [1, 1, 1]})
    x = np.arange(len(methods))
    markers = "osD^v<>ph"
    for ax, key, title in ((axes[0], "node_auc", "nodes (heads, MLPs)"), (axes[1], "edge_auc", "edges")):
        per = {m: [r[key] for r in rows if r["method"] == m] for m in methods}
        bars(ax, x, [_mean(per[m]) for m in methods], width=0.6, color="lightsteelblue")
        for j, model in enumerate(models):
            ys = [next((r[key] for r in rows if r["method"] == m and r["model"] == model), None) for m in methods]
            pts = [(xi, y) for xi, y in zip(x, ys, strict=True) if y is not None and not math.isnan(y)]
            if pts:
                ax.scatter(
                    *zip(*pts, strict=True), s=14, marker=markers[j % len(markers)], color="k", zorder=4, label=model
                )
        reference_line(ax, 0.5, "chance (AUC 0.5)", color="gray")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("ROC AUC against the ground truth")
        ax.set_title(title, fontsize=9)
        ax.set_xticks(x, methods, rotation=40, ha="right", fontsize=7)
    secs = {m: _mean([r["seconds"] for r in rows if r["method"] == m]) for m in methods}
    bars(axes[2], x, [secs[m] for m in methods], width=0.6, color="tan")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("seconds per model (mean)")
    axes[2].set_title("wall time", fontsize=9)
    axes[2].set_xticks(x, methods, rotation=40, ha="right", fontsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    legend_outside(axes[2], handles=handles, labels=labels)
    fig.tight_layout()
    return fig


__all__ = ["plot_circuit_benchmark"]


def plot_attribution_vs_exact(result: Any, exact: Any, label: int = 8) -> Figure:
    """One method's scores (``result``, an ``Attribution``) against exact patching's (``exact``) on the items exact
    patching scored: a point per item, the diagonal (agreement), the wrong-sign quadrants shaded, the ``label``
    largest exact effects named.

    >>> import torch
    >>> from hooked_clip1d.analysis.circuits.attribution import Attribution
    >>> ex = Attribution("exact patching", ["a", "b", "c"], torch.tensor([2.0, -1.0, 0.5]))
    >>> est = Attribution("AtP+QK", ["a", "b", "c"], torch.tensor([1.5, -0.8, -0.1]))
    >>> plot_attribution_vs_exact(est, ex).axes[0].get_xlabel()
    'exact patching'
    """
    x = exact.scores.double().numpy()
    y = result.subset(exact.names).scores.double().numpy()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lim = float(max(np.abs(x).max(), np.abs(y).max(), 1e-12)) * 1.1
    ax.fill_between([-lim, 0], 0, lim, color="mistyrose", zorder=0)
    ax.fill_between([0, lim], -lim, 0, color="mistyrose", zorder=0, label="wrong sign")
    ax.plot([-lim, lim], [-lim, lim], color="gray", lw=0.8, ls="--", label="agreement")
    ax.scatter(x, y, s=12, color="k", zorder=3)
    for i in np.argsort(-np.abs(x))[:label]:
        ax.annotate(exact.names[i], (x[i], y[i]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel(exact.method)
    ax.set_ylabel(result.method)
    ax.legend(fontsize=7, loc="upper left")
    return fig
