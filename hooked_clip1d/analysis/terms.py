"""Decomposition of layer-0 attention scores into token / positional / bias terms, and their ablation as hooks.

At layer 0 of a model without LayerNorm the residual is exactly ``X = E + P`` (token plus positional embedding),
so with ``q = X W_Q + b_Q`` and ``k = X W_K + b_K`` each head's pre-softmax score ``q k^T / sqrt(d_head)`` splits
into nine terms named (query part)(key part) with parts E (token), P (position) and B (bias):

=====  ==========================  ======================================================
term   formula (÷ sqrt(d_head))    paper name
=====  ==========================  ======================================================
EE     E W_Q W_K^T E^T             EW_QKE^T (label-specific, Eq. 2)
EP     E W_Q W_K^T P^T             EW_QKP^T, the horizontal gradient (Sec. 5)
PE     P W_Q W_K^T E^T             PW_QKE^T
PP     P W_Q W_K^T P^T             PW_QKP^T
BE     b_Q W_K^T E^T               part of B_Q^T W_K X^T (App. D)
BP     b_Q W_K^T P^T               B_Q^T W_K P^T (Sec. 5, App. D)
EB     E W_Q b_K^T                 part of X W_Q^T B_K (constant along a row)
PB     P W_Q b_K^T                 part of X W_Q^T B_K (constant along a row)
BB     b_Q b_K^T                   B_Q^T B_K (constant)
=====  ==========================  ======================================================

``VP`` (App. H) is the positional part ``P W_V`` of the values. RoPE models have no P; with positional "none"
every P term is zero.

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . . 2 . . . . . .")
    >>> _, cache = m.vision.run_with_cache(img)
    >>> t = attention_terms(m.vision, cache)
    >>> torch.allclose(sum(t.values()), cache["attn_scores", 0], atol=1e-4)
    True
    >>> hooks = ablate_terms(m.vision, ["EP"])
    >>> out = m.vision.run_with_hooks(img, fwd_hooks=hooks)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from jaxtyping import Float
from transformer_lens import ActivationCache
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.encoders import HookedEncoder

SCORE_TERMS = ("EE", "EP", "PE", "PP", "BE", "BP", "EB", "PB", "BB")
VALUE_TERMS = ("VP",)

Scores = Float[torch.Tensor, "batch head_index query_pos key_pos"]


def _check_supported(model: HookedEncoder, layer: int) -> None:
    if layer != 0:
        raise ValueError(
            f"term decomposition is implemented for layer 0 (where the residual is E + P); got layer={layer}"
        )
    if model.cfg.normalization_type is not None:
        raise ValueError(
            "term decomposition needs a model without LayerNorm (LN mixes E and P non-linearly); "
            f"this tower has normalization_type={model.cfg.normalization_type!r}"
        )
    if model.cfg.positional == "rope":
        raise ValueError("the E/P/B score terms assume additive positional embeddings; this tower uses RoPE")


def _head_mask(heads: Sequence[int], n_heads: int, like: torch.Tensor) -> torch.Tensor:
    """1.0 for the chosen heads, 0.0 elsewhere, [n_heads]."""
    mask = torch.zeros(n_heads, dtype=like.dtype, device=like.device)
    mask[list(heads)] = 1
    return mask


def _score_terms(
    model: HookedEncoder, E: torch.Tensor, P: torch.Tensor, layer: int, heads: Sequence[int] | None = None
) -> dict[str, Scores]:
    attn = model.blocks[layer].attn
    W_Q, W_K, b_Q, b_K = attn.W_Q, attn.W_K, attn.b_Q, attn.b_K
    scale = model.cfg.attn_scale
    qE = torch.einsum("bpm,hmd->bhpd", E, W_Q)
    qP = torch.einsum("bpm,hmd->bhpd", P, W_Q)
    kE = torch.einsum("bpm,hmd->bhpd", E, W_K)
    kP = torch.einsum("bpm,hmd->bhpd", P, W_K)
    qB = b_Q[None, :, None, :].expand_as(qE)
    kB = b_K[None, :, None, :].expand_as(kE)
    parts_q = {"E": qE, "P": qP, "B": qB}
    parts_k = {"E": kE, "P": kP, "B": kB}
    out = {}
    for name in SCORE_TERMS:
        t = parts_q[name[0]] @ parts_k[name[1]].transpose(-1, -2) / scale
        if heads is not None:
            t = t * _head_mask(heads, t.shape[1], t)[None, :, None, None]
        out[name] = t
    return out


def attention_terms(model: HookedEncoder, cache: ActivationCache, layer: int = 0) -> dict[str, Scores]:
    """The nine score terms of ``layer`` from a cache; they sum to ``cache["attn_scores", layer]`` (before masking).

    Needs ``hook_embed`` (and ``hook_pos_embed`` for learned positions) in the cache.
    """
    _check_supported(model, layer)
    E = cache["hook_embed"]
    P = cache["hook_pos_embed"] if "hook_pos_embed" in cache else torch.zeros_like(E)
    if E.ndim == 2:  # cache without batch dim
        E, P = E[None], P[None]
        return {k: v[0] for k, v in _score_terms(model, E, P, layer).items()}
    return _score_terms(model, E, P, layer)


def ablate_terms(
    model: HookedEncoder, terms: Sequence[str], layer: int = 0, heads: Sequence[int] | None = None
) -> list[tuple[str, Callable]]:
    """Forward hooks that remove ``terms`` (any of ``SCORE_TERMS`` and ``"VP"``) from ``layer``'s attention.

    Score terms are subtracted from ``hook_attn_scores`` (the softmax then renormalises); ``VP`` subtracts
    ``P W_V`` from ``hook_v``. Only ``heads`` (default: all) are changed. Use with ``run_with_hooks``,
    ``model.hooks(...)`` or ``evaluate(..., vision_hooks=...)``.
    """
    _check_supported(model, layer)
    terms = list(dict.fromkeys(terms))
    bad = [t for t in terms if t not in SCORE_TERMS + VALUE_TERMS]
    if bad:
        raise ValueError(f"unknown terms {bad}; known: {list(SCORE_TERMS + VALUE_TERMS)}")
    if heads is not None:
        bad_h = [h for h in heads if not 0 <= h < model.cfg.n_heads]
        if bad_h:
            raise ValueError(f"heads {bad_h} out of range 0..{model.cfg.n_heads - 1}")
    store: dict[str, torch.Tensor] = {}

    def save_embed(act: torch.Tensor, hook: HookPoint) -> None:
        store["E"] = act

    def save_pos(act: torch.Tensor, hook: HookPoint) -> None:
        store["P"] = act

    def fix_scores(scores: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        E = store["E"]
        P = store.get("P", torch.zeros_like(E))
        parts = _score_terms(model, E, P, layer, heads)
        removed = sum(parts[t] for t in terms if t in SCORE_TERMS)
        return scores - removed

    def fix_values(v: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        P = store.get("P")
        if P is None:
            return v
        vp = torch.einsum("bpm,hmd->bphd", P, model.blocks[layer].attn.W_V)
        if heads is not None:
            vp = vp * _head_mask(heads, v.shape[2], v)[None, None, :, None]
        return v - vp

    hooks: list[tuple[str, Callable]] = [("hook_embed", save_embed)]
    if model.cfg.positional == "learned":
        hooks.append(("hook_pos_embed", save_pos))
    if any(t in SCORE_TERMS for t in terms):
        hooks.append((f"blocks.{layer}.attn.hook_attn_scores", fix_scores))
    if "VP" in terms:
        hooks.append((f"blocks.{layer}.attn.hook_v", fix_values))
    return hooks
