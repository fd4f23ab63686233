"""Whether a progress bar shows: the caller's ``progress`` flag, a ``no_bars()`` block around the call, and tqdm's
own ``TQDM_DISABLE`` environment variable (torch-free).

tqdm reads ``TQDM_DISABLE`` only as the default of its ``disable`` keyword, so a bar made with an explicit
``disable=not progress`` ignores it: a log of a long run filled with bars though the variable was set. Every bar
the package makes asks this function instead. ``no_bars()`` turns off the bars of code that takes no ``progress``
argument (an analysis family that retrains, a figure that trains a sweep), for the block only: the caller's
environment is not touched.

Example:
    >>> bar_disabled(False), bar_disabled(True, env={}), bar_disabled(True, env={"TQDM_DISABLE": "1"})
    (True, False, True)
    >>> bar_disabled(True, env={"TQDM_DISABLE": "0"})  # "", 0, false, no, off: the variable says show
    False
    >>> with no_bars():
    ...     bar_disabled(True, env={})
    True
    >>> bar_disabled(True, env={})
    False
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["bar_disabled", "no_bars"]

_FALSE = {"", "0", "false", "no", "off"}
_OFF: ContextVar[bool] = ContextVar("hooked_clip1d_no_bars", default=False)


def bar_disabled(progress: bool, env: Mapping[str, str] | None = None) -> bool:
    """``True`` when a bar must not show: ``progress`` is false, the call runs inside ``no_bars()``, or
    ``TQDM_DISABLE`` (in ``env``, default ``os.environ``) is set to anything but an empty string, ``0``, ``false``,
    ``no`` or ``off`` (any case).

    Example:
        >>> bar_disabled(True, env={"TQDM_DISABLE": "True"})
        True
    """
    env = os.environ if env is None else env
    return not progress or _OFF.get() or env.get("TQDM_DISABLE", "").strip().lower() not in _FALSE


@contextmanager
def no_bars(on: bool = True) -> Iterator[None]:
    """No progress bar of the package shows inside the block (the CLI's ``--no-progress`` on ``analyze`` and
    ``reproduce``), unless ``on`` is false (then the block changes nothing); the setting before it comes back after
    it, also on an error.

    Example:
        >>> with no_bars():
        ...     bar_disabled(True)
        True
        >>> with no_bars(on=False):
        ...     bar_disabled(True, env={})
        False
    """
    token = _OFF.set(_OFF.get() or on)
    try:
        yield
    finally:
        _OFF.reset(token)
