"""Path patching: a sender's effect through chosen receivers only (Wang et al. 2022, Sec. 3.1; Goldowsky-Dill et al.
2023), head -> head, embedding -> head, anything -> readout, on either tower or the whole CLIP.

The sender (a writer of ``graph.build_graph``: ``<tower>.embed``, ``<tower>.pos``, ``<tower>.L0.H2``,
``<tower>.L1.mlp``) takes its corrupted value, but only along its direct paths into the **receivers** (ports:
``<tower>.L1.H0.q`` / ``.k`` / ``.v``, a whole head ``<tower>.L1.H0`` meaning its three ports, ``<tower>.L1.mlp``,
``<tower>.readout``); every other reader of the sender, and every component between the sender and a receiver, sees
the clean run; what lies after the receivers recomputes. This is the IOI paper's three-step algorithm (patch the
sender with all other heads frozen, record the receivers' inputs, rerun with those inputs): because the residual
stream is a sum, a receiver's input in step 2 is its clean input plus the sender's corrupted-minus-clean output, which
is what ``graph.run_with_edges`` feeds it directly (LayerNorm, if any, is then applied to that input, as in step 3).

So an embedding term can be routed into one head's keys only (``pos -> L0.H2.k``: the positional key side of the
paper's EP and PP terms), and a head's effect can be split into what it does directly at the readout and what it
does through the heads of later layers. With a single receiver, the effect is the exact patching effect of one
edge (``edge_attribution.exact_edge_patching``), the quantity EAP and EAP-IG approximate; with every port that reads the
sender it is the sender's exact (total) patching effect.

Example:
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10-no-qk-bias")  # head 2 carries left/right
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision")
    >>> keys = path_patch(task, "vision.embed", ["vision.L0.H2.k"])  # where the objects are, as head 2's keys see it
    >>> values = path_patch(task, "vision.embed", ["vision.L0.H2.v"])  # what the objects are, in head 2's values
    >>> bool(keys < 0 and values < 0)  # each path alone moves the belief toward the mirror's
    True
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from hooked_clip1d.analysis.circuits.attribution import Attribution
from hooked_clip1d.analysis.circuits.graph import CHANNELS, build_graph, check_nodes, edge_name, graph_flags, parse_node
from hooked_clip1d.analysis.circuits.task import Task, run_with_edges, writer_activations


def _receivers(task: Task, sender: str, receivers: Sequence[str]) -> list[str]:
    graph = build_graph(task.target)
    if isinstance(receivers, str):
        raise TypeError(f"receivers must be a list of ports, e.g. [{receivers!r}], not a string")
    if not receivers:
        raise ValueError("receivers is empty: name at least one port (e.g. 'vision.L1.H0.q' or 'vision.readout')")
    ports = []
    for r in receivers:
        ref = parse_node(r)
        if ref.kind == "head" and ref.channel is None:
            ports += [f"{r}.{c}" for c in CHANNELS]
        else:
            ports.append(r)
    ports = check_nodes(graph, list(dict.fromkeys(ports)), "port")
    bad = [p for p in ports if (sender, p) not in graph.edges]
    if bad:
        raise ValueError(
            f"{sender} does not feed {bad} (a writer reaches only later ports of its own tower); its ports: "
            f"{[p for w, p in graph.edges if w == sender]}"
        )
    return ports


def path_patch(task: Task, sender: str, receivers: Sequence[str]) -> float:
    """The change of the batch-mean metric when ``sender`` is patched from the corrupted run along its direct paths
    into ``receivers`` only (module docstring). ``receivers``: ports, or whole heads (all three ports)."""
    graph = build_graph(task.target)
    (sender,) = check_nodes(graph, [sender], "writer")
    ports = _receivers(task, sender, receivers)
    with graph_flags(task.target):
        corr = writer_activations(task, "corrupted")[sender]
        base = task.run({}).mean()
        return float(run_with_edges(task, {(sender, p): corr for p in ports}).mean() - base)


def path_patching(
    task: Task, senders: Sequence[str] | None = None, receivers: Sequence[str] | None = None
) -> Attribution:
    """``path_patch`` of every (sender, receiver) pair: one score per edge ``"sender->port"`` that exists (default:
    every writer, every port, i.e. every edge of the graph), each the effect through that one receiver. Whole heads
    given as receivers are scored per port."""
    start = time.perf_counter()
    graph = build_graph(task.target)
    senders = check_nodes(graph, list(graph.writers if senders is None else senders), "writer")
    if receivers is None:
        ports = list(graph.ports)
    else:
        if isinstance(receivers, str) or not receivers:
            raise ValueError("receivers must be a non-empty list of ports or heads")
        ports = []
        for r in receivers:
            ref = parse_node(r)
            ports += [f"{r}.{c}" for c in CHANNELS] if ref.kind == "head" and ref.channel is None else [r]
        ports = check_nodes(graph, list(dict.fromkeys(ports)), "port")
    chosen_s, chosen_p = set(senders), set(ports)
    pairs = [(s, p) for s, p in graph.edges if s in chosen_s and p in chosen_p]  # in the graph's edge order
    if not pairs:
        raise ValueError(f"none of the senders {senders} feeds any of the receivers {ports}")
    with graph_flags(task.target):
        corr = writer_activations(task, "corrupted")
        base = task.run({}).mean()
        scores = [float(run_with_edges(task, {(s, p): corr[s]}).mean() - base) for s, p in pairs]
    names = [edge_name(e) for e in pairs]
    return Attribution("path patching", names, torch.tensor(scores), time.perf_counter() - start)


__all__ = ["path_patch", "path_patching"]
