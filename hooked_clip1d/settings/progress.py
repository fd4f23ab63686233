"""Whether a progress bar shows: the caller's ``progress`` flag, and tqdm's own ``TQDM_DISABLE`` environment
variable (torch-free).

tqdm reads ``TQDM_DISABLE`` only as the default of its ``disable`` keyword, so a bar made with an explicit
``disable=not progress`` ignores it: a log of a long run filled with bars though the variable was set. Every bar
the package makes asks this function instead.

Example:
    >>> import os
    >>> bar_disabled(False), bar_disabled(True, env={}), bar_disabled(True, env={"TQDM_DISABLE": "1"})
    (True, False, True)
    >>> bar_disabled(True, env={"TQDM_DISABLE": "0"})  # "", 0, false, no, off: the variable says show
    False
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["bar_disabled"]

_FALSE = {"", "0", "false", "no", "off"}


def bar_disabled(progress: bool, env: Mapping[str, str] | None = None) -> bool:
    """``True`` when a bar must not show: ``progress`` is false, or ``TQDM_DISABLE`` (in ``env``, default
    ``os.environ``) is set to anything but an empty string, ``0``, ``false``, ``no`` or ``off`` (any case).

    Example:
        >>> bar_disabled(True, env={"TQDM_DISABLE": "True"})
        True
    """
    env = os.environ if env is None else env
    return not progress or env.get("TQDM_DISABLE", "").strip().lower() not in _FALSE
