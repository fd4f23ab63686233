"""Conventions every figure of the package follows, in one place.

- ``metric_label``: readable legend and axis text for the metric keys of ``evaluation.evaluate`` (``acc`` ->
  "accuracy"), so no legend shows a raw key.
- ``bars``: ``ax.bar`` that shows a zero as zero (a flat line and a "0" where a bar has height 0, which would
  otherwise read as missing data) and a missing value as "n/a".
- ``reference_line``: a labelled horizontal reference (chance, a baseline, the paper's value): it appears in the
  legend, so no dashed line is left unexplained.
- ``legend_outside``: the legend to the right of the axes, where it cannot cover data.
- ``stamp``: a footer naming the model and the data a saved figure shows (``analyze`` and ``reproduce`` add it).
- ``save_compact_png``: a figure as a 256-colour PNG, for figures the repository keeps (docs/figures: ~1/3 of the
  bytes of a full-colour one; the working tree travels to a GPU window within 64 MiB).

Example:
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> _ = bars(ax, [0, 1], [0.0, 0.7], width=0.4, label=metric_label("acc"))
    >>> _ = reference_line(ax, 0.5, "chance")
    >>> _ = legend_outside(ax)
    >>> [t.get_text() for t in ax.get_legend().get_texts()]
    ['chance', 'accuracy']
    >>> stamp(fig, model="simplified-ntot20-n2-10", data="val_unseen").get_text()
    'model: simplified-ntot20-n2-10 | data: val_unseen'
    >>> plt.close(fig)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

METRIC_LABELS = {
    "acc": "accuracy",
    "relaxed": "relaxed accuracy (either order)",
    "label_set": "label-set accuracy",
    "n": "images",
}


def require_keys(data: Any, keys: tuple[str, ...], plot: str, takes: str) -> None:
    """A ``KeyError`` naming what ``plot`` takes (``takes``, e.g. "classify_head_roles' output") when ``data`` lacks
    any of ``keys`` (another analysis's output given by mistake).

    >>> require_keys({"delta_label": 0}, ("relational",), "plot_head_roles", "classify_head_roles' output")
    Traceback (most recent call last):
    ...
    KeyError: "plot_head_roles takes classify_head_roles' output; no ['relational'] in ['delta_label']"
    """
    missing = [k for k in keys if k not in data]
    if missing:
        raise KeyError(f"{plot} takes {takes}; no {missing} in {sorted(data)}")


def metric_label(key: str) -> str:
    """Readable text for a metric key (``"label_set"`` -> ``"label-set accuracy"``); unknown keys lose underscores.

    Example:
        >>> metric_label("label_set"), metric_label("val_unseen_acc")
        ('label-set accuracy', 'val unseen acc')
    """
    return METRIC_LABELS.get(key, key.replace("_", " "))


def bars(
    ax: plt.Axes,
    x: Sequence[float | int] | np.ndarray | range,
    heights: Sequence[float | int | None] | np.ndarray,
    width: float = 0.8,
    **kwargs: Any,
) -> Any:
    """``ax.bar(x, heights, width, **kwargs)`` that shows zero and missing values.

    A bar of height 0 is drawn as a flat line in the bar's colour with a small "0" at the zero line, and one too
    small to see (under 0.5 % of the tallest bar drawn by ``bars`` on these axes so far, any series, e.g. -0.0003
    beside 0.6) likewise with "≈0" (not on a log axis); a None or NaN height is drawn as no bar with "n/a" (so a
    missing number is never shown as a zero). Returns the ``BarContainer``.
    """
    xs = np.asarray(x, dtype=float)
    h = np.array([np.nan if v is None else float(v) for v in heights], dtype=float)
    if xs.shape != h.shape:
        raise ValueError(f"bars: {xs.shape[0]} positions but {h.shape[0]} heights")
    cont = ax.bar(xs, h, width=width, **kwargs)
    color = cont.patches[0].get_facecolor() if cont.patches else "k"
    drawn = ax.__dict__.setdefault("_hc1d_bars", [])  # (x, height, width, colour, marked) of every bars() call
    for xi, hi in zip(xs, h, strict=True):
        if np.isnan(hi):
            ax.text(
                xi, 0.02, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, transform=ax.get_xaxis_transform()
            )
        else:
            drawn.append([xi, hi, width, color, False])
    tallest = max((abs(b[1]) for b in drawn), default=0.0)
    for b in drawn:  # earlier series too: a taller series drawn later makes their tiny bars invisible
        xi, hi, w, c, marked = b
        tiny = hi != 0 and abs(hi) < 0.005 * tallest and ax.get_yscale() != "log"
        if not marked and (hi == 0 or tiny):
            ax.plot([xi - w / 2, xi + w / 2], [0, 0], color=c, lw=2.5, solid_capstyle="butt", zorder=3)
            ax.text(xi, 0, "0" if hi == 0 else "≈0", ha="center", va="bottom", fontsize=6)
            b[4] = True
    return cont


def reference_line(ax: plt.Axes, y: float, label: str, color: str = "red", ls: str = "--", lw: float = 0.8) -> Line2D:
    """A horizontal reference line at ``y`` that carries ``label`` into the legend."""
    if not label:
        raise ValueError("a reference line needs a label (say what it marks: chance, baseline, the paper's value)")
    return ax.axhline(y, color=color, ls=ls, lw=lw, label=label)


def legend_outside(ax: plt.Axes, fontsize: float = 7, **kwargs: Any) -> Any:
    """The legend to the right of ``ax`` (outside the data; ``savefig(bbox_inches="tight")`` keeps it)."""
    return ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def stamp(fig: Figure, model: str, data: str | None = None) -> Text:
    """A footer under ``fig`` naming the model (or models) and the data shown, below everything the axes draw
    (rotated tick labels included, which once ran through it); returns the text artist."""
    text = f"model: {model}" + (f" | data: {data}" if data else "")
    if not hasattr(fig.canvas, "get_renderer"):  # a bare Figure(): measure with the Agg canvas savefig would use
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    bottoms = [ax.get_tightbbox(renderer).y0 for ax in fig.axes if ax.get_visible()]
    y = min([-0.01, *(b / fig.bbox.height - 0.02 for b in bottoms)])  # figure fraction, under the lowest label
    return fig.text(0.01, y, text, ha="left", va="top", fontsize=7, color="dimgray")


def save_compact_png(fig: Any, path: Any, dpi: int = 110) -> None:
    """Write ``fig`` to ``path`` (a file name or a binary file object) as a PNG with a 256-colour palette
    (median-cut; matplotlib's flat colours and colormaps keep their look at a third of the bytes).

    Example:
        >>> import io
        >>> fig, ax = plt.subplots()
        >>> _ = ax.plot([0, 1], [0, 1])
        >>> buf = io.BytesIO()
        >>> save_compact_png(fig, buf)
        >>> from PIL import Image
        >>> Image.open(io.BytesIO(buf.getvalue())).mode
        'P'
        >>> plt.close(fig)
    """
    import io

    from PIL import Image

    raw = io.BytesIO()
    fig.savefig(raw, dpi=dpi, format="png", bbox_inches="tight")
    image = Image.open(io.BytesIO(raw.getvalue())).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, format="PNG", optimize=True)
