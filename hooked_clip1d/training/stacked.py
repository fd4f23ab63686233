"""The stacked forward: K same-shaped ``CLIP1D`` models as one module, parameters on a leading model axis.

``StackedCLIP`` computes, for K models at once, the loss ``CLIP1D`` computes for one (``batched.BatchedTrainer``
trains it; ``stacked_support.check_supported`` says which configs it implements). This module builds it (the stacked
parameters, the flat layout, the members' views); its forward is its base class ``stacked_forward.StackedForward``,
its dropout masks and fused-QKV view are ``stacked_ops``' kernels. Why it is fast (it computes the same function as
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
  ``[d_vocab, n_ctx, head]`` table and the output from token-aggregated attention weights
  (``StackedForward._tower_shared_query``), so the paper's simplified model needs no per-input projection at all.
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

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import nn

from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.functional import NEGATIVES, rotary_tables
from hooked_clip1d.training.stacked_forward import StackedForward
from hooked_clip1d.training.stacked_ops import DropoutRNG
from hooked_clip1d.training.stacked_support import SHAPE_FIELDS, check_supported


def _vocab_map(n_labels: int, d_vocab: int, n_max: int) -> list[int]:
    """Padded-vocabulary row of each of a member's token ids: labels keep their id, special ids move up."""
    return [i if i <= n_labels else i + n_max - n_labels for i in range(d_vocab)]


class StackedCLIP(StackedForward):
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
        _check_same_shapes(cfgs)
        self.member_cfgs = list(cfgs)
        self.objective = cfgs[0].objective  # _check_same_shapes: every member's
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
        self.negatives = None  # every member standard CLIP (set_negatives)
        self.head_masks = self._head_masks(cfgs)
        self.rotary: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # RoPE's (sin, cos) per tower
        for name in ("vision", "text"):
            tc = self.tower_cfg[name]
            if tc.positional == "rope":
                sin, cos = rotary_tables(tc.n_ctx, tc.rotary_dim_, tc.rotary_base, tc.dtype)
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
        self.layout_version = 0  # counts the parameters' re-layouts (flat_layout, keep): a captured graph's key
        self.side_stream: Any = None  # a CUDA stream for the text tower (use_streams)
        if self.device.type == "cuda" if flat is None else flat:
            self.flat_layout()

    def _head_masks(self, cfgs: Sequence[CLIPConfig]) -> dict[tuple[str, int], torch.Tensor | None]:
        """Per-member head masks [K, H] per (tower, layer) (1: kept, 0: pruned); None where no member prunes."""
        masks: dict[tuple[str, int], torch.Tensor | None] = {}
        for name in ("vision", "text"):
            tc = self.tower_cfg[name]
            for layer in range(tc.n_layers):
                kept = [getattr(c, name).heads_kept(layer) for c in cfgs]
                masks[(name, layer)] = (
                    None if all(all(k) for k in kept) else torch.tensor(kept, dtype=tc.dtype, device=self.device)
                )
        return masks

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
        projection's ``[K, D, 3 * H * Dh]`` matrix is a view of them (``Adjacent``), no concatenation per step.

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
        self.layout_version += 1
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

    def set_negatives(self, modes: Sequence[str]) -> None:
        """Each member's ``TrainConfig.negatives`` (``functional.NEGATIVES``): how its loss treats identical captions.

        Example:
            >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
            >>> st = StackedCLIP([CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=s) for s in (0, 1)])
            >>> st.set_negatives(["all", "shared"]); st.negatives.tolist()
            [0, 2]
            >>> st.set_negatives(["all", "all"]); st.negatives is None  # the standard loss's own fast path
            True
        """
        if len(modes) != self.K or any(m not in NEGATIVES for m in modes):
            raise ValueError(f"set_negatives: one of {list(NEGATIVES)} per member ({self.K}), got {list(modes)!r}")
        codes = [NEGATIVES.index(m) for m in modes]
        self.negatives = torch.tensor(codes, device=self.device) if any(codes) else None

    def keep(self, members: Sequence[int]) -> None:
        """Drop every member not in ``members`` (finished runs); parameters become new tensors."""
        idx = torch.tensor(list(members), device=self.device)
        keep_l = list(members)
        new = [nn.Parameter(p.detach().index_select(0, idx).clone()) for p in self.flat]
        self.flat = nn.ParameterList(new)
        self.params = dict(zip(self.names, self.flat, strict=True))
        self.layout_version += 1
        if self.flat_data is not None:
            self.flat_layout()
        self.member_cfgs = [self.member_cfgs[i] for i in keep_l]
        self.n_labels = [self.n_labels[i] for i in keep_l]
        self.K = len(keep_l)
        self.max_logit_scale = self.max_logit_scale.index_select(0, idx)
        if self.negatives is not None:
            self.negatives = self.negatives.index_select(0, idx)
        self.head_masks = {k: (None if m is None else m.index_select(0, idx)) for k, m in self.head_masks.items()}
        if self.dropout_rng == "matched":
            self.generators = [self.generators[i] for i in keep_l]
        self._koff = {}


def _check_same_shapes(cfgs: Sequence[CLIPConfig]) -> None:
    """Refuse configs the stacked engine does not implement, or that differ in a shape field (``SHAPE_FIELDS``)."""
    for c in cfgs:
        check_supported(c)
    if len({c.objective for c in cfgs}) > 1:
        raise ValueError(f"a batched group trains one objective; got {sorted({c.objective for c in cfgs})}")
    if cfgs[0].objective == "captioning" and len({c.n_labels for c in cfgs}) > 1:  # W_U's columns are the vocabulary
        raise ValueError(
            f"a batched group of captioning models needs one n_labels (its unembedding's vocabulary); got "
            f"{sorted({c.n_labels for c in cfgs})}"
        )
    for name in ("vision", "text"):
        ref = {f: getattr(getattr(cfgs[0], name), f) for f in SHAPE_FIELDS}
        for i, c in enumerate(cfgs[1:], 1):
            got = {f: getattr(getattr(c, name), f) for f in SHAPE_FIELDS}
            diff = sorted(f for f in ref if ref[f] != got[f])
            if diff:
                raise ValueError(f"model {i} differs from model 0 in {name}.{diff}: a batched group needs equal shapes")


def _is_qkv(name: str) -> bool:
    return name.endswith(("attn.W_Q", "attn.W_K", "attn.W_V"))
