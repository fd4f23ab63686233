"""Figures for every analysis (matplotlib, Agg-backend safe) and circuitsvis attention views.

One module per family: ``plots`` (head bias, ablation bars, similarity matrices) and, beside it, one module per
analysis family of ``hooked_clip1d.analysis``.
"""

from hooked_clip1d.visualization.attention import (
    AttentionView,
    attention_view,
    plot_attention,
    save_html,
    show_attention,
)
from hooked_clip1d.visualization.plots import plot_ablation_accuracy, plot_head_bias, plot_similarity

__all__ = [
    "AttentionView",
    "attention_view",
    "plot_ablation_accuracy",
    "plot_attention",
    "plot_head_bias",
    "plot_similarity",
    "save_html",
    "show_attention",
]
