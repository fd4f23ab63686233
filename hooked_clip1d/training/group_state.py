"""``GroupState``: a batched group at one step, as one object.

It holds the members and their data (datasets, per-epoch data order, the training pairs padded into one tensor per
tower), the stacked model and its optimizer, where the loop stands (step, members still training, the loss sums) and
where the members' files go. ``batched.BatchedTrainer`` builds it and runs the loop on it; the group's files
(``group_io.GroupFiles``) and its whole-step CUDA graph (``graph_step.StepGraph``) receive it, so neither imports
the trainer. ``losses`` (one step's forward on a batch of table rows) and ``batches`` (the index batches of the next
steps) are the two pieces of the step that both the eager loop and the graph use.

Example:
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> from hooked_clip1d.settings import DataConfig, TrainConfig
    >>> from hooked_clip1d.training.batched import BatchedTrainer, Member
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
    >>> state = BatchedTrainer([Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2,
    ...     batch_size=16, seed=s)) for s in (0, 1)], None).state
    >>> state.tables.images.shape, state.active, state.step  # [K, pairs, n_ctx]: every member's training images
    (torch.Size([2, 54, 11]), [0, 1], 0)
    >>> idx, valid, short = state.batches(2)  # the next two steps' rows of the tables, [steps, K, batch]
    >>> idx.shape, state.losses(state.model.loss, idx[0].view(-1), None, None).shape
    (torch.Size([2, 2, 16]), torch.Size([2]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float, Int

from hooked_clip1d.data.dataset import Dataset, EpochPermutations
from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.training.members import Member
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW
from hooked_clip1d.training.stacked_ops import DropoutRNG
from hooked_clip1d.training.trainer import TrainRun


@dataclass(eq=False)
class PairTables:
    """Every member's training pairs in one padded tensor per tower on the device, in the padded vocabulary (built
    by ``pair_tables``); a batch is a set of rows of them (``GroupState.losses``)."""

    images: Int[torch.Tensor, "K pairs n_ctx"]
    captions: Int[torch.Tensor, "K pairs caption_len_plus_1"]  # the last column: the caption's readout position
    text_readout: int | None  # the readout position when every caption has the same one (the paper's templates)


def pair_tables(model: StackedCLIP, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> PairTables:
    """The members' (images, captions) training pairs as ``PairTables`` on ``model``'s device, remapped to its
    padded vocabulary; a caption's readout position is its first EOT. Images must start with CLS."""
    m_max = max(len(im) for im, _ in pairs)
    Pv, Pt = pairs[0][0].shape[1], pairs[0][1].shape[1]
    K = len(pairs)
    images = torch.zeros(K, m_max, Pv, dtype=torch.long)
    captions = torch.zeros(K, m_max, Pt + 1, dtype=torch.long)  # last column: text readout position
    eot = model.tower_cfg["text"].vocab.eot
    for k, (im, cap) in enumerate(pairs):
        cap_r = model.remap_tokens(cap, k)
        images[k, : len(im)] = model.remap_tokens(im, k)
        captions[k, : len(cap), :Pt] = cap_r
        captions[k, : len(cap), Pt] = (cap_r == eot).int().argmax(-1)
    cls = model.tower_cfg["vision"].vocab.cls
    if not all(bool((images[k, : len(im), 0] == cls).all()) for k, (im, _) in enumerate(pairs)):
        raise ValueError("every training image must start with CLS")
    r_all = torch.cat([captions[k, : len(cap), Pt] for k, (_, cap) in enumerate(pairs)])
    readout = int(r_all[0]) if bool((r_all == r_all[0]).all()) else None  # a static readout
    return PairTables(images.to(model.device), captions.to(model.device), readout)


@dataclass(eq=False)
class GroupState:
    """A batched group at one step (module docstring). Member indices ``i`` index ``members``; stack rows ``k``
    index ``active`` (the members still training, in stack order): row ``k`` of every stacked tensor is member
    ``active[k]``."""

    # the members, fixed for the group's life
    members: list[Member]
    names: list[str]
    member_cfgs: list[CLIPConfig]  # the members' model configs with the init seeds filled in (what Trainer saves)
    datasets: list[Dataset]
    streams: list[EpochPermutations]  # each member's per-epoch data order (Trainer's generator calls)
    total_steps: list[int]
    tables: PairTables
    batch_size: int
    # the stacked members still training and their optimizer
    model: StackedCLIP
    opt: StackedAdamW
    dropout_rng: DropoutRNG
    device: torch.device
    # where the members write (None: nothing is written)
    out_dir: Path | None
    member_dirs: list[Path] | None = None  # default: out_dir / name
    # where the loop stands
    active: list[int] = field(default_factory=list)
    step: int = 0  # global steps taken
    elapsed: float = 0.0  # seconds of training
    loss_sum: Float[torch.Tensor, " K"] | None = None  # each active member's loss summed since its last metrics line
    n_loss: list[int] = field(default_factory=list)  # steps in that sum, per member
    finished: dict[int, TrainRun] = field(default_factory=dict)
    last_metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    eval_models: dict[int, CLIP1D] = field(default_factory=dict)  # a CLIP1D per member, reused for evaluations

    def __post_init__(self) -> None:
        if not self.active:
            self.active = list(range(len(self.members)))
        if self.loss_sum is None:
            self.loss_sum = torch.zeros(len(self.active), device=self.device)
        if not self.n_loss:
            self.n_loss = [0] * len(self.members)

    # ---- members ----------------------------------------------------------------------------------------------------
    def member_dir(self, i: int) -> Path | None:
        """Where member ``i`` writes its run files (None without an out_dir)."""
        if self.out_dir is None:
            return None
        return self.member_dirs[i] if self.member_dirs is not None else self.out_dir / self.names[i]

    def member_model(self, i: int) -> CLIP1D:
        """Member ``i`` as a ``CLIP1D`` in eval mode (its current weights, in a model kept for the next call)."""
        if i not in self.active:
            raise ValueError(f"member {i} is not training any more; see finished[{i}].model")
        if i not in self.eval_models:
            m = CLIP1D(self.member_cfgs[i])
            m.data_config = self.members[i].data_cfg
            self.eval_models[i] = m.to(self.device)
        model = self.eval_models[i]
        model.load_state_dict(self.model.member_state_dict(self.active.index(i)))
        return model.eval()

    def run_config(self, i: int) -> RunConfig:
        """Member ``i``'s run (its model config with the init seeds filled in, as ``Trainer`` saves it)."""
        return dataclasses.replace(self.members[i].run, model=self.member_cfgs[i])

    def configs(self, i: int) -> dict[str, Any]:
        """Member ``i``'s three configs as its ``config.json`` and checkpoints hold them."""
        return self.run_config(i).to_dict()

    def keep(self, active: list[int]) -> None:
        """Go on with the members ``active`` only (a subset of ``self.active``, in its order): the finished leave
        the stack, the model, the optimizer state and the loss sums."""
        if active == self.active:
            return
        rows = [self.active.index(i) for i in active]
        if rows:
            self.loss_sum = self.loss_sum[rows].clone()
            self.model.keep(rows)
            self.opt.keep(rows, list(self.model.flat))
        self.active = list(active)

    # ---- the step ---------------------------------------------------------------------------------------------------
    def losses(
        self,
        loss_fn: Callable[..., torch.Tensor],
        rows: Int[torch.Tensor, " K_times_batch"],
        valid: Bool[torch.Tensor, "K batch"] | None,
        n_valid: list[int] | None,
    ) -> Float[torch.Tensor, " K"]:
        """Each active member's loss on the batch whose rows of the pair tables are ``rows`` (stack row k's batch is
        ``rows[k * batch_size : (k + 1) * batch_size]``, offset into the flattened tables); ``valid``: the batch mask,
        or None when every batch is full; ``n_valid``: each member's number of valid rows (matched dropout).
        ``loss_fn`` is ``model.loss`` or its compiled version."""
        t = self.tables
        K, bs = len(self.active), self.batch_size
        images = t.images.view(-1, t.images.shape[-1]).index_select(0, rows).view(K, bs, -1)
        caps = t.captions.view(-1, t.captions.shape[-1]).index_select(0, rows).view(K, bs, -1)
        Pt = t.captions.shape[-1] - 1
        r_t = caps[..., Pt] if t.text_readout is None else t.text_readout
        return loss_fn(images, caps[..., :Pt], r_t, valid, n_valid)

    def batches(self, n_steps: int) -> tuple[torch.Tensor, torch.Tensor, list[list[int] | None]]:
        """The batches of the next ``n_steps`` global steps: rows of the flattened pair tables [S, K, bs], the batch
        mask [S, K, bs], and per step None (every batch full) or each member's number of valid rows. Draws each
        member's data order as ``Trainer`` does (the same generator calls in the same order)."""
        K, bs = len(self.active), self.batch_size
        m_max = self.tables.images.shape[1]
        idx = torch.zeros(n_steps, K, bs, dtype=torch.long)
        valid = torch.ones(n_steps, K, bs, dtype=torch.bool)
        for k, i in enumerate(self.active):
            st = self.streams[i]
            s, end = self.step, self.step + n_steps
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
        offs = (torch.tensor(self.active) * m_max)[None, :, None]
        return (idx + offs).to(self.device), valid.to(self.device), short
