"""The import graph and the package's size rules.

The graph's edges are every import the code can run, read from the source: ``import`` / ``from ... import``
anywhere (in functions too); those under ``if TYPE_CHECKING:`` (a type-only import stands for a module's knowledge of
another: ``GroupFiles`` reading 22 of the trainer's attributes was one); ``importlib.import_module`` / ``__import__``
with a literal name; the lazy-export tables (``lazy_exports(__name__, {name: module})``, ``hooked_clip1d.lazy``),
and a name imported from a package that exports it lazily also counts as an edge to the module defining it. An import
the source does not name literally fails the test unless ``DYNAMIC_IMPORTS`` declares what it imports.

The rules, as data: ``LAYERS`` (the pipeline, bottom to top) -- no module imports a layer above its own unless the
edge is in ``UPWARD_ALLOWED`` with its reason; no circle unless one of its edges is in ``CIRCLE_ALLOWED`` with its
reason. Both lists are documented in docs/architecture.md, and an entry whose edge is gone fails the test until it
is removed (the lists only shrink). Size: at most 10 modules at the package root, none over 650 lines.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import hooked_clip1d

ROOT = Path(hooked_clip1d.__file__).parent
DOCS = ROOT.parent / "docs" / "architecture.md"
PKG = "hooked_clip1d"

# the pipeline by role, bottom to top: a module may import from its own layer or below, never above
LAYERS = [
    ["_version", "files", "lazy"],  # the version, atomic files, lazy exports
    ["settings"],  # what a user sets (torch-free): the configs' fields, recipes
    ["data"],  # the vocabulary and the datasets
    ["model"],  # configs, components, towers, CLIP, model files
    ["evaluation"],  # accuracies of a model on the data (training evaluates as it goes)
    ["training"],  # recipes' parameter groups, run directories, Trainer, the batched engine
    ["sweeps"],  # grids of runs, their plan, pool, status, transfer
    ["analysis"],  # hook factories and analyses of a model (head_subset_sweep retrains, from below)
    ["visualization"],  # figures of analyses
    ["pretrained"],  # the zoo (registry): shipped model files read; releases written and measured (ship, circuits)
    ["reproduce"],  # the paper's figures, verdicts, results page
    ["cli", "__main__", "__init__"],  # the command line; the package's lazy exports of every public name
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}

# upward edges, each with its reason (docs/architecture.md, "Edges against the layers"): none since issue 44 put the
# zoo (which writes and measures releases) above analysis and training, as the brief's pipeline orders them
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}
# edges that close a circle, each with its reason (docs/architecture.md)
CIRCLE_ALLOWED: dict[tuple[str, str], str] = {}
# imports the source does not name literally: the importer -> (what it imports, why); "<folder>.*" is every module
# directly in that folder but the importer and __main__
DYNAMIC_IMPORTS = {
    "lazy": (None, "lazy_exports imports the modules of each caller's table; the table is read at the call"),
    "reproduce.runner": (
        "reproduce.*",
        "_declare_figures imports every figure module (all but its NOT_FIGURE_MODULES), whose register() declares",
    ),
}
IMPORT_CALLS = ("importlib.import_module", "import_module", "__import__")
MAX_ROOT_MODULES = 10  # modules directly in hooked_clip1d/ (the rest live in the pipeline folders)
MAX_LINES = 650  # per module: a longer one is split into cohesive modules of its folder
MAX_LONG_FUNCTIONS = 5  # functions over 80 lines (docstring included) in the package: issue 44's bound


def _full(short: str) -> str:
    return f"{PKG}.{short}"


@cache
def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        out[".".join(rel.parts).removesuffix(".__init__")] = p
    return out


@cache
def _tree(name: str) -> ast.Module:
    return ast.parse(_modules()[name].read_text())


def _lazy_table(call: ast.Call) -> dict[str, str] | None:
    """The table of a ``lazy_exports(__name__, {...})`` call, or None if it is not a literal."""
    if len(call.args) != 2 or not isinstance(call.args[1], ast.Dict):
        return None
    d = call.args[1]
    if not all(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in [*d.keys, *d.values]):
        return None
    return {k.value: v.value for k, v in zip(d.keys, d.values, strict=True)}  # type: ignore[union-attr]


def _is_lazy_call(n: ast.AST) -> bool:
    return isinstance(n, ast.Call) and ast.unparse(n.func).rsplit(".", 1)[-1] == "lazy_exports"


@cache
def _lazy_exports() -> dict[str, dict[str, str]]:
    """Every package's lazy-export table: package -> {name: module}."""
    out: dict[str, dict[str, str]] = {}
    for name in _modules():
        for n in ast.walk(_tree(name)):
            if _is_lazy_call(n) and (table := _lazy_table(n)) is not None:  # type: ignore[arg-type]
                out.setdefault(name, {}).update(table)
    return out


def _imports(name: str) -> Iterator[tuple[str, str, int]]:
    """(imported module or package, kind, line) for every import of module ``name`` the source shows; kind is
    "import", "type-only", "importlib", "lazy" or "unreadable" (then the first item is the source of the call)."""
    tree = _tree(name)
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    lazy = _lazy_exports()
    for n in ast.walk(tree):
        kind = "type-only" if id(n) in typing_only else "import"
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            yield n.module, kind, n.lineno
            for a in n.names:
                yield f"{n.module}.{a.name}", kind, n.lineno  # a submodule imported by name
                if a.name in lazy.get(n.module, {}):  # a name the package exports lazily: its module
                    yield lazy[n.module][a.name], kind, n.lineno
        elif isinstance(n, ast.ImportFrom):
            yield f"relative import {ast.unparse(n)}", "unreadable", n.lineno
        elif isinstance(n, ast.Import):
            for a in n.names:
                yield a.name, kind, n.lineno
        elif isinstance(n, ast.Call) and ast.unparse(n.func) in (
            "importlib.import_module",
            "import_module",
            "__import__",
        ):
            arg = n.args[0] if n.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value, "importlib", n.lineno
            else:
                yield ast.unparse(n), "unreadable", n.lineno
        elif _is_lazy_call(n):
            table = _lazy_table(n)  # type: ignore[arg-type]
            if table is None:
                yield ast.unparse(n), "unreadable", n.lineno
            for module in (table or {}).values():
                yield module, "lazy", n.lineno


def _declared(name: str) -> set[str]:
    """The modules ``DYNAMIC_IMPORTS`` declares that module ``name`` imports."""
    target = DYNAMIC_IMPORTS.get(name.removeprefix(f"{PKG}."), (None, ""))[0]
    if target is None:
        return set()
    folder = _full(target.removesuffix(".*"))
    skipped = _literal(name, "NOT_FIGURE_MODULES")  # the runner's modules that declare no figure
    return {
        m
        for m in _modules()
        if m.rsplit(".", 1)[0] == folder and m != name and m.rsplit(".", 1)[1] not in ("__main__", *skipped)
    }


def _literal(module: str, variable: str) -> tuple[str, ...]:
    """The value of a module-level ``variable = (literal)`` in ``module``'s source (empty if it has none)."""
    path = ROOT.joinpath(*module.removeprefix(f"{PKG}.").split(".")).with_suffix(".py")
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in n.targets):
            return tuple(ast.literal_eval(n.value))
    return ()


@cache
def _edges() -> dict[tuple[str, str], str]:
    """(importer, imported) -> kind, for every import of a package module by another (first kind seen)."""
    mods = _modules()
    edges: dict[tuple[str, str], str] = {}
    for name in mods:
        for target, kind, _ in _imports(name):
            if kind != "unreadable" and target in mods and target != name:
                edges.setdefault((name, target), kind)
        for target in _declared(name):
            edges.setdefault((name, target), "declared")
    return edges


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if module.endswith("__main__"):
        key = "__main__"
    return LEVEL[key]


def _short(edge: tuple[str, str]) -> tuple[str, str]:
    return edge[0].removeprefix(f"{PKG}."), edge[1].removeprefix(f"{PKG}.")


def _upward() -> list[tuple[str, str]]:
    # the root package is imported by every import of a submodule; what a name from it resolves to is the edge
    return sorted(e for e in _edges() if _layer(e[1]) > _layer(e[0]) and e[1] != PKG)


def _circles(skip: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (each holds a circle), without the ``skip`` edges."""
    graph: dict[str, list[str]] = {m: [] for m in _modules()}
    for a, b in _edges():
        if _short((a, b)) not in skip:
            graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    unknown = sorted(m for m in _modules() if (m.split(".")[1] if "." in m else "__init__") not in LEVEL)
    assert not unknown, f"add these modules to LAYERS: {unknown}"


def test_every_import_is_read():
    """An import the source does not name literally (a computed module name, a table that is not a literal) hides
    edges: declare it in DYNAMIC_IMPORTS or name the module."""
    bad = [
        f"{name}:{line}: {what}"
        for name in _modules()
        if name.removeprefix(f"{PKG}.") not in DYNAMIC_IMPORTS
        for what, kind, line in _imports(name)
        if kind == "unreadable"
    ]
    assert not bad, "imports the architecture test cannot read:\n" + "\n".join(bad)
    for importer in DYNAMIC_IMPORTS:
        assert _full(importer) in _modules(), f"DYNAMIC_IMPORTS names a module that does not exist: {importer}"


def test_no_upward_imports():
    bad = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)}, {_edges()[(a, b)]})"
        for a, b in _upward()
        if _short((a, b)) not in UPWARD_ALLOWED
    ]
    assert not bad, "\n".join(bad)


def test_no_private_name_is_imported_across_modules():
    """A module imports only public names of another (issue 44): a name another module needs is a seam, so it is
    public and documented; an underscore name stays inside its module."""
    found = [
        f"{name.removeprefix(PKG + '.')}:{n.lineno} imports {a.name} from {n.module}"
        for name in _modules()
        for n in ast.walk(_tree(name))
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith(PKG)
        for a in n.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]
    assert not found, "make these names public (or keep them in their module): " + "; ".join(found)


# analysis's wings (issue 52), as data: (importer prefix, imported prefix, why it may not); a prefix is a module or
# a folder (its modules); the package's __init__ files export every wing's names and are left out
ONE_WAY = [
    ("analysis.interventions", "analysis.mechanism", "the toolkit never reads this paper's mechanism"),
    ("analysis.circuits", "analysis.mechanism", "circuit discovery never reads this paper's mechanism"),
    ("analysis.hooks", "analysis.interventions", "the hooks and metrics beside the wings use none of them"),
    ("analysis.hooks", "analysis.circuits", "the hooks and metrics beside the wings use none of them"),
    ("analysis.hooks", "analysis.mechanism", "the hooks and metrics beside the wings use none of them"),
    ("analysis.metrics", "analysis.interventions", "the hooks and metrics beside the wings use none of them"),
    ("analysis.metrics", "analysis.circuits", "the hooks and metrics beside the wings use none of them"),
    ("analysis.metrics", "analysis.mechanism", "the hooks and metrics beside the wings use none of them"),
    ("analysis", "training", "analysis measures models; retraining (head_subset_sweep) is training.retrain"),
]


def _under(module: str, prefix: str) -> bool:
    short = module.removeprefix(f"{PKG}.")
    return short == prefix or short.startswith(prefix + ".")


def test_the_analysis_wings_import_one_way():
    assert {m.removeprefix(f"{PKG}.analysis.").split(".")[0] for m in _modules() if _under(m, "analysis")} >= {
        "interventions",
        "circuits",
        "mechanism",
        "hooks",
        "metrics",
    }
    bad = [
        f"{a} imports {b} ({kind}): {why}"
        for (a, b), kind in sorted(_edges().items())
        for src, dst, why in ONE_WAY
        if _under(a, src) and _under(b, dst) and not a.endswith("__init__") and a != _full(src.split(".")[0])
    ]
    assert not bad, "\n".join(bad)


def test_few_long_functions():
    """At most ``MAX_LONG_FUNCTIONS`` functions of the package run over 80 lines (a reader takes one in at a
    sitting); a new long one splits into named steps."""
    long = sorted(
        (n.end_lineno - n.lineno + 1, f"{name.removeprefix(PKG + '.')}.{n.name}")
        for name in _modules()
        for n in ast.walk(_tree(name))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno - n.lineno + 1 > 80
    )
    assert len(long) <= MAX_LONG_FUNCTIONS, f"{len(long)} functions over 80 lines: {long[::-1]}"


# the modules whose declarations are a table laid out by hand (one knob per field: default, help, properties);
# everywhere else the formatter lays the code out, so the long-function bound is measured on formatted code
HAND_LAID_TABLES = ("settings.fields", "settings.configs", "settings.recipes", "model.config")


def test_the_formatter_lays_out_the_code():
    """``# fmt: skip`` only in the knob tables (issue 52 item 5: 216 lines in 46 modules kept functions short by hand
    before; now 27, all in ``HAND_LAID_TABLES``)."""
    skipped = {name.removeprefix(PKG + "."): _modules()[name].read_text().count("# fmt: skip") for name in _modules()}
    assert {n for n, c in skipped.items() if c} <= set(HAND_LAID_TABLES), skipped


def test_no_import_circles():
    circles = _circles(set(CIRCLE_ALLOWED))
    edges = _edges()
    msg = [
        "import circle among "
        + ", ".join(c)
        + ":\n  "
        + "\n  ".join(f"{a} -> {b} ({edges[(a, b)]})" for a in c for b in c if (a, b) in edges)
        for c in circles
    ]
    assert not circles, "\n".join(msg)


def test_the_allowed_edges_are_documented_and_still_there():
    """Each allowed edge has a reason, is written in docs/architecture.md as `a -> b`, and still exists (a fixed one
    leaves both lists); an allowed circle edge still closes a circle."""
    doc = DOCS.read_text()
    up = {_short(e) for e in _upward()}
    for edge, why in [*UPWARD_ALLOWED.items(), *CIRCLE_ALLOWED.items()]:
        assert why.strip(), f"{edge} has no reason"
        assert f"`{edge[0]} -> {edge[1]}`" in doc, f"docs/architecture.md does not list `{edge[0]} -> {edge[1]}`"
    gone = sorted(set(UPWARD_ALLOWED) - up)
    assert not gone, f"these upward edges are gone: delete them from UPWARD_ALLOWED and docs/architecture.md: {gone}"
    for edge in CIRCLE_ALLOWED:
        others = set(CIRCLE_ALLOWED) - {edge}
        closes = any(_full(edge[0]) in c and _full(edge[1]) in c for c in _circles(others))
        assert closes, f"{edge} closes no circle now: delete it from CIRCLE_ALLOWED and docs/architecture.md"


def test_the_docs_show_the_layers():
    """docs/architecture.md's module-by-module paragraph ("Layers, bottom to top: ...") names the folders and root
    modules in LAYERS' order."""
    doc = DOCS.read_text()
    paragraph = doc[doc.index("Layers, bottom to top:") :].split("\n\n")[0].split("\n(")[0]
    shown = re.findall(r"`([a-z_]+)(?:\.py|/)`", paragraph)
    folders = [n for names in LAYERS for n in names if n not in ("_version", "__main__", "__init__")]
    assert shown == folders, f"docs/architecture.md shows {shown}, LAYERS is {folders}"


def test_the_eyes_see_what_they_claim():
    """The graph holds the edges the old test could not see: a type-only import, a lazy export, a name imported from
    a package that exports it lazily, and the figure modules the runner imports by their computed names."""
    edges = _edges()
    assert edges[(_full("data.dataset"), _full("settings"))] == "import"
    assert edges[(PKG, _full("pretrained"))] == "lazy"
    assert edges[(_full("model"), _full("model.clip"))] == "lazy"
    assert edges[(_full("reproduce.runner"), _full("reproduce.open_questions"))] == "declared"
    assert (_full("reproduce.runner"), _full("reproduce.runner")) not in edges


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


def test_lazy_exports_resolve_and_are_listed():
    """Every lazily exported name imports from its module, is the same object through the package, and is in the
    package's ``__all__`` and ``dir()``."""
    import importlib

    for package, table in _lazy_exports().items():
        mod = importlib.import_module(package)
        for name, module in table.items():
            assert getattr(mod, name) is getattr(importlib.import_module(module), name), (package, name)
            assert name in mod.__all__ and name in dir(mod), (package, name)
        with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
            mod.not_a_name  # noqa: B018
