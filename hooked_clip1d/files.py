"""Files written atomically: through a temp file and a rename, so a reader never sees a half-written file and a
kill leaves either the old file or the new one (every file the package writes goes through these); and
``measure_once``, the one process-level memo of readings of files that do not change. Torch-free.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a" / "b.txt"
    >>> atomic_write_text(p, "hello")
    >>> p.read_text()
    'hello'
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

_FULL = {
    errno.ENOSPC: "the disk is full",
    errno.EFBIG: "the file is over the size limit",
    errno.EDQUOT: "the disk quota is exceeded",
}


def _errno_of(e: BaseException) -> int | None:
    """The OS error number behind ``e``: an ``OSError``'s, or the ``(os error N)`` that a Rust writer's error
    carries in its message (safetensors' ``SafetensorError`` is not an ``OSError``).

    Example:
        >>> _errno_of(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"))
        28
    """
    if isinstance(e, OSError):
        return e.errno
    m = re.search(r"\(os error (\d+)\)", str(e))
    return int(m.group(1)) if m else None


def atomic_write(path: str | os.PathLike, write: Any) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path``, so readers never see a half-written file. A full disk or
    a file-size limit (from Python or from a writer such as safetensors) is an ``OSError`` naming the file and what
    is left of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files (and writers may recreate them): fix afterwards
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        code = _errno_of(e) if isinstance(e, Exception) else None
        if code in _FULL:  # say what happened and what is left
            kept = "the previous file is intact" if path.exists() else "nothing was written"
            strerror = e.strerror if isinstance(e, OSError) else os.strerror(code)
            raise OSError(code, f"could not write {str(path)!r}: {_FULL[code]} ({strerror}); {kept}") from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file atomically."""

    def w(tmp: str) -> None:
        Path(tmp).write_text(text, encoding="utf-8")

    atomic_write(path, w)


def json_text(obj: Any, *, default: Any = None) -> str:
    """``obj`` as JSON text for a file the repository keeps (records, manifests): objects and lists that hold other
    objects or lists are laid out one member a line, indented 2; those that hold only scalars stay on one line (a
    row of numbers, a check's fields), which keeps the files a third smaller than ``indent=2`` (what travels to a
    GPU window is measured in MiB) and a diff still names the row that moved. Ends with a newline; ``default`` as
    in ``json.dumps``.

    Example:
        >>> print(json_text({"a": [1, 2.5], "b": [{"x": 1}, {"y": [2, 3]}]}), end="")
        {
          "a": [1, 2.5],
          "b": [
            {"x": 1},
            {
              "y": [2, 3]
            }
          ]
        }
    """

    def nested(x: Any) -> bool:
        values = x.values() if isinstance(x, dict) else x if isinstance(x, list) else ()
        return any(isinstance(v, dict | list) for v in values)

    def text(x: Any, ind: int) -> str:
        pad = " " * (ind + 2)
        if isinstance(x, dict) and nested(x):
            rows = [f"{pad}{json.dumps(k)}: {text(v, ind + 2)}" for k, v in x.items()]
            return "{\n" + ",\n".join(rows) + "\n" + " " * ind + "}"
        if isinstance(x, list) and nested(x):
            return "[\n" + ",\n".join(pad + text(v, ind + 2) for v in x) + "\n" + " " * ind + "]"
        return json.dumps(x, default=default, allow_nan=True)

    return text(json.loads(json.dumps(obj, default=default)), 0) + "\n"


class UnknownNameError(KeyError, ValueError):
    """A name the caller gave is not one this package knows (a zoo model, a circuit, a figure): a ``KeyError`` for
    lookups, and a ``ValueError`` so the command line reports it as a usage error. Its message lists what exists.

    Example:
        >>> str(UnknownNameError("unknown model 'x'; known: ['a']"))
        "unknown model 'x'; known: ['a']"
    """

    def __str__(self) -> str:  # KeyError's repr-quoting would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


# measure_once's values, by key (one table for the package: the readings of files that do not change in a process)
_MEASURED: dict[tuple[Any, ...], Any] = {}


def measure_once(key: tuple[Any, ...], measure: Any) -> Any:
    """``measure()``'s value, computed once a process per ``key`` (which must name everything the value depends on:
    the files' digests or modification times, the code's version), returned as a deep copy so a caller's change
    never reaches the next caller. For readings of stored weights that a figure's audit and null control repeat.

    Example:
        >>> calls = []
        >>> a = measure_once(("demo", 1), lambda: calls.append(1) or {"rows": [1]})
        >>> a["rows"].append(2)
        >>> measure_once(("demo", 1), lambda: calls.append(1) or {"rows": [1]}), len(calls)
        ({'rows': [1]}, 1)
    """
    import copy

    if key not in _MEASURED:
        _MEASURED[key] = measure()
    return copy.deepcopy(_MEASURED[key])
