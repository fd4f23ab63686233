"""Running a sweep's groups: one group (``run_group``: resume, retrain or skip, then ``BatchedTrainer``) and all of
them (``run_groups``: one after another in this process, ``workers`` at once in spawned local processes, or as Ray
tasks). ``sweep.run_sweep`` plans the groups and writes the results; this module only trains them.

A signal (SIGTERM, SIGINT) to the sweep process reaches every worker, which checkpoints its group and stops; a
worker stopped by a signal starts no other group, and a worker whose sweep process died exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hooked_clip1d.sweeps.spec import RunSpec
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, read_group_state
from hooked_clip1d.training.rundir import TrainingInterrupted, stop_on_signal

__all__ = ["GroupTask", "run_group", "run_groups"]


@dataclass(frozen=True)
class GroupTask:
    """What one group needs to run (picklable, for Ray)."""

    name: str
    runs: list[RunSpec]
    group_dir: str
    run_dirs: list[str]
    run: dict[str, Any]
    resume: bool
    progress: bool
    max_steps: int | None = None
    position: int | None = None  # progress-bar line, when several groups train at once
    deadline: float | None = None  # time.time() after which the group checkpoints and stops


_interrupted: list[int] = []  # a worker process whose group a signal stopped starts no other group


def run_group(task: GroupTask) -> list[str]:
    """Train one group (resuming when possible); returns the run names it finished."""
    if _interrupted:
        raise TrainingInterrupted(f"group {task.name} not started: the sweep was stopped by a signal", _interrupted[0])
    gdir = Path(task.group_dir)
    run_dirs = [Path(d) for d in task.run_dirs]
    if all((d / "summary.json").exists() for d in run_dirs):
        return [r.name for r in task.runs]
    if task.deadline is not None and time.time() >= task.deadline:
        return []  # out of time before this group started: it keeps its state for the next call
    state = read_group_state(gdir / GROUP_CHECKPOINT)
    if state is None:  # a fresh group never retrains (or deletes) a finished run
        keep = [i for i, d in enumerate(run_dirs) if not (d / "summary.json").exists()]
    else:  # it resumes with the members it started with (runs finished elsewhere before it started are not)
        names = state.get("names") or [r.name for r in task.runs]
        keep = [i for i, r in enumerate(task.runs) if r.name in names]
    if len(keep) < len(task.runs):
        task = dataclasses.replace(task, runs=[task.runs[i] for i in keep], run_dirs=[task.run_dirs[i] for i in keep])
        run_dirs = [run_dirs[i] for i in keep]
    members = [Member(r.model_cfg, r.data_cfg, r.train_cfg, name=r.name) for r in task.runs]
    if task.run.get("threads"):
        members = [
            dataclasses.replace(m, train_cfg=dataclasses.replace(m.train_cfg, threads=task.run["threads"]))
            for m in members
        ]
    kw = dict(dropout_rng=task.run["dropout_rng"], amp=task.run["amp"], compile=task.run["compile"])
    kw["graph_step"] = bool(task.run.get("graph_step"))
    # the whole-step graph captures a compiled loss's kernels itself (inductor's own CUDA graphs cannot nest in it)
    kw["cudagraphs"] = task.run["cudagraphs"] and task.run["compile"] and not kw["graph_step"]
    resume = task.resume and (gdir / GROUP_CHECKPOINT).exists()
    if not resume:  # start the group afresh: drop partial files of an interrupted first attempt
        if not task.resume and any(d.exists() and any(d.iterdir()) for d in run_dirs):
            raise FileExistsError(
                f"runs of group {task.name} already have files ({run_dirs[0].parent}); resume the sweep or use a new "
                "out_dir"
            )
        for d in run_dirs:
            if d.exists():
                shutil.rmtree(d)
        if gdir.exists():
            shutil.rmtree(gdir)
    trainer = BatchedTrainer(members, gdir, resume=resume, member_dirs=run_dirs, **kw)
    if task.run.get("streams"):  # the towers on two CUDA streams (a ValueError naming the device elsewhere)
        trainer.state.model.use_streams()
    try:
        trainer.run(
            progress=task.progress,
            max_steps=task.max_steps,
            desc=task.name,
            position=task.position,
            deadline=task.deadline,
        )
    except TrainingInterrupted as e:
        if multiprocessing.parent_process() is not None:  # a worker of this sweep's pool (not the sweep process)
            _interrupted.append(e.signum)
        raise
    return [r.name for r in task.runs if (Path(task.run_dirs[task.runs.index(r)]) / "summary.json").exists()]


def _worker_init(threads: int) -> None:  # module-level so spawned workers can import it
    import threading
    import time

    import torch

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the sweep process, which stops the workers
    parent = os.getppid()

    def watch() -> None:  # a worker whose sweep process died stops too (else it trains on, orphaned)
        while os.getppid() == parent:
            time.sleep(2.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _ray_task(task: GroupTask) -> list[str]:  # module-level so Ray workers can import it
    return run_group(task)


def run_groups(tasks: Sequence[GroupTask], runner: str = "local", workers: int = 1, threads: int | None = None) -> None:
    """Train every group of ``tasks``: in turn in this process (``runner="local"``, ``workers=1``), up to ``workers``
    at once in spawned worker processes (each starting with an equal share of the cores; a spec's ``run.threads``
    reaches each group through its task), or as Ray tasks (``runner="ray"``, ``threads`` CPUs each, default 1).
    Re-raises the first group's error; a signal stops every group at a checkpoint (``TrainingInterrupted``).

    Example:
        >>> run_groups([])  # nothing to train
    """
    if runner not in ("local", "ray"):
        raise ValueError(f"runner must be 'local' or 'ray', got {runner!r}")
    if runner == "local" and workers > 1 and len(tasks) > 1:
        from concurrent.futures import ProcessPoolExecutor

        n = min(workers, len(tasks))
        share = max(1, len(os.sched_getaffinity(0)) // n)  # threads per worker unless run.threads says
        # spawn: a fresh interpreter per worker (forking a process that already ran torch threads can hang)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init, initargs=(share,)) as pool:

            def forward(signum: int) -> None:  # SIGTERM / SIGINT here: every worker checkpoints its group and stops
                for p in list(getattr(pool, "_processes", None) or {}):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGTERM)

            with stop_on_signal(forward):
                try:
                    for _ in pool.map(run_group, tasks):  # re-raises a worker's error (or TrainingInterrupted) here
                        pass
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # groups not yet started stay as they are
                    raise
    elif runner == "local":
        for t in tasks:
            run_group(t)
    else:
        try:
            import ray
        except ImportError:
            raise ImportError("runner='ray' needs Ray: pip install ray") from None
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        cpus = threads or 1
        remote = ray.remote(num_cpus=cpus)(_ray_task)
        ray.get([remote.remote(t) for t in tasks])
