"""Figure of the RoPE mechanism analysis (Fig. 19) from ``analysis.mechanism.rope.rope_mechanism``.

Example:
    >>> import os, tempfile
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> from hooked_clip1d.analysis.mechanism.rope import rope_mechanism
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, positional="rope"), seed=0).eval()
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> fig = plot_rope_mechanism(rope_mechanism(m.vision, ds.splits["val_unseen"]))
    >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "rope.png"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.visualization.style import bars


def _np(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def plot_rope_mechanism(result: Mapping[str, Any]) -> Figure:
    """Six panels as in Fig. 19: (a) consistency-condition rates per head (full Eq. 23, without Π_bias, PC1
    approximation) beside P(prefers left); (b) Π_bias against distance b - a (mean ± std); (c) explained variance
    ratio of the key PCA; (d) cumulative energy of W_K's singular values with the effective ranks; (e) |cos| of
    PC1 with W_K's first two right singular vectors; (f) ρ_a against position."""
    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    (a, b, c), (d, e, f) = axes
    cc = result["consistency"]
    rates = [("full (Eq. 23)", "rate_full"), ("no Π_bias", "rate_no_bias"), ("PC1 approx.", "rate_pc1")]
    H = len(_np(cc["rate_full"]))
    x = np.arange(H)
    w = 0.2
    for i, (name, key) in enumerate(rates):
        bars(a, x + (i - 1.5) * w, _np(cc[key]), width=w, label=name)
    bars(a, x + 1.5 * w, _np(cc["prefer_left"]), width=w, label="P(prefers left)", color="grey")
    a.set_xticks(x.tolist(), [f"head {h}" for h in range(H)])
    a.set_ylim(0, 1.05)
    a.set_title("(a) consistency condition rate", fontsize=9)
    a.legend(fontsize=6)

    bg = result["bias_gradient"]
    dist, mean, std = _np(bg["distance"]), _np(bg["mean"]), _np(bg["std"])
    for h in range(H):
        b.errorbar(dist, mean[h], yerr=std[h], capsize=2, marker="o", ms=3, label=f"head {h}")
    b.axhline(0, color="grey", lw=0.5)
    b.set_xlabel("positional distance b − a")
    b.set_ylabel("Π_bias")
    b.set_title("(b) bias-induced gradient", fontsize=9)
    b.legend(fontsize=6)

    kp = result["key_pca"]
    ratio = _np(kp["explained_variance_ratio"])
    n_show = min(ratio.shape[1], 10)
    for h in range(H):
        c.plot(np.arange(1, n_show + 1), ratio[h, :n_show], marker="o", ms=3, label=f"head {h}")
    c.set_xlabel("principal component")
    c.set_ylabel("explained variance ratio")
    c.set_title("(c) PCA of keys W_K E_i", fontsize=9)
    c.legend(fontsize=6)

    er = result["effective_rank"]
    cum, th, rank = _np(er["cumulative"]), _np(er["thresholds"]), _np(er["rank"]).astype(int)
    for h in range(H):
        ranks = ", ".join(str(r) for r in rank[h])
        d.plot(np.arange(1, cum.shape[1] + 1), cum[h], marker=".", label=f"head {h}: rank {ranks}")
    for j, t in enumerate(th):
        d.axhline(t, color="grey", ls=":", lw=0.6, label="energy thresholds" if j == 0 else None)
    d.set_xlabel("number of singular values")
    d.set_ylabel("cumulative energy")
    d.set_title(f"(d) W_K effective rank at {', '.join(f'{t:.0%}' for t in th)}", fontsize=9)
    d.legend(fontsize=6)

    cos = _np(kp["cos_singular"])
    e.bar(x - 0.2, cos[:, 0], width=0.4, label="|cos(PC1, u1)|")
    e.bar(x + 0.2, cos[:, 1], width=0.4, label="|cos(PC1, u2)|")
    e.set_xticks(x.tolist(), [f"head {h}" for h in range(H)])
    e.set_ylim(0, 1.05)
    e.set_title("(e) PC1 vs W_K singular vectors", fontsize=9)
    e.legend(fontsize=6)

    rho = _np(result["rho"]["rho"])
    for h in range(H):
        f.plot(np.arange(rho.shape[1]), rho[h], marker="o", ms=3, label=f"head {h}")
    f.axhline(0, color="grey", lw=0.5)
    f.set_xlabel("pixel position a")
    f.set_ylabel("ρ_a")
    f.set_title("(f) position-dependent contribution ρ", fontsize=9)
    f.legend(fontsize=6)
    fig.tight_layout()
    return fig
