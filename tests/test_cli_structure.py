"""The command line's shape (issue 44): the analysis families on one public API module (no importlib loop between
``cli.analyze`` and ``cli.families``), one parser function per command, no underscore name imported across
modules, no function over 80 lines; every command's ``--help`` answers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hooked_clip1d.cli

CLI = Path(hooked_clip1d.cli.__file__).parent
MAX_FUNCTION_LINES = 80


def _trees() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(CLI.glob("*.py"))}


def test_no_underscore_name_is_imported_across_modules():
    bad = [
        f"{name}: from {n.module} import {a.name}"
        for name, tree in _trees().items()
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("hooked_clip1d")
        for a in n.names
        if a.name.startswith("_") and a.name != "__version__"
    ]
    assert not bad, bad


def test_the_families_load_without_importlib_and_without_a_circle():
    trees = _trees()
    assert not [n for n, t in trees.items() if "importlib" in ast.unparse(t)], "cli/ loads a module by name"

    def imports(tree: ast.Module) -> set[str]:
        out = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        return out | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert "hooked_clip1d.cli.families" in imports(trees["analyze.py"])
    assert "hooked_clip1d.cli.family_api" in imports(trees["families.py"])
    assert not {"hooked_clip1d.cli.analyze", "hooked_clip1d.cli.families"} & imports(trees["family_api.py"])
    assert "hooked_clip1d.cli.analyze" not in imports(trees["families.py"])


def test_every_family_is_declared_in_the_families_module():
    from hooked_clip1d.cli.analyze import FAMILIES
    from hooked_clip1d.cli.family_api import FAMILIES as API_FAMILIES

    assert FAMILIES is API_FAMILIES and len(FAMILIES) >= 11
    assert {f.run.__module__ for f in FAMILIES.values()} == {"hooked_clip1d.cli.families"}


def test_no_function_of_the_command_line_is_over_80_lines():
    long = [
        f"{name}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for name, tree in _trees().items()
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_one_parser_function_per_command():
    from hooked_clip1d.cli import commands, many_runs, train

    sub = next(a for a in commands.build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    names = list(sub.choices)
    assert names == [
        "train",
        "eval",
        "demo",
        "list",
        "analyze",
        "sweep",
        "reproduce",
        "results-page",
        "pack",
        "unpack",
        "export",
        "ship-trajectory",
        "repack-trajectory",
    ]
    for name in names:
        fn = f"add_{name.replace('-', '_')}_parser"
        assert any(hasattr(m, fn) for m in (commands, many_runs, train)), f"no {fn}"
        assert callable(sub.choices[name].get_default("func")), f"{name} runs no function"
    assert commands.build_parser().parse_args(["train", "--out", "x"]).func is commands.cmd_train


@pytest.mark.parametrize("command", [[], ["train"], ["analyze"], ["reproduce"], ["ship-trajectory"]])
def test_help_answers(command):
    r = subprocess.run(
        [sys.executable, "-m", "hooked_clip1d", *command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.startswith("usage: hooked-clip1d") and not r.stderr, r.stderr
