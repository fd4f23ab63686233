"""Attention-logit decompositions at any layer (Paper Sec. 5, Eq. 1-2, App. D-E; Fig. 5a, 12-14).

The query and key inputs of layer ``l`` are linear in the residual stream ``resid_pre[l]``, which is a sum of
components, exactly as TL's ``ActivationCache.decompose_resid`` / ``stack_head_results`` split it:

``embed`` (E), ``pos_embed`` (P, learned positions only), for every earlier layer ``i``: one output per head
``L{i}H{h}`` (``z @ W_O``, or ``hook_result`` when cached), the attention output bias ``{i}_b_O`` and the MLP
output ``{i}_mlp_out`` (with its ``b_out``; MLP models only).

The query side gets two more, input-independent components: ``ln1_b`` (``ln1.b @ W_Q``, LayerNorm models only) and
``b_Q``; the key side likewise ``ln1_b`` and ``b_K``. Every pre-softmax score is therefore a sum of bilinear terms

    score[q_pos, k_pos] = sum over (a, c) of  q_a[q_pos] . k_c[k_pos] / sqrt(d_head)

and ``ScoreDecomposition.terms()[a, c]`` summed over all ``(a, c)`` reproduces ``hook_attn_scores`` to float
tolerance (this package's encoders, like TL, divide by ``sqrt(d_head)`` *before* ``hook_attn_scores``; the
decomposition folds the factor into the query parts, so every term is on the scale of ``hook_attn_scores``).

Conventions:

- **LayerNorm** (``normalization_type="LN"``): ``ln1(x) = (x - mean(x)) / s * w + b`` is linear in ``x`` once
  the scale ``s`` is fixed, so each component ``c`` becomes ``(c - mean(c)) / s * w`` with ``s`` the cached
  ``blocks.{l}.ln1.hook_scale`` of the real forward pass, as TL's ``apply_ln_to_stack`` does (TL assumes folded
  ``w``/``b``; this package's LN weights are not folded, so ``w`` is applied here and ``b`` is its own component).
  Terms are therefore exact for that forward pass, but a term is *not* what the score would be if only that
  component were present (the scale would change).
- **RoPE** (``positional="rope"``): the rotation of position ``p`` is linear, so every query/key component is
  rotated by its own position before the dot product; the terms are exact, and the bias components become
  position dependent (App. I's ``Pi_bias``). There is no ``pos_embed`` component.
- **Causal (text) towers**: terms are not masked; ``ScoreDecomposition.scores()`` applies the mask (``-inf`` above
  the diagonal) exactly as ``hook_attn_scores`` holds it.
- The cache must come from an unedited forward pass in eval mode (dropout off). With ``check=True`` (default)
  the summed query/key components are compared with the cached ``hook_q``/``hook_k`` and a mismatch raises.

Groupings used by the paper (``ScoreDecomposition.weight_bias_terms`` / ``token_position_terms``):

========  ================  ==============================================================================
key       paper             meaning
========  ================  ==============================================================================
``XWX``   XW_QK Xᵀ          X = the attention input ``ln1(resid_pre)`` (all residual components + ``ln1_b``)
``XWB``   X W_Qᵀ B_K        query from X, key bias ``b_K`` (constant along a row: no effect on the softmax)
``BWX``   B_Qᵀ W_K Xᵀ       query bias ``b_Q``, key from X
``BB``    B_Qᵀ B_K          both biases (constant)
``EP``    E W_QK Pᵀ         query from ``embed``, key from ``pos_embed``; the same for EE, PE, PP, BE, BP, EB,
                            PB, BB with B = ``b_Q``/``b_K``. R ("rest") is every other component (earlier
                            layers' outputs and ``ln1_b``), giving ER, RE, PR, RP, BR, RB, RR at later layers
                            or with LN. At layer 0 without LN, R is empty and the nine terms are Eq. 2 + App. D.
========  ================  ==============================================================================

At layer ``l > 0`` E and P are only the *direct* path of the embeddings through the residual stream; position
information that earlier layers moved around is inside R.

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, n_layers=2), seed=0).eval()
    >>> img = m.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . . 4 . . ."])
    >>> _, cache = m.vision.run_with_cache(img)
    >>> dec = decompose_attention_scores(m.vision, cache, layer=1)
    >>> dec.q_labels
    ('embed', 'pos_embed', 'L0H0', 'L0H1', 'L0H2', 'L0H3', '0_b_O', 'b_Q')
    >>> torch.allclose(dec.terms().sum((0, 1)), cache["attn_scores", 1], atol=1e-4)
    True
    >>> wb = dec.weight_bias_terms()
    >>> torch.allclose(sum(wb.values()), cache["attn_scores", 1], atol=1e-4)
    True
    >>> shares = row_std_shares(wb, query_pos=0)  # Fig. 13: share of each term in the CLS-row std
    >>> shares["share"].shape  # [term, head]
    torch.Size([4, 4])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from transformer_lens import ActivationCache

from hooked_clip1d.analysis.hooks import check_tower
from hooked_clip1d.model import functional
from hooked_clip1d.model.encoders import HookedEncoder
from hooked_clip1d.model.terms import (  # the nine layer-0 terms, Eq. 2 and App. D (one table, the model's)
    SCORE_TERMS,
    VALUE_TERMS,
)
from hooked_clip1d.settings.checks import repeated

#: terms with R, the rest of the residual stream (earlier layers' outputs, LayerNorm bias): later layers / LN
REST_TERMS = ("ER", "RE", "PR", "RP", "BR", "RB", "RR")
#: every token/position term name, in display order
TOKEN_POSITION_TERMS = SCORE_TERMS + REST_TERMS
#: the weight-bias terms of Eq. 1
WEIGHT_BIAS_TERMS = ("XWX", "XWB", "BWX", "BB")
#: matplotlib mathtext labels of every term name
TERM_LABELS = {
    "XWX": r"$XW_{QK}X^T$",
    "XWB": r"$XW_Q^TB_K$",
    "BWX": r"$B_Q^TW_KX^T$",
    "BB": r"$B_Q^TB_K$",
    **{t: rf"${t[0]}W_{{QK}}{t[1]}^T$" for t in TOKEN_POSITION_TERMS if t != "BB"},
}

Scores = Float[torch.Tensor, "batch head_index query_pos key_pos"]
Components = Float[torch.Tensor, "component batch pos d_model"]


# ---- residual components -----------------------------------------------------------------------------------------
def check_layer(model: HookedEncoder, layer: int, allow_final: bool = False) -> None:
    """Raise ``ValueError`` unless ``layer`` of ``model`` can be decomposed (a pre-LN tower, a layer that exists;
    ``allow_final``: also the residual after the last layer): what every score decomposition checks first.

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> from hooked_clip1d.model.encoders import HookedVisionEncoder
        >>> check_layer(HookedVisionEncoder(VisionConfig(n_labels=5)), 0)
    """
    check_tower(model)
    if model.cfg.normalization_type == "LN" and model.cfg.ln_position == "post":
        raise ValueError(
            "the score decompositions assume pre-LN blocks (the residual stream a sum of the embeddings and the "
            "sublayer outputs, ln1 before each attention); this tower is post-LN (ln_position='post')"
        )
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"layer must be an int, got {type(layer).__name__}")
    n = model.cfg.n_layers
    top = n if allow_final else n - 1
    if not 0 <= layer <= top:
        have = "layer 0 only" if n == 1 else f"layers 0..{n - 1}"
        raise ValueError(f"layer {layer} does not exist: this tower has {n} layer(s) ({have})")


def _check_eval(model: HookedEncoder) -> None:
    if model.training and model.cfg.dropout > 0:
        raise ValueError(
            "the decomposition needs the tower in eval mode (call model.eval()): in train mode dropout makes the "
            "cached head outputs differ from what was added to the residual stream"
        )


def _get(cache: ActivationCache, name: str) -> torch.Tensor:
    if not isinstance(cache, ActivationCache) and hasattr(cache, "vision") and hasattr(cache, "text"):
        raise TypeError(
            "this is the whole CLIP's cache (CLIP1D.run_with_cache): pass the tower's own, cache.vision or cache.text"
        )
    if name not in cache:
        raise KeyError(
            f"the cache has no {name!r}; run run_with_cache without a names_filter (or keep that hook) "
            "to decompose the attention scores"
        )
    t = cache[name]
    return t if cache.has_batch_dim else t.unsqueeze(0)


@torch.no_grad()
def residual_components(model: HookedEncoder, cache: ActivationCache, layer: int) -> tuple[Components, list[str]]:
    """The residual stream before ``layer`` split into components, with their labels (module docstring).

    Like TL's ``decompose_resid`` with each earlier attention layer split per head (``stack_head_results``) and its
    ``b_O`` separate. The components sum to ``blocks.{layer}.hook_resid_pre`` (``layer == n_layers``: the final
    ``hook_resid_post``, before ``ln_final``). A cache without batch dim gets a batch dim of 1.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("full", n_labels=5, n_layers=2, n_heads=2), seed=0).eval()
        >>> _, cache = m.vision.run_with_cache(m.vision.to_tokens("C 1 . . 2 . . . . . ."))
        >>> comps, labels = residual_components(m.vision, cache, 1)
        >>> labels
        ['embed', 'pos_embed', 'L0H0', 'L0H1', '0_b_O', '0_mlp_out']
        >>> torch.allclose(comps.sum(0), cache["resid_pre", 1], atol=1e-4)
        True
    """
    check_layer(model, layer, allow_final=True)
    if layer > 0:  # dropout acts on sublayer outputs only: layer 0's input E + P is the same in train mode
        _check_eval(model)
    cfg = model.cfg
    embed = _get(cache, "hook_embed")
    comps, labels = [embed], ["embed"]
    if cfg.positional == "learned":
        comps.append(_get(cache, "hook_pos_embed"))
        labels.append("pos_embed")
    for i in range(layer):
        attn = model.blocks[i].attn
        name = f"blocks.{i}.attn.hook_result"
        if name in cache:
            per_head = _get(cache, name)  # [b, p, h, dm]
        else:
            z = _get(cache, f"blocks.{i}.attn.hook_z")
            per_head = torch.einsum("bphd,hdm->bphm", z, attn.W_O)
        kept = getattr(cfg, "heads_kept", None)
        if kept is not None:  # pruned heads add nothing (harmless if their z is already zero)
            per_head = per_head * torch.tensor(kept(i), dtype=per_head.dtype, device=per_head.device)[:, None]
        for h in range(cfg.n_heads):
            comps.append(per_head[:, :, h])
            labels.append(f"L{i}H{h}")
        comps.append(attn.b_O.expand_as(embed))
        labels.append(f"{i}_b_O")
        if not cfg.attn_only:
            comps.append(_get(cache, f"blocks.{i}.hook_mlp_out"))
            labels.append(f"{i}_mlp_out")
    return torch.stack(comps), labels


# ---- projection of components through ln1 and W_Q / W_K / W_V ----------------------------------------------------
def _ln_scale(model: HookedEncoder, layer: int, scale: torch.Tensor | None) -> torch.Tensor | None:
    if model.cfg.normalization_type != "LN":
        return None
    if scale is None:
        raise ValueError(f"this tower has LayerNorm: the decomposition needs blocks.{layer}.ln1.hook_scale")
    return scale


def project_components(
    model: HookedEncoder,
    layer: int,
    comps: Float[torch.Tensor, "*lead batch pos d_model"],
    side: str,
    ln_scale: torch.Tensor | None = None,
) -> Float[torch.Tensor, "*lead batch pos head_index d_head"]:
    """Each residual component's share of the layer's query / key / value (``side`` "q", "k" or "v").

    Through ``ln1`` with the given (live / cached) scale when the tower has LayerNorm: ``(c - mean c) / s * w``;
    the LN bias and ``b_Q``/``b_K``/``b_V`` are *not* included (see ``bias_parts``), nor is the RoPE rotation.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> _, cache = m.vision.run_with_cache(m.vision.to_tokens("C 1 . . 2 . . . . . ."))
        >>> q = project_components(m.vision, 0, cache["resid_pre", 0][None], "q")[0]
        >>> torch.allclose(q + m.vision.blocks[0].attn.b_Q, cache["q", 0], atol=1e-5)
        True
    """
    if side not in ("q", "k", "v"):
        raise ValueError(f"side must be 'q', 'k' or 'v', got {side!r}")
    block = model.blocks[layer]
    W = {"q": block.attn.W_Q, "k": block.attn.W_K, "v": block.attn.W_V}[side]
    scale = _ln_scale(model, layer, ln_scale)
    if scale is not None:
        comps = (comps - comps.mean(-1, keepdim=True)) * block.ln1.w
    out = torch.einsum("...m,hmd->...hd", comps, W)
    if scale is not None:
        b, p = out.shape[-4], out.shape[-3]
        out = out / scale.reshape(b, p, -1, 1)  # [b, p, 1 | h, 1]: per-head scales with split q/k/v inputs
    return out


def bias_parts(model: HookedEncoder, layer: int, side: str) -> dict[str, Float[torch.Tensor, "head_index d_head"]]:
    """The input-independent parts of the layer's query / key / value: ``ln1_b`` (LN only) and ``b_Q``/``b_K``/``b_V``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
        >>> list(bias_parts(m.vision, 0, "k"))
        ['b_K']
    """
    block = model.blocks[layer]
    W = {"q": block.attn.W_Q, "k": block.attn.W_K, "v": block.attn.W_V}[side]
    out = {}
    if model.cfg.normalization_type == "LN":
        out["ln1_b"] = torch.einsum("m,hmd->hd", block.ln1.b, W)
    out[f"b_{side.upper()}"] = {"q": block.attn.b_Q, "k": block.attn.b_K, "v": block.attn.b_V}[side]
    return out


def rotate(
    model: HookedEncoder, layer: int, x: Float[torch.Tensor, "*lead batch pos head_index d_head"]
) -> torch.Tensor:
    """Apply the layer's RoPE rotation (position ``p`` rotates row ``p``) to query/key parts; identity otherwise.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
        >>> x = torch.randn(2, 1, 11, 4, 32)
        >>> torch.equal(rotate(m.vision, 0, x), x)  # learned positions: no rotation
        True
    """
    if model.cfg.positional != "rope":
        return x
    attn = model.blocks[layer].attn
    p, h, d = x.shape[-3:]
    flat = x.reshape(-1, p, h, d)
    return functional.rotate(flat, attn.rotary_sin[:p, None], attn.rotary_cos[:p, None]).reshape(x.shape)


# ---- the decomposition ------------------------------------------------------------------------------------------
def _positions(sel: int | Sequence[int] | slice | None, n: int, what: str) -> torch.Tensor:
    idx = torch.arange(n)
    if sel is None:
        return idx
    if isinstance(sel, bool):
        raise TypeError(f"{what} must be an int, a sequence of ints or a slice, got a bool")
    if isinstance(sel, int):
        if not -n <= sel < n:
            raise ValueError(f"{what}={sel} is out of range for {n} positions")
        return idx[[sel]]
    if isinstance(sel, slice):
        out = idx[sel]
    else:
        sel = list(sel)
        bad = [s for s in sel if isinstance(s, bool) or not isinstance(s, int) or not -n <= s < n]
        if bad:
            raise ValueError(f"{what} {bad} out of range for {n} positions")
        out = idx[sel]
    if len(out) == 0:
        raise ValueError(f"{what} selects no position")
    if len(set(out.tolist())) != len(out):  # a position listed twice weighed twice in the std
        raise ValueError(f"{what} lists a position twice (-1 and n - 1 are one position): {sorted(out.tolist())}")
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class ScoreDecomposition:
    """Per-component query and key parts of one layer's attention scores (see the module docstring).

    Attributes:
        q: query parts ``[q_component, batch, head_index, query_pos, d_head]``, already divided by sqrt(d_head)
            and rotated (RoPE).
        k: key parts ``[k_component, batch, head_index, key_pos, d_head]``.
        q_labels / k_labels: component names (residual components, then ``ln1_b`` (LN), then ``b_Q`` / ``b_K``).
        layer: the layer decomposed.
        query_positions: the query positions kept (``hook_attn_scores[..., query_positions, :]``).
        causal: the tower masks keys after the query (text tower).
        removed: (query component, key component) pairs the model removes from these scores in its own forward
            (``cfg.ablated_terms`` at layer 0, e.g. EP: ``("embed", "pos_embed")``): every term, the scores and the
            groups leave them out, so the terms sum to the scores the model computes.
    """

    q: Float[torch.Tensor, "q_component batch head_index query_pos d_head"]
    k: Float[torch.Tensor, "k_component batch head_index key_pos d_head"]
    q_labels: tuple[str, ...]
    k_labels: tuple[str, ...]
    layer: int
    query_positions: Int[torch.Tensor, " query_pos"]
    causal: bool
    removed: tuple[tuple[str, str], ...] = ()

    def _removed_product(self, qi: list[int], ki: list[int]) -> Scores | None:
        """The sum of the removed pairs among query components ``qi`` and key components ``ki``, or None."""
        pairs = [(self.q_labels.index(a), self.k_labels.index(b)) for a, b in self.removed]
        pairs = [(a, b) for a, b in pairs if a in qi and b in ki]
        if not pairs:
            return None
        return sum(self.q[a] @ self.k[b].transpose(-1, -2) for a, b in pairs)  # type: ignore[return-value]

    # ---- selection ----
    def _index(self, side: str, names: str | Sequence[str]) -> list[int]:
        labels = self.q_labels if side == "q" else self.k_labels
        names = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in names if n not in labels]
        if unknown:
            raise ValueError(f"unknown {side} components {unknown}; this decomposition has {list(labels)}")
        if len(set(names)) != len(names):
            raise ValueError(f"{side} components listed twice: {names}")
        return [labels.index(n) for n in names]

    def term(self, q: str | Sequence[str], k: str | Sequence[str]) -> Scores:
        """The summed contribution of query components ``q`` with key components ``k``, [batch, head, q, k].

        Unmasked (also for causal towers); bilinearity lets groups be summed before the product.
        """
        qi, ki = self._index("q", q), self._index("k", k)
        out = self.q[qi].sum(0) @ self.k[ki].sum(0).transpose(-1, -2)
        gone = self._removed_product(qi, ki)
        return out if gone is None else out - gone

    def terms(self) -> Float[torch.Tensor, "q_component k_component batch head_index query_pos key_pos"]:
        """Every (query component, key component) term; ``terms().sum((0, 1))`` are the unmasked scores (a pair the
        model removes itself, ``removed``, is 0)."""
        out = torch.einsum("abhqd,cbhkd->acbhqk", self.q, self.k)
        for a, b in self.removed:
            out[self.q_labels.index(a), self.k_labels.index(b)] = 0
        return out

    def scores(self) -> Scores:
        """The sum of all terms with the causal mask applied: equals ``hook_attn_scores[..., query_positions, :]``."""
        s = self.term(list(self.q_labels), list(self.k_labels))
        if self.causal:
            keys = torch.arange(s.shape[-1], device=s.device)
            allowed = keys[None, :] <= self.query_positions.to(s.device)[:, None]
            s = torch.where(allowed, s, torch.full_like(s, -torch.inf))
        return s

    def grouped(
        self, q_groups: Mapping[str, Sequence[str]], k_groups: Mapping[str, Sequence[str]]
    ) -> dict[str, Scores]:
        """Terms between groups of components, keyed ``q_group + k_group``; empty groups are skipped.

        Every component must be in exactly one group of its side, so the terms always sum to the scores.
        """
        out = {}
        for side, groups, labels in (("q", q_groups, self.q_labels), ("k", k_groups, self.k_labels)):
            listed = [c for g in groups.values() for c in g]
            missing = sorted(set(labels) - set(listed))
            twice = repeated(listed)
            if missing or twice:
                raise ValueError(
                    f"{side} groups must cover every component exactly once; missing {missing}, repeated {twice}"
                )
        for qn, qg in q_groups.items():
            for kn, kg in k_groups.items():
                if qg and kg:
                    out[qn + kn] = self.term(qg, kg)
        return out

    def weight_bias_terms(self) -> dict[str, Scores]:
        """Eq. 1: ``XWX``, ``XWB``, ``BWX``, ``BB`` (X = attention input incl. the LN bias, B = b_Q / b_K)."""
        xq = [c for c in self.q_labels if c != "b_Q"]
        xk = [c for c in self.k_labels if c != "b_K"]
        return {
            "XWX": self.term(xq, xk),
            "XWB": self.term(xq, ["b_K"]),
            "BWX": self.term(["b_Q"], xk),
            "BB": self.term(["b_Q"], ["b_K"]),
        }

    def token_position_groups(self, side: str) -> dict[str, list[str]]:
        """The E / P / B / R grouping of one side's components (module docstring); empty groups are omitted."""
        labels = self.q_labels if side == "q" else self.k_labels
        bias = "b_Q" if side == "q" else "b_K"
        groups = {
            "E": [c for c in labels if c == "embed"],
            "P": [c for c in labels if c == "pos_embed"],
            "B": [c for c in labels if c == bias],
        }
        groups["R"] = [c for c in labels if c not in ("embed", "pos_embed", bias)]
        return {g: v for g, v in groups.items() if v}

    def token_position_terms(self) -> dict[str, Scores]:
        """Eq. 2 generalised: EE, EP, PE, PP, BE, BP, EB, PB, BB, and the R terms where R is non-empty."""
        raw = self.grouped(self.token_position_groups("q"), self.token_position_groups("k"))
        return {t: raw[t] for t in TOKEN_POSITION_TERMS if t in raw}


@torch.no_grad()
def decompose_attention_scores(
    model: HookedEncoder,
    cache: ActivationCache,
    layer: int = 0,
    *,
    query_pos: int | Sequence[int] | slice | None = None,
    check: bool = True,
) -> ScoreDecomposition:
    """Split ``layer``'s attention scores over (query component, key component) pairs (module docstring).

    Args:
        model: one tower (``clip.vision`` or ``clip.text``), in eval mode.
        cache: its ``run_with_cache`` cache of an unedited forward pass (needs ``hook_embed``, ``hook_pos_embed``,
            earlier layers' ``hook_z`` (or ``hook_result``) and ``hook_mlp_out``, and ``ln1.hook_scale`` with LN).
        layer: any layer of the tower.
        query_pos: keep only these query rows (e.g. ``0`` for the CLS row) to save memory.
        check: compare the summed parts with the cached ``hook_q`` / ``hook_k`` and raise on a mismatch.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("full", n_labels=5, n_layers=2), seed=0).eval()
        >>> _, cache = m.vision.run_with_cache(m.vision.to_tokens("C 1 . . 2 . . . . . ."))
        >>> dec = decompose_attention_scores(m.vision, cache, layer=1, query_pos=0)
        >>> dec.scores().shape  # the CLS row of every head
        torch.Size([1, 4, 1, 11])
        >>> torch.allclose(dec.scores(), cache["attn_scores", 1][:, :, :1], atol=1e-4)
        True
        >>> sorted(dec.token_position_terms())
        ['BB', 'BE', 'BP', 'BR', 'EB', 'EE', 'EP', 'ER', 'PB', 'PE', 'PP', 'PR', 'RB', 'RE', 'RP', 'RR']
    """
    check_layer(model, layer)
    comps, labels = residual_components(model, cache, layer)  # [C, b, p, dm]
    scale = _get(cache, f"blocks.{layer}.ln1.hook_scale") if model.cfg.normalization_type == "LN" else None
    n_pos = comps.shape[2]
    qpos = _positions(query_pos, n_pos, "query_pos")
    sides = {}
    for side in ("q", "k"):
        parts = project_components(model, layer, comps, side, scale)  # [C, b, p, h, d]
        extra = bias_parts(model, layer, side)
        parts = torch.cat([parts, torch.stack(list(extra.values()))[:, None, None].expand(-1, *parts.shape[1:])])
        if check:
            name = f"blocks.{layer}.attn.hook_{side}"
            if name in cache:
                want, got = _get(cache, name), parts.sum(0)
                tol = 1e-4 * max(1.0, float(want.abs().max()))
                if not torch.allclose(got, want, rtol=1e-3, atol=tol):
                    err = float((got - want).abs().max())
                    raise ValueError(
                        f"the residual components do not reproduce the cached {name} (max error {err:.3g}): the cache "
                        "must come from an unedited forward pass in eval mode (hooks that edit the residual, q/k "
                        "inputs or LN scale break the decomposition); pass check=False to skip this check"
                    )
        parts = rotate(model, layer, parts)
        sides[side] = (parts, tuple(labels + list(extra)))
    q, q_labels = sides["q"]
    k, k_labels = sides["k"]
    q = q[:, :, qpos.to(q.device)] / model.cfg.attn_scale  # [C, b, qp, h, d]
    return ScoreDecomposition(
        q=q.transpose(2, 3).contiguous(),
        k=k.transpose(2, 3).contiguous(),
        q_labels=q_labels,
        k_labels=k_labels,
        layer=layer,
        query_positions=qpos,
        causal=model.cfg.attention_dir == "causal",
        removed=_removed_pairs(model, layer, q_labels, k_labels),
    )


def _removed_pairs(
    model: HookedEncoder, layer: int, q_labels: Sequence[str], k_labels: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """The (query component, key component) pairs the tower removes from ``layer``'s scores itself: its layer-0
    ``cfg.ablated_terms`` (E: ``embed``, P: ``pos_embed``, B: ``b_Q`` / ``b_K``; VP acts on the values)."""
    if layer != 0:
        return ()
    names = {"q": {"E": "embed", "P": "pos_embed", "B": "b_Q"}, "k": {"E": "embed", "P": "pos_embed", "B": "b_K"}}
    out = []
    for t in getattr(model.cfg, "ablated_terms", ()) or ():
        if t in VALUE_TERMS:
            continue
        a, b = names["q"][t[0]], names["k"][t[1]]
        if a in q_labels and b in k_labels:
            out.append((a, b))
    return tuple(out)


# ---- Fig. 13: share of each term in the across-key standard deviation -------------------------------------------
def row_std_shares(
    terms: Mapping[str, Scores],
    query_pos: int = 0,
    key_positions: int | Sequence[int] | slice | None = None,
) -> dict[str, Any]:
    """Per term and head, the across-key standard deviation of one query row (CLS: ``query_pos=0``), Fig. 13.

    For every image the std over key positions of each term's row is taken (population std); ``std`` is its mean
    over images, and ``share`` = ``std / sum over terms of std``: the paper's "the average standard deviation of
    XW_QKXᵀ accounts for 76 % ... of the total" (App. D). Terms constant along a row (``XWB``, ``BB``) get 0, as
    they cannot change the softmax. ``ratio_to_total`` divides instead by the mean std of the summed row (the real
    scores), which can exceed 1 when terms cancel. For causal towers pass ``key_positions=range(query_pos + 1)``.

    Returns:
        ``terms`` (names), ``per_image_std`` [term, batch, head], ``std`` / ``share`` / ``ratio_to_total``
        [term, head], ``total_std`` [head].

    Example:
        >>> t = {"a": torch.tensor([[[[0.0, 1.0, 2.0]]]]), "b": torch.tensor([[[[1.0, 1.0, 1.0]]]])}
        >>> row_std_shares(t)["share"].tolist()
        [[1.0], [0.0]]
    """
    if not terms:
        raise ValueError("row_std_shares needs at least one term")
    names = list(terms)
    shapes = {tuple(t.shape) for t in terms.values()}
    if len(shapes) != 1:
        raise ValueError(f"all terms must have the same shape [batch, head, query, key], got {sorted(shapes)}")
    stack = torch.stack([terms[n] for n in names])  # [T, b, h, q, k]
    if stack.ndim != 5:
        raise ValueError(f"terms must be [batch, head_index, query_pos, key_pos], got shape {tuple(stack.shape[1:])}")
    n_q, n_k = stack.shape[-2:]
    if isinstance(query_pos, bool) or not isinstance(query_pos, int) or not -n_q <= query_pos < n_q:
        raise ValueError(f"query_pos must be an int in -{n_q}..{n_q - 1} (a query row), got {query_pos!r}")
    keys = _positions(key_positions, n_k, "key_positions").to(stack.device)
    if len(keys) < 2:
        raise ValueError("the std across keys needs at least two key positions")
    rows = stack[:, :, :, query_pos][..., keys]  # [T, b, h, k]
    if not torch.isfinite(rows).all():
        raise ValueError("the selected row has non-finite values (masked keys?); restrict key_positions")
    per_image = rows.std(-1, correction=0)  # [T, b, h]
    std = per_image.mean(1)  # [T, h]
    total = rows.sum(0).std(-1, correction=0).mean(0)  # [h]
    denom = std.sum(0, keepdim=True)
    share = torch.where(denom > 0, std / denom.clamp(min=1e-30), torch.zeros_like(std))
    return {
        "terms": names,
        "per_image_std": per_image,
        "std": std,
        "share": share,
        "ratio_to_total": std / total.clamp(min=1e-30),
        "total_std": total,
    }
