"""Transformer components with TransformerLens hook names, weight names and per-head weight shapes.

Each ``HookPoint`` sits on the module that produces its tensor, with the shape beside it, and the forward pass
always uses the hook's return value (``x = self.hook_x(x)``), so any hook can edit any activation. Attention is
computed explicitly (scores -> ``hook_attn_scores`` -> softmax -> ``hook_pattern`` -> ``hook_z``), never through a
fused kernel that would hide the pattern.

Weights use TL's right-multiplying, per-head layout: ``q[..., h, :] = x @ W_Q[h] + b_Q[h]`` with
``W_Q[h, d_model, d_head]`` and ``W_O[h, d_head, d_model]``.

Weight tying (``EncoderConfig.tied_repeats``): a repeated layer is a block of its own (its own hook points, named
by the layer it is, ``blocks.{layer}``, and its own pruned-head mask) whose ``LayerNorm``, ``Attention`` and ``MLP``
hold no parameters: they read those of the block they repeat (``tied_to``), so the state dict, ``parameters()`` and
every optimizer see each weight once (under the first block), and gradients of every application add up there.
"""

from __future__ import annotations

import math
from typing import Any, no_type_check

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import nn
from transformer_lens import FactoredMatrix
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.functional import LN_EPS, layer_norm, rotary_tables, rotate
from hooked_clip1d.model.terms import term_scores

Resid = Float[torch.Tensor, "batch pos d_model"]


def _normal(shape: tuple[int, ...], std: float, gen: torch.Generator | None, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, generator=gen, dtype=dtype) * std)


def _zeros(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.zeros(shape, dtype=dtype))


class _Tieable(nn.Module):
    """A module that may hold no parameters of its own and read those of another module of its class (``tied_to``,
    weight tying). The source is kept outside ``_modules``, so its parameters are counted once, under the source;
    it is read on every access, so ``load_state_dict``, ``.to()`` and ``torch.func.functional_call`` on the source
    reach the repeat as well."""

    def _tie(self, source: nn.Module | None) -> bool:
        """Tie to ``source`` (None: no tying); returns whether this module creates its own parameters."""
        if source is None:
            return True
        if type(source) is not type(self):
            raise TypeError(f"cannot tie a {type(self).__name__} to a {type(source).__name__}")
        self.__dict__["tied_to"] = source
        return False

    @no_type_check  # every parameter and submodule read goes through here: not type-checked per call
    def __getattr__(self, name: str) -> Any:
        src = self.__dict__.get("tied_to")
        if src is not None and name in src._parameters:
            return getattr(src, name)
        return super().__getattr__(name)


class Embed(nn.Module):
    """Token embedding ``W_E[d_vocab, d_model]``, initialised N(0, ``init_std``) (default 1, like ``nn.Embedding``)."""

    def __init__(self, cfg: EncoderConfig, gen: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.W_E = _normal((cfg.d_vocab, cfg.d_model), cfg.init_std, gen, cfg.dtype)

    def forward(self, tokens: Int[torch.Tensor, "batch pos"]) -> Resid:
        # F.embedding's backward is deterministic on CPU; W_E[tokens] (index_put) is not with >1 thread
        return F.embedding(tokens, self.W_E)


class PosEmbed(nn.Module):
    """Learned absolute positional embedding ``W_pos[n_ctx, d_model]`` (N(0, ``init_std``)), repeated over the batch."""

    def __init__(self, cfg: EncoderConfig, gen: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.W_pos = _normal((cfg.n_ctx, cfg.d_model), cfg.init_std, gen, cfg.dtype)

    def forward(self, tokens: Int[torch.Tensor, "batch pos"]) -> Resid:
        b, p = tokens.shape
        # a real copy (einops.repeat would return an expand view), so hooks may edit it in place
        # without touching W_pos
        return self.W_pos[:p].unsqueeze(0).repeat(b, 1, 1)


class LayerNorm(_Tieable):
    """TL-style LayerNorm with ``hook_scale`` [batch, pos, 1] and ``hook_normalized`` [batch, pos, d_model].

    Also accepts per-head input [batch, pos, head_index, d_model] (split q/k/v inputs). ``tied_to``: read ``w`` and
    ``b`` from that LayerNorm (weight tying).
    """

    def __init__(self, cfg: EncoderConfig, tied_to: LayerNorm | None = None):
        super().__init__()
        self.cfg = cfg
        self.eps = LN_EPS
        if self._tie(tied_to):
            self.w = nn.Parameter(torch.ones(cfg.d_model, dtype=cfg.dtype))
            self.b = nn.Parameter(torch.zeros(cfg.d_model, dtype=cfg.dtype))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(layer_norm(x, self.w, self.b, hook_scale=self.hook_scale))


class Attention(_Tieable):
    """Multi-head self-attention with TL hooks and per-head weights.

    Hooks: ``hook_q``, ``hook_k``, ``hook_v``, ``hook_z`` [batch, pos, head_index, d_head]; ``hook_rot_q``,
    ``hook_rot_k`` (RoPE only); ``hook_attn_scores`` and ``hook_pattern`` [batch, head_index, query_pos, key_pos];
    ``hook_result`` [batch, pos, head_index, d_model] (only when ``use_attn_result``; without ``b_O``).
    Scores are divided by sqrt(d_head) before ``hook_attn_scores`` and, for causal attention, are -inf above the
    diagonal there, exactly as in TL.
    """

    def __init__(
        self, cfg: EncoderConfig, gen: torch.Generator | None = None, layer: int = 0, tied_to: Attention | None = None
    ):
        """``tied_to``: read every weight from that attention (a repeated layer, ``cfg.tied_repeats``); it draws
        nothing from ``gen``. Hooks and the pruned-head mask (of ``layer``) are its own."""
        super().__init__()
        self.cfg = cfg
        h, dm, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        kept = cfg.heads_kept(layer)
        # pruned heads (App. K): z is multiplied by this [head_index] mask before hook_z; None when nothing is pruned
        self.head_mask: torch.Tensor | None
        self.register_buffer("head_mask", None if all(kept) else torch.tensor(kept, dtype=cfg.dtype), persistent=False)
        if self._tie(tied_to):
            self.W_Q = _normal((h, dm, dh), 1 / math.sqrt(dm), gen, cfg.dtype)
            self.W_K = _normal((h, dm, dh), 1 / math.sqrt(dm), gen, cfg.dtype)
            self.W_V = _normal((h, dm, dh), 1 / math.sqrt(dm), gen, cfg.dtype)
            self.W_O = _normal((h, dh, dm), 1 / math.sqrt(h * dh), gen, cfg.dtype)
            self.b_Q = _zeros((h, dh), cfg.dtype)
            self.b_K = _zeros((h, dh), cfg.dtype)
            self.b_V = _zeros((h, dh), cfg.dtype)
            self.b_O = _zeros((dm,), cfg.dtype)
        self.register_buffer("mask", torch.tril(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool)), persistent=False)
        self.register_buffer("IGNORE", torch.tensor(-torch.inf, dtype=cfg.dtype), persistent=False)
        if cfg.positional == "rope":
            # RoPE's sin / cos tables [n_ctx, rotary_dim] (functional.rotate turns q and k with them)
            sin, cos = rotary_tables(cfg.n_ctx, cfg.rotary_dim_, cfg.rotary_base, cfg.dtype)
            self.register_buffer("rotary_sin", sin, persistent=False)
            self.register_buffer("rotary_cos", cos, persistent=False)

        self.hook_k = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_q = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_v = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_z = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_attn_scores = HookPoint()  # [batch, head_index, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head_index, query_pos, key_pos]
        self.hook_result = HookPoint()  # [batch, pos, head_index, d_model]
        self.attn_dropout = nn.Dropout(cfg.attn_dropout)  # on the pattern, after hook_pattern (train mode only)
        if cfg.positional == "rope":
            self.hook_rot_k = HookPoint()  # [batch, pos, head_index, d_head]
            self.hook_rot_q = HookPoint()  # [batch, pos, head_index, d_head]

    @staticmethod
    def _project(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
        if x.ndim == 4:  # per-head inputs [batch, pos, head_index, d_model]
            return torch.einsum("bphm,hmd->bphd", x, W) + b
        h, dm, dh = W.shape
        # one [d_model, h*d_head] matmul is much faster than a batched matmul over heads for these sizes
        return (x @ W.permute(1, 0, 2).reshape(dm, h * dh)).unflatten(-1, (h, dh)) + b

    def _qkv(self, x: Float[torch.Tensor, "batch pos d_model"]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v from one shared input with a single fused matmul."""
        h, dm, dh = self.W_Q.shape
        W = torch.cat([self.W_Q, self.W_K, self.W_V], dim=0).permute(1, 0, 2).reshape(dm, 3 * h * dh)
        qkv = (x @ W).unflatten(-1, (3, h, dh))
        return qkv[..., 0, :, :] + self.b_Q, qkv[..., 1, :, :] + self.b_K, qkv[..., 2, :, :] + self.b_V

    @property
    def QK(self) -> FactoredMatrix:
        """``W_Q @ W_K^T`` per head, a FactoredMatrix [n_heads, d_model, d_model] (TransformerLens's ``attn.QK``)."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """``W_V @ W_O`` per head, a FactoredMatrix [n_heads, d_model, d_model] (TransformerLens's ``attn.OV``)."""
        return FactoredMatrix(self.W_V, self.W_O)

    def ablated_scores(self, E: torch.Tensor, P: torch.Tensor | None) -> torch.Tensor:
        """The sum of the ``cfg.ablated_terms`` score terms [batch, head, q, k] (÷ sqrt(d_head)), from the token
        embeddings ``E`` and positional embeddings ``P`` of this forward pass: the part (E, P or bias B) of each
        query times the part of each key (``model.terms``, shared with ``analysis.interventions.terms``). Layer 0
        without
        LayerNorm only."""
        parts_q = {"E": self._project(E, self.W_Q, 0.0), "B": self.b_Q.expand(*E.shape[:2], -1, -1)}
        parts_k = {"E": self._project(E, self.W_K, 0.0), "B": self.b_K.expand(*E.shape[:2], -1, -1)}
        zero = torch.zeros_like(parts_q["E"])
        parts_q["P"] = self._project(P, self.W_Q, 0.0) if P is not None else zero
        parts_k["P"] = self._project(P, self.W_K, 0.0) if P is not None else zero
        if self.cfg.positional == "rope":  # the parts turn as q and k do (tables [pos, 1 (every head), rotary_dim])
            sin, cos = self.rotary_sin[: E.shape[1], None], self.rotary_cos[: E.shape[1], None]
            parts_q = {g: rotate(x, sin, cos) for g, x in parts_q.items()}
            parts_k = {g: rotate(x, sin, cos) for g, x in parts_k.items()}
        return term_scores(parts_q, parts_k, self.cfg.ablated_terms, self.cfg.attn_scale)

    def forward(
        self,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        value_input: torch.Tensor,
        embeddings: tuple[torch.Tensor, torch.Tensor | None] | None = None,
    ) -> Float[torch.Tensor, "batch pos d_model"]:
        """``embeddings``: (E, P) of this forward pass, given to layer 0 when ``cfg.ablated_terms`` is set: the
        model itself removes those terms (training-time ablation), before ``hook_v`` / ``hook_attn_scores``."""
        cfg = self.cfg
        if query_input is key_input and key_input is value_input and query_input.ndim == 3:
            q, k, v = self._qkv(query_input)
        else:
            q = self._project(query_input, self.W_Q, self.b_Q)
            k = self._project(key_input, self.W_K, self.b_K)
            v = self._project(value_input, self.W_V, self.b_V)
        if embeddings is not None and "VP" in cfg.ablated_terms and embeddings[1] is not None:
            v = v - self._project(embeddings[1], self.W_V, 0.0)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if cfg.positional == "rope":  # turn q and k by their position (tables [pos, 1 (every head), rotary_dim])
            sin, cos = self.rotary_sin[: q.shape[1], None], self.rotary_cos[: q.shape[1], None]
            q = self.hook_rot_q(rotate(q, sin, cos))
            k = self.hook_rot_k(rotate(k, sin, cos))
        # [b, h, q, d] @ [b, h, d, k] -> [b, h, q, k]
        scores = (q.transpose(1, 2) @ k.permute(0, 2, 3, 1)) / cfg.attn_scale
        if embeddings is not None and any(t != "VP" for t in cfg.ablated_terms):
            scores = scores - self.ablated_scores(*embeddings)
        if cfg.attention_dir == "causal":
            p = scores.shape[-1]
            scores = torch.where(self.mask[:p, :p], scores, self.IGNORE)
        scores = self.hook_attn_scores(scores)
        pattern = F.softmax(scores, dim=-1)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
        pattern = self.attn_dropout(self.hook_pattern(pattern))
        z = (pattern @ v.transpose(1, 2)).transpose(1, 2)  # [b, q, h, d]
        if self.head_mask is not None:
            z = z * self.head_mask[:, None]
        z = self.hook_z(z)
        if cfg.use_attn_result:
            result = self.hook_result(torch.einsum("bqhd,hdm->bqhm", z, self.W_O))
            return result.sum(-2) + self.b_O
        h, dh, dm = self.W_O.shape
        return z.flatten(-2) @ self.W_O.reshape(h * dh, dm) + self.b_O


class MLP(_Tieable):
    """GeLU MLP: ``W_in[d_model, d_mlp]``, ``W_out[d_mlp, d_model]``; hooks ``hook_pre``/``hook_post`` [b, p, d_mlp].
    ``tied_to``: read the weights from that MLP (weight tying)."""

    def __init__(self, cfg: EncoderConfig, gen: torch.Generator | None = None, tied_to: MLP | None = None):
        super().__init__()
        self.cfg = cfg
        assert cfg.d_mlp is not None
        if self._tie(tied_to):
            self.W_in = _normal((cfg.d_model, cfg.d_mlp), 1 / math.sqrt(cfg.d_model), gen, cfg.dtype)
            self.b_in = _zeros((cfg.d_mlp,), cfg.dtype)
            self.W_out = _normal((cfg.d_mlp, cfg.d_model), 1 / math.sqrt(cfg.d_mlp), gen, cfg.dtype)
            self.b_out = _zeros((cfg.d_model,), cfg.dtype)
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Resid) -> Resid:
        pre = self.hook_pre(x @ self.W_in + self.b_in)
        post = self.hook_post(F.gelu(pre))
        return self.dropout(post) @ self.W_out + self.b_out


class TransformerBlock(nn.Module):
    """Pre-LN block (``cfg.ln_position="pre"``, the default): ``resid_mid = resid_pre + attn(ln1(resid_pre))``,
    ``resid_post = resid_mid + mlp(ln2(resid_mid))``. Post-LN (``"post"``): ``resid_mid = ln1(resid_pre +
    attn(resid_pre))``, ``resid_post = ln2(resid_mid + mlp(resid_mid))`` (attention-only: ``resid_post =
    ln1(resid_pre + attn(resid_pre))``); the hooks keep their names and sit on what the residual stream holds.

    Without LayerNorm ``ln1``/``ln2`` are ``nn.Identity``; attention-only blocks have no MLP and no ``hook_resid_mid``.
    Dropout (train mode only) is applied to each sublayer output before its hook, so ``hook_attn_out`` and
    ``hook_mlp_out`` always hold exactly what is added to the residual stream. ``tied_to``: the block this layer
    repeats (``cfg.tied_repeats``): its sublayers read that block's weights (module docstring).
    """

    def __init__(
        self,
        cfg: EncoderConfig,
        layer: int,
        gen: torch.Generator | None = None,
        tied_to: TransformerBlock | None = None,
    ):
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        ln = cfg.normalization_type == "LN"

        def source(name: str) -> Any:  # the repeated block's sublayer, whose weights this one reads
            return None if tied_to is None else getattr(tied_to, name)

        self.ln1 = LayerNorm(cfg, source("ln1")) if ln else nn.Identity()
        self.attn = Attention(cfg, gen, layer=layer, tied_to=source("attn"))
        if not cfg.attn_only:
            self.ln2 = LayerNorm(cfg, source("ln2")) if ln else nn.Identity()
            self.mlp = MLP(cfg, gen, tied_to=source("mlp"))
        self.dropout = nn.Dropout(cfg.dropout)

        self.hook_attn_in = HookPoint()  # [batch, pos, head_index, d_model]
        self.hook_q_input = HookPoint()  # [batch, pos, head_index, d_model]
        self.hook_k_input = HookPoint()  # [batch, pos, head_index, d_model]
        self.hook_v_input = HookPoint()  # [batch, pos, head_index, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]
        if not cfg.attn_only:
            self.hook_mlp_in = HookPoint()  # [batch, pos, d_model]
            self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
            self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid_pre: Resid, embeddings: tuple[torch.Tensor, torch.Tensor | None] | None = None) -> Resid:
        """``embeddings``: (E, P) for the model's own term removal (``cfg.ablated_terms``, layer 0)."""
        cfg = self.cfg
        post = cfg.ln_position == "post" and cfg.normalization_type == "LN"
        norm_in = _identity if post else self.ln1  # the LayerNorm before the attention (pre-LN)
        resid_pre = self.hook_resid_pre(resid_pre)
        if cfg.use_attn_in or cfg.use_split_qkv_input:
            per_head = einops.repeat(resid_pre, "b p d -> b p h d", h=cfg.n_heads)
            if cfg.use_attn_in:
                q_in = k_in = v_in = self.hook_attn_in(per_head.clone())
            else:
                q_in = self.hook_q_input(per_head.clone())
                k_in = self.hook_k_input(per_head.clone())
                v_in = self.hook_v_input(per_head.clone())
            attn_out = self.attn(norm_in(q_in), norm_in(k_in), norm_in(v_in), embeddings)
        else:
            x = norm_in(resid_pre)
            attn_out = self.attn(x, x, x, embeddings)
        attn_out = self.hook_attn_out(self.dropout(attn_out))
        if cfg.attn_only:
            if post:
                return self.hook_resid_post(self.ln1(resid_pre + attn_out))
            return self.hook_resid_post(resid_pre + attn_out)
        resid_mid = self.hook_resid_mid(self.ln1(resid_pre + attn_out) if post else resid_pre + attn_out)
        mlp_in = self.hook_mlp_in(resid_mid.clone()) if cfg.use_hook_mlp_in else resid_mid
        mlp_out = self.hook_mlp_out(self.dropout(self.mlp(mlp_in if post else self.ln2(mlp_in))))
        if post:
            return self.hook_resid_post(self.ln2(resid_mid + mlp_out))
        return self.hook_resid_post(resid_mid + mlp_out)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
