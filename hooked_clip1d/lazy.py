"""Lazy exports (PEP 562), written once for every package ``__init__.py`` of hooked_clip1d: a package lists its
public names with the module that defines each, and a name's module is imported only when the name is first read.
So ``import hooked_clip1d``, the command line's ``--help`` and the torch-free modules (``settings``, ``files``) load
neither torch nor TransformerLens, and importing one module of a folder does not import the others.

The table is a literal ``{name: "hooked_clip1d.<module>"}`` at the call, so ``tests/test_architecture.py`` reads
these imports as edges of the import graph (an import it could not read would hide a circle).

Example:
    >>> import sys, types
    >>> pkg = sys.modules["demo_pkg"] = types.ModuleType("demo_pkg")
    >>> pkg.__getattr__, pkg.__dir__ = lazy_exports("demo_pkg", {"sqrt": "math"})
    >>> pkg.sqrt(4.0), "sqrt" in vars(pkg), "sqrt" in dir(pkg)
    (2.0, True, True)
    >>> pkg.cbrt
    Traceback (most recent call last):
    ...
    AttributeError: module 'demo_pkg' has no attribute 'cbrt'
    >>> del sys.modules["demo_pkg"]
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package (``package``: its ``__name__``) that exports ``table``'s
    names (name -> the module defining it) lazily: reading a name imports its module once and keeps the value in the
    package's namespace; any other unknown name is an ``AttributeError`` naming it. Use it at the package's top:
    ``__getattr__, __dir__ = lazy_exports(__name__, {...})`` (the module docstring has an example)."""
    table = dict(table)

    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
