"""Figures of the attention-logit decompositions and term ablations (Paper Fig. 5a, 5e, 12-14, 16, 17).

- ``plot_term_maps``: one heat map per (head, term) of a single input, query x key (Fig. 12 with the weight-bias
  terms, Fig. 5a / 14 with the token-position terms); diverging colours, symmetric per term.
- ``plot_row_profiles``: one query row (the CLS row by default) of every term along the key positions, one panel
  per head; the horizontal gradient of EP shows as a monotonic line (Fig. 5a, 15b).
- ``plot_std_shares`` / ``plot_std_histograms``: the across-key standard deviation of each term on the CLS row,
  as shares per head and as per-image histograms (Fig. 13).
- ``plot_ablations``: accuracy and label-set recognition per ablation condition (Fig. 5e, 16, 17), from
  ``analysis.interventions.ablation.evaluate_ablations``.

Example:
    >>> import os, tempfile
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . 4 . . . ."])
    >>> _, cache = m.vision.run_with_cache(img)
    >>> tp = decompose_attention_scores(m.vision, cache).token_position_terms()
    >>> labels = m.vision.cfg.vocab.image_tokens_str(img[0])
    >>> fig = plot_term_maps(tp, terms=["EE", "EP", "PE", "PP"], tokens=labels)
    >>> fig = plot_row_profiles(tp, terms=["EE", "EP"], tokens=labels)
    >>> fig = plot_std_shares(row_std_shares(tp))
    >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "shares.png"))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.analysis.interventions.decompose import TERM_LABELS
from hooked_clip1d.data.dataset import SPLIT_TITLES
from hooked_clip1d.settings.checks import check_int
from hooked_clip1d.visualization.plots import plot_ablation_accuracy
from hooked_clip1d.visualization.style import bars, legend_outside

TermMaps = Mapping[str, torch.Tensor]


def _select(
    terms: TermMaps, names: Sequence[str] | None, image: int, heads: Sequence[int] | None
) -> tuple[list[str], dict[str, np.ndarray], list[int]]:
    """Chosen terms of one input as numpy [head, query, key]; accepts [batch, head, q, k] or [head, q, k]."""
    if not terms:
        raise ValueError("no terms to plot")
    names = list(terms) if names is None else list(names)
    if not names:
        raise ValueError(f"terms is empty: name at least one of {list(terms)}")
    unknown = [n for n in names if n not in terms]
    if unknown:
        raise ValueError(f"unknown terms {unknown}; available: {list(terms)}")
    out = {}
    for n in names:
        t = terms[n].detach()
        if t.ndim == 4:
            if not -t.shape[0] <= image < t.shape[0]:
                raise ValueError(f"image={image} is out of range for a batch of {t.shape[0]}")
            t = t[image]
        if t.ndim != 3:
            raise ValueError(
                f"term {n!r} must be [batch, head, query, key] or [head, query, key], got {tuple(t.shape)}"
            )
        out[n] = t.float().cpu().numpy()
    n_heads = next(iter(out.values())).shape[0]
    heads = list(range(n_heads)) if heads is None else list(heads)
    if not heads or any(isinstance(h, bool) or not isinstance(h, int) for h in heads):
        raise ValueError(f"heads must be a non-empty list of head indices (ints), got {heads!r}")
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad:
        raise ValueError(f"heads {bad} out of range 0..{n_heads - 1}")
    return names, out, heads


def _label(name: str) -> str:
    return TERM_LABELS.get(name, name)


def _query_positions(n: int, n_keys: int, query_positions: Sequence[int] | torch.Tensor | None) -> list[int]:
    """The positions of the ``n`` query rows: ``query_positions``, or every position when all rows were kept; a
    decomposition that kept some rows without saying which is refused (its rows were labelled 0, 1, ...: the CLS row
    for the row of position 3)."""
    if query_positions is None:
        if n != n_keys:
            raise ValueError(
                f"the terms keep {n} of {n_keys} query rows: give query_positions "
                "(ScoreDecomposition.query_positions) to say which"
            )
        return list(range(n))
    if isinstance(query_positions, torch.Tensor):
        return [int(q) for q in query_positions.tolist()]
    return list(query_positions)


def _queries_axis_labels(
    n: int, tokens: Sequence[str] | None, query_positions: Sequence[int] | torch.Tensor | None, n_keys: int
) -> list[str]:
    qpos = _query_positions(n, n_keys, query_positions)
    if len(qpos) != n:
        raise ValueError(f"query_positions has {len(qpos)} positions but the terms have {n} query rows")
    if tokens is None:
        return [str(q) for q in qpos]
    return [tokens[q] for q in qpos]


def _check_tokens(tokens: Sequence[str] | None, n_keys: int) -> None:
    if tokens is not None and len(tokens) != n_keys:
        raise ValueError(f"tokens has {len(tokens)} labels but the terms have {n_keys} key positions")


def plot_term_maps(
    term_maps: TermMaps,
    terms: Sequence[str] | None = None,
    *,
    image: int = 0,
    heads: Sequence[int] | None = None,
    tokens: Sequence[str] | None = None,
    query_positions: Sequence[int] | torch.Tensor | None = None,
    title: str | None = None,
) -> Figure:
    """Heat maps query x key of each term (columns) for each head (rows) of one input (Fig. 5a, 12, 14).

    Args:
        term_maps: name -> [batch, head, query, key] (or [head, query, key]), e.g.
            ``ScoreDecomposition.token_position_terms()`` or ``.weight_bias_terms()``.
        terms: which terms, in column order (default: all).
        image: the batch index to show.
        heads: which heads (default: all).
        tokens: one label per key position (e.g. ``vocab.image_tokens_str(ids)``); also used for the query axis.
        query_positions: the query positions of the rows when the decomposition kept only some
            (``ScoreDecomposition.query_positions``).
        title: figure title.

    Colours are diverging and symmetric per term column (red positive, blue negative), so a column's maps compare.
    """
    names, maps, heads = _select(term_maps, terms, image, heads)
    n_q, n_k = next(iter(maps.values())).shape[1:]
    _check_tokens(tokens, n_k)
    qlabels = _queries_axis_labels(n_q, tokens, query_positions, n_k)
    klabels = list(tokens) if tokens is not None else [str(k) for k in range(n_k)]
    fig, axes = plt.subplots(
        len(heads),
        len(names),
        figsize=(2.3 * len(names) + 0.6, 2.0 * len(heads) * max(0.35, n_q / n_k) + 0.8),
        squeeze=False,
        constrained_layout=True,
    )
    for j, n in enumerate(names):
        vmax = float(np.abs(maps[n][heads]).max()) or 1.0
        for i, h in enumerate(heads):
            ax = axes[i, j]
            im = ax.imshow(maps[n][h], cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
            # every panel has the same axes: ticks and labels on the outer panels only (an inner panel's ticks
            # would double the time to draw the figure, and its cells are the tokens of the outer panels' labels)
            outer_x, outer_y = i == len(heads) - 1, j == 0
            ax.set_xticks(range(n_k) if outer_x else [], klabels if outer_x else [], fontsize=6, rotation=90)
            ax.set_yticks(range(n_q) if outer_y else [], qlabels if outer_y else [], fontsize=6)
            if i == 0:
                ax.set_title(_label(n), fontsize=9)
            if j == 0:
                ax.set_ylabel(f"head {h}\nquery", fontsize=8)
            if i == len(heads) - 1:
                ax.set_xlabel("key", fontsize=8)
        fig.colorbar(im, ax=axes[:, j].tolist(), shrink=0.8, location="bottom", aspect=15)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_row_profiles(
    term_maps: TermMaps,
    terms: Sequence[str] | None = None,
    *,
    row: int = 0,
    image: int | None = 0,
    heads: Sequence[int] | None = None,
    tokens: Sequence[str] | None = None,
    query_positions: Sequence[int] | torch.Tensor | None = None,
    title: str | None = None,
) -> Figure:
    """One query row (default the first kept row: the CLS row) of each term along the keys, a panel per head.

    A monotonic line is the horizontal gradient of Sec. 5 (EP in the paper's model, Fig. 5a / 15b). With
    ``image=None`` the row is averaged over the batch (mean +- std shaded). ``query_positions``: the positions of
    the rows when the decomposition kept only some (``ScoreDecomposition.query_positions``; refused if it kept some
    and this is not given).
    """
    if image is None:
        first = next(iter(term_maps.values()))
        if first.ndim != 4:
            raise ValueError("image=None averages over the batch: terms must be [batch, head, query, key]")
        names, maps, heads = _select({k: v.mean(0) for k, v in term_maps.items()}, terms, 0, heads)
        _, spread, _ = _select({k: v.std(0, correction=0) for k, v in term_maps.items()}, terms, 0, heads)
    else:
        names, maps, heads = _select(term_maps, terms, image, heads)
        spread = None
    n_q, n_k = next(iter(maps.values())).shape[1:]
    if not -n_q <= row < n_q:
        raise ValueError(f"row={row} is out of range for {n_q} query rows")
    qpos = _query_positions(n_q, n_k, query_positions)
    if len(qpos) != n_q:
        raise ValueError(f"query_positions has {len(qpos)} positions but the terms have {n_q} query rows")
    _check_tokens(tokens, n_k)
    x = np.arange(n_k)
    fig, axes = plt.subplots(1, len(heads), figsize=(3.0 * len(heads) + 0.5, 2.8), squeeze=False, sharey=True)
    for i, h in enumerate(heads):
        ax = axes[0, i]
        for n in names:
            y = maps[n][h, row]
            (line,) = ax.plot(x, y, marker="o", ms=3, lw=1.2, label=_label(n))
            if spread is not None:
                s = spread[n][h, row]
                ax.fill_between(x, y - s, y + s, color=line.get_color(), alpha=0.15, lw=0)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(x.tolist(), list(tokens) if tokens is not None else [str(k) for k in x], fontsize=6, rotation=90)
        ax.set_xlabel("key position", fontsize=8)
    axes[0, 0].set_ylabel("logit contribution (row)", fontsize=8)
    axes[0, -1].legend(fontsize=7, loc="best")
    fig.suptitle(title or f"query position {qpos[row]}: terms along the keys", fontsize=10)
    fig.tight_layout()
    return fig


def _check_shares(shares: Mapping[str, Any]) -> None:
    missing = [k for k in ("terms", "share", "std", "per_image_std") if k not in shares]
    if missing:
        raise ValueError(f"expected the output of row_std_shares; missing keys {missing}")


def plot_std_shares(
    shares: Mapping[str, Any],
    terms: Sequence[str] | None = None,
    *,
    reference: Mapping[str, Sequence[float]] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Bars of each term's share of the across-key std of the row, per head (Fig. 13 summary).

    ``shares`` is ``analysis.interventions.decompose.row_std_shares(...)``; ``reference`` optionally marks published
    shares
    (term -> one value per head, e.g. ``{"XWX": [0.76, 0.77, 0.91, 0.76]}``) as black ticks.
    """
    _check_shares(shares)
    all_names = list(shares["terms"])
    names = all_names if terms is None else list(terms)
    if not names:
        raise ValueError(f"terms is empty: name at least one of {all_names}")
    unknown = [n for n in names if n not in all_names]
    if unknown:
        raise ValueError(f"unknown terms {unknown}; available: {all_names}")
    share = shares["share"].detach().cpu().numpy()  # [T, h]
    n_heads = share.shape[1]
    fig = ax.figure if ax is not None else plt.figure(figsize=(1.0 + 1.1 * n_heads + 0.25 * len(names), 3.2))
    ax = ax or fig.add_subplot()
    x = np.arange(n_heads)
    w = 0.8 / len(names)
    for i, n in enumerate(names):
        off = (i - (len(names) - 1) / 2) * w
        bars(ax, x + off, share[all_names.index(n)], width=w, label=_label(n))
        if reference is not None and n in reference:
            ref = list(reference[n])
            ax.scatter(x[: len(ref)] + off, ref, marker="_", s=200, color="black", zorder=3)
    if reference:
        ax.scatter([], [], marker="_", s=200, color="black", label="paper")
    ax.set_xticks(x.tolist(), [f"head {h}" for h in range(n_heads)])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of row std")
    ax.set_title(title or "term share of the across-key std (CLS row)", fontsize=10)
    legend_outside(ax)
    return fig


def plot_std_histograms(
    shares: Mapping[str, Any], terms: Sequence[str] | None = None, *, bins: int = 20, title: str | None = None
) -> Figure:
    """Per-image histograms of each term's across-key std of the row, a panel per head (Fig. 13)."""
    _check_shares(shares)
    bins = check_int(bins, "bins")
    all_names = list(shares["terms"])
    names = all_names if terms is None else list(terms)
    if not names:
        raise ValueError(f"terms is empty: name at least one of {all_names}")
    unknown = [n for n in names if n not in all_names]
    if unknown:
        raise ValueError(f"unknown terms {unknown}; available: {all_names}")
    per = shares["per_image_std"].detach().cpu().numpy()  # [T, b, h]
    n_heads = per.shape[2]
    fig, axes = plt.subplots(1, n_heads, figsize=(2.8 * n_heads + 0.5, 2.8), squeeze=False)
    hi = float(per[[all_names.index(n) for n in names]].max()) or 1.0
    edges = np.linspace(0.0, hi, bins + 1)
    for h in range(n_heads):
        ax = axes[0, h]
        for n in names:
            ax.hist(per[all_names.index(n), :, h], bins=edges, alpha=0.6, label=_label(n))
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xlabel("std across keys", fontsize=8)
    axes[0, 0].set_ylabel("images", fontsize=8)
    axes[0, -1].legend(fontsize=7)
    fig.suptitle(title or "std of each term across the CLS row (one count per image)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_ablations(
    result: Mapping[str, Any], splits: Sequence[str] = ("val_unseen",), metrics: Sequence[str] = ("acc", "label_set")
) -> Figure:
    """Bars of ``metrics`` per ablation condition, a panel per split (Fig. 5e, 16, 17).

    ``result`` is ``analysis.interventions.ablation.evaluate_ablations(...)``; each panel is
    ``plots.plot_ablation_accuracy``.

    Example:
        >>> res = {"splits": ["val_unseen"], "conditions": {
        ...     "baseline": {"terms": [], "metrics": {"val_unseen": {"acc": 1.0, "label_set": 1.0}}},
        ...     "EP": {"terms": ["EP"], "metrics": {"val_unseen": {"acc": 0.5, "label_set": 1.0}}}}}
        >>> fig = plot_ablations(res)
        >>> len(fig.axes)
        1
    """
    if "conditions" not in result:
        raise ValueError("expected the output of evaluate_ablations (a dict with 'conditions')")
    for what, v in (("splits", splits), ("metrics", metrics)):
        if isinstance(v, str) or not v:  # metrics="acc" was drawn as three series a, c, c
            raise TypeError(f"{what} must be a non-empty list of names, e.g. ({v!r},), got {v!r}")
    conds = result["conditions"]
    missing = [s for s in splits if any(s not in c["metrics"] for c in conds.values())]
    if missing:
        raise ValueError(f"splits {missing} were not evaluated; available: {result.get('splits')}")
    per_cond = {name: c["metrics"] for name, c in conds.items()}
    width = max(3.4, 1.2 + 0.8 * len(conds)) * len(splits)
    fig, axes = plt.subplots(1, len(splits), figsize=(width, 3.4), squeeze=False)
    for i, s in enumerate(splits):
        plot_ablation_accuracy(per_cond, split=s, metrics=tuple(metrics), ax=axes[0, i], legend=i == len(splits) - 1)
        axes[0, i].set_title(f"term ablation:\n{SPLIT_TITLES.get(s, s)}", fontsize=9)
    fig.tight_layout()
    return fig
