"""The command line, ``hooked-clip1d train|eval|analyze|sweep|reproduce|...`` (``main``), the train command's flags
and configs (``train``), the analysis families of ``analyze`` (``analyze``) and the demo (``demo``). Importing it
does not import torch (``--help`` stays fast)."""

from typing import Any

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """The ``hooked-clip1d`` command (``cli.commands.main``)."""
    from hooked_clip1d.cli.commands import main as _main

    return _main(argv)


def build_parser() -> Any:
    """The command line's parser (``cli.commands.build_parser``)."""
    from hooked_clip1d.cli.commands import build_parser as _build

    return _build()
