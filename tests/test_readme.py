"""The README's first screen and its code: what a newcomer reads and runs first."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_first_screen_has_the_commands_a_hook_and_where_to_go_next():
    lines = README.read_text().splitlines()
    nxt = lines.index("## Where to go next")
    assert nxt < 60, f"the first screen (up to 'Where to go next') is {nxt + 1} lines"
    first = "\n".join(lines[:nxt])
    assert "pip install torch==2.13.0" in first and "python -m pytest -q" in first and "run_with_cache" in first


def test_readme_python_runs(capsys):
    """Every ```python block of the README runs as written, offline, on the shipped model."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "'acc'" in out  # the hook example's evaluate() printed its metrics


@pytest.mark.heavy
def test_docs_python_runs(capsys):
    """The ```python blocks of docs/ run as written, continuing the README's example (a gradient line of
    docs/hooks.md once passed 4 images with 2 captions)."""
    ns = {"__name__": "readme"}
    for code in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S):
        exec(compile(code, "README.md", "exec"), ns)
    docs = sorted((README.parent / "docs").glob("*.md"))
    ran = []
    for doc in docs:
        for code in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
            exec(compile(code, str(doc.name), "exec"), dict(ns))
            ran.append(doc.name)
    assert {"hooks.md", "analyses.md"} <= set(ran)
