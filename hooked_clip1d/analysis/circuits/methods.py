"""The registry of attribution methods (``METHODS``: name -> ``Method``) and the check of any of their results against
exact patching (``check_attribution``).

``METHODS`` holds every circuit-discovery method of the package in one order: the exact references (``exact
patching`` of nodes, ``path patching`` of edges: each edge's exact effect), the first-order estimates (``AtP``,
``AtP+QK``, ``AtP*``, ``EAP``, ``EAP+QK``, ``EAP+AtP*``, ``EAP-IG``) and ``ACDC``'s pruning. Each ``Method`` knows its
unit (nodes or edges), whether its scores are signed, and its exact reference; calling it runs it on a task with
its literature defaults. ``reproduce x-circuits`` iterates the registry, so a method registered here
(``register_method``) is benchmarked with no other change. A new method is built from ``attribution``'s public
building blocks (its module docstring lists them) in a module of its own.

``check_attribution(task, result)`` is the cheap check of a node or edge result: a sample of its items patched
exactly and an ``attribution.AttributionWarning`` when the signs (or, for magnitudes, the sizes) disagree.

Example:
    >>> list(METHODS)[:4]
    ['exact patching', 'AtP', 'AtP+QK', 'AtP*']
    >>> METHODS["EAP"].unit, METHODS["EAP"].reference, METHODS["AtP*"].signed
    ('edge', 'path patching', False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from hooked_clip1d.analysis.circuits.attribution import Attribution
from hooked_clip1d.analysis.circuits.edge_attribution import check_edge_attribution, eap, eap_ig, exact_edge_patching
from hooked_clip1d.analysis.circuits.graph import Edge
from hooked_clip1d.analysis.circuits.node_attribution import atp, atp_star, check_node_attribution, exact_patching
from hooked_clip1d.analysis.circuits.path_patching import path_patching
from hooked_clip1d.analysis.circuits.scores import acdc
from hooked_clip1d.analysis.circuits.task import Task


@dataclass(frozen=True)
class Method:
    """One attribution method: its ``name``, the function ``fn(task, items, **kwargs) -> Attribution``, its ``unit``
    (``"node"``: ``items`` are node kinds or names; ``"edge"``: ``items`` are ``(writer, port)`` pairs, None for
    every edge), whether it is an exact reference (``exact``), whether its scores are ``signed`` (False for
    magnitudes), whether it estimates each item's exact patching effect (``estimate``: False for ACDC, whose scores
    are the metric changes it thresholds while pruning), and the ``kwargs`` it runs with.

    >>> METHODS["EAP-IG"].kwargs
    mappingproxy({'steps': 20, 'line': 'inputs'})
    """

    name: str
    fn: Callable[..., Attribution]
    unit: Literal["node", "edge"]
    exact: bool = False
    signed: bool = True
    estimate: bool = True
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.unit not in ("node", "edge"):
            raise ValueError(f"unit must be 'node' or 'edge', got {self.unit!r}")
        object.__setattr__(self, "kwargs", MappingProxyType(dict(self.kwargs)))

    @property
    def reference(self) -> str:
        """The exact method this one is compared with: ``exact patching`` (nodes) or ``path patching`` (edges)."""
        return "exact patching" if self.unit == "node" else "path patching"

    def __call__(
        self, task: Task, items: Sequence[str] | Sequence[Edge] | None = None, **overrides: Any
    ) -> Attribution:
        """Run on ``task``: node methods on ``items`` (default: heads), edge methods on ``items`` (default: every
        edge), with ``kwargs`` updated by ``overrides``. The result is named after the registry entry."""
        changed = [k for k in IDENTITY_KWARGS if k in overrides and overrides[k] != self.kwargs.get(k, overrides[k])]
        if changed:  # the result would carry this entry's name for another method
            raise ValueError(
                f"METHODS[{self.name!r}] is defined by {', '.join(f'{k}={self.kwargs[k]!r}' for k in changed)}; "
                f"overriding {changed} makes it another method: use that method's entry ({list(_METHODS)}) or call "
                "its function directly"
            )
        kwargs = {**self.kwargs, **overrides}
        if isinstance(items, str):  # a string would be read as a list of letters
            what = "node kinds or names, e.g. ['heads']" if self.unit == "node" else "(writer, port) edges"
            raise TypeError(f"{self.name}: items must be a list of {what}, got the string {items!r}")
        if self.unit == "node":
            result = self.fn(task, list(items) if items is not None else ["heads"], **kwargs)
        else:
            result = self.fn(task, items, **kwargs)
        result.method = self.name
        return result


#: keyword arguments that make a method another one (AtP vs AtP+QK vs AtP*): a registry entry refuses overrides of them
IDENTITY_KWARGS = ("qk_fix", "grad_drop")


def _path_patching(task: Task, edges: Sequence[Edge] | None = None) -> Attribution:
    """Each edge's exact effect: ``path_patching`` through one receiver per edge (``exact_edge_patching``'s numbers,
    tested equal), every edge by default."""
    return path_patching(task) if edges is None else exact_edge_patching(task, edges)


def _acdc(task: Task, edges: Sequence[Edge] | None = None, threshold: float = 0.01) -> Attribution:
    if edges is not None:
        raise ValueError("ACDC prunes the whole graph: it takes no edge list")
    return acdc(task, threshold=threshold)


class _Registry(Mapping[str, Method]):
    """A read-only view of the registered methods whose missing name is a ``KeyError`` naming the registered ones
    (and the one meant, where only the case differs)."""

    def __init__(self, methods: dict[str, Method]):
        self._methods = methods

    def __getitem__(self, name: str) -> Method:
        if name in self._methods:
            return self._methods[name]
        close = [k for k in self._methods if k.lower() == str(name).lower()]
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"no attribution method named {name!r}{hint}; registered: {list(self._methods)}")

    def __iter__(self):  # noqa: ANN204
        return iter(self._methods)

    def __len__(self) -> int:
        return len(self._methods)

    def __repr__(self) -> str:
        return f"METHODS({list(self._methods)})"


_METHODS: dict[str, Method] = {}
#: every registered method by name, in registration order (read-only; add with ``register_method``)
METHODS: Mapping[str, Method] = _Registry(_METHODS)


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to ``METHODS`` (under ``method.name``); an existing name is refused unless ``replace``.

    >>> register_method(Method("EAP", eap, "edge"))
    Traceback (most recent call last):
    ...
    ValueError: a method named 'EAP' is already registered; pass replace=True to replace it
    """
    if not isinstance(method, Method):
        raise TypeError(f"expected a Method, got {type(method).__name__}")
    if method.name in _METHODS and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered; pass replace=True to replace it")
    _METHODS[method.name] = method
    return method


def unregister_method(name: str) -> Method:
    """Remove ``name`` from ``METHODS`` and return it (a ``KeyError`` naming the registered ones if it is not there).

    >>> m = register_method(Method("EAP (copy)", eap, "edge"))
    >>> unregister_method("EAP (copy)") is m, "EAP (copy)" in METHODS
    (True, False)
    """
    if name not in _METHODS:
        raise KeyError(f"no method named {name!r} is registered; registered: {list(_METHODS)}")
    return _METHODS.pop(name)


for _m in (
    Method("exact patching", exact_patching, "node", exact=True),
    Method("AtP", atp, "node", kwargs={"qk_fix": False}),
    Method("AtP+QK", atp_star, "node", kwargs={"qk_fix": True, "grad_drop": False}),
    Method("AtP*", atp_star, "node", signed=False, kwargs={"qk_fix": True, "grad_drop": True}),
    Method("path patching", _path_patching, "edge", exact=True),
    Method("EAP", eap, "edge", kwargs={"qk_fix": False, "grad_drop": False}),
    Method("EAP+QK", eap, "edge", kwargs={"qk_fix": True, "grad_drop": False}),
    Method("EAP+AtP*", eap, "edge", signed=False, kwargs={"qk_fix": True, "grad_drop": True}),
    Method("EAP-IG", eap_ig, "edge", kwargs={"steps": 20, "line": "inputs"}),  # Hanna et al.'s line
    Method("EAP-IG-ports", eap_ig, "edge", kwargs={"steps": 20, "line": "ports"}),  # eap_ig's default
    Method("ACDC", _acdc, "edge", signed=False, estimate=False, kwargs={"threshold": 0.01}),
):
    register_method(_m)


def check_attribution(task: Task, result: Attribution, *, n: int = 8, seed: int = 0, warn: bool = True) -> dict:
    """The cheap check of any node or edge attribution of ``task``: ``n`` of its items (half its largest, half drawn
    with ``seed``) patched exactly and compared; an ``attribution.AttributionWarning`` when the signs agree on fewer
    than 75 % of the items exact patching moves or Pearson's r < 0.5 (``attribution.check_against_exact``). Returns
    the agreement (``sign_agreement``, ``pearson``, ``poor``, ``worst``, ...).

    >>> import warnings
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision", linearise="held")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     out = check_attribution(task, atp(task, ["embed", "k", "terms"], qk_fix=False, check=0), n=6)
    >>> out["poor"], len(caught)  # the cosine's norm held and the softmax: AtP gets signs wrong on keys and terms
    (True, 1)
    """
    if not isinstance(result, Attribution):
        raise TypeError(f"expected an Attribution (a method's result), got {type(result).__name__}")
    if result.names and all("->" in name for name in result.names):
        return check_edge_attribution(task, result, n=n, seed=seed, warn=warn)
    if any("->" in name for name in result.names):
        raise ValueError(f"{result.method} mixes node and edge names; check them separately")
    return check_node_attribution(task, result, n=n, seed=seed, warn=warn)


__all__ = ["METHODS", "Method", "check_attribution", "register_method", "unregister_method"]
