"""The stacked forward: K same-shaped ``CLIP1D`` models as one module, parameters on a leading model axis.

``StackedCLIP`` computes, for K models at once, the loss ``CLIP1D`` computes for one (``batched.BatchedTrainer``
trains it; ``check_supported`` says which configs it implements). Why it is fast (it computes the same function as
``CLIP1D`` with less work):

- **One pass for K models.** Every matmul is a ``bmm`` over the model axis; every optimizer step is one fused AdamW
  call over ~20 stacked tensors, whatever K is.
- **Only the readout is computed in the last block.** The loss reads the final residual at one position per input
  (CLS for images, the first EOT for captions), so the last block computes queries, attention output, MLP and final
  LayerNorm only there (keys and values still at every position).
- **Layer-0 projections from tables.** Without LayerNorm, a block-0 projection of ``W_E[tok] + W_pos[pos]`` equals
  ``(W_E @ W)[tok] + (W_pos @ W)[pos]``: ``d_vocab + n_ctx`` rows instead of ``batch x n_ctx``.
- **A shared query.** When a one-block tower without LayerNorm reads every input at the same position with the same
  token (CLS at 0; the dataset captions' EOT at 3), its readout query is one vector per member: scores come from a
  ``[d_vocab, n_ctx, head]`` table and the output from token-aggregated attention weights (``_tower_shared_query``),
  so the paper's simplified model needs no per-input projection at all.
- **No hooks, no validation, no per-step Python objects.** Data live on the device as one padded tensor per group;
  the index batches of many steps are drawn ahead (the same generator calls, in the same order, as ``Trainer``);
  attention of non-final blocks is one ``scaled_dot_product_attention`` call.

One parameter has no reproducible trajectory, in ``Trainer`` either: ``b_K``. Softmax is shift-invariant per query,
so ``q . b_K`` never changes a pattern and ``b_K``'s gradient is exactly zero in exact arithmetic; in floats it is
rounding noise, which Adam normalises into lr-sized random steps. Its value differs between any two implementations
(and has no effect on any output); every other weight matches.

Dropout: ``"matched"`` draws each member's masks from its own generator seeded like ``Trainer``'s global RNG, in the
same order and shapes, so masks are identical to the single-model run (CPU only; the masks of positions the loss
never reads are drawn too). ``"fast"`` draws from the global RNG (seeded from the members' seeds) only the mask
entries the loss reads, 32 random bits per element (keep probability exact to 2**-32): the same distribution, a
different random stream; on CUDA and under ``torch.compile`` it is ``F.dropout``. It is the default of sweeps and the
benchmark; ``BatchedTrainer`` defaults to ``"matched"``. ``amp=True`` runs the towers under bfloat16 autocast (the
CLIP head stays fp32); ``compile=True`` compiles the stacked loss (needs ``"fast"``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import nn

from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.model.components import rotary_sin_cos
from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.functional import cosine, layer_norm, rotate, symmetric_ce, temperature

DropoutRNG = Literal["matched", "fast"]

# EncoderConfig fields and how the stacked forward treats them. A field missing here (a new one) makes
# ``check_supported`` refuse the config instead of silently training something else.
SHAPE_FIELDS = (  # must be equal across a group; the stacked forward implements each
    "n_layers",
    "n_heads",
    "d_head",
    "d_model",
    "d_mlp",
    "attn_only",
    "normalization_type",
    "ln_position",
    "tied_repeats",
    "positional",
    "rotary_dim",
    "rotary_base",
    "dropout",
    "attn_dropout",
    "embed_dropout",
    "act_fn",
    "attention_dir",
    "n_ctx",
    "d_image",
    "device",
    "dtype",
    "n_key_value_heads",
    "final_rms",
)
_PER_MEMBER_FIELDS = ("n_labels", "init_seed", "init_std", "pruned_heads")  # may differ (padded / per-member mask)
_HOOK_FIELDS = ("use_attn_result", "use_split_qkv_input", "use_attn_in", "use_hook_mlp_in")  # hooks only
_KNOWN_FIELDS = set(SHAPE_FIELDS) | set(_PER_MEMBER_FIELDS) | set(_HOOK_FIELDS)

_CLIP_KNOWN = {"vision", "text", "init_logit_scale", "max_logit_scale"}


def refuse_unknown(obj: Any, known: set[str], what: str) -> None:
    """Raise ``ValueError`` if a dataclass ``obj`` sets a field outside ``known`` to a non-default value."""
    for f in dataclasses.fields(obj):
        if f.init and f.name not in known and getattr(obj, f.name) != f.default:
            raise ValueError(
                f"the batched trainer does not implement {what}.{f.name}={getattr(obj, f.name)!r}; "
                "train this run with training.Trainer"
            )


def check_supported(cfg: CLIPConfig) -> None:
    """Raise ``ValueError`` if ``cfg`` uses a setting the stacked forward does not implement.

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> check_supported(CLIPConfig.from_preset("full", n_labels=8, positional="rope"))
    """
    if not isinstance(cfg, CLIPConfig):
        raise TypeError(f"expected a CLIPConfig, got {type(cfg).__name__}")
    refuse_unknown(cfg, _CLIP_KNOWN, "CLIPConfig")
    for tower in (cfg.vision, cfg.text):
        refuse_unknown(tower, _KNOWN_FIELDS, type(tower).__name__)
        if tower.act_fn != "gelu":
            raise ValueError(f"the batched trainer implements act_fn='gelu' only, got {tower.act_fn!r}")
        if tower.n_key_value_heads is not None or tower.final_rms:
            raise ValueError("the batched trainer does not implement n_key_value_heads or final_rms")


def _vocab_map(n_labels: int, d_vocab: int, n_max: int) -> list[int]:
    """Padded-vocabulary row of each of a member's token ids: labels keep their id, special ids move up."""
    return [i if i <= n_labels else i + n_max - n_labels for i in range(d_vocab)]


class StackedCLIP(nn.Module):
    """K ``CLIP1D`` models of the same shapes as one module; every parameter has a leading model axis.

    Parameter ``self.params[name]`` is ``torch.stack([m.state_dict()[name] for m in models])`` (token embeddings
    padded to the largest vocabulary). ``loss`` computes each member's CLIP loss on its own batch with the
    shortcuts of the module docstring; ``member_state_dict(k)`` gives member k back in ``CLIP1D``'s own shapes.

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> ms = [CLIP1D(CLIPConfig.from_preset("simplified", n_labels=n, d_model=16, d_head=4), seed=0)
        ...       for n in (5, 7)]
        >>> st = StackedCLIP(ms)
        >>> st.params["vision.embed.W_E"].shape  # 2 models, 7 labels + background + CLS
        torch.Size([2, 9, 16])
        >>> all(torch.equal(v, ms[0].state_dict()[k]) for k, v in st.member_state_dict(0).items())
        True
    """

    def __init__(
        self,
        models: Sequence[CLIP1D],
        dropout_rng: DropoutRNG = "fast",
        seeds: Sequence[int] | None = None,
        device: str | torch.device | None = None,
        flat: bool | None = None,
    ):
        """``device``: where the stacked parameters live (default: the members' config device). ``flat``: lay every
        parameter out in one flat buffer, each block's q/k/v weights and biases side by side (``flat_layout``):
        the fused QKV projection then reads them in place, and ``StackedAdamW`` updates the buffer with one fused
        call. It computes what the per-tensor layout computes, bit for bit on the CPU (``tests/test_fast_step.py``);
        it saves kernel launches, which bound a GPU step. None (default): on a CUDA device only."""
        super().__init__()
        if not models:
            raise ValueError("StackedCLIP needs at least one model")
        if dropout_rng not in ("matched", "fast"):
            raise ValueError(f"dropout_rng must be 'matched' or 'fast', got {dropout_rng!r}")
        cfgs = [m.cfg for m in models]
        for c in cfgs:
            check_supported(c)
        for name in ("vision", "text"):
            ref = {f: getattr(getattr(cfgs[0], name), f) for f in SHAPE_FIELDS}
            for i, c in enumerate(cfgs[1:], 1):
                got = {f: getattr(getattr(c, name), f) for f in SHAPE_FIELDS}
                diff = sorted(f for f in ref if ref[f] != got[f])
                if diff:
                    raise ValueError(
                        f"model {i} differs from model 0 in {name}.{diff}: a batched group needs equal shapes"
                    )
        self.member_cfgs = list(cfgs)
        self.K = len(models)
        self.n_labels = [c.n_labels for c in cfgs]
        self.n_max = max(self.n_labels)
        self.dropout_rng = dropout_rng
        self.tower_cfg: dict[str, EncoderConfig] = {
            name: getattr(cfgs[0], name).replace(n_labels=self.n_max, init_seed=None, pruned_heads=())
            for name in ("vision", "text")
        }
        # the training device (a BatchedTrainer's TrainConfig.device), else the members' model config device
        self.device = torch.device(device if device is not None else self.tower_cfg["vision"].device)
        self.names = list(models[0].state_dict())
        states = [m.state_dict() for m in models]
        params = [nn.Parameter(self.stack(name, [st[name] for st in states])) for name in self.names]
        self.flat = nn.ParameterList(params)
        self.params: dict[str, nn.Parameter] = dict(zip(self.names, self.flat, strict=True))
        self.max_logit_scale = torch.tensor([c.max_logit_scale for c in cfgs], device=self.device)
        # per-member head masks [K, H] per (tower, layer); None where no member prunes that layer
        self.head_masks: dict[tuple[str, int], torch.Tensor | None] = {}
        for name in ("vision", "text"):
            tc = self.tower_cfg[name]
            for layer in range(tc.n_layers):
                kept = [getattr(c, name).heads_kept(layer) for c in cfgs]
                self.head_masks[(name, layer)] = (
                    None if all(all(k) for k in kept) else torch.tensor(kept, dtype=tc.dtype, device=self.device)
                )
        self.rotary: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name in ("vision", "text"):
            tc = self.tower_cfg[name]
            if tc.positional == "rope":
                sin, cos = rotary_sin_cos(tc)
                self.rotary[name] = (sin.to(self.device), cos.to(self.device))
        seeds = list(seeds) if seeds is not None else list(range(self.K))
        if len(seeds) != self.K:
            raise ValueError(f"got {len(seeds)} seeds for {self.K} models")
        if dropout_rng == "matched":
            if any(tc.attn_dropout or tc.embed_dropout for tc in self.tower_cfg.values()):
                raise ValueError(
                    "attn_dropout and embed_dropout need dropout_rng='fast' (matched masks reproduce Trainer's "
                    "sublayer dropout only)"
                )
            if self.device.type != "cpu":
                raise ValueError("dropout_rng='matched' reproduces the CPU trainer's masks and needs device 'cpu'")
            self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        else:  # "fast": F.dropout on the global RNG (torch.compile lowers it to its own generator)
            self.generators = []
        self._koff: dict[int, torch.Tensor] = {}
        self._n_valid: Sequence[int] | None = None
        self._labels: dict[tuple[int, int], torch.Tensor] = {}
        self.flat_data: torch.Tensor | None = None  # the one buffer every parameter is a view of (flat layout)
        self.side_stream: Any = None  # a CUDA stream for the text tower (use_streams)
        if self.device.type == "cuda" if flat is None else flat:
            self.flat_layout()

    # ---- layout -------------------------------------------------------------------------------------------------
    def qkv_groups(self) -> list[tuple[int, int, int]]:
        """Indices (into ``names`` / ``flat``) of each block's (W_Q, W_K, W_V) and (b_Q, b_K, b_V)."""
        index = {n: i for i, n in enumerate(self.names)}
        groups = []
        for n in self.names:
            if n.endswith(("attn.W_Q", "attn.b_Q")):
                stem, kind = n[:-3], n[-3:-1]  # "...attn.", "W_" | "b_"
                groups.append(tuple(index[f"{stem}{kind}{c}"] for c in "QKV"))
        return groups

    @torch.no_grad()
    def flat_layout(self, on: bool = True) -> None:
        """Re-point every parameter into one flat buffer (``on``; values kept, parameter objects kept), or back into
        a tensor of its own each (``on=False``). In the buffer each block's ``W_Q``, ``W_K``, ``W_V`` ``[K, D, H,
        Dh]`` are the three slices of one ``[K, D, 3, H, Dh]`` block (biases: ``[K, 3, H, Dh]``), so the fused
        projection's ``[K, D, 3 * H * Dh]`` matrix is a view of them (``_Adjacent``), no concatenation per step.

        Example:
            >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
            >>> m = CLIP1D(CLIPConfig.from_preset("full", n_labels=5, d_model=8, d_head=2), seed=0)
            >>> st = StackedCLIP([m], flat=True)  # the default on a GPU
            >>> W_Q, W_K = st.params["vision.blocks.0.attn.W_Q"], st.params["vision.blocks.0.attn.W_K"]
            >>> W_Q.shape, W_Q.stride(), W_K.storage_offset() - W_Q.storage_offset()  # [K, D, H, Dh], q|k|v rows
            (torch.Size([1, 8, 4, 2]), (192, 24, 2, 1), 8)
            >>> st.flat_layout(False); W_Q.is_contiguous()
            True
        """
        if not on:
            for p in self.flat:
                p.data = p.data.clone(memory_format=torch.contiguous_format)
            self.flat_data = None
            return
        ps = list(self.flat)
        buf = torch.empty(sum(p.numel() for p in ps), dtype=ps[0].dtype, device=ps[0].device)
        lead = {g[0]: g for g in self.qkv_groups()}
        grouped = {i for g in lead.values() for i in g}
        off = 0
        for i, p in enumerate(ps):
            if i in lead:  # [*rows, H, Dh] x3 -> one [*rows, 3, H, Dh] block
                *rows, H, Dh = p.shape
                block = buf[off : off + 3 * p.numel()].view(*rows, 3, H, Dh)
                for j, idx in enumerate(lead[i]):
                    block.select(-3, j).copy_(ps[idx])
                    ps[idx].data = block.select(-3, j)
                off += 3 * p.numel()
            elif i not in grouped:
                view = buf[off : off + p.numel()].view(p.shape)
                view.copy_(p)
                p.data = view
                off += p.numel()
        assert off == buf.numel()
        self.flat_data = buf

    def use_streams(self, on: bool = True) -> None:
        """Run the text tower on a second CUDA stream beside the vision tower (forward, and so backward: autograd
        runs each backward op on its forward op's stream), also inside a whole-step CUDA graph, where the two
        become parallel branches. The towers are independent until the CLIP head, and each alone is too small to
        fill an H100. CUDA only (a ``ValueError`` elsewhere); not under ``torch.compile`` (one stream there).

        Example:
            >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
            >>> StackedCLIP([CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)]).use_streams()
            Traceback (most recent call last):
            ...
            ValueError: use_streams needs a CUDA device (the stacked parameters are on cpu)
        """
        if not on:
            self.side_stream = None
            return
        if self.device.type != "cuda":
            raise ValueError(f"use_streams needs a CUDA device (the stacked parameters are on {self.device.type})")
        self.side_stream = torch.cuda.Stream(self.device)

    def _adjacent(self, ws: Sequence[torch.Tensor]) -> torch.Tensor:
        """``torch.cat(ws, dim=-2)`` of per-head tensors ``[*rows, H, Dh]`` flattened to ``[*rows, n * H * Dh]``: a view
        of them in the flat layout (eager: the fused QKV projection; n = 1: one strided weight, whose gradient then
        goes straight into the flat buffer too), else a concatenation (also under ``torch.compile``, whose inputs
        should not be read through another input's storage)."""
        *rows, H, Dh = ws[0].shape
        if self.flat_data is not None and not torch.compiler.is_compiling():
            return _Adjacent.apply(*ws)
        if len(ws) == 1:
            return ws[0].reshape(*rows, H * Dh)
        return torch.cat(ws, dim=-2).reshape(*rows, len(ws) * H * Dh)

    # ---- members ------------------------------------------------------------------------------------------------
    def stack(self, name: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """One tensor per member, laid out like ``CLIP1D`` parameter ``name``, stacked as ``self.params[name]`` is:
        token embeddings padded to the largest vocabulary (extra rows 0), per-head weights as [K, D, H, Dh]."""
        if name.endswith("embed.W_E"):
            rows = []
            for c, W in zip(self.member_cfgs, tensors, strict=True):
                tcfg = c.vision if name.startswith("vision.") else c.text
                padded = torch.zeros(self.tower_cfg[name.split(".")[0]].d_vocab, W.shape[1], dtype=W.dtype)
                padded[_vocab_map(tcfg.n_labels, tcfg.d_vocab, self.n_max)] = W.detach().cpu()
                rows.append(padded)
            t = torch.stack(rows)
        else:
            t = torch.stack([w.detach().cpu() for w in tensors])
            if _is_qkv(name):  # [K, H, D, Dh] -> [K, D, H, Dh]: projections need no permute per step
                t = t.permute(0, 2, 1, 3).contiguous()
        return t.to(self.device)

    def member_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member ``k``'s weights as a ``CLIP1D`` state dict (its own vocabulary size), detached copies on CPU."""
        return {name: self.to_member(k, name, self.params[name].detach()) for name in self.names}

    def to_member(self, k: int, name: str, stacked: torch.Tensor) -> torch.Tensor:
        """Member ``k``'s slice of a stacked tensor laid out like parameter ``name`` (a parameter or its AdamW
        state), in ``CLIP1D``'s shape: its own vocabulary rows, per-head weights as [H, D, Dh]; a CPU copy."""
        t = stacked[k]
        if name.endswith("embed.W_E"):
            tcfg = self.member_cfgs[k].vision if name.startswith("vision.") else self.member_cfgs[k].text
            t = t[_vocab_map(tcfg.n_labels, tcfg.d_vocab, self.n_max)]
        elif _is_qkv(name):
            t = t.permute(1, 0, 2)
        return t.cpu().contiguous().clone()

    def remap_tokens(self, tokens: Int[torch.Tensor, "*shape"], k: int) -> Int[torch.Tensor, "*shape"]:
        """Member ``k``'s token ids (image or caption) in the padded vocabulary (labels stay, specials move up)."""
        n = self.n_labels[k]
        return torch.where(tokens > n, tokens + (self.n_max - n), tokens)

    def keep(self, members: Sequence[int]) -> None:
        """Drop every member not in ``members`` (finished runs); parameters become new tensors."""
        idx = torch.tensor(list(members), device=self.device)
        keep_l = list(members)
        new = [nn.Parameter(p.detach().index_select(0, idx).clone()) for p in self.flat]
        self.flat = nn.ParameterList(new)
        self.params = dict(zip(self.names, self.flat, strict=True))
        if self.flat_data is not None:
            self.flat_layout()
        self.member_cfgs = [self.member_cfgs[i] for i in keep_l]
        self.n_labels = [self.n_labels[i] for i in keep_l]
        self.K = len(keep_l)
        self.max_logit_scale = self.max_logit_scale.index_select(0, idx)
        self.head_masks = {k: (None if m is None else m.index_select(0, idx)) for k, m in self.head_masks.items()}
        if self.dropout_rng == "matched":
            self.generators = [self.generators[i] for i in keep_l]
        self._koff = {}

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
        return x * _keep_mask(x.shape, keep, x.dtype)

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
        """
        cfg = self.tower_cfg[name]
        emb_drop = cfg.embed_dropout if self.training else 0.0  # dropped embeddings: no table shortcuts
        if cfg.n_layers == 1 and cfg.normalization_type is None and isinstance(readout, int) and not emb_drop:
            return self._tower_shared_query(name, tokens, readout)
        p = self.params
        pre = f"{name}."
        K, B, P = tokens.shape
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        L = cfg.n_layers
        ln = cfg.normalization_type == "LN"
        pre_ln = ln and cfg.ln_position == "pre"  # LayerNorm before each sublayer (and ln_final)
        post_ln = ln and not pre_ln  # LayerNorm after each residual add (ln_position="post")
        learned = cfg.positional == "learned"
        rope = cfg.positional == "rope"
        drop = cfg.dropout if self.training else 0.0
        attn_drop = cfg.attn_dropout if self.training else 0.0
        W_E = p[pre + "embed.W_E"]
        W_pos = p[pre + "pos_embed.W_pos"][:, :P] if learned else None
        static = isinstance(readout, int)
        if static:
            r_tok = tokens[:, :, readout]
            r_pos = torch.full((K, B), readout, dtype=torch.long, device=tokens.device)
        else:
            r_tok = tokens.gather(2, readout[:, :, None]).squeeze(2)
            r_pos = readout
        if rope:
            sin, cos = self.rotary[name]
            sin, cos = sin[:P], cos[:P]

        def readout_rows(x: torch.Tensor) -> torch.Tensor:  # [K, B, P, f] -> [K, B, f]
            if static:
                return x[:, :, readout]
            return x.gather(2, r_pos[:, :, None, None].expand(-1, -1, 1, x.shape[-1])).squeeze(2)

        x: torch.Tensor | None = None  # residual stream [K, B, P, D] (built lazily for block 0 without LN)
        for layer in range(L):
            blk = f"{pre}blocks.{layer % cfg.n_blocks}."  # a repeated layer (tied_repeats) uses its block's weights
            last = layer == L - 1
            W_Q, W_K, W_V = p[blk + "attn.W_Q"], p[blk + "attn.W_K"], p[blk + "attn.W_V"]
            b_Q, b_K, b_V = p[blk + "attn.b_Q"], p[blk + "attn.b_K"], p[blk + "attn.b_V"]
            W_O, b_O = p[blk + "attn.W_O"], p[blk + "attn.b_O"]
            # [K, D, H, Dh] x3 -> [K, D, 3 * H * Dh] (q | k | v); only k | v in the last block
            Ws = (W_K, W_V) if last else (W_Q, W_K, W_V)
            W_cat = self._adjacent(Ws)  # [K, D, n * H * Dh]: one fused projection (a view in the flat layout)
            b_cat = self._adjacent((b_K, b_V) if last else (b_Q, b_K, b_V)).view(K, 1, len(Ws) * H * Dh)
            tables = layer == 0 and not pre_ln and not emb_drop  # block 0 reads E + P itself (no LN before it)
            if tables:
                # block-0 projections from tables: (W_E @ W)[tok] + (W_pos @ W)[pos] + b
                proj = self._rows(torch.bmm(W_E, W_cat), tokens.reshape(K, B * P))  # [K, B*P, n*H*Dh]
                if learned:
                    pos_t = torch.baddbmm(b_cat, W_pos, W_cat)  # [K, P, n*H*Dh]
                    proj = (proj.view(K, B, P, -1) + pos_t[:, None]).view(K, B * P, -1)
                else:
                    proj = proj + b_cat
                x_r = self._rows(W_E, r_tok)  # readout residual [K, B, D] (needed by the last block)
                if learned:
                    x_r = x_r + (W_pos[:, readout][:, None] if static else self._rows(W_pos, r_pos))
                if not last:
                    x = self._rows(W_E, tokens.reshape(K, B * P)).view(K, B, P, D)
                    if learned:
                        x = x + W_pos[:, None]
            else:
                if x is None:
                    x = self._rows(W_E, tokens.reshape(K, B * P)).view(K, B, P, D)
                    if learned:
                        x = x + W_pos[:, None]
                    x = self._dropout(x, (B, P, D), emb_drop, None)  # embedding dropout (E + P)
                h = self._ln(x, p[blk + "ln1.w"], p[blk + "ln1.b"]) if pre_ln else x
                proj = torch.baddbmm(b_cat, h.view(K, B * P, D), W_cat)
                x_r = readout_rows(x) if last else None
            proj = proj.view(K, B, P, len(Ws), H, Dh)
            mask_h = self.head_masks[(name, layer)]
            if not last:
                q, k, v = proj.unbind(3)  # [K, B, P, H, Dh]
                if rope:
                    q = rotate(q, sin[:, None, :], cos[:, None, :])
                    k = rotate(k, sin[:, None, :], cos[:, None, :])
                q, k, v = q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3)  # [K, B, H, P, Dh]
                # softmax(q k^T / sqrt(d_head)) v in one fused kernel (the scale is sqrt(d_head), as cfg.attn_scale)
                z = F.scaled_dot_product_attention(
                    q, k, v, dropout_p=attn_drop, is_causal=cfg.attention_dir == "causal"
                )
                if mask_h is not None:
                    z = z * mask_h[:, None, :, None, None]
                z = z.transpose(2, 3).reshape(K, B * P, H * Dh)
                attn = torch.baddbmm(b_O[:, None], z, W_O.reshape(K, H * Dh, D)).view(K, B, P, D)
                x = x + self._dropout(attn, (B, P, D), drop, None)
                if post_ln:
                    x = self._ln(x, p[blk + "ln1.w"], p[blk + "ln1.b"])
                if not cfg.attn_only:
                    x = x + self._mlp(blk, x, (B, P), drop, None, pre_ln)
                    if post_ln:
                        x = self._ln(x, p[blk + "ln2.w"], p[blk + "ln2.b"])
                continue
            # last block: keys/values at every position, everything else at the readout only
            k, v = proj.unbind(3)  # [K, B, P, H, Dh]
            if tables or not pre_ln:
                q_in = x_r
            else:
                q_in = self._ln(x_r, p[blk + "ln1.w"], p[blk + "ln1.b"])
            q = torch.baddbmm(self._adjacent((b_Q,)).view(K, 1, H * Dh), q_in, self._adjacent((W_Q,)))
            q = q.view(K, B, H, Dh)
            if rope:
                k = rotate(k, sin[:, None, :], cos[:, None, :])
                if static:
                    q = rotate(q, sin[readout], cos[readout])
                else:
                    q = rotate(q, sin[r_pos][:, :, None, :], cos[r_pos][:, :, None, :])
            scores = torch.einsum("kbhd,kbphd->kbhp", q, k) / cfg.attn_scale  # [K, B, H, P]
            if cfg.attention_dir == "causal":
                future = torch.arange(P, device=scores.device) > r_pos[:, :, None]  # [K, B, P]
                scores = scores.masked_fill(future[:, :, None, :], float("-inf"))
            pattern = self._dropout(scores.softmax(-1), (B, H, P), attn_drop, None)
            z = torch.einsum("kbhp,kbphd->kbhd", pattern, v)  # [K, B, H, Dh]
            if mask_h is not None:
                z = z * mask_h[:, None, :, None]
            attn = torch.baddbmm(b_O[:, None], z.reshape(K, B, H * Dh), W_O.reshape(K, H * Dh, D))
            x_r = x_r + self._dropout(attn, (B, P, D), drop, r_pos)
            if post_ln:
                x_r = self._ln(x_r, p[blk + "ln1.w"], p[blk + "ln1.b"])
            if not cfg.attn_only:
                x_r = x_r + self._mlp(blk, x_r, (B, P), drop, r_pos, pre_ln, readout=True)
                if post_ln:
                    x_r = self._ln(x_r, p[blk + "ln2.w"], p[blk + "ln2.b"])
        assert x_r is not None
        if pre_ln:
            x_r = self._ln(x_r, p[pre + "ln_final.w"], p[pre + "ln_final.b"])
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
        if self.flat_data is not None:  # read the strided q/k/v weights of the flat layout through _Adjacent
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
        with torch.autocast(img.device.type, enabled=False):
            txt = torch.bmm(txt.float(), self.params["W_proj"])
            sim = cosine(img.float(), txt)  # [K, B, B]
        logits = temperature(self.params["logit_scale"], self.max_logit_scale)[:, None, None] * sim
        K, B, _ = logits.shape
        labels = None if torch.compiler.is_compiling() else self._labels.get((K, B))  # no cache under compile
        if labels is None and torch.compiler.is_compiling():
            labels = torch.arange(B, device=logits.device).repeat(K)
        elif labels is None:
            labels = self._labels[(K, B)] = torch.arange(B, device=logits.device).repeat(K)
        return symmetric_ce(logits, valid, labels)


def _keep_mask(shape: tuple[int, ...] | torch.Size, keep: float, dtype: torch.dtype) -> torch.Tensor:
    """A CPU dropout mask ``Bernoulli(keep) / keep`` from 32 random bits per element, drawn 64 bits at a time.

    ``bernoulli_`` draws one double per element through the generator (~5 ns/element here); this draws half as
    many 64-bit words and compares 32-bit halves to a threshold: the keep probability is ``keep`` rounded to
    2**-32 (and the scale is its exact inverse), 3-4x cheaper. Used by ``dropout_rng="fast"`` on CPU.
    """
    n = math.prod(shape)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64)
    bits = words.view(torch.int32)[:n]
    threshold = round(keep * 2**32)  # P(u32 < threshold) = threshold / 2**32
    mask = bits < (threshold - 2**31)  # int32 = u32 - 2**31
    return mask.view(shape).to(dtype).mul_(2**32 / threshold)


class _Adjacent(torch.autograd.Function):
    """``[*rows, n * H * Dh]`` view of n per-head tensors ``[*rows, H, Dh]`` that lie side by side in one block of
    the flat layout (``StackedCLIP.flat_layout``: q | k | v of a block); its gradient splits back into the n."""

    @staticmethod
    def forward(ctx: Any, *ws: torch.Tensor) -> torch.Tensor:
        """The view; ``ctx.target``: the same view of the gradients when they are views of one buffer laid out like
        the weights (``StackedAdamW``'s flat gradients), where the backward then adds the gradient in one kernel."""
        w = ws[0]
        *rows, H, Dh = w.shape
        ptr = w.untyped_storage().data_ptr()
        for i, x in enumerate(ws):  # each next to the last, rows strided over all n: what flat_layout builds
            if (
                x.untyped_storage().data_ptr() != ptr
                or x.storage_offset() != w.storage_offset() + i * H * Dh
                or x.stride() != w.stride()
                or w.stride()[-2:] != (Dh, 1)
                or (len(rows) and w.stride(-3) < len(ws) * H * Dh)
            ):
                raise RuntimeError("fused QKV: the weights are not laid out side by side (StackedCLIP.flat_layout)")
        ctx.hd = (H, Dh)
        ctx.target = None
        grads = [x.grad for x in ws]
        g0 = grads[0]
        if g0 is not None and all(
            gr is not None
            and gr.untyped_storage().data_ptr() == g0.untyped_storage().data_ptr()
            and gr.storage_offset() - g0.storage_offset() == x.storage_offset() - w.storage_offset()
            and gr.stride() == x.stride()
            for gr, x in zip(grads, ws, strict=True)
        ):
            ctx.target = g0.as_strided((*rows, len(ws) * H * Dh), (*g0.stride()[:-2], 1), g0.storage_offset())
        return w.as_strided((*rows, len(ws) * H * Dh), (*w.stride()[:-2], 1), w.storage_offset())

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        H, Dh = ctx.hd
        n = g.shape[-1] // (H * Dh)
        if ctx.target is not None and not torch.is_grad_enabled():
            # the flat gradient buffer: one add for the n weights, instead of n accumulations into strided views
            # (autograd accepts those, with a warning that they break its gradient layout contract)
            ctx.target.add_(g)
            return (None,) * n
        return tuple(g[..., i * H * Dh : (i + 1) * H * Dh].unflatten(-1, (H, Dh)) for i in range(n))


def _is_qkv(name: str) -> bool:
    return name.endswith(("attn.W_Q", "attn.W_K", "attn.W_V"))
