"""Batched training: K same-shaped models in one process, parameters stacked on a leading model axis.

``BatchedTrainer(members)`` trains K ``CLIP1D`` models (different seeds, label counts, layouts, learning rates,
weight decays, pruned heads, ...) with one forward, one backward and one AdamW step per step for all of them. Each
member follows the trajectory of ``training.Trainer`` for the same configs: the same initial weights, the same
per-epoch data permutations (its own seeded generator), the same dropout masks (``dropout_rng="matched"``, CPU) and
the same AdamW update, so it ends where the single-model trainer ends up to float rounding (``tests/test_batched.py``
checks this over hundreds of steps). Every member writes the files a ``Trainer`` run writes (``config.json``,
``metrics.jsonl``, ``checkpoint.safetensors``, ``model.safetensors``, ``summary.json``); they load with
``checkpoint.load_model_file`` and resume with ``Trainer(..., resume=True)``.

Why it is fast (the stacked forward, ``StackedCLIP``, computes the same function as ``CLIP1D`` with less work):

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

Members may differ in ``n_labels`` (their vocabularies are padded into one: the extra embedding rows are never read,
receive zero gradient and do not affect the member; saved checkpoints have the member's own shapes), in the dataset
(``DataConfig``: sizes may differ; a short last batch is masked out of the loss exactly), in ``pruned_heads``,
``init_std``, the training seed, ``lr``, ``weight_decay``, ``epochs``, ``eval_every`` and ``checkpoint_every``.
Everything that sets a shape or the forward computation must be equal (``group_key`` says what).

Dropout: ``"matched"`` draws each member's masks from its own generator seeded like ``Trainer``'s global RNG, in the
same order and shapes, so masks are identical to the single-model run (CPU only; the masks of positions the loss
never reads are drawn too). ``"fast"`` draws from the global RNG (seeded from the members' seeds) only the mask
entries the loss reads, 32 random bits per element (keep probability exact to 2**-32): the same distribution, a
different random stream; on CUDA and under ``torch.compile`` it is ``F.dropout``. It is the default of sweeps and the
benchmark; ``BatchedTrainer`` defaults to ``"matched"``. ``amp=True`` runs the towers under bfloat16 autocast (the
CLIP head stays fp32); ``compile=True`` compiles the stacked loss (needs ``"fast"``).

Example:
    >>> import tempfile
    >>> from hooked_clip1d.clip import CLIPConfig
    >>> from hooked_clip1d.data import DataConfig
    >>> from hooked_clip1d.training import TrainConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
    >>> members = [Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, batch_size=16, seed=s))
    ...            for s in (0, 1)]
    >>> runs = BatchedTrainer(members, tempfile.mkdtemp()).run(progress=False)
    >>> [(r.epoch, r.step) for r in runs]
    [(2, 8), (2, 8)]
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import nn
from tqdm.auto import tqdm

from hooked_clip1d.checkpoint import (
    CheckpointError,
    atomic_write_text,
    canonical_config,
    read_tensors,
    save_model,
    save_tensors,
)
from hooked_clip1d.clip import CLIP1D, CLIPConfig
from hooked_clip1d.components import rotary_sin_cos
from hooked_clip1d.config import EncoderConfig
from hooked_clip1d.data import DataConfig, Dataset, build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.param_groups import decay_mask, is_frozen
from hooked_clip1d.rundir import RunLock, check_run_dir, clean_stale_tmp, read_metrics
from hooked_clip1d.training import TrainConfig, TrainRun, _provenance, comparable_train_config, save_snapshot

DropoutRNG = Literal["matched", "fast"]

# EncoderConfig fields and how the stacked forward treats them. A field missing here (a new one) makes
# ``check_supported`` refuse the config instead of silently training something else.
_SHAPE_FIELDS = (  # must be equal across a group; the stacked forward implements each
    "n_layers",
    "n_heads",
    "d_head",
    "d_model",
    "d_mlp",
    "attn_only",
    "normalization_type",
    "positional",
    "rotary_dim",
    "rotary_base",
    "dropout",
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
_KNOWN_FIELDS = set(_SHAPE_FIELDS) | set(_PER_MEMBER_FIELDS) | set(_HOOK_FIELDS)

# TrainConfig fields that must be equal in a group (the rest may differ per member)
_TRAIN_SHARED = ("betas", "eps", "device")
_TRAIN_KNOWN = {"lr", "weight_decay", "epochs", "batch_size", "seed", "eval_every", "checkpoint_every", "threads"}
_TRAIN_KNOWN |= {"no_decay", "frozen", "keep_snapshots"}  # per-member decay / freeze masks, snapshots
_TRAIN_KNOWN |= set(_TRAIN_SHARED)
_CLIP_KNOWN = {"vision", "text", "init_logit_scale", "max_logit_scale"}


def _refuse_unknown(obj: Any, known: set[str], what: str) -> None:
    for f in dataclasses.fields(obj):
        if f.init and f.name not in known and getattr(obj, f.name) != f.default:
            raise ValueError(
                f"the batched trainer does not implement {what}.{f.name}={getattr(obj, f.name)!r}; "
                "train this run with training.Trainer"
            )


def check_supported(cfg: CLIPConfig) -> None:
    """Raise ``ValueError`` if ``cfg`` uses a setting the stacked forward does not implement.

    Example:
        >>> from hooked_clip1d.clip import CLIPConfig
        >>> check_supported(CLIPConfig.from_preset("full", n_labels=8, positional="rope"))
    """
    if not isinstance(cfg, CLIPConfig):
        raise TypeError(f"expected a CLIPConfig, got {type(cfg).__name__}")
    _refuse_unknown(cfg, _CLIP_KNOWN, "CLIPConfig")
    for tower in (cfg.vision, cfg.text):
        _refuse_unknown(tower, _KNOWN_FIELDS, type(tower).__name__)
        if tower.act_fn != "gelu":
            raise ValueError(f"the batched trainer implements act_fn='gelu' only, got {tower.act_fn!r}")
        if tower.n_key_value_heads is not None or tower.final_rms:
            raise ValueError("the batched trainer does not implement n_key_value_heads or final_rms")


def group_key(model_cfg: CLIPConfig, data_cfg: DataConfig, train_cfg: TrainConfig) -> str:
    """A string equal for runs that can train in one batched group (same shapes and shared settings).

    Example:
        >>> from hooked_clip1d.clip import CLIPConfig
        >>> a = group_key(CLIPConfig.from_preset("simplified", n_labels=10), DataConfig(n_labels=10), TrainConfig())
        >>> b = group_key(CLIPConfig.from_preset("simplified", n_labels=20), DataConfig(n_labels=20, n2=5),
        ...               TrainConfig(seed=3, weight_decay=0.1))
        >>> a == b
        True
    """
    check_supported(model_cfg)
    _refuse_unknown(train_cfg, _TRAIN_KNOWN, "TrainConfig")
    towers = {}
    for name, tower in (("vision", model_cfg.vision), ("text", model_cfg.text)):
        towers[name] = {f: str(getattr(tower, f)) for f in _SHAPE_FIELDS}
    bs = train_cfg.batch_size or data_cfg.batch_size
    shared = {f: str(getattr(train_cfg, f)) for f in _TRAIN_SHARED}
    return json.dumps({"towers": towers, "batch_size": bs, "train": shared}, sort_keys=True)


# ---------------------------------------------------------------------------------------------------------------------
# The stacked model
# ---------------------------------------------------------------------------------------------------------------------


def _vocab_map(n_labels: int, d_vocab: int, n_max: int) -> list[int]:
    """Padded-vocabulary row of each of a member's token ids: labels keep their id, special ids move up."""
    return [i if i <= n_labels else i + n_max - n_labels for i in range(d_vocab)]


class StackedCLIP(nn.Module):
    """K ``CLIP1D`` models of the same shapes as one module; every parameter has a leading model axis.

    Parameter ``self.params[name]`` is ``torch.stack([m.state_dict()[name] for m in models])`` (token embeddings
    padded to the largest vocabulary). ``loss`` computes each member's CLIP loss on its own batch with the
    shortcuts of the module docstring; ``member_state_dict(k)`` gives member k back in ``CLIP1D``'s own shapes.

    Example:
        >>> from hooked_clip1d.clip import CLIP1D, CLIPConfig
        >>> ms = [CLIP1D(CLIPConfig.from_preset("simplified", n_labels=n, d_model=16, d_head=4), seed=0)
        ...       for n in (5, 7)]
        >>> st = StackedCLIP(ms)
        >>> st.params["vision.embed.W_E"].shape  # 2 models, 7 labels + background + CLS
        torch.Size([2, 9, 16])
        >>> all(torch.equal(v, ms[0].state_dict()[k]) for k, v in st.member_state_dict(0).items())
        True
    """

    def __init__(self, models: Sequence[CLIP1D], dropout_rng: DropoutRNG = "fast", seeds: Sequence[int] | None = None):
        super().__init__()
        if not models:
            raise ValueError("StackedCLIP needs at least one model")
        if dropout_rng not in ("matched", "fast"):
            raise ValueError(f"dropout_rng must be 'matched' or 'fast', got {dropout_rng!r}")
        cfgs = [m.cfg for m in models]
        for c in cfgs:
            check_supported(c)
        for name in ("vision", "text"):
            ref = {f: getattr(getattr(cfgs[0], name), f) for f in _SHAPE_FIELDS}
            for i, c in enumerate(cfgs[1:], 1):
                got = {f: getattr(getattr(c, name), f) for f in _SHAPE_FIELDS}
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
        self.device = torch.device(self.tower_cfg["vision"].device)
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
            if self.device.type != "cpu":
                raise ValueError("dropout_rng='matched' reproduces the CPU trainer's masks and needs device 'cpu'")
            self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        else:  # "fast": F.dropout on the global RNG (torch.compile lowers it to its own generator)
            self.generators = []
        self._koff: dict[int, torch.Tensor] = {}
        self._n_valid: Sequence[int] | None = None
        self._labels: dict[tuple[int, int], torch.Tensor] = {}

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
        return torch.addcmul(b.view(shape), F.layer_norm(x, (x.shape[-1],), eps=1e-5), w.view(shape))

    @staticmethod
    def _rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        """RoPE (NeoX halves, as ``components.apply_rotary``) of x [..., H, d_head]; sin/cos broadcast [..., 1, rd]."""
        rd = sin.shape[-1]
        half = rd // 2
        x_rot, x_pass = x[..., :rd], x[..., rd:]
        flipped = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
        return torch.cat([x_rot * cos + flipped * sin, x_pass], dim=-1)

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
        if cfg.n_layers == 1 and cfg.normalization_type is None and isinstance(readout, int):
            return self._tower_shared_query(name, tokens, readout)
        p = self.params
        pre = f"{name}."
        K, B, P = tokens.shape
        H, Dh, D = cfg.n_heads, cfg.d_head, cfg.d_model
        L = cfg.n_layers
        ln = cfg.normalization_type == "LN"
        learned = cfg.positional == "learned"
        rope = cfg.positional == "rope"
        drop = cfg.dropout if self.training else 0.0
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
            blk = f"{pre}blocks.{layer}."
            last = layer == L - 1
            W_Q, W_K, W_V = p[blk + "attn.W_Q"], p[blk + "attn.W_K"], p[blk + "attn.W_V"]
            b_Q, b_K, b_V = p[blk + "attn.b_Q"], p[blk + "attn.b_K"], p[blk + "attn.b_V"]
            W_O, b_O = p[blk + "attn.W_O"], p[blk + "attn.b_O"]
            # [K, D, H, Dh] x3 -> [K, D, 3 * H * Dh] (q | k | v); only k | v in the last block
            Ws = (W_K, W_V) if last else (W_Q, W_K, W_V)
            W_cat = torch.cat(Ws, dim=2).reshape(K, D, len(Ws) * H * Dh)
            b_cat = torch.cat((b_K, b_V) if last else (b_Q, b_K, b_V), dim=1).reshape(K, 1, len(Ws) * H * Dh)
            if layer == 0 and not ln:
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
                h = self._ln(x, p[blk + "ln1.w"], p[blk + "ln1.b"]) if ln else x
                proj = torch.baddbmm(b_cat, h.view(K, B * P, D), W_cat)
                x_r = readout_rows(x) if last else None
            proj = proj.view(K, B, P, len(Ws), H, Dh)
            mask_h = self.head_masks[(name, layer)]
            if not last:
                q, k, v = proj.unbind(3)  # [K, B, P, H, Dh]
                if rope:
                    q = self._rotate(q, sin[:, None, :], cos[:, None, :])
                    k = self._rotate(k, sin[:, None, :], cos[:, None, :])
                q, k, v = q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3)  # [K, B, H, P, Dh]
                # softmax(q k^T / sqrt(d_head)) v in one fused kernel (the scale is sqrt(d_head), as cfg.attn_scale)
                z = F.scaled_dot_product_attention(q, k, v, is_causal=cfg.attention_dir == "causal")
                if mask_h is not None:
                    z = z * mask_h[:, None, :, None, None]
                z = z.transpose(2, 3).reshape(K, B * P, H * Dh)
                attn = torch.baddbmm(b_O[:, None], z, W_O.reshape(K, H * Dh, D)).view(K, B, P, D)
                x = x + self._dropout(attn, (B, P, D), drop, None)
                if not cfg.attn_only:
                    x = x + self._mlp(blk, x, (B, P), drop, None, ln)
                continue
            # last block: keys/values at every position, everything else at the readout only
            k, v = proj.unbind(3)  # [K, B, P, H, Dh]
            if layer == 0 and not ln:
                q_in = x_r
            else:
                q_in = self._ln(x_r, p[blk + "ln1.w"], p[blk + "ln1.b"]) if ln else x_r
            q = torch.baddbmm(b_Q.reshape(K, 1, H * Dh), q_in, W_Q.reshape(K, D, H * Dh))
            q = q.view(K, B, H, Dh)
            if rope:
                k = self._rotate(k, sin[:, None, :], cos[:, None, :])
                if static:
                    q = self._rotate(q, sin[readout], cos[readout])
                else:
                    q = self._rotate(q, sin[r_pos][:, :, None, :], cos[r_pos][:, :, None, :])
            scores = torch.einsum("kbhd,kbphd->kbhp", q, k) / cfg.attn_scale  # [K, B, H, P]
            if cfg.attention_dir == "causal":
                future = torch.arange(P, device=scores.device) > r_pos[:, :, None]  # [K, B, P]
                scores = scores.masked_fill(future[:, :, None, :], float("-inf"))
            z = torch.einsum("kbhp,kbphd->kbhd", scores.softmax(-1), v)  # [K, B, H, Dh]
            if mask_h is not None:
                z = z * mask_h[:, None, :, None]
            attn = torch.baddbmm(b_O[:, None], z.reshape(K, B, H * Dh), W_O.reshape(K, H * Dh, D))
            x_r = x_r + self._dropout(attn, (B, P, D), drop, r_pos)
            if not cfg.attn_only:
                x_r = x_r + self._mlp(blk, x_r, (B, P), drop, r_pos, ln, readout=True)
        assert x_r is not None
        if ln:
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

        (attention weights sum to 1 over p, and pruned heads are masked in every term).
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
        # the shared readout residual and query
        x_r = self._rows(W_E, tokens[:, :1, r])  # [K, 1, D]
        if learned:
            x_r = x_r + W_pos[:, r : r + 1]
        q = torch.baddbmm(b_Q.reshape(K, 1, H * Dh), x_r, W_Q.reshape(K, D, H * Dh)).view(K, H, Dh)
        X = torch.cat((W_E, W_pos), dim=1) if learned else W_E  # the rows every input is a sum of
        if rope:
            sin, cos = self.rotary[name]
            q = self._rotate(q, sin[r], cos[r])
            kE = torch.bmm(W_E, W_K.reshape(K, D, H * Dh)) + b_K.reshape(K, 1, H * Dh)  # [K, V, H*Dh]
            kc = kE.view(K, V, 1, H, Dh).expand(K, V, P, H, Dh)  # keys of every (token, position)
            kc = self._rotate(kc, sin[:P, None, :], cos[:P, None, :])
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
        img = self.tower("vision", images, 0)
        txt = self.tower("text", captions, text_readout)
        # the CLIP head in fp32 even under bf16 autocast: cosines scaled by up to 100 need more than 8 mantissa bits
        with torch.autocast(img.device.type, enabled=False):
            txt = torch.bmm(txt.float(), self.params["W_proj"])
            sim = torch.bmm(F.normalize(img.float(), dim=-1), F.normalize(txt, dim=-1).transpose(1, 2))  # [K, B, B]
        scale = self.params["logit_scale"].clamp(max=self.max_logit_scale).exp()
        logits = scale[:, None, None] * sim
        K, B, _ = logits.shape
        labels = self._labels.get((K, B))
        if labels is None:
            labels = self._labels[(K, B)] = torch.arange(B, device=logits.device).repeat(K)
        if valid is None:
            li = F.cross_entropy(logits.reshape(K * B, B), labels, reduction="none").view(K, B).mean(1)
            lt = F.cross_entropy(logits.transpose(1, 2).reshape(K * B, B), labels, reduction="none").view(K, B).mean(1)
            return 0.5 * (li + lt)
        # a short batch: valid rows see only valid columns (and vice versa); padded rows weigh 0
        inf = float("-inf")
        row_mask = valid[:, :, None] & ~valid[:, None, :]  # valid image i, padded caption j
        li = F.cross_entropy(logits.masked_fill(row_mask, inf).reshape(K * B, B), labels, reduction="none")
        lt = F.cross_entropy(
            logits.transpose(1, 2).masked_fill(row_mask, inf).reshape(K * B, B), labels, reduction="none"
        )
        w = valid.to(logits.dtype)
        n = w.sum(1)
        return 0.5 * ((li.view(K, B) * w).sum(1) + (lt.view(K, B) * w).sum(1)) / n


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


def _is_qkv(name: str) -> bool:
    return name.endswith(("attn.W_Q", "attn.W_K", "attn.W_V"))


def _mix_seeds(seeds: Sequence[int]) -> int:
    h = 1469598103934665603
    for s in seeds:
        h = ((h ^ (int(s) & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) % (1 << 63)
    return h


# ---------------------------------------------------------------------------------------------------------------------
# The optimizer
# ---------------------------------------------------------------------------------------------------------------------


class StackedAdamW:
    """AdamW over stacked parameters with per-member ``lr`` and ``weight_decay`` (torch's AdamW update rule).

    When every member has the same ``lr`` and ``weight_decay`` it is ``torch.optim.AdamW(fused=True)`` on the stacked
    tensors (elementwise, so each member's slice gets exactly the single-model update); otherwise the same formula
    with per-member factors (``torch._foreach_*`` ops). ``state[i]`` holds ``step``, ``exp_avg``, ``exp_avg_sq``
    of parameter ``i``, ``torch.optim.AdamW``'s layout with a leading model axis.

    Example:
        >>> p = nn.Parameter(torch.ones(2, 3))
        >>> opt = StackedAdamW([p], lr=[0.1, 0.2], weight_decay=[0.0, 0.0])
        >>> p.grad = torch.ones(2, 3)
        >>> opt.step()
        >>> [round(v, 4) for v in p.detach()[:, 0].tolist()]
        [0.9, 0.8]
    """

    def __init__(
        self,
        params: Sequence[nn.Parameter],
        lr: Sequence[float],
        weight_decay: Sequence[float],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        decay_masks: Sequence[torch.Tensor | None] | None = None,
        grad_masks: Sequence[torch.Tensor | None] | None = None,
    ):
        self.params = list(params)
        # per parameter, None or a 0/1 tensor of its stacked shape: decayed where 1 (TrainConfig.no_decay); the
        # gradient is kept where 1 (0: TrainConfig.frozen, never moved: zero gradient, zero Adam moments, no decay)
        self.decay_masks = list(decay_masks) if decay_masks is not None else [None] * len(self.params)
        self.grad_masks = list(grad_masks) if grad_masks is not None else [None] * len(self.params)
        if len(self.decay_masks) != len(self.params) or len(self.grad_masks) != len(self.params):
            raise ValueError("StackedAdamW needs one decay mask and one gradient mask (or None) per parameter")
        self.masked = any(m is not None for m in [*self.decay_masks, *self.grad_masks])
        self.lr, self.wd = [float(v) for v in lr], [float(v) for v in weight_decay]
        if not self.params or len(self.lr) != self.params[0].shape[0] or len(self.wd) != len(self.lr):
            raise ValueError("StackedAdamW needs one lr and one weight_decay per member (leading axis)")
        self.betas, self.eps = betas, eps
        dev = self.params[0].device
        self.state: list[dict[str, torch.Tensor]] = [
            {
                "step": torch.zeros((), dtype=torch.float32, device=dev),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
            for p in self.params
        ]
        self.fused = dev.type in ("cpu", "cuda")
        self._set_factors(self.lr, self.wd)

    def _set_factors(self, lr: list[float], wd: list[float]) -> None:
        self.lr, self.wd = lr, wd
        self.uniform = len(set(lr)) == 1 and len(set(wd)) == 1 and not self.masked
        if not self.uniform:
            dev = self.params[0].device
            lr_t, wd_t = torch.tensor(lr, device=dev), torch.tensor(wd, device=dev)
            self._lr = [lr_t.view(-1, *([1] * (p.ndim - 1))).to(p.dtype) for p in self.params]
            self._decay = []
            for p, mask in zip(self.params, self.decay_masks, strict=True):
                lw = (lr_t * wd_t).view(-1, *([1] * (p.ndim - 1))).to(p.dtype)
                self._decay.append(1 - lw if mask is None else 1 - lw * mask)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        idx = [i for i, p in enumerate(self.params) if p.grad is not None]
        for i in idx:
            if self.grad_masks[i] is not None:
                self.params[i].grad.mul_(self.grad_masks[i])
        grads = [self.params[i].grad for i in idx]
        m = [self.state[i]["exp_avg"] for i in idx]
        v = [self.state[i]["exp_avg_sq"] for i in idx]
        steps = [self.state[i]["step"] for i in idx]
        if self.uniform and self.fused:
            torch._foreach_add_(steps, 1)
            torch._fused_adamw_(
                params, grads, m, v, [], steps,
                lr=self.lr[0], beta1=b1, beta2=b2, weight_decay=self.wd[0], eps=self.eps,
                amsgrad=False, maximize=False,
            )  # fmt: skip
            return
        if self.fused and len(set(self.lr)) == 1:
            # per-member or masked decay, one lr: decay first (as AdamW does), then the fused kernel without decay
            torch._foreach_add_(steps, 1)
            torch._foreach_mul_(params, [self._decay[i] for i in idx])
            torch._fused_adamw_(
                params, grads, m, v, [], steps,
                lr=self.lr[0], beta1=b1, beta2=b2, weight_decay=0.0, eps=self.eps,
                amsgrad=False, maximize=False,
            )  # fmt: skip
            return
        torch._foreach_add_(steps, 1)
        step = float(steps[0].item())
        bc1 = 1 - b1**step
        bc2_sqrt = math.sqrt(1 - b2**step)
        if self.uniform:
            torch._foreach_mul_(params, 1 - self.lr[0] * self.wd[0])
        else:
            torch._foreach_mul_(params, [self._decay[i] for i in idx])
        torch._foreach_lerp_(m, grads, 1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, 1 - b2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        upd = torch._foreach_div(m, denom)
        if self.uniform:
            torch._foreach_mul_(upd, self.lr[0] / bc1)
        else:
            torch._foreach_mul_(upd, [self._lr[i] / bc1 for i in idx])
        torch._foreach_sub_(params, upd)

    def keep(self, members: Sequence[int], params: Sequence[nn.Parameter]) -> None:
        """Restrict to ``members`` after ``StackedCLIP.keep`` replaced the parameters with ``params``."""
        idx = torch.tensor(list(members), device=self.params[0].device)
        self.params = list(params)
        for st in self.state:
            st["exp_avg"] = st["exp_avg"].index_select(0, idx).clone()
            st["exp_avg_sq"] = st["exp_avg_sq"].index_select(0, idx).clone()
        self.decay_masks = [None if m is None else m.index_select(0, idx) for m in self.decay_masks]
        self.grad_masks = [None if m is None else m.index_select(0, idx) for m in self.grad_masks]
        self._set_factors([self.lr[i] for i in members], [self.wd[i] for i in members])


# ---------------------------------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One run of a batched group: the three configs ``training.Trainer`` takes, plus optional starting weights."""

    model_cfg: CLIPConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig
    name: str | None = None  # sub-directory of the group's out_dir (default: "member{index}")
    init_model: CLIP1D | None = None  # start from these weights instead of CLIP1D(model_cfg, seed)


class _Stream:
    """A member's per-epoch data permutations, drawn from its generator exactly as ``Trainer.run`` draws them."""

    def __init__(self, m: int, bs: int, seed: int):
        self.m, self.bs = m, bs
        self.spe = -(-m // bs)  # steps per epoch (the last batch may be short)
        self.gen = torch.Generator().manual_seed(seed)
        self.next_epoch = 0  # the next epoch whose permutation gen will draw
        self.states: dict[int, torch.Tensor] = {}  # epoch -> gen state before drawing its permutation
        self.perms: dict[int, torch.Tensor] = {}

    def perm(self, epoch: int) -> torch.Tensor:
        while self.next_epoch <= epoch:
            self.states[self.next_epoch] = self.gen.get_state()
            self.perms[self.next_epoch] = torch.randperm(self.m, generator=self.gen)
            self.next_epoch += 1
        return self.perms[epoch]

    def state_before(self, epoch: int) -> torch.Tensor:
        """Generator state before epoch ``epoch``'s permutation (``Trainer``'s ``rng.data`` after epoch-1)."""
        if epoch == self.next_epoch:
            return self.gen.get_state()
        return self.states[epoch]

    def restore(self, epoch: int, state: torch.Tensor) -> None:
        self.gen.set_state(state)
        self.next_epoch = epoch
        self.states, self.perms = {}, {}

    def forget_before(self, epoch: int) -> None:
        for e in [e for e in self.perms if e < epoch]:
            del self.perms[e]
            self.states.pop(e, None)


class BatchedTrainer:
    """Train ``members`` together (see the module docstring); each writes a ``Trainer``-style run directory.

    Args:
        members: the runs; their shapes must agree (``group_key``).
        out_dir: the group directory; member ``i`` writes into ``out_dir / members[i].name`` and the group's own
            resumable state goes to ``out_dir / "group_checkpoint.safetensors"``. None: write nothing.
        resume: continue from the group checkpoint (finished members are not retrained).
        dropout_rng: ``"matched"`` (masks identical to ``Trainer``'s; CPU) or ``"fast"``.
        group_checkpoint_every: global steps between group checkpoints (default: the shortest member's
            ``checkpoint_every`` epochs).
        amp: run matmuls in bfloat16 autocast (measured in the benchmark; fp32 is the default).
    """

    def __init__(
        self,
        members: Sequence[Member],
        out_dir: str | Path | None,
        *,
        resume: bool = False,
        dropout_rng: DropoutRNG = "matched",
        group_checkpoint_every: int | None = None,
        amp: bool = False,
        compile: bool = False,  # noqa: A002
        member_dirs: Sequence[str | Path] | None = None,
    ):
        if not members:
            raise ValueError("BatchedTrainer needs at least one member")
        for i, mb in enumerate(members):
            if not isinstance(mb, Member):
                raise TypeError(f"members[{i}] is a {type(mb).__name__}, expected batched.Member")
            if mb.model_cfg.n_labels != mb.data_cfg.n_labels:
                raise ValueError(
                    f"member {i}: model n_labels={mb.model_cfg.n_labels} but data n_labels={mb.data_cfg.n_labels}"
                )
            if mb.model_cfg.vision.d_image != mb.data_cfg.d_image:
                raise ValueError(
                    f"member {i}: model d_image={mb.model_cfg.vision.d_image} but data d_image={mb.data_cfg.d_image}"
                )
        keys = [group_key(m.model_cfg, m.data_cfg, m.train_cfg) for m in members]
        if len(set(keys)) > 1:
            bad = next(i for i, k in enumerate(keys) if k != keys[0])
            raise ValueError(
                f"member {bad} cannot train in one group with member 0: shapes, batch size, betas, eps or device "
                f"differ (see batched.group_key)"
            )
        names = [m.name or f"member{i}" for i, m in enumerate(members)]
        if len(set(names)) != len(names):
            raise ValueError(f"member names must be distinct, got {names}")
        self.members = list(members)
        self.names = names
        self.out_dir = Path(out_dir) if out_dir is not None else None
        if member_dirs is not None and (len(member_dirs) != len(members) or out_dir is None):
            raise ValueError("member_dirs needs an out_dir and one directory per member")
        self._member_dirs = None if member_dirs is None else [Path(d) for d in member_dirs]
        if compile and dropout_rng == "matched" and any(m.model_cfg.vision.dropout for m in members):
            raise ValueError("compile=True needs dropout_rng='fast' (matched dropout draws from per-member generators)")
        self.dropout_rng: DropoutRNG = dropout_rng
        self.amp = amp
        self.compile = compile
        tc0 = members[0].train_cfg
        self.device = torch.device(tc0.device)
        self.bs = tc0.batch_size or members[0].data_cfg.batch_size

        # data: every member's training pairs in one padded tensor per tower, remapped to the padded vocabulary
        self.datasets: list[Dataset] = [build_dataset(m.data_cfg) for m in members]
        pairs = [ds.training_pairs() for ds in self.datasets]
        self.streams = [_Stream(len(im), self.bs, m.train_cfg.seed) for (im, _), m in zip(pairs, members, strict=True)]
        self.total_steps = [m.train_cfg.epochs * s.spe for m, s in zip(members, self.streams, strict=True)]

        self._caller_rng = torch.get_rng_state()  # restored at the end of __init__ (and around run)
        models = []
        for m in members:
            torch.manual_seed(m.train_cfg.seed)  # as Trainer does before building its model
            model = m.init_model if m.init_model is not None else CLIP1D(m.model_cfg, seed=m.train_cfg.seed)
            models.append(model)
        seeds = [m.train_cfg.seed for m in members]
        self.model = StackedCLIP(models, dropout_rng, seeds=seeds)
        self.model.train()
        if dropout_rng == "fast":
            torch.manual_seed(_mix_seeds(seeds))  # the group's dropout stream
        self.member_cfgs = [mdl.cfg for mdl in models]  # with init seeds filled in (what Trainer saves)
        m_max = max(len(im) for im, _ in pairs)
        Pv, Pt = pairs[0][0].shape[1], pairs[0][1].shape[1]
        K = len(members)
        images = torch.zeros(K, m_max, Pv, dtype=torch.long)
        captions = torch.zeros(K, m_max, Pt + 1, dtype=torch.long)  # last column: text readout position
        for k, (im, cap) in enumerate(pairs):
            eot = self.model.tower_cfg["text"].vocab.eot
            cap_r = self.model.remap_tokens(cap, k)
            images[k, : len(im)] = self.model.remap_tokens(im, k)
            captions[k, : len(cap), :Pt] = cap_r
            captions[k, : len(cap), Pt] = (cap_r == eot).int().argmax(-1)
        cls = self.model.tower_cfg["vision"].vocab.cls
        if not all(bool((images[k, : len(im), 0] == cls).all()) for k, (im, _) in enumerate(pairs)):
            raise ValueError("every training image must start with CLS")
        r_all = torch.cat([captions[k, : len(cap), Pt] for k, (_, cap) in enumerate(pairs)])
        # one EOT position for every caption (the paper's templates): a static readout
        self.text_readout: int | None = int(r_all[0]) if bool((r_all == r_all[0]).all()) else None
        self.m_max = m_max
        self._images_all, self._captions_all = images.to(self.device), captions.to(self.device)
        self.Pt = Pt

        decay_masks, grad_masks = self._masks(models)
        self.opt = StackedAdamW(
            list(self.model.flat),
            lr=[m.train_cfg.lr for m in members],
            weight_decay=[m.train_cfg.weight_decay for m in members],
            betas=tc0.betas,
            eps=tc0.eps,
            decay_masks=decay_masks,
            grad_masks=grad_masks,
        )
        self.active = list(range(K))  # member indices still training, in stack order
        self.step = 0
        self.elapsed = 0.0
        self.loss_sum = torch.zeros(K, device=self.device)
        self.n_loss = [0] * K
        self.finished: dict[int, TrainRun] = {}
        self.last_metrics: dict[int, dict[str, Any]] = {}
        if group_checkpoint_every is None:
            pairs_ms = zip(members, self.streams, strict=True)
            group_checkpoint_every = min(m.train_cfg.checkpoint_every * s.spe for m, s in pairs_ms)
        if group_checkpoint_every < 1:
            raise ValueError(f"group_checkpoint_every must be >= 1, got {group_checkpoint_every}")
        self.group_checkpoint_every = group_checkpoint_every
        self._eval_models: dict[int, CLIP1D] = {}

        self.locks: list[RunLock] = []
        if self.out_dir is not None:
            self.group_ckpt = self.out_dir / "group_checkpoint.safetensors"
            try:
                for i in range(K):
                    check_run_dir(self.member_dir(i), f"member {names[i]!r}'s directory")
                self.locks.append(RunLock(self.out_dir, "batched group directory").acquire())
                for i in range(K):
                    if Path(self.member_dir(i)).resolve() != self.out_dir.resolve():  # train_fast: one folder
                        lock = RunLock(self.member_dir(i), f"member {names[i]!r}'s run directory")
                        self.locks.append(lock.acquire())
                for d in [self.out_dir, *(self.member_dir(i) for i in range(K))]:
                    clean_stale_tmp(d)
                if resume:
                    self._resume()
                else:
                    used = [n for i, n in enumerate(names) if (self.member_dir(i) / "metrics.jsonl").exists()]
                    if self.group_ckpt.exists() or used:
                        raise FileExistsError(
                            f"{str(self.out_dir)!r} already holds runs {used}; resume them (resume=True) or use a new "
                            "directory"
                        )
            except BaseException:
                self.release_locks()
                torch.set_rng_state(self._caller_rng)
                raise
        elif resume:
            torch.set_rng_state(self._caller_rng)
            raise ValueError("resume=True needs an out_dir")
        self._rng = torch.get_rng_state()  # the group's own stream (dropout); the caller's is given back
        torch.set_rng_state(self._caller_rng)

    def release_locks(self) -> None:
        """Release the group's and members' directory locks (done at the end of ``run``)."""
        for lock in reversed(self.locks):
            lock.release()

    def _masks(self, models: Sequence[CLIP1D]) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """Stacked decay and gradient masks (``param_groups``) of every parameter; None where no member needs one."""
        decay: list[torch.Tensor | None] = []
        grad: list[torch.Tensor | None] = []
        for name, p in zip(self.model.names, self.model.flat, strict=True):
            dm, gm, any_d, any_g = [], [], False, False
            for mb, model in zip(self.members, models, strict=True):
                shape = model.state_dict()[name].shape
                tc = mb.train_cfg
                frozen = is_frozen(name, tc.frozen)
                mask = 0.0 if frozen else decay_mask(name, model.cfg, tc.no_decay)
                any_d |= mask is not None
                any_g |= frozen
                dm.append(torch.ones(shape) if mask is None else torch.as_tensor(mask).expand(shape).clone())
                gm.append(torch.full(shape, 0.0 if frozen else 1.0))
            decay.append(self.model.stack(name, dm).to(p.dtype) if any_d else None)
            grad.append(self.model.stack(name, gm).to(p.dtype) if any_g else None)
        return decay, grad

    # ---- member views ---------------------------------------------------------------------------------------------
    def member_dir(self, i: int) -> Path | None:
        """Where member ``i`` writes its run files (None without an out_dir)."""
        if self.out_dir is None:
            return None
        return self._member_dirs[i] if self._member_dirs is not None else self.out_dir / self.names[i]

    def member_model(self, i: int) -> CLIP1D:
        """Member ``i`` (an index into ``members``) as a ``CLIP1D`` in eval mode (a copy of its current weights)."""
        if i not in self.active:
            raise ValueError(f"member {i} is not training any more; see finished[{i}].model")
        if i not in self._eval_models:
            m = CLIP1D(self.member_cfgs[i])
            m.data_config = self.members[i].data_cfg
            self._eval_models[i] = m.to(self.device)
        model = self._eval_models[i]
        model.load_state_dict(self.model.member_state_dict(self.active.index(i)))
        return model.eval()

    def _configs(self, i: int) -> dict[str, Any]:
        m = self.members[i]
        return {
            "model_config": self.member_cfgs[i].to_dict(),
            "data_config": m.data_cfg.to_dict(),
            "train_config": m.train_cfg.to_dict(),
        }

    def _member_optimizer_tensors(self, k: int) -> dict[str, torch.Tensor]:
        """``Trainer``-format optimizer state (``optim.{i}.{step,exp_avg,exp_avg_sq}``) of stack row ``k``."""
        out = {}
        for i, (name, st) in enumerate(zip(self.model.names, self.opt.state, strict=True)):
            out[f"optim.{i}.step"] = st["step"].detach().cpu().clone()
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"optim.{i}.{key}"] = self.model.to_member(k, name, st[key].detach())
        return out

    def _save_member_checkpoint(self, i: int, epoch: int) -> None:
        """A ``Trainer``-format training checkpoint of member ``i`` at the end of ``epoch``."""
        k = self.active.index(i)
        tensors = {f"model.{n}": v for n, v in self.model.member_state_dict(k).items()}
        tensors.update(self._member_optimizer_tensors(k))
        if self.dropout_rng == "matched":
            tensors["rng.torch"] = self.model.generators[k].get_state()
        else:
            tensors["rng.torch"] = torch.get_rng_state()  # fast mode draws from the global RNG
        tensors["rng.data"] = self.streams[i].state_before(epoch)
        meta = {
            **self._configs(i),
            "train_state": {"epoch": epoch, "step": self.step, "elapsed_s": self.elapsed},
            "batched": {"dropout_rng": self.dropout_rng, "group_size": len(self.members)},
        }
        save_tensors(self.member_dir(i) / "checkpoint.safetensors", tensors, meta)
        if self.members[i].train_cfg.keep_snapshots:
            save_snapshot(self.member_model(i), self.member_dir(i), epoch, self.members[i].data_cfg)

    # ---- group checkpoint -----------------------------------------------------------------------------------------
    def save_group_checkpoint(self) -> None:
        """Everything needed to continue the whole group from this step (any step, also mid-epoch)."""
        if self.out_dir is None:
            return
        tensors: dict[str, torch.Tensor] = {}
        for name, p in zip(self.model.names, self.model.flat, strict=True):
            tensors[f"stack.{name}"] = p.detach()
        for i, st in enumerate(self.opt.state):
            for key, t in st.items():
                tensors[f"optim.{i}.{key}"] = t
        for k, i in enumerate(self.active):
            s = self.streams[i]
            tensors[f"rng.data.{i}"] = s.state_before(self.step // s.spe)
            if self.dropout_rng == "matched":
                tensors[f"rng.dropout.{i}"] = self.model.generators[k].get_state()
        if self.dropout_rng == "fast":
            tensors["rng.dropout"] = torch.get_rng_state()
            if self.device.type == "cuda":
                tensors["rng.dropout_cuda"] = torch.cuda.get_rng_state(self.device)
        tensors["loss_sum"] = self.loss_sum
        meta = {
            "group_state": {
                "step": self.step,
                "elapsed_s": self.elapsed,
                "active": self.active,
                "n_loss": self.n_loss,
                "names": self.names,
                "dropout_rng": self.dropout_rng,
            },
            "members": [self._configs(i) for i in range(len(self.members))],
        }
        save_tensors(self.group_ckpt, tensors, meta)

    def _resume(self) -> None:
        if not self.group_ckpt.exists():
            hint = ""
            dirs = self._member_dirs or []
            if dirs and all((d / "checkpoint.safetensors").exists() for d in dirs):
                hint = (
                    " (a finished group keeps only each run's Trainer-format checkpoint.safetensors: continue "
                    "those runs with training.Trainer, i.e. `hooked-clip1d train --engine standard --resume`)"
                )
            raise FileNotFoundError(f"cannot resume: no group checkpoint at {str(self.group_ckpt)!r}{hint}")
        tensors, meta = read_tensors(self.group_ckpt)
        gs = meta.get("group_state")
        if not isinstance(gs, dict) or "members" not in meta:
            raise CheckpointError(f"{str(self.group_ckpt)!r} is not a batched-group checkpoint")
        if gs["names"] != self.names:
            raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: it holds members {gs['names']}")
        if gs["dropout_rng"] != self.dropout_rng:
            raise CheckpointError(
                f"cannot resume {str(self.group_ckpt)!r}: it was trained with dropout_rng={gs['dropout_rng']!r}"
            )
        for i, saved in enumerate(meta["members"]):
            now = self._configs(i)
            for key in ("model_config", "data_config"):
                if canonical_config(key, saved[key]) != now[key]:
                    raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: member {i}'s {key} differs")
            old_t, new_t = comparable_train_config(saved["train_config"]), comparable_train_config(now["train_config"])
            if old_t != new_t:
                raise CheckpointError(
                    f"cannot resume {str(self.group_ckpt)!r}: member {i}'s train_config differs: {old_t} vs {new_t}"
                )
        active = [int(i) for i in gs["active"]]
        self.step = int(gs["step"])
        self.elapsed = float(gs["elapsed_s"])
        if active != self.active:
            self.model.keep(active)
            self.opt.keep(active, list(self.model.flat))
        with torch.no_grad():
            for name, p in zip(self.model.names, self.model.flat, strict=True):
                p.copy_(tensors[f"stack.{name}"])
            for i, st in enumerate(self.opt.state):
                for key in st:
                    st[key].copy_(tensors[f"optim.{i}.{key}"])
        self.loss_sum = tensors["loss_sum"].to(self.device).clone()
        self.n_loss = [int(v) for v in gs["n_loss"]]
        for k, i in enumerate(active):
            s = self.streams[i]
            s.restore(self.step // s.spe, tensors[f"rng.data.{i}"])
            if self.dropout_rng == "matched":
                self.model.generators[k].set_state(tensors[f"rng.dropout.{i}"])
        if self.dropout_rng == "fast":
            torch.set_rng_state(tensors["rng.dropout"])
            if "rng.dropout_cuda" in tensors and self.device.type == "cuda":
                torch.cuda.set_rng_state(tensors["rng.dropout_cuda"], self.device)
        self.active = active
        for i in range(len(self.members)):
            if i in active:  # drop metric lines written after the checkpoint (they will be written again)
                path = self.member_dir(i) / "metrics.jsonl"
                if path.exists():
                    keep = [ln for ln in read_metrics(path) if ln["step"] <= self.step]
                    atomic_write_text(path, "".join(json.dumps(ln) + "\n" for ln in keep))
            else:
                summary = self.member_dir(i) / "summary.json"
                if not summary.exists():
                    raise CheckpointError(f"member {self.names[i]!r} is marked finished but has no {summary}")

    # ---- loop -----------------------------------------------------------------------------------------------------
    def _chunk(self, n_steps: int) -> tuple[torch.Tensor, torch.Tensor, list[list[int] | None]]:
        """Index batches of the next ``n_steps`` global steps: idx [S, K, bs] (into each member's pairs),
        valid [S, K, bs], and per step None (all batches full) or each member's number of valid rows."""
        K, bs = len(self.active), self.bs
        idx = torch.zeros(n_steps, K, bs, dtype=torch.long)
        valid = torch.ones(n_steps, K, bs, dtype=torch.bool)
        for k, i in enumerate(self.active):
            st = self.streams[i]
            s = self.step
            end = self.step + n_steps
            while s < end:
                epoch, off = divmod(s, st.spe)
                perm = st.perm(epoch)
                n = min(st.spe - off, end - s)
                padded = torch.zeros(st.spe * bs, dtype=torch.long)
                padded[: st.m] = perm
                block = padded.view(st.spe, bs)[off : off + n]
                counts = (torch.arange(off, off + n) * bs).neg().add(st.m).clamp(max=bs)  # valid rows per step
                idx[s - self.step : s - self.step + n, k] = block
                valid[s - self.step : s - self.step + n, k] = torch.arange(bs)[None, :] < counts[:, None]
                s += n
            st.forget_before(self.step // st.spe)
        counts = valid.sum(-1)  # [S, K]
        short = [c if min(c) < bs else None for c in counts.tolist()]
        offs = (torch.tensor(self.active) * self.m_max)[None, :, None]
        return (idx + offs).to(self.device), valid.to(self.device), short

    def _next_event(self) -> int:
        """The next global step at which some member evaluates, checkpoints or finishes, or the group checkpoints."""
        nxt = (self.step // self.group_checkpoint_every + 1) * self.group_checkpoint_every
        for i in self.active:
            m, s = self.members[i].train_cfg, self.streams[i]
            nxt = min(nxt, self.total_steps[i])
            every = math.gcd(m.eval_every, m.checkpoint_every) * s.spe
            nxt = min(nxt, (self.step // every + 1) * every)
        return nxt

    def _write_metrics(self, i: int, epoch: int) -> None:
        k = self.active.index(i)
        model = self.member_model(i)
        metrics = evaluate(model, self.datasets[i])
        self.last_metrics[i] = metrics
        line = {
            "epoch": epoch,
            "step": self.step,
            "loss": (self.loss_sum[k] / max(self.n_loss[i], 1)).item(),
            "elapsed_s": round(self.elapsed, 2),
            "eval": metrics,
        }
        self.loss_sum[k] = 0.0
        self.n_loss[i] = 0
        if self.out_dir is not None:
            with open(self.member_dir(i) / "metrics.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")

    def _finish(self, i: int) -> TrainRun:
        model = self.member_model(i)
        self._eval_models.pop(i, None)
        m = self.members[i]
        metrics = self.last_metrics.get(i) or evaluate(model, self.datasets[i])
        epochs = m.train_cfg.epochs
        if self.out_dir is not None:
            d = self.member_dir(i)
            save_model(model, d / "model.safetensors", m.data_cfg, extra={"train_config": m.train_cfg.to_dict()})
            summary = {
                "epochs": epochs,
                "steps": self.step,
                "train_seconds": round(self.elapsed, 1),
                "steps_per_second": round(self.step / max(self.elapsed, 1e-9), 1),
                "final_metrics": metrics,
                "batched": {"group_size": len(self.members), "dropout_rng": self.dropout_rng},
            }
            atomic_write_text(d / "summary.json", json.dumps(summary, indent=2))
        return TrainRun(model, self.member_dir(i) or Path("."), epochs, self.step, metrics, self.elapsed)

    def _events(self) -> None:
        """Evaluate / checkpoint / finish the members whose epoch boundary is this step."""
        done = []
        for i in list(self.active):
            m, st = self.members[i].train_cfg, self.streams[i]
            if self.step % st.spe:
                continue
            epoch = self.step // st.spe
            last = self.step == self.total_steps[i]
            if epoch % m.eval_every == 0 or last:
                self._write_metrics(i, epoch)
            if self.out_dir is not None and (epoch % m.checkpoint_every == 0 or last):
                self._save_member_checkpoint(i, epoch)
            if last:
                done.append(i)
        for i in done:
            self.finished[i] = self._finish(i)
        if done:
            keep_rows = [k for k, i in enumerate(self.active) if i not in done]
            if keep_rows:
                self.loss_sum = self.loss_sum[keep_rows].clone()
                self.model.keep(keep_rows)
                self.opt.keep(keep_rows, list(self.model.flat))
            self.active = [i for i in self.active if i not in done]
        if self.active and (done or self.step % self.group_checkpoint_every == 0):
            self.save_group_checkpoint()

    def _write_configs(self) -> None:
        if self.out_dir is None:
            return
        prov = _provenance()
        for i in range(len(self.members)):
            d = self.member_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            if not (d / "config.json").exists():
                body = {**self._configs(i), "provenance": prov, "batched": {"group": self.names}}
                atomic_write_text(d / "config.json", json.dumps(body, indent=2))

    def run(
        self,
        progress: bool = True,
        max_steps: int | None = None,
        chunk_steps: int = 512,
        desc: str | None = None,
        position: int | None = None,
    ) -> list[TrainRun]:
        """Train until every member finished (or ``max_steps`` global steps were taken in this call, then save a
        group checkpoint and stop); return the finished members' ``TrainRun``s in member order.

        One progress bar for the whole group (``desc``, on line ``position`` when several groups share a terminal),
        in global steps (the longest member's count)."""
        for lock in self.locks:
            if not lock.held:
                lock.acquire()
        try:
            return self._run(progress, max_steps, chunk_steps, desc, position)
        finally:
            self.release_locks()

    def _run(
        self, progress: bool, max_steps: int | None, chunk_steps: int, desc: str | None, position: int | None
    ) -> list[TrainRun]:
        self._write_configs()
        threads = max((m.train_cfg.threads or 0) for m in self.members)
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        total = max(self.total_steps)
        stop_at = total if max_steps is None else min(total, self.step + max_steps)
        bar = tqdm(total=total, initial=self.step, desc=desc or f"group of {len(self.members)}", unit="step",
                   disable=not progress, mininterval=1.0, position=position)  # fmt: skip
        t0 = time.perf_counter() - self.elapsed
        caller_rng = torch.get_rng_state()
        torch.set_rng_state(self._rng)
        model, opt = self.model, self.opt
        if self.compile and getattr(self, "_compiled_loss", None) is None:
            # inductor's attention fusion (fx_passes/fuse_attention) rewrites the stacked [model, batch, head, ...]
            # attention into scaled_dot_product_attention wrongly: on the full preset the compiled loss silently
            # differs from eager (and on small shapes fails to compile); without the pattern passes it matches eager
            self._compiled_loss = torch.compile(model.loss, options={"pattern_matcher": False})
        loss_fn = self._compiled_loss if self.compile else model.loss
        Pt = self.Pt
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)
        try:
            while self.active and self.step < stop_at:
                nxt = min(self._next_event(), stop_at)
                n = min(nxt - self.step, chunk_steps)
                idx, valid, short = self._chunk(n)
                K, bs = idx.shape[1], idx.shape[2]
                imgs_flat = self._images_all.view(-1, self._images_all.shape[-1])
                caps_flat = self._captions_all.view(-1, self._captions_all.shape[-1])
                for j in range(n):
                    flat = idx[j].view(-1)
                    images = imgs_flat.index_select(0, flat).view(K, bs, -1)
                    caps = caps_flat.index_select(0, flat).view(K, bs, -1)
                    with autocast:
                        sj = short[j]  # None: every batch full; else each member's valid rows
                        r_t = caps[..., Pt] if self.text_readout is None else self.text_readout
                        v_j = None if sj is None else valid[j]
                        n_v = sj if self.dropout_rng == "matched" else None
                        losses = loss_fn(images, caps[..., :Pt], r_t, v_j, n_v)
                    opt.zero_grad()
                    losses.sum().backward()
                    opt.step()
                    self.loss_sum += losses.detach().float()
                    self.step += 1
                bar.update(n)
                bad = [i for k, i in enumerate(self.active) if not bool(torch.isfinite(self.loss_sum[k]))]
                if bad:
                    raise FloatingPointError(
                        f"training loss of {[self.names[i] for i in bad]} is not finite in steps "
                        f"{self.step - n + 1}-{self.step}; the group stopped, its last good checkpoints are kept"
                    )
                for i in self.active:
                    self.n_loss[i] += n
                self.elapsed = time.perf_counter() - t0
                if self.step == nxt:
                    self._events()
                    if self.active:
                        bar.set_postfix(active=len(self.active), refresh=False)
            self.elapsed = time.perf_counter() - t0
            if self.active and self.step % self.group_checkpoint_every:
                self.save_group_checkpoint()  # stopped early (max_steps): make it resumable from here
        finally:
            bar.close()
            torch.set_num_threads(old_threads)
            self._rng = torch.get_rng_state()
            torch.set_rng_state(caller_rng)
        return [self.finished[i] for i in sorted(self.finished)]


def train_batched(
    members: Sequence[Member],
    out_dir: str | Path | None,
    *,
    resume: bool = False,
    progress: bool = True,
    dropout_rng: DropoutRNG = "matched",
) -> list[TrainRun]:
    """Train ``members`` as one batched group (see ``BatchedTrainer``); returns one ``TrainRun`` per member.

    Example:
        >>> from hooked_clip1d.clip import CLIPConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> runs = train_batched([Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=1))],
        ...                      None, progress=False)
        >>> runs[0].epoch, runs[0].step
        (1, 2)
    """
    return BatchedTrainer(members, out_dir, resume=resume, dropout_rng=dropout_rng).run(progress=progress)


def train_fast(
    model_cfg: CLIPConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    dropout_rng: DropoutRNG = "matched",
    compile: bool = False,  # noqa: A002
    init_model: CLIP1D | None = None,
) -> TrainRun:
    """``training.train`` on the batched engine (K = 1): the same files in ``out_dir``, the same trajectory to float
    rounding (``dropout_rng="matched"``), 3-5x the speed; resumable from ``out_dir``'s group checkpoint.

    Example:
        >>> import tempfile
        >>> from hooked_clip1d.clip import CLIPConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> run = train_fast(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, batch_size=16),
        ...                  tempfile.mkdtemp(), progress=False)
        >>> run.epoch, run.step, sorted(run.final_metrics)
        (2, 8, ['train', 'val_seen', 'val_single', 'val_unseen'])
    """
    out = Path(out_dir)
    trainer = BatchedTrainer(
        [Member(model_cfg, data_cfg, train_cfg, init_model=init_model)],
        out,
        resume=resume,
        dropout_rng=dropout_rng,
        compile=compile,
        member_dirs=[out],
    )
    runs = trainer.run(progress=progress, desc="train")
    return runs[0]
