"""Batched training: K same-shaped models in one process, parameters stacked on a leading model axis.

``BatchedTrainer(members)`` trains K ``CLIP1D`` models (different seeds, label counts, layouts, learning rates,
weight decays, pruned heads, ...) with one forward, one backward and one AdamW step per step for all of them. Each
member follows the trajectory of ``training.Trainer`` for the same configs: the same initial weights, the same
per-epoch data permutations (its own seeded generator), the same dropout masks (``dropout_rng="matched"``, CPU) and
the same AdamW update, so it ends where the single-model trainer ends up to float rounding (``tests/test_batched.py``
checks this over hundreds of steps). Every member writes the files a ``Trainer`` run writes (``config.json``,
``metrics.jsonl``, ``checkpoint.safetensors``, ``model.safetensors``, ``summary.json``); they load with
``checkpoint.load_model_file`` and resume with ``Trainer(..., resume=True)``.

The forward is ``stacked.StackedCLIP`` (why it is fast: its module docstring), the optimizer
``stacked_adamw.StackedAdamW``.

Members may differ in ``n_labels`` (their vocabularies are padded into one: the extra embedding rows are never read,
receive zero gradient and do not affect the member; saved checkpoints have the member's own shapes), in the dataset
(``DataConfig``: sizes may differ; a short last batch is masked out of the loss exactly), in ``pruned_heads``,
``init_std``, the training seed, ``lr``, ``weight_decay``, ``epochs``, ``eval_every`` and ``checkpoint_every``.
Everything that sets a shape or the forward computation must be equal (``group_key`` says what).

Dropout (``dropout_rng``): ``"matched"`` gives each member the single-model masks (CPU), ``"fast"`` the same
distribution from one group stream (``stacked`` says how); ``BatchedTrainer`` defaults to ``"matched"``, sweeps and the
benchmark use ``"fast"``. ``amp=True`` runs the towers under bfloat16 autocast (the CLIP head stays fp32);
``compile=True`` compiles the stacked loss (needs ``"fast"``).

Example:
    >>> import tempfile
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> from hooked_clip1d.data.dataset import DataConfig
    >>> from hooked_clip1d.training.trainer import TrainConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
    >>> members = [Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, batch_size=16, seed=s))
    ...            for s in (0, 1)]
    >>> runs = BatchedTrainer(members, tempfile.mkdtemp()).run(progress=False)
    >>> [(r.epoch, r.step) for r in runs]
    [(2, 8), (2, 8)]
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hooked_clip1d.data.dataset import DataConfig, Dataset, EpochPermutations, build_dataset
from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.training.graph_step import StepGraph, check_graph_step
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, GroupFiles
from hooked_clip1d.training.members import Member, _mix_seeds, check_members
from hooked_clip1d.training.param_groups import decay_mask, frozen_mask, held_value
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.rundir import (
    RunLock,
    TrainingInterrupted,
    check_run_dir,
    clean_stale_tmp,
    stop_on_signal,
    stop_requested,
)
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW
from hooked_clip1d.training.stacked_ops import DropoutRNG
from hooked_clip1d.training.trainer import TrainConfig, TrainRun, save_snapshot


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
        cudagraphs: with ``compile``, replay the compiled step as CUDA graphs on a GPU (fewer launches).
        graph_step: on a GPU, capture the whole step (forward, backward, AdamW) as one CUDA graph and replay it
            (``graph_step`` module; not with ``compile``).
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
        cudagraphs: bool = False,
        graph_step: bool = False,
    ):
        self.names = check_members(members)  # they can train as one group
        if member_dirs is not None and (len(member_dirs) != len(members) or out_dir is None):
            raise ValueError("member_dirs needs an out_dir and one directory per member")
        if compile and dropout_rng == "matched" and any(m.model_cfg.vision.dropout for m in members):
            raise ValueError("compile=True needs dropout_rng='fast' (matched dropout draws from per-member generators)")
        if cudagraphs and not compile:
            raise ValueError("cudagraphs=True needs compile=True (CUDA graphs of the compiled stacked loss)")
        self.members = list(members)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._member_dirs = None if member_dirs is None else [Path(d) for d in member_dirs]
        self.dropout_rng: DropoutRNG = dropout_rng
        self.amp = amp
        self.compile = compile
        self.cudagraphs = cudagraphs
        tc0 = members[0].train_cfg
        self.device = torch.device(tc0.device)
        self.bs = tc0.batch_size or members[0].data_cfg.batch_size
        pairs = self._build_data()

        self._caller_rng = torch.get_rng_state()  # restored at the end of __init__ (and around run)
        try:  # every failure below gives the caller's RNG back (_open_directories restores it itself)
            models = self._build_models()  # seeds the global RNG: the members' initial weights, the dropout stream
            self._build_tables(pairs)
            self._build_optimizer(models, graph_step)
            self._start_state(group_checkpoint_every)
        except BaseException:
            torch.set_rng_state(self._caller_rng)
            raise
        self._open_directories(resume)
        self._rng = torch.get_rng_state()  # the group's own stream (dropout); the caller's is given back
        torch.set_rng_state(self._caller_rng)

    # ---- construction (the steps of __init__, in its order) ------------------------------------------------------

    def _build_data(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every member's dataset, per-epoch data order and step count; returns its training (images, captions)."""
        self.datasets: list[Dataset] = [build_dataset(m.data_cfg) for m in self.members]
        pairs = [ds.training_pairs() for ds in self.datasets]
        self.streams = [
            EpochPermutations(len(im), self.bs, m.train_cfg.seed)
            for (im, _), m in zip(pairs, self.members, strict=True)
        ]
        self.total_steps = [m.train_cfg.epochs * s.spe for m, s in zip(self.members, self.streams, strict=True)]
        return pairs

    def _build_models(self) -> list[CLIP1D]:
        """The members' initial models (seeded as ``Trainer`` seeds its own) stacked into ``self.model``; with
        ``dropout_rng="fast"`` the global RNG is then seeded for the group's dropout stream."""
        models = []
        for m in self.members:
            torch.manual_seed(m.train_cfg.seed)  # as Trainer does before building its model
            model = m.init_model if m.init_model is not None else CLIP1D(m.model_cfg, seed=m.train_cfg.seed)
            models.append(model)
        seeds = [m.train_cfg.seed for m in self.members]
        self.model = StackedCLIP(models, self.dropout_rng, seeds=seeds, device=self.device)
        self.model.train()
        if self.dropout_rng == "fast":
            torch.manual_seed(_mix_seeds(seeds))  # the group's dropout stream
        self.member_cfgs = [mdl.cfg for mdl in models]  # with init seeds filled in (what Trainer saves)
        return models

    def _build_tables(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Every member's training pairs in one padded tensor per tower on the device, remapped to the padded
        vocabulary; the captions' last column holds their readout position (the first EOT)."""
        m_max = max(len(im) for im, _ in pairs)
        Pv, Pt = pairs[0][0].shape[1], pairs[0][1].shape[1]
        K = len(self.members)
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

    def _build_optimizer(self, models: Sequence[CLIP1D], graph_step: bool) -> None:
        """``StackedAdamW`` over the stacked parameters (per-member lr, weight decay and masks) and, with
        ``graph_step``, the whole-step CUDA graph."""
        tc0 = self.members[0].train_cfg
        decay_masks, grad_masks = self._masks(models)
        self.opt = StackedAdamW(
            list(self.model.flat),
            lr=[m.train_cfg.lr for m in self.members],
            weight_decay=[m.train_cfg.weight_decay for m in self.members],
            betas=tc0.betas,
            eps=tc0.eps,
            decay_masks=decay_masks,
            grad_masks=grad_masks,
            coupled=tc0.optimizer == "adam",
        )
        with torch.no_grad():  # held parameters (TrainConfig.fixed_temperature): set after the optimizer zeroed them
            for name, p in self.model.params.items():
                for k, mb in enumerate(self.members):
                    held = held_value(name, mb.train_cfg.fixed_temperature)
                    if held is not None:
                        p[k] = held
        self.scheduled = tc0.lr_schedule != "constant"  # every member's lr follows tc0.lr_at (group_key)
        if graph_step and (self.scheduled or tc0.optimizer != "adamw"):
            raise ValueError(
                "graph_step=True replays AdamW at a fixed learning rate; it does not implement "
                f"optimizer={tc0.optimizer!r} or lr_schedule={tc0.lr_schedule!r}"
            )
        self._graph = StepGraph() if graph_step else None
        if graph_step:
            check_graph_step(self)

    def _start_state(self, group_checkpoint_every: int | None) -> None:
        """The loop's state at step 0 (every member active) and the group checkpoint interval."""
        K = len(self.members)
        self.active = list(range(K))  # member indices still training, in stack order
        self.step = 0
        self.elapsed = 0.0
        self.loss_sum = torch.zeros(K, device=self.device)
        self.n_loss = [0] * K
        self.finished: dict[int, TrainRun] = {}
        self.last_metrics: dict[int, dict[str, Any]] = {}
        if group_checkpoint_every is None:
            pairs_ms = zip(self.members, self.streams, strict=True)
            group_checkpoint_every = min(m.train_cfg.checkpoint_every * s.spe for m, s in pairs_ms)
        if group_checkpoint_every < 1:
            raise ValueError(f"group_checkpoint_every must be >= 1, got {group_checkpoint_every}")
        self.group_checkpoint_every = group_checkpoint_every
        self.eval_models: dict[int, CLIP1D] = {}

    def _open_directories(self, resume: bool) -> None:
        """The group's files (``GroupFiles``); with an out_dir, lock the group's and members' directories, clean
        stale temporary files, and resume (``resume``) or refuse directories that already hold runs. A failure
        releases the locks and gives the caller's RNG back."""
        K = len(self.members)
        self.files = GroupFiles(self)  # the member run directories and the group checkpoint
        self.locks: list[RunLock] = []
        if self.out_dir is not None:
            self.group_ckpt = self.out_dir / GROUP_CHECKPOINT
            try:
                for i in range(K):
                    check_run_dir(self.member_dir(i), f"member {self.names[i]!r}'s directory")
                self.locks.append(RunLock(self.out_dir, "batched group directory").acquire())
                for i in range(K):
                    if Path(self.member_dir(i)).resolve() != self.out_dir.resolve():  # train_fast: one folder
                        lock = RunLock(self.member_dir(i), f"member {self.names[i]!r}'s run directory")
                        self.locks.append(lock.acquire())
                for d in [self.out_dir, *(self.member_dir(i) for i in range(K))]:
                    clean_stale_tmp(d)
                if resume:
                    self.files.resume()
                else:
                    used = [n for i, n in enumerate(self.names) if (self.member_dir(i) / "metrics.jsonl").exists()]
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
                held = held_value(name, tc.fixed_temperature) is not None
                fm = 0.0 if held else frozen_mask(name, model.cfg, tc.frozen)
                mask = (
                    0.0 if isinstance(fm, float) else decay_mask(name, model.cfg, tc.no_decay, tc.qk_bias_decay_scale)
                )
                any_d |= mask is not None
                any_g |= fm is not None
                dm.append(torch.ones(shape) if mask is None else torch.as_tensor(mask).expand(shape).clone())
                gm.append(torch.ones(shape) if fm is None else torch.as_tensor(fm).expand(shape).clone())
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
        if i not in self.eval_models:
            m = CLIP1D(self.member_cfgs[i])
            m.data_config = self.members[i].data_cfg
            self.eval_models[i] = m.to(self.device)
        model = self.eval_models[i]
        model.load_state_dict(self.model.member_state_dict(self.active.index(i)))
        return model.eval()

    def run_config(self, i: int) -> RunConfig:
        """Member ``i``'s run (its model config with the init seeds filled in, as ``Trainer`` saves it)."""
        m = self.members[i]
        return RunConfig(self.member_cfgs[i], m.data_cfg, m.train_cfg)

    def configs(self, i: int) -> dict[str, Any]:
        return self.run_config(i).to_dict()

    # ---- checkpoints and member files: group_io.GroupFiles -----------------------------------------------------
    def save_group_checkpoint(self) -> None:
        """Save everything needed to continue the whole group from this step (``GroupFiles``)."""
        self.files.save_group_checkpoint()

    def _write_metrics(self, i: int, epoch: int) -> None:
        self.files.write_metrics(i, epoch)

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
            later = [e * s.spe for e in m.snapshot_epochs if e * s.spe > self.step]
            if later:
                nxt = min(nxt, later[0])
        return nxt

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
                self._write_metrics(i, epoch)  # through a method of its own: a subclass may hook in
            if self.out_dir is not None and (epoch % m.checkpoint_every == 0 or last):
                self.files.save_member_checkpoint(i, epoch)
            if self.out_dir is not None and epoch in m.snapshot_epochs:
                save_snapshot(self.member_model(i), self.member_dir(i), epoch, self.members[i].data_cfg)
            if last:
                done.append(i)
        for i in done:
            self.finished[i] = self.files.finish(i)
        if done:
            keep_rows = [k for k, i in enumerate(self.active) if i not in done]
            if keep_rows:
                self.loss_sum = self.loss_sum[keep_rows].clone()
                self.model.keep(keep_rows)
                self.opt.keep(keep_rows, list(self.model.flat))
            self.active = [i for i in self.active if i not in done]
        if self.active and (done or self.step % self.group_checkpoint_every == 0):
            self.files.save_group_checkpoint()

    def run(
        self,
        progress: bool = True,
        max_steps: int | None = None,
        chunk_steps: int = 512,
        desc: str | None = None,
        position: int | None = None,
        deadline: float | None = None,
    ) -> list[TrainRun]:
        """Train until every member finished (or ``max_steps`` global steps were taken in this call, or the wall
        clock passed ``deadline`` (a ``time.time()``, checked after every step), then save a group
        checkpoint and stop); return the finished members' ``TrainRun``s in member order.

        One progress bar for the whole group (``desc``, on line ``position`` when several groups share a terminal),
        in global steps (the longest member's count). SIGTERM or SIGINT stops it like the deadline, then raises
        ``TrainingInterrupted`` (``rundir.stop_on_signal``)."""
        for lock in self.locks:
            if not lock.held:
                lock.acquire()
        try:
            with stop_on_signal():
                runs = self._run(progress, max_steps, chunk_steps, desc, position, deadline)
                if (sig := stop_requested()) and self.active:
                    where = f"step {self.step}/{max(self.total_steps)}"
                    raise TrainingInterrupted.at(sig, "group", where, str(self.out_dir))
                return runs
        finally:
            self.release_locks()

    def _run(
        self,
        progress: bool,
        max_steps: int | None,
        chunk_steps: int,
        desc: str | None,
        position: int | None,
        deadline: float | None,
    ) -> list[TrainRun]:
        self.files.write_configs()
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
        model = self.model
        if self.compile and getattr(self, "_compiled_loss", None) is None:
            # inductor's attention fusion (fx_passes/fuse_attention) rewrites the stacked [model, batch, head, ...]
            # attention into scaled_dot_product_attention wrongly: on the full preset the compiled loss silently
            # differs from eager (and on small shapes fails to compile); without the pattern passes it matches eager
            # cudagraphs: replay the compiled forward/backward as CUDA graphs (these models are tiny, so a GPU step
            # is bound by kernel launches); inductor ignores it on the CPU
            opts = {"pattern_matcher": False, "triton.cudagraphs": self.cudagraphs}
            self._compiled_loss = torch.compile(model.loss, options=opts)
        loss_fn = self._compiled_loss if self.compile else model.loss
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)
        # a compiled group recompiles as members finish and leave the stack (a new K; at most two graphs per size, as
        # dynamo may first specialise and then mark K dynamic); dynamo's default limit of 8 would send a group of more
        # than a few sizes back to eager (slower than never compiling)
        limit = max(torch._dynamo.config.recompile_limit, 2 * len(self.members) + 4)
        try:
            if self.step == 0 and self.out_dir is not None:  # the initial weights, where a schedule asks for them
                for i in self.active:
                    if 0 in self.members[i].train_cfg.snapshot_epochs:
                        save_snapshot(self.member_model(i), self.member_dir(i), 0, self.members[i].data_cfg)
            with torch._dynamo.config.patch(
                recompile_limit=limit,
                accumulated_recompile_limit=max(torch._dynamo.config.accumulated_recompile_limit, 4 * limit),
            ):
                while self.active and self.step < stop_at:
                    nxt = min(self._next_event(), stop_at)
                    n = min(nxt - self.step, chunk_steps)
                    n = self._steps(n, loss_fn, autocast, deadline)  # fewer if the deadline or a signal came
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
                    if (deadline is not None and time.time() >= deadline) or stop_requested():
                        break
            self.elapsed = time.perf_counter() - t0
            if self.active and self.step % self.group_checkpoint_every:
                self.files.save_group_checkpoint()  # stopped early (max_steps, deadline, signal): resumable from here
        finally:
            bar.close()
            torch.set_num_threads(old_threads)
            self._rng = torch.get_rng_state()
            torch.set_rng_state(caller_rng)
        return [self.finished[i] for i in sorted(self.finished)]

    def _losses(self, loss_fn: Any, flat: torch.Tensor, valid: torch.Tensor | None, n_valid: Any) -> torch.Tensor:
        """Each active member's loss [K] on the batch whose rows of the padded pair tables are ``flat`` [K * bs]
        (``valid`` [K, bs]: the batch mask, or None when every batch is full); shared by the eager step and the
        whole-step graph (``graph_step``)."""
        K, bs, Pt = len(self.active), self.bs, self.Pt
        images = self._images_all.view(-1, self._images_all.shape[-1]).index_select(0, flat).view(K, bs, -1)
        caps = self._captions_all.view(-1, self._captions_all.shape[-1]).index_select(0, flat).view(K, bs, -1)
        r_t = caps[..., Pt] if self.text_readout is None else self.text_readout
        return loss_fn(images, caps[..., :Pt], r_t, valid, n_valid)

    def _steps(self, n: int, loss_fn: Any, autocast: Any, deadline: float | None = None) -> int:
        """Take the next ``n`` global steps (forward, backward, AdamW) for every active member; stop early, after
        any step, once ``deadline`` (a ``time.time()``) has passed or a stop signal came (a chunk of a full-model
        group takes minutes on a CPU). Returns the number of steps taken."""
        idx, valid, short = self._chunk(n)
        if self._graph is not None:
            done = lambda: (deadline is not None and time.time() >= deadline) or bool(stop_requested())  # noqa: E731
            return self._graph.steps(self, idx, valid, autocast, done)
        for j in range(n):
            with autocast:
                sj = short[j]  # None: every batch full; else each member's valid rows
                # compiled: always a mask (all True on full batches), so full and short batches share one graph
                v_j = valid[j] if sj is not None or self.compile else None
                n_v = sj if self.dropout_rng == "matched" else None
                losses = self._losses(loss_fn, idx[j].view(-1), v_j, n_v)
            self.opt.zero_grad()
            losses.sum().backward()
            if self.scheduled:
                i0 = self.active[0]
                self.opt.set_lr(self.members[i0].train_cfg.lr_at(self.step, self.total_steps[i0], self.streams[i0].spe))
            self.opt.step()
            self.loss_sum += losses.detach().float()
            self.step += 1
            if (deadline is not None and time.time() >= deadline) or stop_requested():
                return j + 1
        return n


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
        >>> from hooked_clip1d.model.clip import CLIPConfig
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
        >>> from hooked_clip1d.model.clip import CLIPConfig
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
