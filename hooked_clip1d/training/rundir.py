"""Run directories: one owner at a time, no foreign folders, and recovery from crashes (shared by every writer).

A training run, a batched group, a sweep and an export each write into a folder. ``RunLock`` makes that folder
owned by one process: ``.lock`` is created atomically (``O_CREAT | O_EXCL``) holding the owner's pid and host; a
second process gets ``RunDirBusy`` naming the owner; a lock left by a dead process on this host is taken over, with a
notice on stderr. ``check_run_dir`` refuses a non-empty folder that is not a run of this package, before anything is
written. ``atomic_write`` / ``atomic_write_text`` write a file through a temp file and a rename (every file the
package writes goes through them), ``clean_stale_tmp`` removes temp files of interrupted atomic writes, and
``read_metrics`` reads ``metrics.jsonl`` and drops a last line cut short by a crash (with a notice).
``stop_on_signal`` turns SIGTERM and Ctrl-C into a request (``stop_requested``) that the trainers honour at their
next safe point: they checkpoint, release their locks and raise ``TrainingInterrupted``.

The files of a run directory are written here too, for the single-model and the batched trainer alike:
``write_config`` (``config.json``: the configs and ``provenance``), ``append_metrics`` / ``drop_metrics_after``
(``metrics.jsonl``, one line per evaluation; on resume the lines after the checkpoint go), and ``write_summary``
(``summary.json`` at the end).

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with RunLock(d):
    ...     try:
    ...         RunLock(d).acquire()
    ...     except RunDirBusy as e:
    ...         print("busy")
    busy
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# torch-free at import: the CLI's error handling imports RunDirBusy, `list` reads manifests
from hooked_clip1d.files import atomic_write, atomic_write_text  # noqa: F401  (used here and by the trainers)

LOCK = ".lock"
CONFIG_KEYS = ("model_config", "data_config", "train_config")


class RunDirBusy(RuntimeError):
    """Another live process owns the run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class TrainingInterrupted(RuntimeError):
    """Training stopped on SIGTERM or SIGINT after saving its checkpoint; resuming continues it bit for bit.

    ``signum`` is the signal (``str(e)`` names it, the epoch or step, and the checkpoint)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message, signum)  # both in args: a worker process's exception pickles back whole
        self.signum = signum

    def __str__(self) -> str:
        return str(self.args[0])

    @classmethod
    def at(cls, signum: int, what: str, where: str, checkpoint: str) -> TrainingInterrupted:
        """The error of ``what`` ("training", "group") stopped by ``signum`` at ``where`` (e.g. "epoch 2/4")."""
        return cls(
            f"{what} stopped by {signal.Signals(signum).name} at {where}; its checkpoint {checkpoint!r} is saved: "
            "resume it (train --resume; a sweep: run it again; Python: resume=True)",
            signum,
        )


_stop: list[int] = []  # the signal that asked the training running in this process to stop
_stop_depth = [0]  # nested stop_on_signal blocks (a sweep's group inside a sweep): the outermost owns the handlers


def stop_requested() -> int | None:
    """The signal (SIGTERM, SIGINT) received inside a ``stop_on_signal`` block, or None: training polls it at its
    safe points (the end of an epoch, a chunk of steps), checkpoints and raises ``TrainingInterrupted``."""
    return _stop[0] if _stop else None


@contextlib.contextmanager
def stop_on_signal(forward: Callable[[int], None] | None = None) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT ask the training to stop at its next safe point instead of killing it.

    A process killed mid-run loses everything since its last checkpoint; inside this block the first SIGTERM or
    SIGINT is recorded (``stop_requested``) and passed to ``forward`` (a sweep sends it on to its worker
    processes); the trainer then saves a checkpoint and raises ``TrainingInterrupted``. A second SIGINT (Ctrl-C
    twice) acts as usual (``KeyboardInterrupt``); further SIGTERMs are ignored (SIGKILL still kills). Signals this
    process ignores (a sweep's workers ignore SIGINT) stay ignored. Outside the main thread the block does nothing.

    Example:
        >>> import os, signal
        >>> with stop_on_signal():
        ...     os.kill(os.getpid(), signal.SIGTERM)  # recorded, not fatal
        ...     stop_requested() == signal.SIGTERM
        True
        >>> stop_requested() is None  # cleared when the block ends
        True
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}
    if _stop_depth[0] == 0:
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)
            if prev is signal.SIG_IGN:
                continue

            def handler(signum: int, frame: Any, prev: Any = prev) -> None:
                if _stop:
                    if signum == signal.SIGINT:  # a second Ctrl-C: as without this block
                        signal.signal(signum, prev)
                        raise KeyboardInterrupt
                    return
                _stop.append(signum)
                if forward is not None:
                    forward(signum)

            old[sig] = prev
            signal.signal(sig, handler)
    _stop_depth[0] += 1
    try:
        yield
    finally:
        _stop_depth[0] -= 1
        for sig, prev in old.items():
            signal.signal(sig, prev)
        if _stop_depth[0] == 0:
            _stop.clear()


class RunLock:
    """An exclusive, process-level lock on a directory (``dir/.lock``); a context manager.

    ``acquire`` creates the directory if needed. The lock is released by ``release`` (or leaving the ``with``
    block); a process that dies leaves a stale lock, which the next owner on the same host takes over.
    """

    def __init__(self, directory: str | os.PathLike, what: str = "run directory"):
        self.dir = Path(directory)
        self.path = self.dir / LOCK
        self.what = what
        self.held = False

    def acquire(self) -> RunLock:
        self.created = not self.dir.exists()  # removed again by release() if it is still empty then
        self.dir.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is None:  # unreadable or half-written lock: its writer died mid-write
                    self._take_over("an unreadable lock file")
                    continue
                pid, host = owner.get("pid"), owner.get("host")
                if host != me["host"]:
                    raise RunDirBusy(
                        f"{self.what} {str(self.dir)!r} is locked by pid {pid} on host {host!r}; if that process is "
                        f"gone, delete {str(self.path)!r}"
                    ) from None
                if isinstance(pid, int) and _alive(pid):
                    raise RunDirBusy(
                        f"{self.what} {str(self.dir)!r} is in use by process {pid} (lock {str(self.path)!r}); "
                        "wait for it to finish or stop it, or use another directory"
                    ) from None
                self._take_over(f"a stale lock of process {pid}, which is no longer running")
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise RunDirBusy(f"could not lock {self.what} {str(self.dir)!r}: the lock keeps changing hands")

    @staticmethod
    def holder(directory: str | os.PathLike) -> dict[str, Any] | None:
        """Who holds ``directory``'s lock now: ``{"pid", "host", "since"}``, or None when nobody does (no lock, an
        unreadable one, or a stale one left on this host by a process that is gone). Takes nothing over.

        Example:
            >>> import tempfile
            >>> d = tempfile.mkdtemp()
            >>> RunLock.holder(d) is None
            True
            >>> with RunLock(d):
            ...     RunLock.holder(d)["pid"] == os.getpid()
            True
        """
        owner = RunLock(directory)._owner()
        if owner is None:
            return None
        pid, host = owner.get("pid"), owner.get("host")
        if host == socket.gethostname() and not (isinstance(pid, int) and _alive(pid)):
            return None
        return owner

    def _owner(self) -> dict[str, Any] | None:
        try:
            d = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def _take_over(self, why: str) -> None:
        print(f"hooked-clip1d: taking over {self.what} {str(self.dir)!r} from {why}", file=sys.stderr)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        owner = self._owner()
        if owner is not None and owner.get("pid") == os.getpid():
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        if getattr(self, "created", False):
            try:
                self.dir.rmdir()  # only succeeds when nothing was written: a failed start leaves no folder behind
            except OSError:
                pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def is_run_dir(path: str | os.PathLike) -> bool:
    """Whether ``path/config.json`` is a run config written by this package (model, data and train configs)."""
    cfg = Path(path) / "config.json"
    try:
        d = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and all(k in d for k in CONFIG_KEYS)


def _ours(name: str) -> bool:
    return name == LOCK or (name.startswith(".") and name.endswith(".tmp"))


def check_run_dir(path: str | os.PathLike, what: str = "--out") -> None:
    """Refuse a folder that exists, holds files, and is not a run directory of this package.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "notes.txt").write_text("mine")
        4
        >>> check_run_dir(d)
        Traceback (most recent call last):
        ...
        FileExistsError: --out ... is not empty and is not a hooked_clip1d run directory (it holds notes.txt); ...
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise NotADirectoryError(f"{what} {str(p)!r} is a file, not a directory")
    if not p.is_dir():
        return
    entries = sorted(e.name for e in p.iterdir() if not _ours(e.name))
    if entries and not is_run_dir(p):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise FileExistsError(
            f"{what} {str(p)!r} is not empty and is not a hooked_clip1d run directory (it holds {shown}); "
            "choose a new or empty directory"
        )


def clean_stale_tmp(directory: str | os.PathLike) -> list[str]:
    """Remove the temp files (``.NAME.*.tmp``) that interrupted atomic writes left in ``directory``; return their
    names. Call it only while holding the directory's ``RunLock`` (a live writer's temp file would be removed)."""
    removed = []
    d = Path(directory)
    if not d.is_dir():
        return removed
    for e in d.iterdir():
        if e.is_file() and e.name.startswith(".") and e.name.endswith(".tmp"):
            e.unlink()
            removed.append(e.name)
    return sorted(removed)


def clear_stale_snapshots(run_dir: str | os.PathLike) -> list[int]:
    """Remove the kept snapshots (``snapshots/epoch_NNNNN.safetensors``) of a run that is starting again from epoch 0
    (killed before its first checkpoint): they are the killed run's weights, and left there they would load as the
    new run's trajectory. Returns their epochs. Call it only while holding the directory's ``RunLock``.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "snapshots").mkdir()
        >>> (d / "snapshots" / "epoch_00010.safetensors").write_bytes(b"")
        0
        >>> clear_stale_snapshots(d), list((d / "snapshots").iterdir())
        ([10], [])
    """
    removed = []
    snaps = Path(run_dir) / "snapshots"
    if snaps.is_dir():
        for p in sorted(snaps.glob("epoch_*.safetensors")):
            removed.append(int(p.stem.split("_")[1]))
            p.unlink()
    return removed


def warn_missed_snapshots(run_dir: str | os.PathLike, snapshot_epochs: Any, epoch: int) -> list[int]:
    """Warn (and return them) about the asked-for snapshot epochs before ``epoch``, where a run resumes, that its
    ``snapshots/`` lacks: added to ``TrainConfig.snapshot_epochs`` after those epochs were trained, they will never
    be made (a trajectory read later would silently lack them)."""
    import warnings

    snaps = Path(run_dir) / "snapshots"
    missed = [int(e) for e in snapshot_epochs if e < epoch and not (snaps / f"epoch_{int(e):05d}.safetensors").exists()]
    if missed:
        warnings.warn(
            f"{str(run_dir)!r} resumes at epoch {epoch}: the snapshots of epochs {missed} asked for were not kept "
            "when those epochs were trained and will not be made (retrain from epoch 0 to have them)",
            stacklevel=3,
        )
    return missed


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines of a ``metrics.jsonl``; a last line cut short by a crash is dropped (notice on stderr), any other
    unreadable line is an error naming the file and line.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
        >>> _ = p.write_text('{"epoch": 1}\\n{"epo')
        >>> read_metrics(p)  # doctest: +ELLIPSIS
        [{'epoch': 1}]
    """
    p = Path(path)
    if not p.exists():
        return []
    text = p.read_text()
    lines = text.splitlines()
    out = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:
            if i == len(lines) - 1 and not text.endswith("\n"):
                print(f"hooked-clip1d: {str(p)!r}: dropping a last line cut short by a crash", file=sys.stderr)
                continue
            raise ValueError(f"{str(p)!r} line {i + 1} is not valid JSON (corrupt metrics file)") from None
    return out


def provenance() -> dict[str, Any]:
    """What produced a run: the command (program name, not its path), package version, git commit, torch, python."""
    import torch

    from hooked_clip1d._version import __version__

    commit = None
    try:
        here = Path(__file__).resolve().parent
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if r.returncode == 0:
            commit = r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        # the program's name, not its path on this machine (e.g. "hooked-clip1d train ...")
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "",
        "hooked_clip1d": __version__,
        "git_commit": commit,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def write_config(
    run_dir: str | os.PathLike, configs: dict[str, Any], prov: dict[str, Any] | None = None, **extra: Any
) -> None:
    """Write ``config.json`` (the run's configs, ``provenance`` and ``extra`` sections) unless it exists: a resumed
    run keeps the record of how it started."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        body = {**configs, "provenance": prov if prov is not None else provenance(), **extra}
        atomic_write_text(path, json.dumps(body, indent=2))


def append_metrics(run_dir: str | os.PathLike, line: dict[str, Any]) -> None:
    """Append one evaluation line to ``metrics.jsonl``."""
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def drop_metrics_after(run_dir: str | os.PathLike, key: str, value: int) -> None:
    """On resume: keep the ``metrics.jsonl`` lines whose ``key`` (``epoch`` or ``step``) is at most ``value`` (the
    later ones came after the checkpoint and will be written again)."""
    path = Path(run_dir) / "metrics.jsonl"
    if path.exists():
        keep = [ln for ln in read_metrics(path) if ln[key] <= value]
        atomic_write_text(path, "".join(json.dumps(ln) + "\n" for ln in keep))


def write_summary(
    run_dir: str | os.PathLike, epochs: int, steps: int, seconds: float, metrics: dict[str, Any], **extra: Any
) -> None:
    """Write ``summary.json``, the mark of a finished run: epochs, steps, time, final metrics (and ``extra``)."""
    summary = {
        "epochs": epochs,
        "steps": steps,
        "train_seconds": round(seconds, 1),
        "steps_per_second": round(steps / max(seconds, 1e-9), 1),
        "final_metrics": metrics,
        **extra,
    }
    atomic_write_text(Path(run_dir) / "summary.json", json.dumps(summary, indent=2))
