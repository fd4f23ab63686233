"""Figure of the vision / text label-embedding alignment (Fig. 7) from
``analysis.mechanism.alignment.embedding_alignment``.

Example:
    >>> import os, tempfile
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6), seed=0)
    >>> fig = plot_alignment(embedding_alignment(m, fit_labels=[1, 2, 3, 4], test_labels=[5, 6]))
    >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "alignment.png"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from hooked_clip1d.visualization.style import bars, legend_outside, reference_line

_SCORE_NAMES = {
    "raw": "raw embeddings",
    "procrustes": "rotated (Procrustes)",
    "shuffled": "rotation fit on shuffled labels",
}


_FIT_NAMES = {"procrustes": "Procrustes", "canonical": "canonical Procrustes", "span": "span part of Procrustes"}


def _label_span(labels: list[int]) -> str:
    """``"16..20"`` for consecutive labels, else the list (``"16, 20"``: two labels are not 16..20).

    >>> _label_span([16, 17, 18]), _label_span([16, 20])
    ('16..18', '16, 20')
    """
    consecutive = labels == list(range(labels[0], labels[0] + len(labels))) if labels else False
    return f"{labels[0]}..{labels[-1]}" if consecutive and len(labels) > 2 else ", ".join(map(str, labels))


def plot_alignment(result: Mapping[str, Any]) -> Figure:
    """Three panels: text x vision cosine matrices of the label embeddings, raw (Fig. 7a) and after the fitted
    rotation (Fig. 7b), with the fit / test label boundary; and bars of the test-label scores (matched cosine,
    retrieval accuracy) for raw, rotated and shuffled-fit embeddings."""
    fit_name = _FIT_NAMES.get(str(result.get("rotation", "procrustes")), str(result.get("rotation")))
    panels = [("raw", result.get("cos_raw")), (f"rotated ({fit_name})", result["cos_procrustes"])]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    fit, test = list(result["fit_labels"]), list(result["test_labels"])
    order = fit + [t for t in test if t not in fit]
    idx = np.array(order) - 1
    for ax, (title, cos) in zip(axes[:2], panels, strict=True):
        if cos is None:
            ax.text(0.5, 0.5, "widths differ:\nno raw cosine", ha="center", va="center")
            ax.axis("off")
            continue
        c = np.asarray(cos, dtype=float)[np.ix_(idx, idx)]
        im = ax.imshow(c, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ticks = np.arange(len(order))
        ax.set_xticks(ticks.tolist(), [str(o) for o in order], fontsize=6)
        ax.set_yticks(ticks.tolist(), [str(o) for o in order], fontsize=6)
        ax.axhline(len(fit) - 0.5, color="k", lw=0.8, label="fit | test labels")
        ax.axvline(len(fit) - 0.5, color="k", lw=0.8, label="fit | test labels")
        ax.text(
            len(fit) - 0.5, 1.01, "fit | test", ha="center", va="bottom", fontsize=6, transform=ax.get_xaxis_transform()
        )
        ax.set_xlabel("vision label embedding")
        ax.set_ylabel("text label embedding")
        ax.set_title(f"cosine, {title}", fontsize=9, pad=14)  # room for "fit | test" above the top row
        fig.colorbar(im, ax=ax, fraction=0.046)
    ax = axes[2]
    names = [n for n in ("raw", "procrustes", "shuffled") if result.get(n)]
    metrics = ("matched_cos", "unmatched_cos", "acc")
    x = np.arange(len(metrics))
    w = 0.8 / max(len(names), 1)
    for i, n in enumerate(names):
        heights = [result[n][m] for m in metrics]
        label = f"rotated ({fit_name})" if n == "procrustes" else _SCORE_NAMES.get(n, n)
        bars(ax, x + (i - (len(names) - 1) / 2) * w, heights, width=w, label=label)
    reference_line(ax, 1 / max(len(test), 1), "chance retrieval accuracy", ls=":")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(x.tolist(), ["matched\ncosine", "unmatched\ncosine", "retrieval\naccuracy"])
    ax.set_title(f"test labels {_label_span(test)} (fit on {len(fit)})", fontsize=9)
    legend_outside(ax)
    fig.tight_layout()
    return fig
