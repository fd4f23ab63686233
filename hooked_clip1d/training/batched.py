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

import contextlib
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hooked_clip1d.data.dataset import Dataset, EpochPermutations, build_dataset
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.settings.checks import check_int
from hooked_clip1d.settings.progress import bar_disabled
from hooked_clip1d.training.graph_step import StepGraph, check_graph_step
from hooked_clip1d.training.group_io import GroupFiles
from hooked_clip1d.training.group_state import GroupState, pair_tables
from hooked_clip1d.training.members import Member, check_members, mix_seeds
from hooked_clip1d.training.param_groups import param_rule
from hooked_clip1d.training.run_config import RunConfig, run_args
from hooked_clip1d.training.rundir import (
    RunLock,
    TrainingInterrupted,
    check_run_dir,
    clean_stale_tmp,
    clear_stale_snapshots,
    stop_on_signal,
    stop_requested,
)
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW
from hooked_clip1d.training.stacked_ops import DropoutRNG
from hooked_clip1d.training.trainer import TrainRun, save_snapshot


class BatchedTrainer:
    """Train ``members`` together (see the module docstring); each writes a ``Trainer``-style run directory.

    The group's state (members, data, stacked model, optimizer, step, ...) is ``self.state``, a
    ``group_state.GroupState``, which its files (``self.files``, a ``group_io.GroupFiles``) and its whole-step graph
    receive: callers read ``trainer.state.model``, ``.opt``, ``.step``, ``.active`` ... (issue 52: the trainer keeps
    no copies of them).

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
            (``graph_step`` module); with ``compile``, inductor's fused kernels are what it captures (not with
            ``cudagraphs``).
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
        names = check_members(members)  # they can train as one group
        flags = {"amp": amp, "compile": compile, "cudagraphs": cudagraphs, "graph_step": graph_step}
        bad = {k: v for k, v in flags.items() if not isinstance(v, bool)}  # "no" would read as True
        if bad:
            raise ValueError(f"BatchedTrainer: {', '.join(bad)} must be True or False, got {bad}")
        group_checkpoint_every = check_int(
            group_checkpoint_every, "BatchedTrainer: group_checkpoint_every (steps)", none_ok=True
        )
        if member_dirs is not None and (len(member_dirs) != len(members) or out_dir is None):
            raise ValueError("member_dirs needs an out_dir and one directory per member")
        if compile and dropout_rng == "matched" and any(m.model_cfg.vision.dropout for m in members):
            raise ValueError("compile=True needs dropout_rng='fast' (matched dropout draws from per-member generators)")
        if cudagraphs and not compile:
            raise ValueError("cudagraphs=True needs compile=True (CUDA graphs of the compiled stacked loss)")
        given = [k for k, v in flags.items() if v]
        if given and members[0].model_cfg.objective == "captioning":  # one objective a group (check_members)
            raise ValueError(
                f"BatchedTrainer: {', '.join(given)} not tested on the captioning loss (model.captioning); train "
                "captioners eager in fp32"
            )
        self.amp, self.compile, self.cudagraphs = amp, compile, cudagraphs
        self.compiled_loss: Any = None  # torch.compile of model.loss, made by the first run
        tc0 = members[0].train_cfg
        bs = tc0.batch_size or members[0].data_cfg.batch_size
        datasets, streams, pairs = _member_data(members, bs)

        self._caller_rng = torch.get_rng_state()  # restored at the end of __init__ (and around run)
        try:  # every failure below gives the caller's RNG back (_open_directories restores it itself)
            models, model = _stack_members(members, dropout_rng, torch.device(tc0.device))  # seeds the global RNG
            self.state = GroupState(
                members=list(members),
                names=names,
                member_cfgs=[mdl.cfg for mdl in models],  # with init seeds filled in (what Trainer saves)
                datasets=datasets,
                streams=streams,
                total_steps=[m.train_cfg.epochs * s.spe for m, s in zip(members, streams, strict=True)],
                tables=pair_tables(model, pairs),
                batch_size=bs,
                model=model,
                opt=_optimizer(model, members, models),
                dropout_rng=dropout_rng,
                device=model.device,
                out_dir=Path(out_dir) if out_dir is not None else None,
                member_dirs=None if member_dirs is None else [Path(d) for d in member_dirs],
            )
            self.scheduled = tc0.lr_schedule != "constant"  # every member's lr follows tc0.lr_at (group_key)
            if graph_step and (self.scheduled or tc0.optimizer != "adamw"):
                raise ValueError(
                    "graph_step=True replays AdamW at a fixed learning rate; it does not implement "
                    f"optimizer={tc0.optimizer!r} or lr_schedule={tc0.lr_schedule!r}"
                )
            if graph_step:
                check_graph_step(self.state, compile, cudagraphs)
            self.graph = StepGraph() if graph_step else None
            self.group_checkpoint_every = _group_checkpoint_every(group_checkpoint_every, members, streams)
        except BaseException:
            torch.set_rng_state(self._caller_rng)
            raise
        self.files = GroupFiles(self.state)  # the member run directories and the group checkpoint
        self._open_directories(resume)
        self._rng = torch.get_rng_state()  # the group's own stream (dropout); the caller's is given back
        torch.set_rng_state(self._caller_rng)

    @property
    def group_ckpt(self) -> Path | None:
        """The group checkpoint's path (``files.group_ckpt``); None without an out_dir."""
        return self.files.group_ckpt

    def _open_directories(self, resume: bool) -> None:
        """With an out_dir, lock the group's and members' directories, clean stale temporary files, and resume
        (``resume``) or refuse directories that already hold runs. A failure releases the locks and gives the
        caller's RNG back."""
        st = self.state
        K = len(st.members)
        self.locks: list[RunLock] = []
        if st.out_dir is not None:
            try:
                for i in range(K):
                    check_run_dir(st.member_dir(i), f"member {st.names[i]!r}'s directory")
                self.locks.append(RunLock(st.out_dir, "batched group directory").acquire())
                for i in range(K):
                    if Path(st.member_dir(i)).resolve() != st.out_dir.resolve():  # train_fast: one folder
                        lock = RunLock(st.member_dir(i), f"member {st.names[i]!r}'s run directory")
                        self.locks.append(lock.acquire())
                for d in [st.out_dir, *(st.member_dir(i) for i in range(K))]:
                    clean_stale_tmp(d)
                if resume:
                    self.files.resume()
                else:
                    used = [n for i, n in enumerate(st.names) if (st.member_dir(i) / "metrics.jsonl").exists()]
                    if self.files.group_ckpt.exists() or used:
                        raise FileExistsError(
                            f"{str(st.out_dir)!r} already holds runs {used}; resume them (resume=True) or use a new "
                            "directory"
                        )
                    for i in range(K):  # a killed group's snapshots would load as these runs' trajectories
                        stale = clear_stale_snapshots(st.member_dir(i))
                        if stale:
                            print(
                                f"hooked-clip1d: removed the snapshots of epochs {stale} from member "
                                f"{st.names[i]!r}'s directory (left by a run that stopped before its first "
                                "checkpoint; this run starts from epoch 0)",
                                file=sys.stderr,
                            )
            except BaseException:
                self.release_locks()
                torch.set_rng_state(self._caller_rng)
                raise
        elif resume:
            torch.set_rng_state(self._caller_rng)
            raise ValueError("resume=True needs an out_dir")

    def __del__(self) -> None:  # a group built and dropped without run() leaves its folders unlocked
        try:
            self.release_locks()
        except Exception:  # noqa: BLE001  (interpreter shutdown, or __init__ failed before the locks)
            pass

    def release_locks(self) -> None:
        """Release the group's and members' directory locks (done at the end of ``run``)."""
        for lock in reversed(self.locks):
            lock.release()

    def save_group_checkpoint(self) -> None:
        """Save everything needed to continue the whole group from this step (``GroupFiles``)."""
        self.files.save_group_checkpoint()

    def _write_metrics(self, i: int, epoch: int) -> None:
        self.files.write_metrics(i, epoch)

    # ---- loop -----------------------------------------------------------------------------------------------------
    def _next_event(self) -> int:
        """The next global step at which some member evaluates, checkpoints or finishes, or the group checkpoints."""
        st = self.state
        nxt = (st.step // self.group_checkpoint_every + 1) * self.group_checkpoint_every
        for i in st.active:
            m, s = st.members[i].train_cfg, st.streams[i]
            nxt = min(nxt, st.total_steps[i])
            every = math.gcd(m.eval_every, m.checkpoint_every) * s.spe
            nxt = min(nxt, (st.step // every + 1) * every)
            later = [e * s.spe for e in m.snapshot_epochs if e * s.spe > st.step]
            if later:
                nxt = min(nxt, later[0])
        return nxt

    def _events(self) -> None:
        """Evaluate / checkpoint / finish the members whose epoch boundary is this step."""
        st = self.state
        done = []
        for i in list(st.active):
            m, stream = st.members[i].train_cfg, st.streams[i]
            if st.step % stream.spe:
                continue
            epoch = st.step // stream.spe
            last = st.step == st.total_steps[i]
            if epoch % m.eval_every == 0 or last:
                self._write_metrics(i, epoch)  # through a method of its own: a subclass may hook in
            if st.out_dir is not None and (epoch % m.checkpoint_every == 0 or last):
                self.files.save_member_checkpoint(i, epoch)
            if st.out_dir is not None and epoch in m.snapshot_epochs:
                save_snapshot(st.member_model(i), st.member_dir(i), epoch, st.members[i].data_cfg)
            if last:
                done.append(i)
        for i in done:
            st.finished[i] = self.files.finish(i)
        if done:
            st.keep([i for i in st.active if i not in done])
        if st.active and (done or st.step % self.group_checkpoint_every == 0):
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
        max_steps = check_int(max_steps, "BatchedTrainer.run: max_steps", none_ok=True)  # 0 trained nothing
        chunk_steps = check_int(chunk_steps, "BatchedTrainer.run: chunk_steps")
        for lock in self.locks:
            if not lock.held:
                lock.acquire()
        try:
            with stop_on_signal():
                runs = self._run(progress, max_steps, chunk_steps, desc, position, deadline)
                if (sig := stop_requested()) and self.state.active:
                    where = f"step {self.state.step}/{max(self.state.total_steps)}"
                    raise TrainingInterrupted.at(sig, "group", where, str(self.state.out_dir))
                return runs
        finally:
            self.release_locks()

    def _loss_fn(self) -> Any:
        """The stacked loss the steps call: ``model.loss``, or with ``compile`` its compiled version (made once)."""
        if not self.compile:
            return self.state.model.loss
        if self.compiled_loss is None:
            # inductor's attention fusion (fx_passes/fuse_attention) rewrites the stacked [model, batch, head, ...]
            # attention into scaled_dot_product_attention wrongly: on the full preset the compiled loss silently
            # differs from eager (and on small shapes fails to compile); without the pattern passes it matches eager
            # cudagraphs: replay the compiled forward/backward as CUDA graphs (these models are tiny, so a GPU step
            # is bound by kernel launches); inductor ignores it on the CPU
            opts = {"pattern_matcher": False, "triton.cudagraphs": self.cudagraphs}
            self.compiled_loss = torch.compile(self.state.model.loss, options=opts)
        return self.compiled_loss

    def _run(
        self,
        progress: bool,
        max_steps: int | None,
        chunk_steps: int,
        desc: str | None,
        position: int | None,
        deadline: float | None,
    ) -> list[TrainRun]:
        st = self.state
        self.files.write_configs()
        threads = max((m.train_cfg.threads or 0) for m in st.members)
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        total = max(st.total_steps)
        stop_at = total if max_steps is None else min(total, st.step + max_steps)
        bar = tqdm(
            total=total,
            initial=st.step,
            desc=desc or f"group of {len(st.members)}",
            unit="step",
            disable=bar_disabled(progress),
            mininterval=1.0,
            position=position,
        )
        t0 = time.perf_counter() - st.elapsed
        caller_rng = torch.get_rng_state()
        torch.set_rng_state(self._rng)
        loss_fn = self._loss_fn()
        # bf16 autocast of the towers (amp), else no context at all (entering a disabled one costs ~5 us a step)
        autocast = torch.autocast(st.device.type, dtype=torch.bfloat16) if self.amp else contextlib.nullcontext()
        # a compiled group recompiles as members finish and leave the stack (a new K; at most two graphs per size, as
        # dynamo may first specialise and then mark K dynamic); dynamo's default limit of 8 would send a group of more
        # than a few sizes back to eager (slower than never compiling)
        limit = max(torch._dynamo.config.recompile_limit, 2 * len(st.members) + 4)
        try:
            if st.step == 0 and st.out_dir is not None:  # the initial weights, where a schedule asks for them
                for i in st.active:
                    if 0 in st.members[i].train_cfg.snapshot_epochs:
                        save_snapshot(st.member_model(i), st.member_dir(i), 0, st.members[i].data_cfg)
            with torch._dynamo.config.patch(
                recompile_limit=limit,
                accumulated_recompile_limit=max(torch._dynamo.config.accumulated_recompile_limit, 4 * limit),
            ):
                while st.active and st.step < stop_at:
                    nxt = min(self._next_event(), stop_at)
                    n = self._steps(min(nxt - st.step, chunk_steps), loss_fn, autocast, deadline)  # fewer if stopped
                    bar.update(n)
                    self._check_finite(n)
                    for i in st.active:
                        st.n_loss[i] += n
                    st.elapsed = time.perf_counter() - t0
                    if st.step == nxt:
                        self._events()
                        if st.active:
                            bar.set_postfix(active=len(st.active), refresh=False)
                    if (deadline is not None and time.time() >= deadline) or stop_requested():
                        break
            st.elapsed = time.perf_counter() - t0
            if st.active and st.step % self.group_checkpoint_every:
                self.files.save_group_checkpoint()  # stopped early (max_steps, deadline, signal): resumable from here
        finally:
            bar.close()
            torch.set_num_threads(old_threads)
            self._rng = torch.get_rng_state()
            torch.set_rng_state(caller_rng)
        return [st.finished[i] for i in sorted(st.finished)]

    def _check_finite(self, n: int) -> None:
        """Stop the group with ``FloatingPointError`` if some member's loss of the last ``n`` steps is not finite."""
        st = self.state
        bad = [i for k, i in enumerate(st.active) if not bool(torch.isfinite(st.loss_sum[k]))]
        if bad:
            raise FloatingPointError(
                f"training loss of {[st.names[i] for i in bad]} is not finite in steps {st.step - n + 1}-{st.step}; "
                "the group stopped, its last good checkpoints are kept"
            )

    def _steps(self, n: int, loss_fn: Any, autocast: Any, deadline: float | None = None) -> int:
        """Take the next ``n`` global steps (forward, backward, AdamW) for every active member; stop early, after
        any step, once ``deadline`` (a ``time.time()``) has passed or a stop signal came (a chunk of a full-model
        group takes minutes on a CPU). Returns the number of steps taken."""
        st = self.state
        idx, valid, short = st.batches(n)
        if self.graph is not None:
            done = lambda: (deadline is not None and time.time() >= deadline) or bool(stop_requested())  # noqa: E731
            return self.graph.steps(st, idx, valid, autocast, done, loss_fn)
        opt, matched = st.opt, st.dropout_rng == "matched"
        if self.scheduled:
            i0 = st.active[0]
            tc0, total0, spe0 = st.members[i0].train_cfg, st.total_steps[i0], st.streams[i0].spe
        for j in range(n):
            with autocast:
                sj = short[j]  # None: every batch full; else each member's valid rows
                # compiled: always a mask (all True on full batches), so full and short batches share one graph
                v_j = valid[j] if sj is not None or self.compile else None
                losses = st.losses(loss_fn, idx[j].view(-1), v_j, sj if matched else None)
            opt.zero_grad()
            losses.sum().backward()
            if self.scheduled:
                opt.set_lr(tc0.lr_at(st.step, total0, spe0))
            opt.step()
            st.loss_sum += losses.detach().float()
            st.step += 1
            if (deadline is not None and time.time() >= deadline) or stop_requested():
                return j + 1
        return n


def _member_data(
    members: Sequence[Member], bs: int
) -> tuple[list[Dataset], list[EpochPermutations], list[tuple[torch.Tensor, torch.Tensor]]]:
    """Every member's dataset, per-epoch data order (``Trainer``'s generator) and training (images, captions)."""
    datasets = [build_dataset(m.data_cfg) for m in members]
    pairs = [ds.training_pairs() for ds in datasets]
    streams = [EpochPermutations(len(im), bs, m.train_cfg.seed) for (im, _), m in zip(pairs, members, strict=True)]
    return datasets, streams, pairs


def _stack_members(
    members: Sequence[Member], dropout_rng: DropoutRNG, device: torch.device
) -> tuple[list[CLIP1D], StackedCLIP]:
    """The members' initial models (seeded as ``Trainer`` seeds its own) and the ``StackedCLIP`` of them, in train
    mode; with ``dropout_rng="fast"`` the global RNG is then seeded for the group's dropout stream."""
    models = []
    for m in members:
        torch.manual_seed(m.train_cfg.seed)  # as Trainer does before building its model
        models.append(m.init_model if m.init_model is not None else CLIP1D(m.model_cfg, seed=m.train_cfg.seed))
    seeds = [m.train_cfg.seed for m in members]
    model = StackedCLIP(models, dropout_rng, seeds=seeds, device=device)
    model.set_negatives([m.train_cfg.negatives for m in members])
    model.train()
    if dropout_rng == "fast":
        torch.manual_seed(mix_seeds(seeds))  # the group's dropout stream
    return models, model


def _optimizer(model: StackedCLIP, members: Sequence[Member], models: Sequence[CLIP1D]) -> StackedAdamW:
    """``StackedAdamW`` over the stacked parameters (per-member lr, weight decay and masks); held parameters
    (``TrainConfig.fixed_temperature``) set to their values after it zeroed the frozen ones."""
    tc0 = members[0].train_cfg
    decay_masks, grad_masks = _masks(model, members, models)
    opt = StackedAdamW(
        list(model.flat),
        lr=[m.train_cfg.lr for m in members],
        weight_decay=[m.train_cfg.weight_decay for m in members],
        betas=tc0.betas,
        eps=tc0.eps,
        decay_masks=decay_masks,
        grad_masks=grad_masks,
        coupled=tc0.optimizer == "adam",
    )
    with torch.no_grad():
        for name, p in model.params.items():
            for k, (mb, mdl) in enumerate(zip(members, models, strict=True)):
                held = param_rule(name, mdl.cfg, mb.train_cfg).held
                if held is not None:
                    p[k] = held
    return opt


def _masks(
    model: StackedCLIP, members: Sequence[Member], models: Sequence[CLIP1D]
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Stacked decay and gradient masks (``param_groups``) of every parameter; None where no member needs one."""
    decay: list[torch.Tensor | None] = []
    grad: list[torch.Tensor | None] = []
    for name, p in zip(model.names, model.flat, strict=True):
        dm, gm, any_d, any_g = [], [], False, False
        for mb, mdl in zip(members, models, strict=True):
            shape = mdl.state_dict()[name].shape
            rule = param_rule(name, mdl.cfg, mb.train_cfg)  # the same rule the single-model trainer reads
            fm, mask = rule.grad, rule.decay
            any_d |= mask is not None
            any_g |= fm is not None
            dm.append(torch.ones(shape) if mask is None else torch.as_tensor(mask).expand(shape).clone())
            gm.append(torch.ones(shape) if fm is None else torch.as_tensor(fm).expand(shape).clone())
        decay.append(model.stack(name, dm).to(p.dtype) if any_d else None)
        grad.append(model.stack(name, gm).to(p.dtype) if any_g else None)
    return decay, grad


def _group_checkpoint_every(every: int | None, members: Sequence[Member], streams: Sequence[EpochPermutations]) -> int:
    """Global steps between group checkpoints: ``every``, by default the shortest member's ``checkpoint_every``."""
    if every is None:
        every = min(m.train_cfg.checkpoint_every * s.spe for m, s in zip(members, streams, strict=True))
    if every < 1:
        raise ValueError(f"group_checkpoint_every must be >= 1, got {every}")
    return every


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
        >>> from hooked_clip1d.settings import DataConfig, TrainConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> runs = train_batched([Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=1))],
        ...                      None, progress=False)
        >>> runs[0].epoch, runs[0].step
        (1, 2)
    """
    return BatchedTrainer(members, out_dir, resume=resume, dropout_rng=dropout_rng).run(progress=progress)


def train_fast(run: Any, *args: Any, **kwargs: Any) -> TrainRun:
    """``training.train`` on the batched engine (K = 1): ``train_fast(run, out_dir)`` (``run`` a ``RunConfig``; the
    older ``train_fast(model_cfg, data_cfg, train_cfg, out_dir)`` still works, deprecated) writes the same files in
    ``out_dir`` and follows the same trajectory to float rounding (``dropout_rng="matched"``), 3-5x the speed;
    resumable from ``out_dir``'s group checkpoint. Keywords: ``resume``, ``progress``, ``dropout_rng``, ``compile``,
    ``init_model`` (start from these weights).

    Example:
        >>> import tempfile
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> from hooked_clip1d.settings import DataConfig, TrainConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> run = RunConfig(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, batch_size=16))
        >>> trained = train_fast(run, tempfile.mkdtemp(), progress=False)
        >>> trained.epoch, trained.step, sorted(trained.final_metrics)
        (2, 8, ['train', 'val_seen', 'val_single', 'val_unseen'])
    """
    run, given = run_args(run, args, "train_fast", ("out_dir",))
    return _train_fast(run, **given, **kwargs)


def _train_fast(
    run: RunConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    dropout_rng: DropoutRNG = "matched",
    compile: bool = False,  # noqa: A002
    init_model: CLIP1D | None = None,
) -> TrainRun:
    out = Path(out_dir)
    trainer = BatchedTrainer(
        [Member.from_run(run, init_model=init_model)],
        out,
        resume=resume,
        dropout_rng=dropout_rng,
        compile=compile,
        member_dirs=[out],
    )
    return trainer.run(progress=progress, desc="train")[0]
