"""Figures of a training trajectory: the mechanism's emergence over log-epoch, the attention pattern and the EP row
at a few checkpoints side by side, and a circuitsvis view that steps through the checkpoints.

- ``plot_emergence(em)``: ``analysis.mechanism.dynamics.emergence`` output (an ``Emergence``, its ``to_json()`` or
its rows)
  over the epoch on a symmetric-log axis (linear below 1, so epoch 0 is drawn, at the left edge), one panel per
  family: loss and accuracies; per-head P(left) / P(right); the EP CLS row's std and rank correlation; the Fig. 13
  XW_QKX^T share and the invariant ablation; the per-head W_QK rank and the decay exposure. Dotted vertical lines mark
  the first epoch at which the model generalizes and at which the paper's whole picture holds (where they do).
- ``plot_accuracy_dynamics(rows)``: the three accuracies over log-epoch with Fig. 11's levels, for a trajectory
  whose mechanism rows were not measured (``pretrained.trajectory_accuracies``).
- ``plot_checkpoints(checkpoints, image)``: per checkpoint (columns) the CLS row of the attention pattern and the EP
  term of the CLS row, one line per head (Fig. 4b and 5a along training).
- ``show_attention_over_checkpoints(checkpoints, image)``: one circuitsvis ``attention_heads`` view whose panels are
  the heads at each checkpoint (``epoch 100 L0H2``); ``visualization.attention.save_html`` writes it as one offline
  page.

``checkpoints`` is ``[(epoch, model), ...]`` (``pretrained.load_trajectory``). Every figure follows ``style``'s
conventions (labelled reference lines, readable legends outside the axes).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
    >>> from hooked_clip1d.analysis.mechanism.dynamics import emergence
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=8, d_model=16, d_head=4)
    >>> ckpts = [(e, CLIP1D(cfg, seed=e).eval()) for e in (0, 10)]
    >>> for _, m in ckpts:
    ...     m.data_config = DataConfig(n_labels=8, n_heldout=3, n2=3)
    >>> fig = plot_emergence(emergence(ckpts))
    >>> [ax.get_title() for ax in fig.axes[:2]], fig.axes[0].get_xscale()
    (['loss and generalization', 'CLS -> object bias per head (Fig. 4c)'], 'symlog')
    >>> fig2 = plot_checkpoints(ckpts)
    >>> [ax.get_title() for ax in fig2.axes[:2]]
    ['epoch 0', 'epoch 10']
    >>> view = show_attention_over_checkpoints(ckpts)
    >>> '"epoch 10 L0H3"' in view.local_src
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from circuitsvis.attention import attention_heads
from circuitsvis.utils.render import RenderedHTML
from jaxtyping import Int
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from hooked_clip1d.analysis.interventions.terms import attention_terms
from hooked_clip1d.analysis.mechanism.dynamics import FIG11_LEVELS, Emergence
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.modes import eval_mode
from hooked_clip1d.visualization.attention import attention_view
from hooked_clip1d.visualization.style import legend_outside, reference_line

Checkpoints = Sequence[tuple[int, CLIP1D]]
XLABEL = "epoch (symmetric log scale: linear below 1, so epoch 0 sits at the left edge)"


def _rows(em: Emergence | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    rows = em.rows if isinstance(em, Emergence) else em["rows"] if isinstance(em, Mapping) else list(em)
    if not rows:
        raise ValueError("plot_emergence needs at least one checkpoint's row")
    for i, r in enumerate(rows):  # a missing column drew an empty panel without a word (a None value is a gap)
        missing = [k for k in ROW_KEYS if k not in r]
        if missing:
            raise ValueError(
                f"plot_emergence: row {i} lacks {missing} (rows of analysis.mechanism.dynamics.emergence or "
                "trajectory_emergence carry them)"
            )
    return sorted(rows, key=lambda r: r["epoch"])


# what the panels and the check windows read from a row (every emergence row carries them; "exposure" only with a
# training config, its panel says n/a without)
ROW_KEYS = ("epoch", "loss", "single", "seen", "unseen", "p_left", "p_right", "ep_std", "ep_spearman")
ROW_KEYS += ("invariant", "xwx_share", "qk_rank", "checks")


def _windows(em: Any, rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    if isinstance(em, Emergence):
        return em.windows
    if isinstance(em, Mapping) and "windows" in em:
        return em["windows"]
    from hooked_clip1d.analysis.mechanism.dynamics import check_windows

    return check_windows(rows)


def _col(rows: Sequence[Mapping[str, Any]], key: str, idx: int | None = None) -> np.ndarray:
    out = []
    for r in rows:
        v = r.get(key)
        if v is not None and idx is not None:
            v = v[idx] if idx < len(v) else None
        out.append(np.nan if v is None else float(v))
    return np.asarray(out, dtype=float)


def _legend(ax: plt.Axes, extra: Sequence[Any] = ()) -> None:
    """One legend outside ``ax`` holding its lines, its twin's (if any) and ``extra`` proxies."""
    handles, labels = [], []
    twins = getattr(ax, "_hc1d_twins", ())
    for a in (ax, *twins):
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    for h in extra:
        handles.append(h)
        labels.append(h.get_label())
    if not twins:
        legend_outside(ax, handles=handles, labels=labels)
        return
    # beside a right-hand twin axis: past its tick labels and label (legend_outside's place, moved right)
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.13, 1.0), borderaxespad=0.0)


def _twin(ax: plt.Axes) -> plt.Axes:
    tw = ax.twinx()
    ax.__dict__.setdefault("_hc1d_twins", []).append(tw)
    return tw


def _head_proxies(n_heads: int, styles: Sequence[tuple[str, str]]) -> list[Line2D]:
    """Legend proxies: one colour per head, one line style per quantity."""
    out = [Line2D([], [], color=f"C{h}", label=f"head {h}") for h in range(n_heads)]
    out += [Line2D([], [], color="grey", ls=ls, label=label) for ls, label in styles]
    return out


def _panel_accuracy(ax: plt.Axes, x: np.ndarray, rows: Sequence[Mapping[str, Any]], H: int) -> list[Line2D]:
    """Panel: loss and generalization; returns its legend proxies."""
    for key, label, style in (
        ("single", "single-object accuracy", "-"),
        ("seen", "seen-pair accuracy", "-"),
        ("unseen", "unseen-pair accuracy", "-"),
        ("probe", "unseen-pair accuracy, probe (every position pair)", "--"),
    ):
        ax.plot(x, _col(rows, key), style, marker=".", label=label)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("accuracy")
    tw = _twin(ax)
    label = "standard CLIP loss (all negatives, fixed batches)"  # whatever the run trained with: comparable
    tw.plot(x, _col(rows, "loss"), color="black", lw=1.0, marker=".", label=label)
    tw.set_ylabel("loss")
    ax.set_title("loss and generalization")
    return []


def _panel_bias(ax: plt.Axes, x: np.ndarray, rows: Sequence[Mapping[str, Any]], H: int) -> list[Line2D]:
    """Panel: head bias; returns its legend proxies."""
    for h in range(H):
        ax.plot(x, _col(rows, "p_left", h), color=f"C{h}", marker=".")
        ax.plot(x, _col(rows, "p_right", h), color=f"C{h}", ls="--", marker=".")
    reference_line(ax, 0.6, "0.6 (a biased head, Fig. 4c check)", color="grey")
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("P(CLS peaks on object)")
    ax.set_title("CLS -> object bias per head (Fig. 4c)")
    return _head_proxies(H, [("-", "P(left object)"), ("--", "P(right object)")])


def _panel_ep_row(ax: plt.Axes, x: np.ndarray, rows: Sequence[Mapping[str, Any]], H: int) -> list[Line2D]:
    """Panel: EP CLS row; returns its legend proxies."""
    for h in range(H):
        ax.plot(x, np.maximum(_col(rows, "ep_std", h), 1e-6), color=f"C{h}", marker=".")
    ax.set_yscale("log")
    reference_line(ax, 0.1, "std 0.1 (non-flat, Fig. 14 check)", color="grey")
    ax.set_ylabel("EP CLS-row std")
    tw = _twin(ax)
    for h in range(H):
        tw.plot(x, _col(rows, "ep_spearman", h), color=f"C{h}", ls=":", marker="x", ms=3)
    reference_line(tw, 0.9, "|Spearman| 0.9 (monotonic, Fig. 14 check)", color="black", ls="-.")
    tw.axhline(-0.9, color="black", ls="-.", lw=0.8, label="_nolegend_")
    tw.set_ylim(-1.05, 1.05)
    tw.set_ylabel("EP CLS-row Spearman")
    ax.set_title("EP term of the CLS row per head (Fig. 14)")
    return _head_proxies(H, [("-", "std (left axis)"), (":", "Spearman with position (right axis)")])


def _panel_share(ax: plt.Axes, x: np.ndarray, rows: Sequence[Mapping[str, Any]], H: int) -> list[Line2D]:
    """Panel: Fig. 13 share and the invariant ablation; returns its legend proxies."""
    ax.axhspan(0.76, 0.91, color="orange", alpha=0.15, label="paper's Fig. 13 range (0.76-0.91)")
    for h in range(H):
        ax.plot(x, _col(rows, "xwx_share", h), color=f"C{h}", marker=".")
    inv = "CLS key-position ablated"
    ax.plot(x, _col(rows, "invariant", 0), color="black", ls="--", marker=".", label=f"accuracy, {inv}")
    ax.plot(x, _col(rows, "invariant", 1), color="grey", ls=":", marker=".", label=f"label-set, {inv}")
    reference_line(ax, 0.5, "0.5 (left/right at chance)", color="red")
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("share / accuracy")
    ax.set_title("Fig. 13 share (XW_QKX^T of the CLS row) and the invariant ablation")
    return _head_proxies(H, [("-", "XW_QKX^T share")])


def _panel_rank(ax: plt.Axes, x: np.ndarray, rows: Sequence[Mapping[str, Any]], H: int) -> list[Line2D]:
    """Panel: W_QK rank and decay exposure; returns its legend proxies."""
    for h in range(H):
        ax.plot(x, _col(rows, "qk_rank", h) + 0.06 * (h - (H - 1) / 2), color=f"C{h}", marker="o", ms=3, lw=0.8)
    ranks = np.asarray([v for r in rows for v in (r.get("qk_rank") or [])], dtype=float)
    if ranks.size:
        lo, hi = int(ranks.min()), int(ranks.max())
        ax.set_ylim(lo - 0.6, hi + 0.6)
        ax.set_yticks(range(lo, hi + 1, max(1, (hi - lo) // 6 + 1)))
    ax.set_ylabel("rank of W_QK (99 % energy)")
    exposure = _col(rows, "exposure")
    if np.isfinite(exposure).any():
        tw = _twin(ax)
        tw.plot(x, exposure, color="black", lw=1.0, marker=".", label="decay exposure w x sum(lr)")
        tw.set_ylabel("decay exposure")
    else:
        ax.text(
            0.99,
            0.95,
            "decay exposure: n/a (no training config)",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
        )
    ax.set_title("W_QK rank per head and weight-decay exposure")
    ax.set_xlabel(XLABEL)
    return _head_proxies(H, [("-", "rank (heads offset slightly)")])


PANELS = (_panel_accuracy, _panel_bias, _panel_ep_row, _panel_share, _panel_rank)  # top to bottom


def plot_emergence(em: Emergence | Mapping[str, Any] | Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """The emergence of the mechanism over training, five panels over log-epoch (see the module docstring)."""
    rows = _rows(em)
    windows = _windows(em, rows)
    x = np.asarray([r["epoch"] for r in rows], dtype=float)
    H = len(rows[0]["p_left"])
    fig, axes = plt.subplots(5, 1, figsize=(8.0, 13.0), sharex=True, layout="constrained")
    for ax in axes:
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.4)
        ax.grid(alpha=0.25, lw=0.5)
    marks = []
    for check, text, color in (("generalizes", "generalizes", "tab:green"), ("picture", "paper's picture", "purple")):
        first = (windows.get(check) or {}).get("first")
        if first is not None:
            marks.append((float(first), f"{text} from epoch {first}", color))

    extras = [panel(ax, x, rows, H) for panel, ax in zip(PANELS, axes, strict=True)]
    for ax, extra in zip(axes, extras, strict=True):
        for xv, label, color in marks:
            ax.axvline(xv, color=color, ls=":", lw=1.2, label=label if ax is axes[0] else "_nolegend_")
        _legend(ax, extra)
    ax.set_xlim(left=min(-0.2, float(x.min())), right=float(x.max()) * 1.05 + 0.5)
    fig.suptitle(title or "emergence of the mechanism over training")
    return fig


ACCURACY_LEVELS = FIG11_LEVELS  # Fig. 11's levels, as its check reads them
SOURCE_MARKERS = {"history": "", "checkpoint": "s", "snapshot": "o"}


def plot_accuracy_dynamics(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Figure:
    """The three generalization accuracies over log-epoch (``pretrained.trajectory_accuracies`` rows), each epoch
    marked by where its numbers come from (the history: none; a stored checkpoint: a square; a snapshot recorded
    without its weights: a circle), with Fig. 11's levels as reference lines: a trajectory's dynamics where its
    mechanism rows were not measured (a RoPE, two-layer or full-model tower).

    Example:
        >>> rows = [{"epoch": e, "single": a, "seen": a, "unseen": a / 2, "source": s}
        ...         for e, a, s in ((0, 0.0, "checkpoint"), (5, 0.5, "snapshot"), (100, 1.0, "history"))]
        >>> plot_accuracy_dynamics(rows).axes[0].get_xscale()
        'symlog'
    """
    if not rows:
        raise ValueError("plot_accuracy_dynamics needs at least one row")
    x = np.asarray([r["epoch"] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(8.0, 3.6), layout="constrained")
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.4)
    ax.grid(alpha=0.25, lw=0.5)
    for (key, label), color in zip(
        (("single", "single-object"), ("seen", "seen-pair"), ("unseen", "unseen-pair")),
        ("tab:blue", "tab:orange", "tab:green"),
        strict=True,
    ):
        y = np.asarray([np.nan if r[key] is None else r[key] for r in rows], dtype=float)
        ax.plot(x, y, color=color, lw=1.2, label=label)
        for source, marker in SOURCE_MARKERS.items():
            at = [i for i, r in enumerate(rows) if r["source"] == source]
            if marker and at:
                ax.plot(x[at], y[at], ls="", marker=marker, ms=4, color=color, label="_nolegend_")
        reference_line(ax, ACCURACY_LEVELS[key], f"{label} level {ACCURACY_LEVELS[key]}", color=color, ls=":")
    proxies = [
        Line2D([], [], ls="", marker="s", color="gray", label="stored checkpoint"),
        Line2D([], [], ls="", marker="o", color="gray", label="snapshot, accuracies only"),
    ]
    ax.set(xlabel=XLABEL, ylabel="accuracy", ylim=(-0.02, 1.05))
    ax.set_xlim(left=min(-0.2, float(x.min())), right=float(x.max()) * 1.05 + 0.5)
    handles, _ = ax.get_legend_handles_labels()
    legend_outside(ax, handles=[*handles, *proxies])
    ax.set_title(title or "generalization over training")
    return fig


def _image(model: CLIP1D, image: str | Int[torch.Tensor, " pos"] | None) -> torch.Tensor:
    """The image to show: the one given, else two held-out labels at pixels 2 and 6 (Fig. 4b's layout)."""
    if image is not None:
        return model.vision.to_tokens(image)[0]
    dc = model.data_config
    if dc is None:
        raise ValueError("the model has no data_config: pass image=, e.g. 'C . . 17 . . 19 . . . .'")
    x, y = dc.n_pair + 1, dc.n_pair + 2
    return model.cfg.vision.vocab.image({2: x, 6: y}, d_image=dc.d_image)


def _check_checkpoints(checkpoints: Checkpoints) -> list[tuple[int, CLIP1D]]:
    ck = sorted(((int(e), m) for e, m in checkpoints), key=lambda c: c[0])
    if not ck:
        raise ValueError("give at least one (epoch, model) checkpoint")
    return ck


@torch.no_grad()
def plot_checkpoints(
    checkpoints: Checkpoints, image: str | Int[torch.Tensor, " pos"] | None = None, layer: int = 0
) -> Figure:
    """Side by side per checkpoint (columns): the CLS row of the attention pattern at ``layer`` (top) and the EP term
    of the CLS row over the pixels (bottom, layer 0 of a learned-position tower), one line per head, on ``image``
    (default: two held-out labels at pixels 2 and 6). The models' modes are left as they were."""
    ck = _check_checkpoints(checkpoints)
    model0 = ck[0][1]
    img = _image(model0, image)
    n = len(ck)
    fig, axes = plt.subplots(2, n, figsize=(2.6 * n + 1.6, 5.2), squeeze=False, sharey="row")
    tokens = model0.vision.token_strs(img)
    H = model0.cfg.vision.n_heads
    ep_ok = True
    for j, (epoch, model) in enumerate(ck):
        view = attention_view(model, img, layer=layer, tower="vision")
        ax = axes[0, j]
        for h in range(H):
            ax.plot(range(len(tokens)), view.pattern[h, 0].numpy(), color=f"C{h}", marker=".", label=f"head {h}")
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_title(f"epoch {epoch}")
        ax.set_ylim(-0.02, 1.02)
        ax = axes[1, j]
        with eval_mode(model.vision):  # every submodule's mode given back, not only the tower's
            try:
                _, cache = model.vision.run_with_cache(img[None])
                ep = attention_terms(model.vision, cache, 0).get("EP")
            except ValueError:
                ep = None
        if ep is None:
            ep_ok = False
            ax.text(0.5, 0.5, "n/a (no learned positions)", ha="center", va="center", transform=ax.transAxes)
            continue
        for h in range(H):
            ax.plot(range(1, len(tokens)), ep[0, h, 0, 1:].numpy(), color=f"C{h}", marker=".", label=f"head {h}")
        ax.set_xticks(range(1, len(tokens)), [str(p) for p in range(len(tokens) - 1)], fontsize=7)
        ax.set_xlabel("key pixel")
    axes[0, 0].set_ylabel(f"CLS attention, layer {layer}")
    axes[1, 0].set_ylabel("EP term, CLS row" if ep_ok else "EP term")
    legend_outside(axes[0, -1])
    fig.suptitle(f"CLS attention and EP row along training, image {model0.cfg.vision.vocab.image_to_text(img)!r}")
    fig.tight_layout()
    return fig


def show_attention_over_checkpoints(
    checkpoints: Checkpoints,
    image: str | Int[torch.Tensor, " pos"] | None = None,
    layer: int = 0,
    heads: int | Sequence[int] | None = None,
) -> RenderedHTML:
    """One circuitsvis view stepping through the checkpoints: a panel per (checkpoint, head), named
    ``"epoch E L{layer}H{h}"`` in epoch order (click through them, or hover a panel); the vision tower unmasked. Write
    it as one offline page with ``visualization.attention.save_html``."""
    ck = _check_checkpoints(checkpoints)
    img = _image(ck[0][1], image)
    patterns, names = [], []
    tokens: list[str] = []
    for epoch, model in ck:
        v = attention_view(model, img, layer=layer, heads=heads, tower="vision")
        patterns.append(v.pattern)
        names += [f"epoch {epoch} {n}" for n in v.head_names]
        tokens = v.tokens
    return attention_heads(
        attention=torch.cat(patterns, 0),
        tokens=tokens,
        attention_head_names=names,
        max_value=1.0,
        min_value=0.0,
        mask_upper_tri=False,
    )


__all__ = ["plot_checkpoints", "plot_emergence", "show_attention_over_checkpoints"]
