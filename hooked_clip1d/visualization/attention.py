"""Attention patterns of either tower as circuitsvis views (offline HTML) and matplotlib figures (Paper Fig. 4a, A10).

``show_attention(model, "C . . 17 . . 19 . . . .")`` returns a ``circuitsvis`` ``RenderedHTML`` of
``blocks.{layer}.attn.hook_pattern``; the tower is taken from the input (an image string starts with ``C``, a caption
with a label) or from ``tower=``. Token labels come from the tower's ``token_strs`` (``[CLS]``, ``·`` for background,
labels; caption phrases). circuitsvis masks the upper triangle of a pattern unless told not to
(``maskUpperTri`` defaults to true in its JS), so the bidirectional vision tower is rendered with
``mask_upper_tri=False`` and the causal text tower with ``True``.

``save_html(view, path)`` writes a self-contained page: circuitsvis's ``local_src`` with its bundled
``dist/cdn/iife.js`` inlined, never the unpkg CDN import of ``str(view)``, so it opens offline. (In Jupyter,
``view._repr_html_()`` pings google.com with a 1 s timeout and inlines the bundle only when that fails.)

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> view = attention_view(m, "C . 3 . . 5 . . . . .", layer=0, heads=[0, 2])
    >>> view.tower, view.pattern.shape, view.tokens[:3], view.causal
    ('vision', torch.Size([2, 11, 11]), ['[CLS]', '·', '3'], False)
    >>> attention_view(m, "3 is on the left of 5").tokens
    ['3', 'is on the left of', '5', '<eot>']
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib
import numpy as np
import torch
from circuitsvis.attention import attention_heads
from circuitsvis.utils.render import RenderedHTML
from jaxtyping import Float
from matplotlib.figure import Figure

from hooked_clip1d.files import atomic_write
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder
from hooked_clip1d.model.modes import eval_mode

Tower = Literal["vision", "text"]
IMAGE_EXAMPLE = "C . 3 . . 5 . . . . ."
CAPTION_EXAMPLE = "3 is on the left of 5"


@dataclass(frozen=True)
class AttentionView:
    """One input's attention pattern at one layer, for the chosen heads, with readable token labels."""

    tower: str  # "vision" or "text"
    layer: int
    heads: tuple[int, ...]  # head indices, in the order of ``pattern``'s first axis
    tokens: list[str]  # one readable label per position (the tower's ``token_strs``)
    pattern: Float[torch.Tensor, "head query key"]  # softmax attention, rows (queries) sum to 1
    causal: bool  # True for the text tower: keys after the query are masked (zero)

    @property
    def head_names(self) -> list[str]:
        """``["L0H0", "L0H2", ...]``: the real layer/head indices, also when a subset of heads is shown."""
        return [f"L{self.layer}H{h}" for h in self.heads]


def _tower_name(enc: HookedEncoder) -> Tower:
    if isinstance(enc, HookedEncoder):
        return enc.cfg.tower  # type: ignore[return-value]
    raise TypeError(f"expected a vision or text tower, got {type(enc).__name__}")


def _string_kind(s: str) -> Tower:
    words = s.split()
    if words and words[0] == "C":
        return "vision"
    if words and words[0].isdigit():
        return "text"
    raise ValueError(
        f"cannot tell whether {s!r} is an image (like {IMAGE_EXAMPLE!r}, starting with the CLS token 'C') "
        f"or a caption (like {CAPTION_EXAMPLE!r}, starting with a label); pass tower='vision' or tower='text' "
        "with a valid string"
    )


def _select_tower(model_or_tower: CLIP1D | HookedEncoder, x: str | torch.Tensor, tower: str | None) -> HookedEncoder:
    if tower is not None and tower not in ("vision", "text"):
        raise ValueError(f"tower must be 'vision' or 'text', got {tower!r}")
    if isinstance(model_or_tower, HookedEncoder):
        name = _tower_name(model_or_tower)
        if tower is not None and tower != name:
            raise ValueError(f"tower={tower!r} was asked for, but the model given is the {name} tower")
        if isinstance(x, str):
            try:
                kind: str | None = _string_kind(x)
            except ValueError:
                kind = None  # left to the tower's parser, whose error names the problem
            if kind is not None and kind != name:
                what = "an image" if kind == "vision" else "a caption"
                raise ValueError(f"{x!r} looks like {what}, but the model given is the {name} tower")
        return model_or_tower
    if not isinstance(model_or_tower, CLIP1D):
        raise TypeError(
            f"expected a CLIP1D or one of its towers (model.vision / model.text), got {type(model_or_tower).__name__}"
        )
    if tower is None:
        if isinstance(x, str):
            tower = _string_kind(x)
        else:
            n = x.shape[-1] if x.ndim else -1
            fits = [t for t in ("vision", "text") if getattr(model_or_tower, t).cfg.n_ctx == n]
            if len(fits) != 1:
                v, t = model_or_tower.vision.cfg.n_ctx, model_or_tower.text.cfg.n_ctx
                why = "both towers" if fits else "neither tower"
                raise ValueError(
                    f"token tensor of shape {tuple(x.shape)} fits {why} (vision n_ctx={v}, text n_ctx={t}); "
                    "pass tower='vision' or tower='text'"
                )
            tower = fits[0]
    return getattr(model_or_tower, tower)


def _check_layer(enc: HookedEncoder, layer: Any) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer):
        raise TypeError(f"layer must be an int, got {type(layer).__name__}")
    n = enc.cfg.n_layers
    if not 0 <= int(layer) < n:
        raise ValueError(f"layer {layer} is out of range: this tower has {n} layer(s), valid layers are 0..{n - 1}")
    return int(layer)


def _check_heads(enc: HookedEncoder, heads: Any) -> tuple[int, ...]:
    n = enc.cfg.n_heads
    if heads is None:
        return tuple(range(n))
    hs = [heads] if isinstance(heads, int | np.integer) and not isinstance(heads, bool) else list(heads)
    if not hs:
        raise ValueError("heads is empty; pass None for all heads")
    for h in hs:
        if isinstance(h, bool) or not isinstance(h, int | np.integer):
            raise TypeError(f"heads must be ints, got {h!r} ({type(h).__name__})")
        if not 0 <= int(h) < n:
            raise ValueError(f"head {h} is out of range: this tower has {n} heads, valid heads are 0..{n - 1}")
    return tuple(int(h) for h in hs)


def _one_input(enc: HookedEncoder, x: str | torch.Tensor, index: int | None) -> torch.Tensor:
    if isinstance(x, torch.Tensor) and x.ndim == 2 and x.shape[0] != 1 and index is None:
        raise ValueError(f"got a batch of {x.shape[0]} inputs (shape {tuple(x.shape)}); pass index= to pick one")
    if index is not None:
        if not isinstance(x, torch.Tensor) or x.ndim != 2:
            raise ValueError("index= picks a row of a [batch, pos] token tensor; give such a tensor or drop index")
        if not -x.shape[0] <= index < x.shape[0]:
            raise ValueError(f"index {index} is out of range for a batch of {x.shape[0]}")
        x = x[index]
    if isinstance(x, torch.Tensor) and x.ndim not in (1, 2):
        raise ValueError(f"expected one input's token ids [pos] (or [1, pos]), got shape {tuple(x.shape)}")
    return enc.to_tokens(x)  # validates dtype, length, ids, CLS / EOT


@torch.no_grad()
def attention_view(
    model_or_tower: CLIP1D | HookedEncoder,
    image_or_caption: str | torch.Tensor,
    layer: int = 0,
    heads: int | Sequence[int] | None = None,
    *,
    tower: str | None = None,
    index: int | None = None,
) -> AttentionView:
    """The attention pattern of one input at ``layer`` (``blocks.{layer}.attn.hook_pattern``), heads selected.

    Args:
        model_or_tower: a ``CLIP1D`` (the tower is chosen from the input or ``tower``) or ``model.vision`` /
            ``model.text``.
        image_or_caption: ``"C . 3 . . 5 . . . . ."``, ``"3 is on the left of 5"``, one input's ids ``[pos]`` or
            ``[1, pos]``, or a ``[batch, pos]`` tensor with ``index`` (e.g. ``split.images, index=4``).
        layer: block index, ``0..n_layers-1``.
        heads: one head, a list of heads, or None (all).
        tower: ``"vision"`` / ``"text"``, needed only where the input does not tell (or to check a tower).
        index: row of a ``[batch, pos]`` input.

    The pattern is taken in eval mode (no dropout upstream); the model's train/eval mode is restored afterwards.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, n_layers=2), seed=0).eval()
        >>> v = attention_view(m.text, "3 is on the left of 5", layer=1, heads=3)
        >>> v.head_names, v.pattern.shape, bool(v.pattern[0, 0, 1:].eq(0).all())
        (['L1H3'], torch.Size([1, 4, 4]), True)
    """
    if not isinstance(image_or_caption, str | torch.Tensor):
        raise TypeError(
            f"image_or_caption must be a string or a tensor of token ids, got {type(image_or_caption).__name__}"
        )
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        raise TypeError(f"index must be an int, got {type(index).__name__}")
    enc = _select_tower(model_or_tower, image_or_caption, tower)
    layer = _check_layer(enc, layer)
    hs = _check_heads(enc, heads)
    tokens = _one_input(enc, image_or_caption, index)
    name = f"blocks.{layer}.attn.hook_pattern"
    with eval_mode(enc):  # every submodule's mode given back, not only the tower's
        _, cache = enc.run_with_cache(tokens, names_filter=name, return_type=None)
    pattern = cache[name][0, list(hs)].detach().float().cpu()
    return AttentionView(
        tower=_tower_name(enc),
        layer=layer,
        heads=hs,
        tokens=enc.token_strs(tokens[0].cpu()),
        pattern=pattern,
        causal=enc.cfg.attention_dir == "causal",
    )


def show_attention(
    model_or_tower: CLIP1D | HookedEncoder,
    image_or_caption: str | torch.Tensor,
    layer: int = 0,
    heads: int | Sequence[int] | None = None,
    *,
    tower: str | None = None,
    index: int | None = None,
) -> RenderedHTML:
    """A circuitsvis ``attention_heads`` view of one input's pattern at ``layer`` (arguments as ``attention_view``).

    The vision tower is bidirectional and is shown without circuitsvis's upper-triangle mask; the causal text tower
    keeps it. Heads are named ``L{layer}H{head}``. Multi-word caption tokens are joined with ``_``
    (``is_on_the_left_of``) because circuitsvis strips whitespace from labels. Display it in Jupyter, or write an
    offline page with ``save_html``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> view = show_attention(m, "C . 3 . . 5 . . . . .", layer=0)
        >>> '"maskUpperTri": false' in view.local_src, '"[CLS]"' in view.local_src
        (True, True)
    """
    v = attention_view(model_or_tower, image_or_caption, layer, heads, tower=tower, index=index)
    return attention_heads(
        attention=v.pattern,
        tokens=[re.sub(r"\s+", "_", t) for t in v.tokens],
        attention_head_names=v.head_names,
        max_value=1.0,
        min_value=0.0,
        mask_upper_tri=v.causal,
    )


_EXTERNAL_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=|\bimport\b[^;]*?\bfrom\s*[\"']https?://", re.IGNORECASE)


def save_html(
    obj: RenderedHTML, path: str | Path, title: str = "hooked_clip1d attention", heading: str | None = None
) -> Path:
    """Write a circuitsvis view as a self-contained HTML page that works offline; returns the path.

    Uses ``obj.local_src`` (circuitsvis's bundled ``iife.js`` inlined, ~1.3 MB), never the CDN version, and refuses
    to write a page that would load a script from elsewhere. The write is atomic (temp file + rename).

    Example:
        >>> import tempfile, os
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> p = save_html(show_attention(m, "3 is on the left of 5"), os.path.join(tempfile.mkdtemp(), "a.html"))
        >>> text = p.read_text(encoding="utf-8")
        >>> "CircuitsVis.render(" in text, "unpkg.com" in text
        (True, False)
    """
    src = getattr(obj, "local_src", None)
    if not isinstance(src, str):
        raise TypeError(f"save_html needs a circuitsvis RenderedHTML (from show_attention), got {type(obj).__name__}")
    if _EXTERNAL_SCRIPT.search(src):
        raise ValueError("this circuitsvis view loads a script from a URL, so it would not work offline")
    # circuitsvis writes its mount point as '<div .../>', which HTML parses as an unclosed <div>: close it
    src = re.sub(r'^(\s*<div id="[^"]*"[^>]*?)\s*/>', r"\1></div>", src, count=1)
    heading_html = (
        f'<h3 style="font-family: sans-serif">{html.escape(heading)}</h3>\n'
        '<p style="font-family: sans-serif; font-size: small">attention weight: 0 (white) to 1 (darkest); '
        "hover a cell for its value</p>\n"
        if heading
        else ""
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n{heading_html}{src}\n</body>\n</html>\n"
    )
    path = Path(path)
    atomic_write(path, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    return path


def plot_attention(
    model_or_tower: CLIP1D | HookedEncoder,
    image_or_caption: str | torch.Tensor,
    layer: int = 0,
    heads: int | Sequence[int] | None = None,
    *,
    tower: str | None = None,
    index: int | None = None,
) -> Figure:
    """A matplotlib figure: one heat map per head (query rows, key columns, 0..1), token labels on both axes.

    Arguments as ``attention_view``. For the causal text tower the masked upper triangle is drawn grey. The figure is
    a bare ``matplotlib.figure.Figure`` (not registered with pyplot, so nothing to close); save it with ``savefig``.

    Example:
        >>> import tempfile, os
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> fig = plot_attention(m, "C . 3 . . 5 . . . . .", layer=0, heads=[1, 2])
        >>> [ax.get_title() for ax in fig.axes[:2]]
        ['L0H1', 'L0H2']
        >>> fig.savefig(os.path.join(tempfile.mkdtemp(), "attn.png"))
    """
    v = attention_view(model_or_tower, image_or_caption, layer, heads, tower=tower, index=index)
    n_h, n = len(v.heads), len(v.tokens)
    side = 0.9 + 0.28 * n
    fig = Figure(figsize=(side * n_h + 0.8, side + 0.9), layout="constrained")
    axes = fig.subplots(1, n_h, squeeze=False)[0]
    data = v.pattern.numpy()
    if v.causal:
        data = np.ma.masked_array(data, mask=np.triu(np.ones((n, n), dtype=bool), k=1)[None].repeat(n_h, 0))
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad="lightgrey")  # masked (causal) cells grey
    im = None
    for i, (ax, name, pat) in enumerate(zip(axes, v.head_names, data, strict=True)):
        im = ax.imshow(pat, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks(range(n), v.tokens, rotation=90, fontsize=7)
        # the query axis is the same in every panel: labelled on the first only (ticks are most of the draw time)
        ax.set_yticks(range(n) if i == 0 else [], v.tokens if i == 0 else [], fontsize=7)
        ax.set_xlabel("key")
        ax.set_title(name)
    axes[0].set_ylabel("query")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="attention")
    fig.suptitle(f"{v.tower} tower, layer {v.layer}: attention pattern")
    return fig


__all__ = ["AttentionView", "attention_view", "plot_attention", "save_html", "show_attention"]
