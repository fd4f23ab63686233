"""Token / positional / bias terms of attention scores, and their ablation as hooks (Paper Sec. 5, App. D, H).

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

``VP`` (App. H) is the positional part ``P W_V`` of the values.

**Beyond layer 0 without LN** (see ``hooked_clip1d.analysis.interventions.decompose``), a fourth part R ("rest") holds
everything else in the attention input: earlier layers' outputs and, with LayerNorm, the LN bias ``ln1.b``. This
adds the terms ER, RE, PR, RP, BR, RB, RR, and E / P mean the *direct* path of the embeddings:

- **Later layers** (``layer > 0``): ``R = resid_pre - E - P`` from the live forward pass. Ablating the P terms
  there removes only the direct positional path; position information carried by earlier layers stays in R.
- **LayerNorm** (``ln_scale="live"``, opt-in): LN is linear once its scale is fixed, so each part becomes
  ``(part - mean) / s * w`` with ``s`` the live ``ln1.hook_scale`` of the same forward pass (TL's
  ``apply_ln_to_stack`` convention); the scale itself is not recomputed after the ablation. Without the opt-in a
  LayerNorm tower is refused, because "the EP term" is only defined up to that convention.
- **RoPE**: every part is rotated by its position before the product, so E / B / R terms can be ablated; there
  is no additive P, so P terms and VP are refused. With ``positional="none"`` P is zero and P terms are no-ops.

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

from hooked_clip1d.analysis.hooks import Hook, check_indices
from hooked_clip1d.analysis.interventions.decompose import (
    REST_TERMS,
    SCORE_TERMS,
    TOKEN_POSITION_TERMS,
    bias_parts,
    check_layer,
    decompose_attention_scores,
    project_components,
    rotate,
)
from hooked_clip1d.model.encoders import HookedEncoder
from hooked_clip1d.model.terms import VALUE_TERMS, term_scores
from hooked_clip1d.settings.checks import repeated

__all__ = [
    "ABLATABLE_TERMS",
    "POSITIONAL_TERMS",
    "REST_TERMS",
    "SCORE_TERMS",
    "VALUE_TERMS",
    "ablate_terms",
    "attention_terms",
]

#: every term name ``ablate_terms`` accepts
ABLATABLE_TERMS = TOKEN_POSITION_TERMS + VALUE_TERMS
#: the position-dependent terms of Fig. 17 ("all position-dependent terms from attention and value")
POSITIONAL_TERMS = ("EP", "PE", "PP", "BP", "PB", "VP")

Scores = Float[torch.Tensor, "batch head_index query_pos key_pos"]


def attention_terms(
    model: HookedEncoder, cache: ActivationCache, layer: int = 0
) -> dict[str, Float[torch.Tensor, "*batch head_index query_pos key_pos"]]:
    """The token / position / bias score terms of ``layer`` from a cache; they sum to ``cache["attn_scores", layer]``
    (before the causal mask of the text tower).

    At layer 0 without LayerNorm and with learned positions: the nine ``SCORE_TERMS``. Otherwise the generalisation
    of ``decompose.ScoreDecomposition.token_position_terms`` (R terms; no P terms with RoPE or no positions).
    Needs ``hook_embed`` (and ``hook_pos_embed`` for learned positions) in the cache, plus what
    ``decompose_attention_scores`` needs at later layers / with LN. A cache without batch dim gives terms without one.
    """
    single = not cache.has_batch_dim
    terms = decompose_attention_scores(model, cache, layer).token_position_terms()
    return {k: v[0] for k, v in terms.items()} if single else terms


def _head_mask(heads: Sequence[int], n_heads: int, like: torch.Tensor) -> torch.Tensor:
    """1.0 for the chosen heads, 0.0 elsewhere, [n_heads]."""
    mask = torch.zeros(n_heads, dtype=like.dtype, device=like.device)
    mask[list(heads)] = 1
    return mask


def _validate(
    model: HookedEncoder, terms: Sequence[str], layer: int, heads: Sequence[int] | None, ln_scale: str | None
) -> list[str]:
    check_layer(model, layer)
    cfg = model.cfg
    if isinstance(terms, str):
        raise TypeError(f"terms must be a list of term names, e.g. [{terms!r}], not a string")
    terms = list(terms)
    twice = repeated(terms)
    if twice:  # the mean / resample ablations would add a listed term's replacement once per listing
        raise ValueError(f"terms listed twice: {twice}")
    bad = [t for t in terms if t not in ABLATABLE_TERMS]
    if bad:
        raise ValueError(f"unknown terms {bad}; known: {list(ABLATABLE_TERMS)}")
    rest = [t for t in terms if "R" in t]
    if layer == 0 and rest:  # layer 0's input is E + P (+ bias): the rest R is 0 there, so they removed nothing
        raise ValueError(
            f"terms {rest} do not exist at layer 0: R is the residual's part written by earlier layers, and layer 0 "
            "has none"
        )
    gone = [t for t in terms if layer == 0 and t in (cfg.ablated_terms or ())]
    if gone:
        raise ValueError(
            f"this tower already removes {gone} from layer 0 in its own forward pass (cfg.ablated_terms="
            f"{tuple(cfg.ablated_terms)}): ablating them again would subtract them twice"
        )
    if ln_scale not in (None, "live"):
        raise ValueError(f"ln_scale must be None or 'live', got {ln_scale!r}")
    if cfg.normalization_type is not None and ln_scale != "live":
        raise ValueError(
            f"this tower has LayerNorm (normalization_type={cfg.normalization_type!r}): LN mixes E and P "
            "non-linearly, so a term is only defined with a fixed LN scale; pass ln_scale='live' to use the live "
            "scale of each forward pass (TL's apply_ln_to_stack convention)"
        )
    if cfg.positional == "rope":
        with_p = [t for t in terms if "P" in t]
        if with_p:
            raise ValueError(
                f"terms {with_p} need an additive positional embedding P; this tower uses RoPE (position enters "
                "by rotating q and k), so only E, B and R terms can be ablated"
            )
    if heads is not None:
        check_indices(heads, cfg.n_heads, "heads", empty_ok=False)
    return terms


def ablate_terms(
    model: HookedEncoder,
    terms: Sequence[str],
    layer: int = 0,
    heads: Sequence[int] | None = None,
    *,
    ln_scale: str | None = None,
) -> list[Hook]:
    """Forward hooks that remove ``terms`` (any of ``ABLATABLE_TERMS``) from ``layer``'s attention.

    Score terms are subtracted from ``hook_attn_scores`` (the softmax then renormalises); ``VP`` subtracts the
    positional part of the values from ``hook_v``. Only ``heads`` (default: all) are changed. Works at any layer,
    with LayerNorm when ``ln_scale="live"`` and with RoPE for E/B/R terms (module docstring). Use with
    ``run_with_hooks``, ``model.hooks(...)`` or ``evaluate(..., vision_hooks=...)``; hooks for several layers can
    be concatenated.

    (``EncoderConfig.ablated_terms`` makes a model remove terms itself, in every forward pass; see
    ``components.Attention.ablated_scores``. Both sum the terms with ``model.terms.term_scores``, from one table of
    term names.)

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("full", n_labels=5, n_layers=2), seed=0).eval()
        >>> img = m.vision.to_tokens("C 1 . . 2 . . . . . .")
        >>> hooks = ablate_terms(m.vision, ["EP", "PE", "PP", "BP", "VP"], layer=1, ln_scale="live")
        >>> m.vision.run_with_hooks(img, fwd_hooks=hooks).shape
        torch.Size([1, 128])
    """
    terms = _validate(model, terms, layer, heads, ln_scale)
    cfg = model.cfg
    score_terms = [t for t in terms if t in TOKEN_POSITION_TERMS]
    ln = cfg.normalization_type == "LN"
    need_rest = any("R" in t for t in score_terms)
    store: dict[str, torch.Tensor] = {}

    def saver(key: str) -> Callable:
        def save(act: torch.Tensor, hook: HookPoint) -> None:
            store[key] = act

        return save

    def parts(side: str, groups: set[str]) -> dict[str, torch.Tensor]:
        """Each group's share of q or k, [batch, pos, head, d_head] (through LN, rotated)."""
        E = store["E"]
        P = store.get("P")
        scale = store.get("scale")
        consts = bias_parts(model, layer, side)
        out = {}
        for g in groups:
            if g == "E":
                x = project_components(model, layer, E, side, scale)
            elif g == "P":
                x = project_components(model, layer, P if P is not None else torch.zeros_like(E), side, scale)
            elif g == "R":
                rest = store["resid"] - E - (P if P is not None else 0.0)
                x = project_components(model, layer, rest, side, scale)
                if "ln1_b" in consts:
                    x = x + consts["ln1_b"]
            else:  # B
                x = consts[f"b_{side.upper()}"].expand(E.shape[0], E.shape[1], -1, -1)
            out[g] = rotate(model, layer, x)
        return out

    def fix_scores(scores: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        qs = parts("q", {t[0] for t in score_terms})
        ks = parts("k", {t[1] for t in score_terms})
        removed = term_scores(qs, ks, score_terms, cfg.attn_scale)
        if heads is not None:
            removed = removed * _head_mask(heads, scores.shape[1], scores)[None, :, None, None]
        return scores - removed

    def fix_values(v: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        P = store.get("P")
        if P is None:
            return v
        vp = project_components(model, layer, P, "v", store.get("scale"))
        if heads is not None:
            vp = vp * _head_mask(heads, v.shape[2], v)[None, None, :, None]
        return v - vp

    hooks: list[Hook] = [("hook_embed", saver("E"))]
    if cfg.positional == "learned":
        hooks.append(("hook_pos_embed", saver("P")))
    if need_rest:
        hooks.append((f"blocks.{layer}.hook_resid_pre", saver("resid")))
    if ln and terms:
        hooks.append((f"blocks.{layer}.ln1.hook_scale", saver("scale")))
    if score_terms:
        hooks.append((f"blocks.{layer}.attn.hook_attn_scores", fix_scores))
    if "VP" in terms:
        hooks.append((f"blocks.{layer}.attn.hook_v", fix_values))
    return hooks
