"""The import graph: no cycles (lazy imports included; type-only imports under ``TYPE_CHECKING`` excluded), and no
upward imports (the pipeline's layers); and the
package's size criteria: at most 10 modules at the package root, none over 650 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hooked_clip1d

ROOT = Path(hooked_clip1d.__file__).parent

# the pipeline, bottom to top: a module may import from its own layer or below, never above
LAYERS = [
    ["_version", "settings", "files", "data"],  # what a user sets (torch-free), atomic files; vocabulary, dataset
    ["model"],  # configs, components, towers, CLIP, model files
    ["evaluation"],  # accuracies of a model on the data
    ["training"],  # recipes' parameter groups, run directories, Trainer, the batched engine
    ["sweeps"],  # grids of runs, their plan, pool, status, transfer
    ["analysis"],  # hook factories and analyses
    ["visualization"],  # figures
    ["pretrained"],  # the zoo
    ["reproduce"],  # the paper's figures, verdicts, results page
    ["cli", "__main__", "__init__"],  # the command line
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
MAX_ROOT_MODULES = 10  # modules directly in hooked_clip1d/ (the rest live in the pipeline folders)
MAX_LINES = 650  # per module: a longer one is split into cohesive modules of its folder


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps = set()
        tree = ast.parse(p.read_text())
        typing_only = {  # imports under ``if TYPE_CHECKING:`` never run (annotations only), so they make no cycle
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for n in ast.walk(tree):
            if id(n) in typing_only:
                continue
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("hooked_clip1d"):
                deps |= {m for m in (n.module, *(f"{n.module}.{a.name}" for a in n.names)) if m in mods}
            elif isinstance(n, ast.Import):
                deps |= {a.name for a in n.names if a.name in mods}
        graph[name] = deps - {name}
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if module.endswith("__main__"):
        key = "__main__"
    return LEVEL[key]


def test_every_module_has_a_layer():
    unknown = sorted(m for m in _modules() if (m.split(".")[1] if "." in m else "__init__") not in LEVEL)
    assert not unknown, f"add these modules to LAYERS: {unknown}"


def test_no_upward_imports():
    bad = [
        f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
        for m, deps in _graph().items()
        for d in deps
        if _layer(d) > _layer(m) and d != "hooked_clip1d"
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    graph = _graph()
    seen: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(v: str, path: list[str]) -> None:
        seen[v] = 1
        for w in sorted(graph[v]):
            if seen.get(w) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(w) :], w]))
            if w not in seen:
                visit(w, [*path, w])
        seen[v] = 2

    for v in sorted(graph):
        if v not in seen:
            visit(v, [v])


def test_few_modules_at_the_package_root():
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, (
        f"{len(root)} modules at the package root (at most {MAX_ROOT_MODULES}): {root}; move some into a folder"
    )


def test_no_module_is_too_long():
    lines = {name: len(p.read_text().splitlines()) for name, p in _modules().items()}
    long = sorted((n, c) for n, c in lines.items() if c > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines (split them): " + ", ".join(f"{n} ({c})" for n, c in long)


@pytest.mark.parametrize(
    "code",
    [
        "import hooked_clip1d.cli.commands as c; c.build_parser()",  # --help, argument errors
        "import hooked_clip1d.cli.commands as c; c.build_parser().parse_args(['train', '--out', 'x'])",  # defaults
        "from hooked_clip1d import DataConfig, TrainConfig, settings; DataConfig(); TrainConfig(); settings.RECIPES",
    ],
)
def test_help_and_settings_do_not_import_torch(code):
    """--help, argument errors, `train --help` and the settings must not wait for torch / TransformerLens (timed in
    benchmarks/bench_cli.py)."""
    import subprocess
    import sys

    code = f"import sys; {code}; print(sorted(m for m in ('torch', 'transformer_lens', 'numpy') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_the_module_runs_as_a_command():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "hooked_clip1d", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("hooked-clip1d ")
