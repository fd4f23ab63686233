"""Output-preserving reparametrisations of the simplified vision tower, and the invariance audit of a measurement.

A check that reads a trained model's parameters can report a choice of coordinates rather than a property of the
function the model computes. Each function here returns a copy of a ``CLIP1D`` whose every output (image
embeddings, logits, the CLS row's attention pattern) is the same as the original's, with its parameters moved:

- ``move_cls_embedding`` (``analysis.mechanism.report``): ``W_E[CLS] + W_pos[0]`` moved into one of the two rows
  (CLS only ever sits at position 0). The paper's EP and PP terms of the CLS row trade places.
- ``fold_query_bias``: ``b_Q`` folded into ``W_Q`` along the CLS token's residual ``x_CLS = W_E[CLS] + W_pos[0]``
  (``W_Q += x_CLS^T b_Q / |x_CLS|^2``, ``b_Q = 0``). In a 1-layer tower read out at CLS only the CLS query reaches the
  output; other rows' queries change, the output does not. Fig. 13's XW_QKX^T share becomes 1 in every head.
- ``shift_embeddings``: a constant vector moved from every row of ``W_E`` into every row of ``W_pos`` (every token
  at every position keeps ``W_E[t] + W_pos[p]``). The paper's EP, PE, PP and EE terms all change.
- ``scale_query_key``: ``W_Q, b_Q`` times c and ``W_K, b_K`` over c (every score unchanged).

``invariance_audit(model, measure)`` evaluates ``measure`` on the model and on each reparametrised copy: a counted
check must give the same value on every one (issue 42's invariance audit; docs/fidelity.md). A move is
output-preserving only for the model it was derived for: a model whose forward ablates a score term
(``EncoderConfig.ablated_terms``) computes a different function after it. ``logit_change(model, moved)`` measures
that on a fixed probe batch, and the audits apply a move only where it is below ``PRESERVING_TOL``.

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
    >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 4 . . 3 . . . . ."])
    >>> all(torch.allclose(f(m).vision(img), m.vision(img), atol=1e-4) for f in REPARAMETRISATIONS.values())
    True
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from hooked_clip1d.analysis.mechanism.report import check_clip, check_simplified_tower, move_cls_embedding
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.modes import eval_mode
from hooked_clip1d.settings.checks import check_int, check_real


def _cls_residual(model: CLIP1D) -> torch.Tensor:
    v = model.vision
    return v.W_E[v.cfg.vocab.cls] + v.W_pos[0]


def fold_query_bias(model: CLIP1D) -> CLIP1D:
    """A copy of ``model`` with the vision ``b_Q`` folded into ``W_Q`` on the CLS row (module docstring)."""
    check_clip(model, "fold_query_bias")
    check_simplified_tower(model.vision)
    out = copy.deepcopy(model)
    attn = out.vision.blocks[0].attn
    with torch.no_grad():
        x = _cls_residual(out)
        n2 = x.dot(x)
        if not bool(n2 > 0):
            raise ValueError("fold_query_bias needs a non-zero CLS residual W_E[CLS] + W_pos[0]")
        attn.W_Q += torch.einsum("m,hd->hmd", x, attn.b_Q) / n2
        attn.b_Q.zero_()
    return out


def shift_embeddings(model: CLIP1D, c: torch.Tensor | None = None) -> CLIP1D:
    """A copy of ``model`` with ``c`` (default: the mean row of the vision ``W_E``) subtracted from every row of
    ``W_E`` and added to every row of ``W_pos``."""
    check_clip(model, "shift_embeddings")
    check_simplified_tower(model.vision)
    out = copy.deepcopy(model)
    with torch.no_grad():
        W_E, W_pos = out.vision.embed.W_E, out.vision.pos_embed.W_pos
        c = W_E.mean(0) if c is None else torch.as_tensor(c).to(W_E)
        if c.shape != W_E.shape[-1:] or not bool(torch.isfinite(c).all()):
            raise ValueError(
                f"shift_embeddings needs a finite vector of d_model = {W_E.shape[-1]}, got {tuple(c.shape)}"
            )
        W_E -= c
        W_pos += c
    return out


def scale_query_key(model: CLIP1D, c: float = 3.0) -> CLIP1D:
    """A copy of ``model`` with the vision ``W_Q``, ``b_Q`` times ``c`` and ``W_K``, ``b_K`` over ``c`` (``c`` a finite
    number > 0: an infinite one would turn every score into NaN or inf)."""
    check_clip(model, "scale_query_key")
    check_simplified_tower(model.vision)
    check_real(c, "scale_query_key: c", strict=True)
    out = copy.deepcopy(model)
    attn = out.vision.blocks[0].attn
    with torch.no_grad():
        before = {k: getattr(attn, k).clone() for k in ("W_Q", "b_Q", "W_K", "b_K")}
        attn.W_Q *= c
        attn.b_Q *= c
        attn.W_K /= c
        attn.b_K /= c
        for k, w in before.items():  # a finite c can still overflow or underflow the weights' dtype (c = 1e39)
            back = getattr(attn, k) / c if k in ("W_Q", "b_Q") else getattr(attn, k) * c
            if not bool(torch.isfinite(getattr(attn, k)).all()) or not torch.allclose(back, w, rtol=1e-5, atol=0.0):
                raise ValueError(
                    f"scale_query_key: c = {c!r} overflows or underflows {k} in {w.dtype} (the move would not "
                    "preserve the outputs); use a c nearer 1"
                )
    return out


REPARAMETRISATIONS: dict[str, Callable[[CLIP1D], CLIP1D]] = {
    "cls into W_E": lambda m: move_cls_embedding(m, "token"),
    "cls into W_pos": lambda m: move_cls_embedding(m, "position"),
    "b_Q folded into W_Q": fold_query_bias,
    "embedding shift": shift_embeddings,
    "W_Q x 3, W_K / 3": scale_query_key,
}


PRESERVING_TOL = 1e-4  # a move preserves a model's outputs when no logit moves by more than this x the largest one


@torch.no_grad()
def logit_change(model: CLIP1D, moved: CLIP1D, n: int = 64, seed: int = 0) -> float:
    """The largest change of CLIP's logits from ``model`` to ``moved`` over a fixed probe batch, relative to the
    largest logit: ``n`` random images (CLS first, every other pixel a random label or background) against ``n``
    random captions, drawn from ``seed`` (a generator of its own: the global RNG is untouched). Both in eval mode
    for the measurement, each given back in its own mode.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
        >>> logit_change(m, scale_query_key(m)) < PRESERVING_TOL
        True
        >>> ablated = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0,
        ...                                         vision_overrides={"ablated_terms": ("EP",)}), seed=0).eval()
        >>> logit_change(ablated, move_cls_embedding(ablated, "position")) > PRESERVING_TOL  # EP moves into PP
        True
    """
    check_clip(model, "logit_change")
    check_clip(moved, "logit_change")
    if moved.cfg.vision.n_labels != model.cfg.vision.n_labels or moved.cfg.text.d_vocab != model.cfg.text.d_vocab:
        raise ValueError("logit_change compares two copies of one model: their vocabularies differ")
    n = check_int(n, "logit_change: n (probe images)")
    g = torch.Generator().manual_seed(seed)
    vc, tc = model.cfg.vision, model.cfg.text
    images = torch.randint(0, vc.n_labels + 1, (n, vc.n_ctx), generator=g)
    images[:, 0] = vc.vocab.cls
    captions = torch.randint(1, tc.d_vocab, (n, tc.n_ctx), generator=g)
    with eval_mode(model, moved), torch.no_grad():  # every submodule's mode given back, not only the top's
        a = model(images, captions, validate=False)
        b = moved(images, captions, validate=False)
    if not bool(torch.isfinite(b).all()):
        return float("inf")
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))


def invariance_audit(model: CLIP1D, measure: Callable[[CLIP1D], Any]) -> dict[str, Any]:
    """``measure`` on ``model`` (key ``"as trained"``) and on each of ``REPARAMETRISATIONS`` that preserves this
    model's outputs (``logit_change`` within ``PRESERVING_TOL``); every copy is in eval mode and the caller's model is
    not changed. A move that changes the outputs (a model whose forward removes a term, ``cfg.ablated_terms``: the
    move shifts a part into a removed term) is not measured: it is listed, with its logit change, under
    ``"not output-preserving"`` (a key present only then).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
        >>> audit = invariance_audit(m, lambda x: round(float(x.vision.blocks[0].attn.b_Q.detach().norm()), 3))
        >>> audit["as trained"] == audit["embedding shift"], audit["b_Q folded into W_Q"]
        (True, 0.0)
    """
    out: dict[str, Any] = {"as trained": measure(model)}
    skipped: dict[str, str] = {}
    for name, f in REPARAMETRISATIONS.items():
        copy = f(model).eval()
        change = logit_change(model, copy)
        if not change <= PRESERVING_TOL:  # NaN too: not shown to preserve the outputs
            skipped[name] = f"logits move by {change:.3g} of the largest"
            continue
        out[name] = measure(copy)
    if skipped:
        out["not output-preserving"] = skipped
    return out
