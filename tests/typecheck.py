"""The test run's type and shape checks: jaxtyping + beartype on the package's functions, at the right depth.

A pytest plugin (``-p tests.typecheck`` in pyproject's ``addopts``, loaded before anything imports the package) that
installs an import hook for ``hooked_clip1d``: every module-level function and class, and every method of a class
(nested classes included), gets ``@jaxtyping.jaxtyped(typechecker=beartype.beartype)``, as jaxtyping's own hook
(``--jaxtyping-packages``) does. Unlike that hook it leaves a function defined inside another (a hook's wrapper, an
error helper, a ``sorted`` key) alone unless it declares a shape (``Float[...]`` on an argument or its return).
jaxtyping's hook decorates such a function every time its parent runs, and beartype compiles a new wrapper each
time: 27k decorations of ``checked_hook``'s wrapper in one profile of six test files (41 s), the masked loss's
helper at every training step. None of those declares a shape; the functions that call them, and that they return
into, are checked. Of the package's 82 nested functions, 3 declare shapes (the belief metrics' closures, made once
per metric): those are checked.

``@typing.no_type_check`` on a function or class leaves it (and what it contains) unchecked, as with jaxtyping's hook.
The instrumented bytecode is cached beside the normal one under its own name (``*.opt-typecheckedN.pyc``), so a run
without the hook never loads it.

Example (what the hook does to a module's source):
    >>> print(ast.unparse(decorate(ast.parse("def f(x):\\n    def g(y):\\n        return y\\n    return g(x)"))))
    import jaxtyping as _typecheck_jaxtyping
    import beartype as _typecheck_beartype
    <BLANKLINE>
    @_typecheck_jaxtyping.jaxtyped(typechecker=_typecheck_beartype.beartype)
    def f(x):
    <BLANKLINE>
        def g(y):
            return y
        return g(x)
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import marshal
import os
import sys
from collections.abc import Sequence
from typing import Any

PACKAGES = ("hooked_clip1d",)
VERSION = 2  # bump when the transformation changes: the cached bytecode of the old one is then ignored
_CACHE_TAG = f"typechecked{VERSION}"


def _no_type_check(node: ast.FunctionDef | ast.ClassDef) -> bool:
    def named(d: ast.expr) -> bool:
        if isinstance(d, ast.Call):
            return named(d.func)
        return (isinstance(d, ast.Name) and d.id == "no_type_check") or (
            isinstance(d, ast.Attribute) and d.attr == "no_type_check"
        )

    return any(named(d) for d in node.decorator_list)


def _shape_types() -> frozenset[str]:
    import jaxtyping

    def dtype(name: str) -> bool:
        obj = getattr(jaxtyping, name)
        return isinstance(obj, type) and issubclass(obj, jaxtyping.AbstractDtype) and obj is not jaxtyping.AbstractDtype

    return frozenset(n for n in dir(jaxtyping) if dtype(n))


SHAPE_TYPES = _shape_types()  # Float, Int, Bool, Shaped, ...: an annotation ``Float[...]`` declares a shape


def declares_shape(node: ast.FunctionDef) -> bool:
    """Whether an argument or the return of ``node`` is annotated with a jaxtyping array type (``Float[...]``)."""
    a = node.args
    annotations = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]
    for ann in [*annotations, node.returns]:
        for sub in ast.walk(ann) if ann is not None else ():
            if isinstance(sub, ast.Subscript):
                name = sub.value.id if isinstance(sub.value, ast.Name) else getattr(sub.value, "attr", None)
                if name in SHAPE_TYPES:
                    return True
    return False


def _decorator() -> ast.expr:
    return ast.parse("_typecheck_jaxtyping.jaxtyped(typechecker=_typecheck_beartype.beartype)", mode="eval").body


def _walk(node: ast.AST, in_function: bool) -> None:
    """Decorate what ``node`` holds: at module or class level (blocks like ``if``, ``try``, ``with`` and loops
    included) every function and class, recursing into classes; inside a function only the functions that declare a
    shape (each is decorated at every call of its parent: the few that declare shapes are worth it)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _no_type_check(child):
            continue
        if isinstance(child, ast.FunctionDef):
            if not in_function or declares_shape(child):
                child.decorator_list.append(ast.copy_location(_decorator(), child))  # innermost: sees the annotations
            _walk(child, in_function=True)
        elif isinstance(child, ast.ClassDef) and not in_function:
            child.decorator_list.insert(0, ast.copy_location(_decorator(), child))  # outermost: after @dataclass
            _walk(child, in_function=False)
        elif not (isinstance(child, ast.AsyncFunctionDef) and not in_function):  # jaxtyping's hook leaves async
            _walk(child, in_function)  # functions alone too


def decorate(tree: ast.Module) -> ast.Module:
    """The module ``tree`` with its module-level functions and classes and their methods decorated (in place)."""
    _walk(tree, in_function=False)
    at = 0
    for at, node in enumerate(tree.body):  # the imports go after a docstring and ``from __future__`` imports
        docstring = at == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not (docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")):
            break
    else:
        at = len(tree.body)
    tree.body[at:at] = ast.parse(
        "import jaxtyping as _typecheck_jaxtyping\nimport beartype as _typecheck_beartype"
    ).body
    return ast.fix_missing_locations(tree)


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> Any:
        path = self.path
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size, VERSION)
        cache = importlib.util.cache_from_source(path, optimization=_CACHE_TAG)
        try:
            with open(cache, "rb") as f:
                stored, code = marshal.load(f)
            if tuple(stored) == key:
                return code
        except (OSError, EOFError, ValueError, TypeError):
            pass
        tree = decorate(ast.parse(self.get_data(path), filename=path))
        code = compile(tree, path, "exec", dont_inherit=True)
        try:  # written whole or not at all: two test workers may import the module at once
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            tmp = f"{cache}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                marshal.dump((key, code), f)
            os.replace(tmp, cache)
        except OSError:
            pass
        return code


class _Finder:
    """Hands the package's modules to ``_Loader``; every other module is left to the next finder."""

    def __init__(self, packages: Sequence[str]):
        self.packages = tuple(packages)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not any(fullname == p or fullname.startswith(p + ".") for p in self.packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _Loader(spec.loader.name, spec.loader.path)
            return spec
        return None


def install(packages: Sequence[str] = PACKAGES) -> _Finder:
    """Install the hook (first on ``sys.meta_path``); refused if a package is already imported (it would go
    unchecked)."""
    imported = [p for p in packages if p in sys.modules]
    if imported:
        raise RuntimeError(f"cannot type-check {imported}: already imported before the hook was installed")
    finder = _Finder(packages)
    sys.meta_path.insert(0, finder)
    return finder


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: Any) -> None:
    """Before the conftests (which import the package) are loaded."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        install()
