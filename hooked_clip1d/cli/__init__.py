"""The command line, ``hooked-clip1d train|eval|analyze|sweep|reproduce|...``: the parser and the single-model
commands (``commands``: ``build_parser``, one ``add_<command>_parser`` per command, and ``main``), the train
command's flags and configs (``train``), the commands over many runs (``many_runs``), the ``analyze`` command
(``analyze``), its families (``families``) and what they build on (``family_api``), and the demo (``demo``).
Importing it does not import torch (``--help`` stays fast)."""

from typing import Any

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """The ``hooked-clip1d`` command (``cli.commands.main``)."""
    from hooked_clip1d.cli import commands

    return commands.main(argv)


def build_parser() -> Any:
    """The command line's parser (``cli.commands.build_parser``)."""
    from hooked_clip1d.cli import commands

    return commands.build_parser()
