"""Figures for every analysis (matplotlib) and circuitsvis attention views, one module per analysis family:

- ``attention``: ``show_attention`` (circuitsvis; vision unmasked), ``save_html`` (offline), ``plot_attention``.
- ``plots``: head bias bars, ablation bars, similarity matrices.
- ``decomposition``: term heat maps, CLS-row profiles (the EP gradient), std shares (Fig. 5a, 12-14), ablations.
- ``heads``: delta-label vs delta-p.e., head roles, text EOT bias, pruning (Fig. 5c-d, 6, 22).
- ``alignment`` (Fig. 7), ``rope`` (Fig. 19), ``patching`` (patching maps, knockout, probes, steering).
"""

from hooked_clip1d.visualization.alignment import (
    plot_alignment,
)
from hooked_clip1d.visualization.attention import (
    AttentionView,
    attention_view,
    plot_attention,
    save_html,
    show_attention,
)
from hooked_clip1d.visualization.decomposition import (
    plot_ablations,
    plot_row_profiles,
    plot_std_histograms,
    plot_std_shares,
    plot_term_maps,
)
from hooked_clip1d.visualization.heads import (
    plot_eot_bias,
    plot_head_roles,
    plot_label_pe_scatter,
    plot_pruning,
)
from hooked_clip1d.visualization.patching import (
    plot_fraction_map,
    plot_interchange,
    plot_knockout,
    plot_patching_map,
    plot_probe_accuracy,
    plot_recovery_bars,
    plot_spatial_ids,
    plot_steering_curves,
)
from hooked_clip1d.visualization.plots import (
    plot_ablation_accuracy,
    plot_head_bias,
    plot_similarity,
)
from hooked_clip1d.visualization.rope import (
    plot_rope_mechanism,
)

__all__ = [
    "AttentionView",
    "attention_view",
    "plot_ablation_accuracy",
    "plot_ablations",
    "plot_alignment",
    "plot_attention",
    "plot_eot_bias",
    "plot_fraction_map",
    "plot_head_bias",
    "plot_head_roles",
    "plot_interchange",
    "plot_knockout",
    "plot_label_pe_scatter",
    "plot_patching_map",
    "plot_probe_accuracy",
    "plot_pruning",
    "plot_recovery_bars",
    "plot_rope_mechanism",
    "plot_row_profiles",
    "plot_similarity",
    "plot_spatial_ids",
    "plot_std_histograms",
    "plot_std_shares",
    "plot_steering_curves",
    "plot_term_maps",
    "save_html",
    "show_attention",
]
