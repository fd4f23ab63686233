"""The test run's type-check hook (tests/typecheck.py): what it decorates, and that the package runs under it."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import jaxtyping
import pytest
import torch

from tests import typecheck

DECORATOR = "_typecheck_jaxtyping.jaxtyped(typechecker=_typecheck_beartype.beartype)"

SOURCE = '''"""doc"""
from __future__ import annotations
if True:
    def in_block(): ...
class A:
    def method(self):
        def helper(): ...
    class B:
        def inner_method(self): ...
@no_type_check
def skipped():
    def nested(x: Float[torch.Tensor, "b"]): ...
def outer(x):
    def per_call(y): ...
    def shaped(y: Float[torch.Tensor, "b"]) -> Int[torch.Tensor, " b"]: ...
    return per_call, shaped
'''


def _decorated(tree: ast.Module) -> set[str]:
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.ClassDef) and any(ast.unparse(d) == DECORATOR for d in n.decorator_list)
    }


def test_functions_methods_and_classes_are_decorated_nested_functions_only_where_they_declare_a_shape():
    tree = typecheck.decorate(ast.parse(SOURCE))
    assert _decorated(tree) == {"in_block", "A", "method", "B", "inner_method", "outer", "shaped"}
    assert ast.get_docstring(tree) == "doc"  # the imports go after the docstring and the __future__ import
    assert isinstance(tree.body[1], ast.ImportFrom) and ast.unparse(tree.body[2]).startswith("import jaxtyping")
    compile(tree, "<test>", "exec")  # still valid code


def test_a_module_imported_through_the_hook_is_checked_at_the_right_depth(tmp_path, monkeypatch):
    """A package imported through the hook: its module-level function is checked (a wrong shape raises); the
    function it defines per call is a plain function, rebuilt by nobody; the shaped one is checked. The
    instrumented bytecode is cached under its own name, apart from Python's."""
    pkg = tmp_path / "hc1d_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import torch\nfrom jaxtyping import Float\n\n"
        "def outer(x: Float[torch.Tensor, 'b']):\n"
        "    def per_call(y): return y\n"
        "    def shaped(y: Float[torch.Tensor, 'b']): return y\n"
        "    return per_call, shaped\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = typecheck._Finder(["hc1d_probe_pkg"])
    monkeypatch.setattr("sys.meta_path", [finder, *__import__("sys").meta_path])
    import hc1d_probe_pkg as probe

    try:
        assert hasattr(probe.outer, "__wrapped__")
        with pytest.raises(jaxtyping.TypeCheckError):
            probe.outer(torch.zeros(2, 3))
        per_call, shaped = probe.outer(torch.zeros(2))
        assert not hasattr(per_call, "__wrapped__") and per_call(5) == 5
        with pytest.raises(jaxtyping.TypeCheckError):
            shaped(torch.zeros(2, 3))
        cached = list((pkg / "__pycache__").glob("*.opt-typechecked*.pyc"))
        plain = importlib.util.cache_from_source(str(pkg / "__init__.py"))  # Python's own, never written by the hook
        assert len(cached) == 1 and not Path(plain).exists()
    finally:
        __import__("sys").modules.pop("hc1d_probe_pkg", None)


def test_the_package_itself_runs_under_the_hook():
    from hooked_clip1d.analysis import metrics
    from hooked_clip1d.model import functional

    assert type(functional.__spec__.loader) is typecheck._Loader
    assert hasattr(metrics.image_belief_metric, "__wrapped__")
