"""The computational graph that circuit discovery scores: nodes, edges, a patching task, and edge-level interventions.

Circuit-discovery methods (``node_attribution``: AtP, AtP*; ``edge_attribution``: EAP, EAP-IG; ``path_patching``;
``circuits``: ground truth, faithfulness, ACDC-style pruning) share one graph per tower, in the convention of ACDC
(Conmy et al. 2023) and EAP (Syed et al. 2023; Hanna et al. 2024): the residual stream is a sum of **writers**, and
every component reads it through **ports**.

- writers (upstream nodes): ``<tower>.embed`` (token embedding E, ``hook_embed``), ``<tower>.pos`` (positional
  embedding P, ``hook_pos_embed``, learned positions only), ``<tower>.L{l}.H{h}`` (one head's output
  ``z_h @ W_O[h]``, ``hook_result`` without ``b_O``), ``<tower>.L{l}.mlp`` (``hook_mlp_out``).
- ports (downstream inputs): ``<tower>.L{l}.H{h}.q`` / ``.k`` / ``.v`` (that head's query, key and value input,
  ``hook_q_input`` etc. before ``ln1``), ``<tower>.L{l}.mlp`` (``hook_mlp_in``) and ``<tower>.readout`` (the final
  residual, read at CLS / EOT after ``ln_final``).
- edges ``writer -> port`` wherever the writer comes earlier in the residual stream (a head feeds the MLP of its own
  layer and every later layer). Constant parts of the residual (``b_O``; with LN, ``ln1.b``) are no node.

In the whole CLIP the two towers' graphs sit side by side (``vision.*`` and ``text.*``) and both readouts feed the
logits; a vision node reaches the logits through the image embedding, a text node through the caption embedding.

A ``Task`` is what every method scores: a **clean** input, a **corrupted** (counterfactual) input of the same shape,
and a metric of the output, per example. A node's or edge's effect is **noising**, as in AtP (Kramár et al. 2024,
``c(n) = L(M(x_clean | do(n <- n(x_noise)))) - L(M(x_clean))``) and EAP: the change of the batch-mean metric when
that node (edge) takes its corrupted value in the clean run. ``mirror_task`` builds the package's default task:
two-object images against their mirrors (the relation flips), the metric the logit difference between the true
caption and its left/right swap.

An edge intervention changes one port's input only: the port reads ``clean input - writer's value + writer's
replacement`` (``run_with_edges``; what ACDC and path patching do), so the writer's other readers are untouched.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> g = build_graph(m.vision)
    >>> g.writers
    ('vision.embed', 'vision.pos', 'vision.L0.H0', 'vision.L0.H1', 'vision.L0.H2', 'vision.L0.H3')
    >>> len(g.edges), g.edges[0]
    (30, ('vision.embed', 'vision.L0.H0.q'))
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from hooked_clip1d.analysis.metrics import (
    NORMS,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder

Target = HookedEncoder | CLIP1D
Inputs = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
#: one edge: (writer node, port)
Edge = tuple[str, str]
TOWERS = ("vision", "text")
CHANNELS = ("q", "k", "v")

_NODE = re.compile(r"^(vision|text)\.(?:(embed|pos|readout)|L(\d+)\.(?:H(\d+)(?:\.([qkv]))?|(mlp)))$")


# ---- names ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRef:
    """A parsed node or port name: ``tower``, ``kind`` (embed, pos, head, mlp, readout), ``layer``, ``head`` and, for a
    head's port, ``channel`` (q, k or v)."""

    tower: str
    kind: str
    layer: int | None = None
    head: int | None = None
    channel: str | None = None


def parse_node(name: str) -> NodeRef:
    """The parts of a node or port name (module docstring).

    >>> parse_node("vision.L1.H2.k")
    NodeRef(tower='vision', kind='head', layer=1, head=2, channel='k')
    >>> parse_node("vision.head2")
    Traceback (most recent call last):
    ValueError: 'vision.head2' is not a node name; e.g. vision.embed, vision.pos, vision.L0.H2(.q), vision.L0.mlp
    """
    m = _NODE.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"{name!r} is not a node name; e.g. vision.embed, vision.pos, vision.L0.H2(.q), vision.L0.mlp")
    tower, flat, layer, head, channel, mlp = m.groups()
    if flat is not None:
        return NodeRef(tower, flat)
    if mlp is not None:
        return NodeRef(tower, "mlp", int(layer))
    return NodeRef(tower, "head", int(layer), int(head), channel)


def edge_name(edge: Edge) -> str:
    """``"writer->port"``, the edge's name in records.

    >>> edge_name(("vision.pos", "vision.L0.H2.k"))
    'vision.pos->vision.L0.H2.k'
    """
    return f"{edge[0]}->{edge[1]}"


# ---- the graph ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Graph:
    """The writers, ports and edges of a tower or of the whole CLIP (module docstring), in forward order."""

    writers: tuple[str, ...]
    ports: tuple[str, ...]
    edges: tuple[Edge, ...]

    def heads(self) -> list[str]:
        """The head writers (``<tower>.L{l}.H{h}``)."""
        return [w for w in self.writers if parse_node(w).kind == "head"]

    def components(self) -> list[str]:
        """The writers a circuit chooses among: heads and MLPs (the embeddings are its inputs)."""
        return [w for w in self.writers if parse_node(w).kind in ("head", "mlp")]


def _order(ref: NodeRef, writer: bool) -> int:
    """Position in the residual stream: a writer at ``order`` feeds every port with a larger order."""
    if ref.kind in ("embed", "pos"):
        return -1
    if ref.kind == "readout":
        return 10**6
    assert ref.layer is not None
    return 2 * ref.layer + (1 if ref.kind == "mlp" else 0)


def build_graph(target: Target) -> Graph:
    """The graph of one tower (``model.vision`` / ``model.text``) or of the whole ``CLIP1D`` (both towers)."""
    towers = towers_of(target)
    key = tuple(
        (t.cfg.tower, t.cfg.n_layers, t.cfg.n_heads, t.cfg.attn_only, t.cfg.positional) for t in towers.values()
    )
    return _graph_of(key)


@functools.lru_cache(maxsize=64)
def _graph_of(key: tuple[tuple[str, int, int, bool, str], ...]) -> Graph:
    """The graph of towers described by (tower, n_layers, n_heads, attn_only, positional): it depends on nothing
    else, so it is built once per architecture."""
    writers: list[str] = []
    ports: list[str] = []
    for tower, n_layers, n_heads, attn_only, positional in key:
        writers += [f"{tower}.embed"] + ([f"{tower}.pos"] if positional == "learned" else [])
        for layer in range(n_layers):
            writers += [f"{tower}.L{layer}.H{h}" for h in range(n_heads)]
            ports += [f"{tower}.L{layer}.H{h}.{c}" for h in range(n_heads) for c in CHANNELS]
            if not attn_only:
                writers.append(f"{tower}.L{layer}.mlp")
                ports.append(f"{tower}.L{layer}.mlp")
        ports.append(f"{tower}.readout")
    w_ref = {w: parse_node(w) for w in writers}
    p_ref = {p: parse_node(p) for p in ports}
    edges = [
        (w, p)
        for p in ports
        for w in writers
        if w_ref[w].tower == p_ref[p].tower and _order(w_ref[w], True) < _order(p_ref[p], False)
    ]
    return Graph(tuple(writers), tuple(ports), tuple(edges))


@functools.lru_cache(maxsize=64)
def edge_set(graph: Graph) -> frozenset[Edge]:
    """``graph``'s edges as a set (cached per graph), for membership tests.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> tower = CLIP1D(CLIPConfig.from_preset("simplified")).vision
        >>> ("vision.embed", "vision.L0.H0.q") in edge_set(build_graph(tower))
        True
    """
    return frozenset(graph.edges)


def writer_hook(name: str) -> tuple[str, str, int | None]:
    """(tower, hook point, head index or None) where writer ``name``'s activation [batch, pos, d_model] is read."""
    ref = parse_node(name)
    if ref.kind == "embed":
        return ref.tower, "hook_embed", None
    if ref.kind == "pos":
        return ref.tower, "hook_pos_embed", None
    if ref.kind == "mlp":
        return ref.tower, f"blocks.{ref.layer}.hook_mlp_out", None
    if ref.kind == "head" and ref.channel is None:
        return ref.tower, f"blocks.{ref.layer}.attn.hook_result", ref.head
    raise ValueError(f"{name!r} is not a writer (embed, pos, a head or an MLP)")


def port_hook(name: str, tower: HookedEncoder) -> tuple[str, str, int | None]:
    """(tower, hook point, head index or None) of port ``name``'s input [batch, pos, d_model]."""
    ref = parse_node(name)
    if ref.kind == "readout":
        return ref.tower, f"blocks.{tower.cfg.n_layers - 1}.hook_resid_post", None
    if ref.kind == "mlp":
        return ref.tower, f"blocks.{ref.layer}.hook_mlp_in", None
    if ref.kind == "head" and ref.channel is not None:
        return ref.tower, f"blocks.{ref.layer}.hook_{ref.channel}_input", ref.head
    raise ValueError(f"{name!r} is not a port (a head's .q/.k/.v, an MLP or the readout)")


def check_nodes(graph: Graph, names: Sequence[str], kind: Literal["writer", "port"]) -> list[str]:
    """``names`` as a list, each a writer (or port) of ``graph``; otherwise an error naming the bad one."""
    if isinstance(names, str):
        raise TypeError(f"expected a list of {kind} names, e.g. [{names!r}], not a string")
    known = graph.writers if kind == "writer" else graph.ports
    out = []
    for n in names:
        parse_node(n)
        if n not in known:
            raise ValueError(f"{n!r} is not a {kind} of this graph; {kind}s: {list(known)}")
        out.append(n)
    return out


# ---- the task -------------------------------------------------------------------------------------------------------
def towers_of(target: object) -> dict[str, HookedEncoder]:
    """The towers of ``target`` by name (a ``CLIP1D``'s two, or one tower's own), refusing what has no writer/port
    graph (a post-LN tower, anything else).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> sorted(towers_of(CLIP1D(CLIPConfig.from_preset("simplified"))))
        ['text', 'vision']
    """
    if isinstance(target, CLIP1D):
        towers = {"vision": target.vision, "text": target.text}
    elif isinstance(target, HookedEncoder):
        towers = {target.cfg.tower: target}
    else:
        raise TypeError(f"expected a tower (model.vision / model.text) or a CLIP1D model, got {type(target).__name__}")
    for tower in towers.values():
        if tower.cfg.normalization_type == "LN" and getattr(tower.cfg, "ln_position", "pre") == "post":
            raise ValueError(
                f"the {tower.cfg.tower} tower is post-LN (ln_position='post'): its residual stream is normalised "
                "after every block, so it is not a sum of component outputs and has no writer/port graph"
            )
    return towers


@contextlib.contextmanager
def graph_flags(target: Target) -> Iterator[None]:
    """Turn on the hook points the graph reads (per-head ``hook_result``, split ``hook_{q,k,v}_input``,
    ``hook_mlp_in``) on every tower of ``target``, and restore each tower's own flags on exit (also after an
    error)."""
    saved = []
    try:
        for tower in towers_of(target).values():
            cfg = tower.cfg
            saved.append((tower, cfg.use_attn_result, cfg.use_split_qkv_input, cfg.use_attn_in, cfg.use_hook_mlp_in))
            _set_flags(tower, True, True, False, not cfg.attn_only)
        yield
    finally:
        for tower, *flags in saved:
            _set_flags(tower, *flags)


def _set_flags(tower: HookedEncoder, result: bool, split: bool, attn_in: bool, mlp_in: bool) -> None:
    tower.set_use_attn_result(result)
    if not attn_in:  # the two are exclusive: what goes off goes off first
        tower.set_use_attn_in(False)
    tower.set_use_split_qkv_input(split)
    tower.set_use_attn_in(attn_in)
    if not tower.cfg.attn_only:
        tower.set_use_hook_mlp_in(mlp_in)


__all__ = [
    "CHANNELS",
    "NORMS",
    "TOWERS",
    "Edge",
    "Graph",
    "NodeRef",
    "build_graph",
    "check_nodes",
    "edge_name",
    "edge_set",
    "graph_flags",
    "parse_node",
    "port_hook",
    "towers_of",
    "writer_hook",
]
