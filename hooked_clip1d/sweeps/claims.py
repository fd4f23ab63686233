"""Calls on some groups of one sweep, side by side (``run_sweep(groups=...)``, ``sweep --groups``): such a call
claims its groups (a lock per group under ``out/claims/``) while it holds the sweep folder's lock, then lets the
folder's lock go while it trains, so a call on other groups can start; a call that would train a claimed group (the
same group named again, or the whole sweep) is refused before it trains. The folder's lock is taken back to
write the results table. A call with ``groups`` waits up to 120 s for the folder's lock (``folder_lock``), which
another such call holds only for seconds (a whole-sweep call holds it while it trains: then the wait ends in a
refusal); a whole-sweep call is refused at once while the folder is held.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp())
    >>> lock = RunLock(out, "sweep directory").acquire()
    >>> train_beside(lock, out, ["g000"], lambda: print("held:", RunLock.holder(out) is not None)), lock.held
    held: False
    (True, True)
    >>> lock.release()
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hooked_clip1d.training.rundir import RunDirBusy, RunLock

CLAIMS = "claims"


def refuse_claimed(out: Path, names: Sequence[str]) -> None:
    """Refuse to train groups that a call naming them trains now (call with the sweep folder's lock held).

    Example:
        >>> refuse_claimed(Path("/nonexistent"), ["g000"])  # nothing claimed
    """
    busy = {n: h for n in names if (h := RunLock.holder(Path(out) / CLAIMS / n)) is not None}
    if busy:
        who = ", ".join(f"{n} (process {h.get('pid')} on {h.get('host')})" for n, h in busy.items())
        raise RunDirBusy(
            f"groups of the sweep in {str(out)!r} are being trained by a call that named them: {who}; name the other "
            "groups (groups=[...], --groups) or wait for it to finish"
        )


def train_beside(
    lock: RunLock, out: Path, names: Sequence[str], train: Callable[[], object], wait_s: float = 120.0
) -> bool:
    """Claim the groups ``names``, let the sweep folder's ``lock`` go, ``train()``, and take the lock back (waiting
    up to ``wait_s`` for another call's plan or results write). Returns whether it is held again: False (with a
    warning) when it could not be had, so the caller leaves the results table to a later call. An error while
    training propagates with the lock left released and the claims given up."""
    refuse_claimed(out, names)  # the folder's lock is held: no claim can be made between this and the next lines
    claims: list[RunLock] = []
    try:
        for n in names:  # a claim held by a live process: refused here, before anything is trained
            claims.append(RunLock(Path(out) / CLAIMS / n, f"sweep group {n!r}").acquire())
        lock.release()
        train()
    finally:
        for c in reversed(claims):
            c.release()
    try:
        _acquire_waiting(lock, wait_s)
        return True
    except RunDirBusy:
        msg = f"sweep folder {str(out)!r} stayed locked; its results table is left to a later call"
        warnings.warn(msg, stacklevel=3)
        return False


@contextmanager
def folder_lock(out: Path, groups: Sequence[str] | None, wait_s: float = 120.0) -> Iterator[RunLock]:
    """The sweep folder's lock, held for the ``with`` block. A call naming ``groups`` waits up to ``wait_s`` for it
    (two lanes started together each hold it for seconds, to plan and claim); a whole-sweep call is refused at once
    when it is held (a whole-sweep call holds it while it trains).

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> with folder_lock(out, ["g000"]) as lock:
        ...     lock.held
        True
    """
    lock = RunLock(out, "sweep directory")
    _acquire_waiting(lock, wait_s if groups is not None else 0.0)
    try:
        yield lock
    finally:
        lock.release()


def _acquire_waiting(lock: RunLock, wait_s: float) -> None:
    """Acquire ``lock``, retrying each second for up to ``wait_s``; the last refusal propagates (RunDirBusy, or a
    FileNotFoundError where another caller's failed start removed the new folder between its mkdir and the lock)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock.acquire()
            return
        except (RunDirBusy, FileNotFoundError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


__all__ = ["CLAIMS", "folder_lock", "refuse_claimed", "train_beside"]
