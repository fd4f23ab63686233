"""The stacked forward: ``StackedForward``, the base class of ``stacked.StackedCLIP``, computes K members' CLIP losses
in one pass.

``tower`` runs one tower for every member (every matmul a ``bmm`` over the model axis, block 0 from tables, the last
block at the readout only), ``_tower_shared_query`` a one-block tower without LayerNorm read at one position with
one token (no per-input projection), ``loss`` both towers and the CLIP head. The per-member helpers gather
(``_rows``), normalise (``_ln``), drop (``_dropout``) and read fused weights (``_adjacent``) with the model axis
leading. Why each shortcut computes what ``CLIP1D`` computes: ``stacked``'s module docstring. The state it reads
(parameters, tower configs, head masks, rotary tables, dropout generators) is built by ``StackedCLIP.__init__`` and
kept by ``StackedCLIP.keep``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import nn

from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.functional import (
    NEGATIVES,
    cosine,
    layer_norm,
    rotate,
    same_caption,
    symmetric_ce,
    temperature,
)
from hooked_clip1d.training.stacked_ops import Adjacent, DropoutRNG, keep_mask


class StackedForward(nn.Module):
    """The forward of K stacked members: ``stacked.StackedCLIP``'s base class (build that one; it sets the state
    below). ``tower`` gives every member's pooled tower output, ``loss`` every member's CLIP loss.

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> from hooked_clip1d.training.stacked import StackedCLIP
        >>> cfg = CLIPConfig.from_preset("full", n_labels=5, d_model=16, d_head=4)
        >>> ms = [CLIP1D(cfg, seed=s).eval() for s in (0, 1)]
        >>> st = StackedCLIP(ms).eval()
        >>> images = torch.randint(1, 6, (2, 3, cfg.vision.n_ctx))
        >>> images[..., 0] = cfg.vision.vocab.cls  # images start with CLS
        >>> pooled = st.tower("vision", images, 0)  # [K, batch, d_model]: CLS of every image of every member
        >>> pooled.shape, torch.allclose(pooled[1], ms[1].vision(images[1]), atol=1e-5)
        (torch.Size([2, 3, 16]), True)
    """

    # set by StackedCLIP.__init__, kept by StackedCLIP.keep
    K: int
    device: torch.device
    dropout_rng: DropoutRNG
    tower_cfg: dict[str, EncoderConfig]
    params: dict[str, nn.Parameter]
    max_logit_scale: torch.Tensor
    negatives: torch.Tensor | None  # per member: NEGATIVES index [K] (0 standard CLIP); None: every member standard
    head_masks: dict[tuple[str, int], torch.Tensor | None]  # per-member head masks [K, H]; None: no member prunes
    rotary: dict[str, tuple[torch.Tensor, torch.Tensor]]  # RoPE's (sin, cos) per tower
    generators: list[torch.Generator]  # per member (dropout_rng="matched")
    flat_data: torch.Tensor | None  # the flat layout's buffer (StackedCLIP.flat_layout)
    side_stream: Any  # a CUDA stream for the text tower (StackedCLIP.use_streams)
    objective: str  # every member's CLIPConfig.objective: "contrastive" (the CLIP loss) or "captioning"
    _koff: dict[int, torch.Tensor]
    _n_valid: Sequence[int] | None
    _labels: dict[tuple[int, int], torch.Tensor]

    def _adjacent(self, ws: Sequence[torch.Tensor]) -> torch.Tensor:
        """``torch.cat(ws, dim=-2)`` of per-head tensors ``[*rows, H, Dh]`` flattened to ``[*rows, n * H * Dh]``: a view
        of them in the flat layout (eager: the fused QKV projection; n = 1: one strided weight, whose gradient then
        goes straight into the flat buffer too), else a concatenation (also under ``torch.compile``, whose inputs
        should not be read through another input's storage)."""
        *rows, H, Dh = ws[0].shape
        if self.flat_data is not None and not torch.compiler.is_compiling():
            return Adjacent.apply(*ws)
        if len(ws) == 1:
            return ws[0].reshape(*rows, H * Dh)
        return torch.cat(ws, dim=-2).reshape(*rows, len(ws) * H * Dh)

    # ---- helpers ------------------------------------------------------------------------------------------------
    def _offsets(self, n: int) -> torch.Tensor:
        """``[K, 1]`` offsets ``k * n`` for indexing a flattened ``[K * n, ...]`` table."""
        if torch.compiler.is_compiling():  # no cache inside a compiled step: under CUDA graphs it would hold a
            return (torch.arange(self.K, device=self.device) * n)[:, None]  # graph output the next replay overwrites
        if n not in self._koff:
            self._koff[n] = (torch.arange(self.K, device=self.device) * n)[:, None]
        return self._koff[n]

    def _rows(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``out[k, ...] = table[k, idx[k, ...]]`` for a ``[K, n, f]`` table (deterministic backward)."""
        K, n, f = table.shape
        off = idx + self._offsets(n).view(K, *([1] * (idx.ndim - 1)))
        return F.embedding(off, table.reshape(K * n, f))

    def _dropout(
        self, x: torch.Tensor, full_shape: tuple[int, ...], p: float, rows: int | torch.Tensor | None
    ) -> torch.Tensor:
        """Dropout of ``x``: the sublayer output ``[K, *full_shape]`` or, with ``rows`` (readout positions
        [K, B]), only those rows ``[K, B, d]`` of it."""
        if p == 0.0 or not self.training:
            return x
        keep = 1.0 - p
        if self.dropout_rng == "matched":  # Trainer's F.dropout: empty_like(x).bernoulli_(1 - p).div_(1 - p)
            masks = []
            for k, g in enumerate(self.generators):
                n = full_shape[0] if self._n_valid is None else self._n_valid[k]  # a short batch draws fewer
                m = torch.empty((n, *full_shape[1:]), dtype=x.dtype).bernoulli_(keep, generator=g)
                if n < full_shape[0]:
                    m = torch.cat([m, m.new_ones((full_shape[0] - n, *full_shape[1:]))])
                masks.append(m)
            mask = torch.stack(masks).div_(keep)
            if isinstance(rows, int):
                mask = mask[:, :, rows]
            elif rows is not None:  # [K, B, P, d] -> the readout rows [K, B, d]
                mask = mask.gather(2, rows[:, :, None, None].expand(-1, -1, 1, mask.shape[-1])).squeeze(2)
            return x * mask
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            return F.dropout(x, p, training=True)  # fused there (CUDA's kernel, inductor's generator)
        return x * keep_mask(x.shape, keep, x.dtype)

    @staticmethod
    def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """LayerNorm with per-member weight/bias [K, d] (x: [K, ..., d])."""
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return layer_norm(x, w.view(shape), b.view(shape))

    # ---- forward ------------------------------------------------------------------------------------------------
    def tower(
        self,
        name: str,
        tokens: Int[torch.Tensor, "K batch pos"],
        readout: int | Int[torch.Tensor, "K batch"],
    ) -> Float[torch.Tensor, "K batch d_model"]:
        """Pooled output of tower ``name`` ("vision"/"text") for every member.

        ``readout``: the position read out per input [K, batch], or an int when every input is read at that
        position and has the same token there (CLS at 0 for images; EOT at 3 for the dataset's captions), which
        allows the shared-query shortcut of ``_tower_shared_query`` for one-block towers without LayerNorm.
        Otherwise the blocks run in turn (``_projections``, then ``_block`` for every block but the last, which
        ``_readout_block`` computes at the readout only).
        """
        cfg = self.tower_cfg[name]
        emb_drop = cfg.embed_dropout if self.training else 0.0  # dropped embeddings: no table shortcuts
        if cfg.n_layers == 1 and cfg.normalization_type is None and isinstance(readout, int) and not emb_drop:
            return self._tower_shared_query(name, tokens, readout)
        t = _Pass.of(self, name, tokens, readout)
        x: torch.Tensor | None = None  # residual stream [K, B, P, D] (built lazily for block 0 without LN)
        x_r: torch.Tensor | None = None  # the readout rows of the residual [K, B, D]
        for layer in range(cfg.n_layers):
            blk = f"{t.pre}blocks.{layer % cfg.n_blocks}."  # a repeated layer (tied_repeats) uses its block's weights
            last = layer == cfg.n_layers - 1
            proj, x, x_r, tables = self._projections(t, blk, layer, last, x)
            if not last:
                x = self._block(t, blk, layer, proj, x)
            else:
                x_r = self._readout_block(t, blk, layer, proj, x_r, tables)
        assert x_r is not None
        if t.pre_ln:
            x_r = self._ln(x_r, self.params[t.pre + "ln_final.w"], self.params[t.pre + "ln_final.b"])
        return x_r

    def _projections(
        self, t: _Pass, blk: str, layer: int, last: bool, x: torch.Tensor | None, from_tables: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, bool]:
        """Block ``blk``'s fused projections ``[K, B, P, n, H, Dh]`` (q | k | v; k | v in the last block), the
        residual ``x`` (built here where block 0 needs it), the readout residual (last block) and whether block 0's
        projections came from tables (no LayerNorm before it: ``(W_E @ W)[tok] + (W_pos @ W)[pos] + b``)."""
        p, (K, B, P), cfg = self.params, t.shape, t.cfg
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        W_Q, W_K, W_V = p[blk + "attn.W_Q"], p[blk + "attn.W_K"], p[blk + "attn.W_V"]
        b_Q, b_K, b_V = p[blk + "attn.b_Q"], p[blk + "attn.b_K"], p[blk + "attn.b_V"]
        # [K, D, H, Dh] x3 -> [K, D, 3 * H * Dh] (q | k | v); only k | v in the last block
        Ws = (W_K, W_V) if last else (W_Q, W_K, W_V)
        W_cat = self._adjacent(Ws)  # [K, D, n * H * Dh]: one fused projection (a view in the flat layout)
        b_cat = self._adjacent((b_K, b_V) if last else (b_Q, b_K, b_V)).view(K, 1, len(Ws) * H * Dh)
        # block 0 reads E + P itself (no LN before it); not a captioner's decoder, whose position 0 reads the image
        tables = from_tables and layer == 0 and not t.pre_ln and not t.emb_drop
        W_E = p[t.pre + "embed.W_E"]
        x_r = None
        if tables:
            proj = self._rows(torch.bmm(W_E, W_cat), t.tokens.reshape(K, B * P))  # [K, B*P, n*H*Dh]
            if t.W_pos is not None:
                pos_t = torch.baddbmm(b_cat, t.W_pos, W_cat)  # [K, P, n*H*Dh]
                proj = (proj.view(K, B, P, -1) + pos_t[:, None]).view(K, B * P, -1)
            else:
                proj = proj + b_cat
            x_r = self._rows(W_E, t.r_tok)  # readout residual [K, B, D] (needed by the last block)
            if t.W_pos is not None:
                x_r = x_r + (t.W_pos[:, t.readout][:, None] if t.static else self._rows(t.W_pos, t.r_pos))
            if not last:
                x = self._rows(W_E, t.tokens.reshape(K, B * P)).view(K, B, P, D)
                if t.W_pos is not None:
                    x = x + t.W_pos[:, None]
        else:
            if x is None:
                x = self._rows(W_E, t.tokens.reshape(K, B * P)).view(K, B, P, D)
                if t.W_pos is not None:
                    x = x + t.W_pos[:, None]
                x = self._dropout(x, (B, P, D), t.emb_drop, None)  # embedding dropout (E + P)
            h = self._ln(x, p[blk + "ln1.w"], p[blk + "ln1.b"]) if t.pre_ln else x
            proj = torch.baddbmm(b_cat, h.view(K, B * P, D), W_cat)
            x_r = t.readout_rows(x) if last else None
        return proj.view(K, B, P, len(Ws), H, Dh), x, x_r, tables

    def _block(self, t: _Pass, blk: str, layer: int, proj: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A block before the last: attention at every position (one ``scaled_dot_product_attention``), then the
        MLP; returns the new residual ``[K, B, P, D]``."""
        p, (K, B, P), cfg = self.params, t.shape, t.cfg
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        mask_h = self.head_masks[(t.name, layer)]
        q, k, v = proj.unbind(3)  # [K, B, P, H, Dh]
        if t.rope:
            q = rotate(q, t.sin[:, None, :], t.cos[:, None, :])
            k = rotate(k, t.sin[:, None, :], t.cos[:, None, :])
        q, k, v = q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3)  # [K, B, H, P, Dh]
        # softmax(q k^T / sqrt(d_head)) v in one fused kernel (the scale is sqrt(d_head), as cfg.attn_scale)
        z = F.scaled_dot_product_attention(q, k, v, dropout_p=t.attn_drop, is_causal=cfg.attention_dir == "causal")
        if mask_h is not None:
            z = z * mask_h[:, None, :, None, None]
        z = z.transpose(2, 3).reshape(K, B * P, H * Dh)
        attn = torch.baddbmm(p[blk + "attn.b_O"][:, None], z, p[blk + "attn.W_O"].reshape(K, H * Dh, D))
        x = x + self._dropout(attn.view(K, B, P, D), (B, P, D), t.drop, None)
        if t.post_ln:
            x = self._ln(x, p[blk + "ln1.w"], p[blk + "ln1.b"])
        if not cfg.attn_only:
            x = x + self._mlp(blk, x, (B, P), t.drop, None, t.pre_ln)
            if t.post_ln:
                x = self._ln(x, p[blk + "ln2.w"], p[blk + "ln2.b"])
        return x

    def _readout_block(
        self, t: _Pass, blk: str, layer: int, proj: torch.Tensor, x_r: torch.Tensor, tables: bool
    ) -> torch.Tensor:
        """The last block at the readout only: keys and values at every position (``proj``: k | v), the query,
        attention output and MLP at the readout rows ``x_r`` ``[K, B, D]``; returns the new readout rows."""
        p, (K, B, P), cfg = self.params, t.shape, t.cfg
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        mask_h = self.head_masks[(t.name, layer)]
        k, v = proj.unbind(3)  # [K, B, P, H, Dh]
        q_in = x_r if tables or not t.pre_ln else self._ln(x_r, p[blk + "ln1.w"], p[blk + "ln1.b"])
        b_Q = self._adjacent((p[blk + "attn.b_Q"],)).view(K, 1, H * Dh)  # (b_Q before W_Q: the op order of before)
        q = torch.baddbmm(b_Q, q_in, self._adjacent((p[blk + "attn.W_Q"],))).view(K, B, H, Dh)
        if t.rope:
            k = rotate(k, t.sin[:, None, :], t.cos[:, None, :])
            if t.static:
                q = rotate(q, t.sin[t.readout], t.cos[t.readout])
            else:
                q = rotate(q, t.sin[t.r_pos][:, :, None, :], t.cos[t.r_pos][:, :, None, :])
        scores = torch.einsum("kbhd,kbphd->kbhp", q, k) / cfg.attn_scale  # [K, B, H, P]
        if cfg.attention_dir == "causal":
            future = torch.arange(P, device=scores.device) > t.r_pos[:, :, None]  # [K, B, P]
            scores = scores.masked_fill(future[:, :, None, :], float("-inf"))
        pattern = self._dropout(scores.softmax(-1), (B, H, P), t.attn_drop, None)
        z = torch.einsum("kbhp,kbphd->kbhd", pattern, v)  # [K, B, H, Dh]
        if mask_h is not None:
            z = z * mask_h[:, None, :, None]
        W_O, b_O = p[blk + "attn.W_O"], p[blk + "attn.b_O"]
        attn = torch.baddbmm(b_O[:, None], z.reshape(K, B, H * Dh), W_O.reshape(K, H * Dh, D))
        x_r = x_r + self._dropout(attn, (B, P, D), t.drop, t.r_pos)
        if t.post_ln:
            x_r = self._ln(x_r, p[blk + "ln1.w"], p[blk + "ln1.b"])
        if not cfg.attn_only:
            x_r = x_r + self._mlp(blk, x_r, (B, P), t.drop, t.r_pos, t.pre_ln, readout=True)
            if t.post_ln:
                x_r = self._ln(x_r, p[blk + "ln2.w"], p[blk + "ln2.b"])
        return x_r

    def _tower_shared_query(
        self, name: str, tokens: Int[torch.Tensor, "K batch pos"], r: int
    ) -> Float[torch.Tensor, "K batch d_model"]:
        """A one-block tower without LayerNorm whose inputs are all read at position ``r`` with the same token.

        The readout query is then one vector per member and head, so no per-input projection is needed::

            score[b, p, h] = q_h . k_h(tok[b, p], p)          (a [d_vocab, n_ctx, head] table, gathered)
            out[b] = sum_{v,h} A[b, v, h] W_E[v] W_V^h W_O^h + sum_{p,h} pattern[b, p, h] W_pos[p] W_V^h W_O^h
                     + sum_h b_V^h W_O^h + b_O,        A[b, v, h] = sum_p pattern[b, p, h] [tok[b, p] = v]

        (attention weights sum to 1 over p, so b_V enters once per head, except when attention dropout drops some;
        pruned heads are masked in every term).
        """
        cfg = self.tower_cfg[name]
        p = self.params
        pre, blk = f"{name}.", f"{name}.blocks.0."
        K, B, P = tokens.shape
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        learned, rope = cfg.positional == "learned", cfg.positional == "rope"
        W_E = p[pre + "embed.W_E"]
        V = W_E.shape[1]
        W_pos = p[pre + "pos_embed.W_pos"][:, :P] if learned else None
        W_Q, W_K, W_V, W_O = (p[blk + f"attn.W_{c}"] for c in "QKVO")
        b_Q, b_K, b_V, b_O = (p[blk + f"attn.b_{c}"] for c in "QKVO")
        if self.flat_data is not None:  # read the strided q/k/v weights of the flat layout through Adjacent
            W_Q, W_K, W_V, b_Q, b_K, b_V = (
                self._adjacent((w,)).unflatten(-1, (H, Dh)) for w in (W_Q, W_K, W_V, b_Q, b_K, b_V)
            )
        # the shared readout residual and query
        x_r = self._rows(W_E, tokens[:, :1, r])  # [K, 1, D]
        if learned:
            x_r = x_r + W_pos[:, r : r + 1]
        q = torch.baddbmm(b_Q.reshape(K, 1, H * Dh), x_r, W_Q.reshape(K, D, H * Dh)).view(K, H, Dh)
        X = torch.cat((W_E, W_pos), dim=1) if learned else W_E  # the rows every input is a sum of
        if rope:
            sin, cos = self.rotary[name]
            q = rotate(q, sin[r], cos[r])
            kE = torch.bmm(W_E, W_K.reshape(K, D, H * Dh)) + b_K.reshape(K, 1, H * Dh)  # [K, V, H*Dh]
            kc = kE.view(K, V, 1, H, Dh).expand(K, V, P, H, Dh)  # keys of every (token, position)
            kc = rotate(kc, sin[:P, None, :], cos[:P, None, :])
            S = (kc * q[:, None, None]).sum(-1)  # [K, V, P, H]
        else:
            # q_h . (x W_K^h + b_K^h) = x . (W_K^h q_h) + b_K^h . q_h: project the query back, not every key
            u = (W_K * q[:, None]).sum(-1)  # [K, D, H]
            s = torch.bmm(X, u)  # [K, V (+ P), H]: token (then position) rows
            kq = (b_K * q).sum(-1)[:, None]  # [K, 1, H]
            if learned:
                S = s[:, :V, None] + (s[:, V:] + kq)[:, None]  # [K, V, P, H]
            else:
                S = (s + kq)[:, :, None].expand(K, V, P, H)
        S = S / cfg.attn_scale
        combo = tokens * P + torch.arange(P, device=tokens.device)  # (token, position) row of S
        scores = self._rows(S.reshape(K, V * P, H), combo)  # [K, B, P, H]
        if cfg.attention_dir == "causal" and r < P - 1:
            future = torch.arange(P, device=tokens.device) > r
            scores = scores.masked_fill(future[:, None], float("-inf"))
        pattern = scores.softmax(2)
        attn_drop = cfg.attn_dropout if self.training else 0.0
        pattern = self._dropout(pattern, (B, P, H), attn_drop, None)  # attention-probability dropout
        A = torch.zeros(K, B, V, H, dtype=pattern.dtype, device=pattern.device).scatter_add(
            2, tokens[..., None].expand(K, B, P, H), pattern
        )  # attention weight per (input, token id, head)
        mask_h = self.head_masks[(name, 0)]
        W_Om = W_O if mask_h is None else W_O * mask_h[:, :, None, None]  # [K, H, Dh, D]
        # each token's (and position's) output direction per head: x W_V^h W_O^h   [K, V (+ P), H, D]
        OX = torch.einsum("kxhd,khde->kxhe", torch.bmm(X, W_V.reshape(K, D, H * Dh)).view(K, -1, H, Dh), W_Om)
        weights = A.view(K, B, V * H)
        if learned:
            weights = torch.cat((weights, pattern.reshape(K, B, P * H)), dim=-1)
        if attn_drop:  # dropped weights no longer sum to 1: b_V's share is each head's weight sum
            bVO = torch.einsum("khd,khde->khe", b_V, W_Om)  # [K, H, D]
            const = torch.baddbmm(b_O[:, None], pattern.sum(2), bVO)  # [K, B, D]
        else:
            const = torch.baddbmm(b_O[:, None], b_V.reshape(K, 1, H * Dh), W_Om.reshape(K, H * Dh, D))  # [K, 1, D]
        out = torch.baddbmm(const, weights, OX.reshape(K, -1, D))
        drop = cfg.dropout if self.training else 0.0
        return x_r + self._dropout(out, (B, P, D), drop, r)

    def _mlp(
        self,
        blk: str,
        x: torch.Tensor,
        bp: tuple[int, int],
        drop: float,
        r_pos: torch.Tensor | None,
        ln: bool,
        readout: bool = False,
    ) -> torch.Tensor:
        """MLP sublayer output (after its dropout) for x [K, B, P, D] or, with ``readout``, x [K, B, D]."""
        p = self.params
        K = x.shape[0]
        D = x.shape[-1]
        h = self._ln(x, p[blk + "ln2.w"], p[blk + "ln2.b"]) if ln else x
        W_in, b_in, W_out, b_out = p[blk + "mlp.W_in"], p[blk + "mlp.b_in"], p[blk + "mlp.W_out"], p[blk + "mlp.b_out"]
        M = W_in.shape[-1]
        rows = r_pos if readout else None
        pre = torch.baddbmm(b_in[:, None], h.reshape(K, -1, D), W_in)
        post = self._dropout(F.gelu(pre.view(*x.shape[:-1], M)), (*bp, M), drop, rows)
        out = torch.baddbmm(b_out[:, None], post.reshape(K, -1, M), W_out).view(x.shape)
        return self._dropout(out, (*bp, D), drop, rows)

    def loss(
        self,
        images: Int[torch.Tensor, "K batch pos"],
        captions: Int[torch.Tensor, "K batch 4"],
        text_readout: int | Int[torch.Tensor, "K batch"],
        valid: Bool[torch.Tensor, "K batch"] | None = None,
        n_valid: Sequence[int] | None = None,
    ) -> Float[torch.Tensor, " K"]:
        """Each member's symmetric CLIP loss on its batch (padded rows excluded where ``valid`` is False).

        Images are read at CLS (position 0); captions at ``text_readout`` (their first EOT; an int when it is the
        same position for every caption, as in the paper's datasets).

        ``n_valid`` (each member's number of valid rows, the first ones) makes matched dropout draw masks of the
        true batch size, as the single-model trainer does for a short last batch.
        """
        if self.dropout_rng == "matched":
            self._n_valid = None if valid is None else n_valid
        if self.objective == "captioning":
            return self.caption_loss(images, captions, valid)
        side = self.side_stream
        if side is not None and not torch.compiler.is_compiling():  # the towers on two streams (use_streams)
            cur = torch.cuda.current_stream(self.device)
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                txt = self.tower("text", captions, text_readout)
            img = self.tower("vision", images, 0)
            cur.wait_stream(side)
            if not torch.cuda.is_current_stream_capturing():
                txt.record_stream(cur)  # made on the side stream, read on this one
        else:
            img = self.tower("vision", images, 0)
            txt = self.tower("text", captions, text_readout)
        # the CLIP head in fp32 even under bf16 autocast: cosines scaled by up to 100 need more than 8 mantissa bits
        # (autocast off for it; without autocast there is nothing to turn off, and entering the context costs time)
        fp32 = torch.compiler.is_compiling() or torch.is_autocast_enabled(img.device.type)
        with torch.autocast(img.device.type, enabled=False) if fp32 else contextlib.nullcontext():
            txt = torch.bmm(txt.float(), self.params["W_proj"])
            sim = cosine(img.float(), txt)  # [K, B, B]
        logits = temperature(self.params["logit_scale"], self.max_logit_scale)[:, None, None] * sim
        K, B, _ = logits.shape
        labels = None if torch.compiler.is_compiling() else self._labels.get((K, B))  # no cache under compile
        if labels is None and torch.compiler.is_compiling():
            labels = torch.arange(B, device=logits.device).repeat(K)
        elif labels is None:
            labels = self._labels[(K, B)] = torch.arange(B, device=logits.device).repeat(K)
        if self.negatives is None:
            return symmetric_ce(logits, valid, labels)
        # TrainConfig.negatives per member: the standard ones keep only their diagonal as "same caption"
        same = same_caption(captions) & (
            (self.negatives != 0)[:, None, None] | torch.eye(B, dtype=torch.bool, device=logits.device)
        )
        return symmetric_ce(logits, valid, labels, same=same, shared=self.negatives == NEGATIVES.index("shared"))

    def caption_loss(
        self,
        images: Int[torch.Tensor, "K batch pos"],
        captions: Int[torch.Tensor, "K batch 4"],
        valid: Bool[torch.Tensor, "K batch"] | None = None,
    ) -> Float[torch.Tensor, " K"]:
        """Each captioning member's loss (``model.captioning.caption_loss``): the mean token cross-entropy of each
        image's own caption, read by the decoder through the image's prefix (the vision CLS output @ ``W_prefix`` in
        place of position 0's token embedding); padded rows (``valid`` False) excluded."""
        p = self.params
        prefix = torch.bmm(self.tower("vision", images, 0), p["W_prefix"])  # [K, B, d_text]
        resid = self.decoder(captions, prefix)  # [K, B, 4, d_text]
        K, B, P, D = resid.shape
        logp = torch.bmm(resid.reshape(K, B * P, D), p["W_U"]).log_softmax(-1)
        ll = logp.gather(-1, captions.reshape(K, B * P, 1)).view(K, B, P)
        if valid is None:
            return -ll.mean((1, 2))
        w = valid.to(ll.dtype)[..., None]
        return -(ll * w).sum((1, 2)) / (w.sum((1, 2)) * P)

    def decoder(
        self, captions: Int[torch.Tensor, "K batch 4"], prefix: Float[torch.Tensor, "K batch d_model"]
    ) -> Float[torch.Tensor, "K batch 4 d_model"]:
        """A captioning member's text tower as its decoder: input ``[image, X, rel, Y]`` (the prefix in place of
        position 0's embedding, ``model.captioning.decoder_inputs``), every block at every position (causal), the
        final residual (after ``ln_final`` where pre-LN), as ``HookedTextEncoder(..., return_type="resid")``."""
        tokens = torch.cat([captions[..., :1], captions[..., :3]], -1)
        t = _Pass.of(self, "text", tokens, 3)
        p, (K, B, P), cfg = self.params, t.shape, t.cfg
        D = cfg.d_model
        x = self._rows(p["text.embed.W_E"], tokens.reshape(K, B * P)).view(K, B, P, D)
        x = torch.cat([prefix[:, :, None].to(x.dtype), x[:, :, 1:]], 2)
        if t.W_pos is not None:
            x = x + t.W_pos[:, None]
        x = self._dropout(x, (B, P, D), t.emb_drop, None)  # embedding dropout (E + P)
        for layer in range(cfg.n_layers):
            blk = f"text.blocks.{layer % cfg.n_blocks}."  # a repeated layer (tied_repeats) uses its block's weights
            proj, _, _, _ = self._projections(t, blk, layer, False, x, from_tables=False)  # q | k | v from x
            x = self._block(t, blk, layer, proj, x)
        if t.pre_ln:
            x = self._ln(x, p["text.ln_final.w"], p["text.ln_final.b"])
        return x


@dataclass
class _Pass:
    """One general tower pass's settings (``StackedForward.tower``): the config, shapes, which sublayers normalise
    and drop, the positional tables and where every input is read out."""

    name: str
    cfg: EncoderConfig
    pre: str  # the tower's parameter prefix, "vision." / "text."
    tokens: torch.Tensor  # [K, B, P]
    shape: tuple[int, int, int]  # K, B, P
    readout: int | torch.Tensor  # the readout position (an int: every input's), else [K, B]
    static: bool  # readout is an int
    r_tok: torch.Tensor  # the readout tokens [K, B]
    r_pos: torch.Tensor  # the readout positions [K, B]
    W_pos: torch.Tensor | None  # the learned positions [K, P, D] (None: rope or none)
    rope: bool
    sin: torch.Tensor | None  # RoPE's tables at the P positions
    cos: torch.Tensor | None
    pre_ln: bool  # LayerNorm before each sublayer (and ln_final)
    post_ln: bool  # LayerNorm after each residual add (ln_position="post")
    drop: float  # sublayer dropout (0 in eval mode)
    attn_drop: float
    emb_drop: float

    @classmethod
    def of(cls, fwd: StackedForward, name: str, tokens: torch.Tensor, readout: int | torch.Tensor) -> _Pass:
        cfg = fwd.tower_cfg[name]
        K, B, P = tokens.shape
        ln = cfg.normalization_type == "LN"
        static = isinstance(readout, int)
        if static:
            r_tok = tokens[:, :, readout]
            r_pos = torch.full((K, B), readout, dtype=torch.long, device=tokens.device)
        else:
            r_tok = tokens.gather(2, readout[:, :, None]).squeeze(2)
            r_pos = readout
        rope = cfg.positional == "rope"
        sin, cos = fwd.rotary[name] if rope else (None, None)
        return cls(
            name=name,
            cfg=cfg,
            pre=f"{name}.",
            tokens=tokens,
            shape=(K, B, P),
            readout=readout,
            static=static,
            r_tok=r_tok,
            r_pos=r_pos,
            W_pos=fwd.params[f"{name}.pos_embed.W_pos"][:, :P] if cfg.positional == "learned" else None,
            rope=rope,
            sin=None if sin is None else sin[:P],
            cos=None if cos is None else cos[:P],
            pre_ln=ln and cfg.ln_position == "pre",
            post_ln=ln and cfg.ln_position != "pre",
            drop=cfg.dropout if fwd.training else 0.0,
            attn_drop=cfg.attn_dropout if fwd.training else 0.0,
            emb_drop=cfg.embed_dropout if fwd.training else 0.0,
        )

    def readout_rows(self, x: torch.Tensor) -> torch.Tensor:
        """The readout rows ``[K, B, f]`` of ``x`` ``[K, B, P, f]``."""
        if self.static:
            return x[:, :, self.readout]
        return x.gather(2, self.r_pos[:, :, None, None].expand(-1, -1, 1, x.shape[-1])).squeeze(2)
