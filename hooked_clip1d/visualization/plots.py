"""Basic plots (matplotlib): head bias bars, ablation bars, similarity matrices.

Example:
    >>> import torch, tempfile, os
    >>> fig = plot_head_bias({"left": torch.tensor([[0.9, 0.1]]), "right": torch.tensor([[0.1, 0.8]])})
    >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "bias.png"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.data.dataset import SPLIT_TITLES
from hooked_clip1d.settings.checks import check_index
from hooked_clip1d.visualization.style import bars, legend_outside, metric_label, reference_line, require_keys


def plot_head_bias(bias: Mapping[str, Any], layer: int = 0, ax: plt.Axes | None = None) -> Figure:
    """Bars of P(CLS attends most to the left / right object) per head (Fig. 4c): ``cls_object_bias``'s output
    (``left`` / ``right`` [layer, head], tensors or ``to_jsonable``'s nested lists)."""
    require_keys(bias, ("left", "right"), "plot_head_bias", "cls_object_bias's output ('left' / 'right' [layer, head])")
    n_layers = len(bias["left"])
    layer = check_index(layer, n_layers, "layer", f" (the bias has {n_layers} layer(s))")
    fig = ax.figure if ax is not None else plt.figure(figsize=(4.5, 3.2))
    ax = ax or fig.add_subplot()
    left, right = list(map(float, bias["left"][layer])), list(map(float, bias["right"][layer]))
    x = np.arange(len(left))
    bars(ax, x - 0.2, left, width=0.4, label="left object")
    bars(ax, x + 0.2, right, width=0.4, label="right object")
    reference_line(ax, 0.5, "0.5 (no side preferred)")
    ax.set_xticks(x.tolist(), [f"head {h}" for h in range(len(left))])
    ax.set_ylim(0, 1)
    ax.set_ylabel("P(max CLS attention)")
    ax.set_title(f"CLS→object bias, layer {layer}")
    legend_outside(ax)
    return fig


def plot_ablation_accuracy(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    split: str = "val_unseen",
    metrics: tuple[str, ...] = ("acc", "label_set"),
    ax: plt.Axes | None = None,
    legend: bool = True,
) -> Figure:
    """Grouped bars: accuracy of ``split`` per ablation condition (Fig. 5e, 16); a metric missing for some condition
    shows "n/a" (one that no condition has is refused, as is a metric given as a string)."""
    if isinstance(metrics, str) or not metrics:  # "acc" was drawn as three series a, c, c, all n/a
        raise TypeError(f"metrics must be a non-empty list of metric names, e.g. ({metrics!r},), got {metrics!r}")
    names = list(results)
    if "conditions" in names:  # evaluate_ablations' whole output, not its conditions
        raise TypeError(
            "plot_ablation_accuracy takes {condition: {split: metrics}}; evaluate_ablations' output goes to "
            "visualization.decomposition.plot_ablations"
        )
    absent = [m for m in metrics if not any(m in results[n].get(split, {}) for n in names)]
    if absent:
        raise ValueError(f"no condition has metric(s) {absent} on split {split!r}")
    fig = ax.figure if ax is not None else plt.figure(figsize=(5.5, 3.2))
    ax = ax or fig.add_subplot()
    x = np.arange(len(names))
    w = 0.8 / len(metrics)
    for i, m in enumerate(metrics):
        vals = [results[n][split].get(m) for n in names]
        xs = x + (i - (len(metrics) - 1) / 2) * w
        bars(ax, xs, vals, width=w, label=metric_label(m))  # a missing metric is marked, not drawn as a zero bar
    reference_line(ax, 0.5, "0.5 (order at chance)")
    ax.set_xticks(x.tolist(), names, rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title(f"term ablation: {SPLIT_TITLES.get(split, split)}")
    if legend:
        legend_outside(ax)
    return fig


def plot_similarity(sim: torch.Tensor, title: str = "", ax: plt.Axes | None = None) -> Figure:
    """Heat map of an image x caption cosine-similarity matrix (Fig. 3 right)."""
    big = float(sim.detach().abs().max()) if sim.numel() else 0.0
    if not big <= 1 + 1e-4:  # logits (about +-100) were clipped to the fixed colour range: one solid colour
        raise ValueError(
            f"plot_similarity draws cosine similarities in [-1, 1]; this matrix reaches {big:.3g} (CLIP's logits, "
            "scaled by the temperature?): pass model.similarity(images, captions)"
        )
    fig = ax.figure if ax is not None else plt.figure(figsize=(5, 4))
    ax = ax or fig.add_subplot()
    im = ax.imshow(sim.detach().cpu().numpy(), aspect="auto", cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("caption")
    ax.set_ylabel("image")
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    return fig
