"""Ground-truth circuits of the shipped models as data, their faithfulness, completeness and minimality, ACDC-style
pruning, and the scores a circuit-discovery method gets against a ground truth.

**What a circuit is here.** A set of edges of ``graph.build_graph(model)`` (both towers of the whole CLIP: writers
``embed``, ``pos``, heads, MLPs; ports a head's ``q``/``k``/``v``, an MLP, the readout) and the components (heads,
MLPs) those edges connect to the readouts, for one **task**: two-object images with their ``X is on the left of Y``
captions, the metric ``M`` the mean logit difference between the true caption and its left/right swap
(``graph.mirror_task(..., "clip")``).

**How the ground truth is measured** (``ground_truth_circuit``; fixed before any method was scored against it):

- An edge is *ablated* by feeding its port the writer's **ablation value** instead of its live activation
  (``graph.run_with_edges``): the writer's per-position mean over the reference set (the task's images and their
  mirrors; its captions and their swaps), the mean ablation of Wang et al. (2022); for ``pos``, which is the same on
  every input (its mean is itself), zero, i.e. the paper's own term ablations (Fig. 5e: EP, PE, PP removed).
- ``cost(e) = (M_full - M_without_e) / M_full``. An edge is in the circuit when ``|cost| >= threshold`` (0.05):
  edges in **both directions**, those that carry the belief (ablating them costs it) and those that work against it
  (ablating them raises it; e.g. heads that attend to the other object). A component is in it when it sends a kept
  edge into a kept component or a readout (dangling edges are pruned, readouts first). Until issue 45 only edges
  with ``cost >= threshold`` counted; a circuit without the edges that oppose the belief is more than the model
  (its faithfulness was 1.04-1.54).
- **On which inputs.** A circuit is measured on one set of inputs (the shipped ones: every unseen-pair validation
  image of the model's dataset, ``ground_truth_inputs``) and its scores, minimality included, hold on those; on
  other inputs (seen pairs, training pairs) an edge's share can fall below the threshold, so it is minimal there
  only where ``circuit_scores`` on those inputs says so (``reproduce x-circuits`` measures both).
- Measurements kept beside it (not used to choose it): each component's own mean-ablation cost, its mirror-swap
  patching effect (its output taken from the mirrored input or the swapped caption, IDs §2.1; as a share of the
  belief, -2 = flipped), the zero-ablation cost of each layer-0 score term per head (Fig. 5e, 16), and the cost of
  attention knockouts per head (CLS -> left / right object; EOT -> subject / object).

**Scores of a circuit** (``circuit_scores``), as in the circuit literature:

- faithfulness (Wang et al. 2022; normalised as Hanna et al. 2024): ``(M(C) - M(empty)) / (M_full - M(empty))``
  with every edge outside ``C`` ablated; also the ratio ``M(C) / M_full`` and the circuit's accuracy (rows whose
  belief stays positive).
- completeness: the complement carries nothing, ``1 - (M(G \\ C) - M(empty)) / (M_full - M(empty))`` with the
  circuit's own edges ablated; and Wang et al.'s incompleteness ``max_K |F(C \\ K) - F(G \\ K)| / M_full`` over
  ``K`` = each single circuit component.
- minimality: for each circuit edge ``e``, the share of the circuit's effect it moves, ``|M(C) - M(C \\ e)| /
  |M(C) - M(empty)|`` (an edge that opposes the belief moves it too); reported per edge, as its minimum and as the
  fraction of edges with a share >= threshold.

``acdc`` is ACDC's greedy pruning (Conmy et al. 2023, Alg. 1) on any task: ports in reverse topological order, each
incoming edge tried by patching it to its corrupted value, removed when ``|M(H \\ e) - M(H)| < threshold |M_full|``.
``roc_auc``, ``precision_at_k`` and ``rank_correlation`` score a method's ranking against a ground truth or against
exact patching.

Example:
    >>> from hooked_clip1d import load_model
    >>> m = load_model("simplified-ntot20-n2-10-no-qk-bias")  # head 2 carries left/right
    >>> imgs, caps = ground_truth_inputs(m, n=8)
    >>> circ = ground_truth_circuit(m, imgs, caps, name="simplified-ntot20-n2-10-no-qk-bias")
    >>> "vision.L0.H2" in circ.nodes, circ.scores["faithfulness"] > 0.8
    (True, True)
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int

from hooked_clip1d.analysis.circuits.attribution import Attribution
from hooked_clip1d.analysis.circuits.graph import Edge, Graph, build_graph, edge_name, graph_flags, parse_node
from hooked_clip1d.analysis.circuits.task import Task, mirror_task, run_with_edges, writer_activations
from hooked_clip1d.analysis.hooks import check_eval, knockout_hooks
from hooked_clip1d.analysis.interventions.knockout import cls_object_edges, eot_edges
from hooked_clip1d.analysis.interventions.terms import ablate_terms, attention_terms
from hooked_clip1d.analysis.metrics import check_model, pair_inputs
from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.files import json_text
from hooked_clip1d.model.clip import CLIP1D

THRESHOLD = 0.05
#: a ranking's scores: numbers or a 1-D tensor
Scores = Sequence[float | int] | torch.Tensor
CIRCUIT_FORMAT = 1


# ---- the circuit as data --------------------------------------------------------------------------------------------
@dataclass
class Circuit:
    """A circuit as data: its ``nodes`` (components and the inputs it reads) and ``edges`` (``"writer->port"``), the
    ``definition`` it was measured under, the ``measurements`` behind it and its ``scores`` (faithfulness,
    completeness, minimality). ``to_json`` / ``from_json`` / ``save`` / ``load`` round-trip it."""

    model: str
    nodes: list[str]
    edges: list[str]
    definition: dict[str, Any] = field(default_factory=dict)
    measurements: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    format: int = CIRCUIT_FORMAT

    def edge_pairs(self) -> list[Edge]:
        """The edges as ``(writer, port)`` pairs."""
        return [tuple(e.split("->")) for e in self.edges]  # type: ignore[misc]

    def components(self) -> list[str]:
        """The heads and MLPs of the circuit."""
        return [n for n in self.nodes if parse_node(n).kind in ("head", "mlp")]

    def to_json(self) -> str:
        """JSON text, floats rounded to 6 decimals (what a file holds)."""
        return json_text(_rounded(asdict(self)))

    @staticmethod
    def from_json(text: str) -> Circuit:
        d = json.loads(text)
        if not isinstance(d, dict) or not {"model", "nodes", "edges"} <= set(d):
            raise ValueError("not a circuit: a JSON object with 'model', 'nodes' and 'edges' is expected")
        if d.get("format", CIRCUIT_FORMAT) != CIRCUIT_FORMAT:
            raise ValueError(f"circuit format {d.get('format')} is not {CIRCUIT_FORMAT}; regenerate the file")
        for name in d["nodes"]:
            parse_node(name)
        for e in d["edges"]:
            if not isinstance(e, str) or e.count("->") != 1:
                raise ValueError(f"edge {e!r} is not 'writer->port'")
        return Circuit(**d)

    def save(self, path: str | Path) -> Path:
        from hooked_clip1d.files import atomic_write_text

        path = Path(path)
        atomic_write_text(path, self.to_json())
        return path

    @staticmethod
    def load(path: str | Path) -> Circuit:
        return Circuit.from_json(Path(path).read_text())


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 6) + 0.0
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_rounded(v) for v in obj]
    return obj


# ---- ablation values and circuit runs -------------------------------------------------------------------------------
def reference_inputs(task: Task) -> dict[str, torch.Tensor]:
    """The reference set of each tower for mean ablation: its clean and corrupted inputs together (images and their
    mirrors; captions and their swaps), so the mean carries no left/right information."""
    return {k: torch.cat([task.tokens(k, "clean"), task.tokens(k, "corrupted")]) for k in task.towers}


def ablation_values(task: Task, reference: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Each writer's ablation value [1, pos, d_model]: its per-position mean over ``reference`` (default
    ``reference_inputs``), and zero for ``pos`` (the same on every input; module docstring). Call inside
    ``graph_flags``."""
    reference = reference_inputs(task) if reference is None else reference
    acts = writer_activations(task, tokens=reference)
    return {
        w: (torch.zeros_like(a[:1]) if parse_node(w).kind == "pos" else a.mean(0, keepdim=True))
        for w, a in acts.items()
    }


def run_circuit(
    task: Task, keep: Collection[Edge], values: Mapping[str, torch.Tensor], graph: Graph | None = None
) -> Float[torch.Tensor, " batch"]:
    """The metric per example with every edge not in ``keep`` ablated to its writer's ``values``. Call inside
    ``graph_flags``."""
    graph = build_graph(task.target) if graph is None else graph
    kept = set(keep)
    return run_with_edges(task, {e: values[e[0]] for e in graph.edges if e not in kept})


def _prune(graph: Graph, edges: set[Edge]) -> tuple[set[Edge], list[str]]:
    """Drop edges into components that reach no readout through ``edges``; return (edges, components kept)."""
    alive: set[str] = set()
    kept: set[Edge] = set()
    for port in sorted(graph.ports, key=_port_rank, reverse=True):  # readouts first, then later layers
        ref = parse_node(port)
        if ref.kind != "readout":
            owner = port.rsplit(".", 1)[0] if ref.channel else port
            if owner not in alive:
                continue
        for w, p in graph.edges:
            if p == port and (w, p) in edges:
                kept.add((w, p))
                if parse_node(w).kind in ("head", "mlp"):
                    alive.add(w)
    return kept, [w for w in graph.writers if w in alive]


def _port_rank(port: str) -> tuple[int, int]:
    ref = parse_node(port)
    if ref.kind == "readout":
        return (10**6, 0)
    return (2 * (ref.layer or 0) + (1 if ref.kind == "mlp" else 0), 0)


# ---- ground truth ---------------------------------------------------------------------------------------------------
def ground_truth_inputs(
    model: CLIP1D, split: str = "val_unseen", n: int | None = None, seed: int = 0
) -> tuple[Int[torch.Tensor, "n pos"], Int[torch.Tensor, "n 4"]]:
    """The task's inputs: the two-object images of ``split`` of the model's own dataset with their ``X is on the left
    of Y`` captions (``n`` random rows if given, drawn with ``seed``)."""
    model = check_model(model)
    if model.data_config is None:
        raise ValueError("the model has no data_config (load it with load_model, or set model.data_config)")
    ds = build_dataset(model.data_config)
    return pair_inputs(ds.splits[split], ds.vocab, n=n, seed=seed)


def _cost(full: float, value: torch.Tensor) -> float:
    return (full - float(value.mean())) / full


@torch.no_grad()
def ground_truth_circuit(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    *,
    threshold: float = THRESHOLD,
    name: str = "",
) -> Circuit:
    """Measure the model's circuit for the left/right task on ``images`` and their ``captions`` (module docstring:
    mean ablation of every edge, membership by ``threshold``, pruning, plus term ablations, mirror swaps and
    knockouts as measurements, and the circuit's scores)."""
    model = check_eval(check_model(model))
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    start = time.perf_counter()
    task = mirror_task(model, images, captions, target="clip")
    graph = build_graph(model)
    full = float(task.clean_metric().mean())
    if full <= 0:
        raise ValueError(
            f"the model's mean belief on these inputs is {full:.3g} <= 0: it does not do the task, so "
            "there is no circuit to measure"
        )
    with graph_flags(model):
        values = ablation_values(task)
        full = float(task.run({}).mean())
        edge_cost = {e: _cost(full, run_with_edges(task, {e: values[e[0]]})) for e in graph.edges}
        node_cost = {
            w: _cost(full, run_with_edges(task, {e: values[w] for e in graph.edges if e[0] == w}))
            for w in graph.components()
        }
        edges, components = _prune(graph, {e for e, c in edge_cost.items() if abs(c) >= threshold})
        corr = writer_activations(task, "corrupted")
        mirror = {
            w: -_cost(full, run_with_edges(task, {e: corr[w] for e in graph.edges if e[0] == w}))
            for w in graph.components()
        }
    inputs = [w for w in graph.writers if parse_node(w).kind in ("embed", "pos") and any(e[0] == w for e in edges)]
    circuit = Circuit(
        model=name,
        nodes=inputs + components,
        edges=[edge_name(e) for e in graph.edges if e in edges],
        definition={
            "task": "left/right belief of the whole CLIP: two-object images with their 'X is on the left of Y' "
            "captions; metric = mean over images of logit(true caption) - logit(its left/right swap)",
            "inputs": {"n": int(images.shape[0])},
            "ablation": "edge ablation: the port reads the writer's per-position mean over the reference set "
            "(images and their mirrors; captions and their swaps); pos (the same on every input) is ablated to zero",
            "membership": f"an edge is in the circuit when ablating it alone moves the full belief by >= {threshold} "
            "of it, in either direction (edges that carry the belief and edges that oppose it); a head or MLP when "
            "it sends a kept edge into a kept component or a readout (dangling edges pruned)",
            "minimal_on": "the inputs above: faithfulness, completeness and minimality are measured on them; on "
            "other inputs (seen or training pairs) an edge may move the belief by less than the threshold "
            "(circuit_scores on those inputs; reproduce x-circuits measures them)",
            "threshold": threshold,
            "graph": {"writers": len(graph.writers), "ports": len(graph.ports), "edges": len(graph.edges)},
        },
        measurements={
            "full_belief": full,
            "edge_cost": {edge_name(e): c for e, c in edge_cost.items()},
            "node_cost": node_cost,
            "mirror_effect": mirror,
            "terms": _term_costs(model, task, full),
            "knockouts": _knockout_costs(model, task, full),
        },
    )
    circuit.scores = circuit_scores(model, images, captions, circuit, threshold=threshold)
    circuit.scores["seconds"] = time.perf_counter() - start
    return circuit


def _term_costs(model: CLIP1D, task: Task, full: float) -> dict[str, float]:
    """Zero-ablation cost of every layer-0 score term of every head (the paper's Fig. 5e / 16 ablations), per tower."""
    out: dict[str, float] = {}
    for k, tower in task.towers.items():
        _, cache = tower.run_with_cache(task.tokens(k)[:1])
        ln = "live" if tower.cfg.normalization_type == "LN" else None
        for term in attention_terms(tower, cache, 0):
            if term[1] == "B" or term == "BB":  # constant along a row: no effect on the softmax
                continue
            for h in range(tower.cfg.n_heads):
                hooks = ablate_terms(tower, [term], 0, [h], ln_scale=ln)
                out[f"{k}.L0.H{h}.{term}"] = _cost(full, task.run({k: hooks}))
    return out


def _knockout_costs(model: CLIP1D, task: Task, full: float) -> dict[str, float]:
    """Cost of knocking out, in one head at every layer, CLS -> left / right object (vision) and EOT -> subject /
    object (text)."""
    out: dict[str, float] = {}
    images = task.tokens("vision")
    for h in range(model.vision.cfg.n_heads):
        for side in ("left", "right"):
            hooks = knockout_hooks(model.vision, cls_object_edges(images, side), heads=[h])
            out[f"vision.H{h}.CLS->{side}"] = _cost(full, task.run({"vision": hooks}))
    for h in range(model.text.cfg.n_heads):
        for slot in ("subject", "object"):
            hooks = knockout_hooks(model.text, eot_edges(slot), heads=[h])
            out[f"text.H{h}.EOT->{slot}"] = _cost(full, task.run({"text": hooks}))
    return out


@torch.no_grad()
def circuit_scores(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    circuit: Circuit,
    *,
    threshold: float = THRESHOLD,
) -> dict[str, Any]:
    """Faithfulness, completeness and minimality of ``circuit`` on the task of ``images`` / ``captions`` (module
    docstring), with the same ablation values as ``ground_truth_circuit``."""
    model = check_eval(check_model(model))
    if not 0 < threshold < 1:  # a negative one made every edge "minimal"
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    task = mirror_task(model, images, captions, target="clip")
    graph = build_graph(model)
    keep = set(circuit.edge_pairs())
    unknown = [edge_name(e) for e in keep if e not in graph.edges]
    if unknown:
        raise ValueError(f"the circuit's edges {unknown[:3]} are not edges of this model's graph")
    strangers = [n for n in circuit.nodes if n not in graph.writers and n not in graph.ports]
    if strangers:  # scored and counted (n_nodes, incompleteness) as if they were the model's
        raise ValueError(f"the circuit's nodes {strangers[:3]} are not nodes of this model's graph")
    with graph_flags(model):
        values = ablation_values(task)
        full_rows = task.run({})
        full = float(full_rows.mean())
        c_rows = run_circuit(task, keep, values, graph)
        m_c, m_empty = float(c_rows.mean()), float(run_circuit(task, [], values, graph).mean())
        m_comp = float(run_circuit(task, [e for e in graph.edges if e not in keep], values, graph).mean())
        span = full - m_empty
        incompleteness = {}
        for k in circuit.components():
            out_k = {e for e in graph.edges if e[0] == k}
            f_c = float(run_circuit(task, keep - out_k, values, graph).mean())
            f_g = float(run_circuit(task, set(graph.edges) - out_k, values, graph).mean())
            incompleteness[k] = abs(f_c - f_g) / abs(full)
        minimality = {
            edge_name(e): abs(m_c - float(run_circuit(task, keep - {e}, values, graph).mean())) / abs(m_c - m_empty)
            for e in graph.edges
            if e in keep
        }
    shares = list(minimality.values())
    return {
        "full_belief": full,
        "circuit_belief": m_c,
        "empty_belief": m_empty,
        "faithfulness": (m_c - m_empty) / span,
        "faithfulness_ratio": m_c / full,
        "full_accuracy": float((full_rows > 0).float().mean()),
        "circuit_accuracy": float((c_rows > 0).float().mean()),
        "completeness": 1 - (m_comp - m_empty) / span,
        "incompleteness_max": max(incompleteness.values(), default=0.0),
        "incompleteness": incompleteness,
        "minimality_min": min(shares, default=0.0),
        "minimal_fraction": sum(s >= threshold for s in shares) / len(shares) if shares else 0.0,
        "minimality": minimality,
        "n_nodes": len(circuit.components()),
        "n_edges": len(keep),
    }


# ---- ACDC -----------------------------------------------------------------------------------------------------------
@torch.no_grad()
def acdc(task: Task, threshold: float = 0.01) -> Attribution:
    """ACDC's greedy pruning (Conmy et al. 2023, Alg. 1) with the task's corrupted activations: ports in reverse
    topological order (readouts first), each incoming edge removed (patched to its writer's corrupted value) when
    that changes the metric by less than ``threshold * |M_full|``. Scores are ``|M(H \\ e) - M(H)|`` when each edge
    was tried (the quantity ACDC thresholds); ``info["kept"]`` lists the edges kept."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    start = time.perf_counter()
    graph = build_graph(task.target)
    with graph_flags(task.target):
        corr = writer_activations(task, "corrupted")
        current = float(task.run({}).mean())
        tol = threshold * abs(current)
        removed: dict[Edge, torch.Tensor] = {}
        score: dict[Edge, float] = {}
        for port in sorted(graph.ports, key=_port_rank, reverse=True):
            for w in reversed([w for w, p in graph.edges if p == port]):
                trial = dict(removed)
                trial[(w, port)] = corr[w]
                value = float(run_with_edges(task, trial).mean())
                score[(w, port)] = abs(value - current)
                if score[(w, port)] < tol:
                    removed, current = trial, value
    kept = [edge_name(e) for e in graph.edges if e not in removed]
    names = [edge_name(e) for e in graph.edges]
    scores = torch.tensor([score[e] for e in graph.edges])
    return Attribution("ACDC", names, scores, time.perf_counter() - start, info={"kept": kept, "threshold": threshold})


# ---- scoring a method -----------------------------------------------------------------------------------------------
def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Average ranks (ties share their mean rank), 0-based, float64."""
    x = x.double()
    below = (x[None, :] < x[:, None]).sum(-1).double()
    equal = (x[None, :] == x[:, None]).sum(-1).double()
    return below + (equal - 1) / 2


def _checked_scores(where: str, scores: Scores, labels: Sequence[Any] | torch.Tensor | None = None) -> torch.Tensor:
    """``scores`` as float64, refused (naming ``where``) if any is NaN or infinite (a NaN has no rank: it gave an AUC
    of -0.25 and came first in a top-k) or if ``labels`` has another length."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    bad = int((~torch.isfinite(s)).sum())
    if bad:
        raise ValueError(f"{where}: {bad} of the {s.numel()} scores are not finite numbers (NaN or inf)")
    if labels is not None and len(labels) != s.numel():
        raise ValueError(f"{where}: {s.numel()} scores but {len(labels)} labels")
    return s


def roc_auc(scores: Scores, labels: Sequence[bool] | torch.Tensor) -> float:
    """Area under the ROC curve of ``scores`` for binary ``labels`` (Mann-Whitney; ties count 1/2); NaN when one
    class is empty.

    >>> roc_auc([0.9, 0.1, 0.5, 0.5], [True, False, True, False])
    0.875
    """
    s, y = _checked_scores("roc_auc", scores, labels), torch.as_tensor(labels, dtype=torch.bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = _ranks(s)
    return float((r[y].sum() - n_pos * (n_pos - 1) / 2) / (n_pos * n_neg))


def precision_at_k(scores: Scores, labels: Sequence[bool] | torch.Tensor, k: int | None = None) -> float:
    """The fraction of ground-truth members among the ``k`` highest scores (default ``k`` = the number of members;
    ties broken by order).

    >>> precision_at_k([0.9, 0.1, 0.5, 0.4], [True, False, False, True])
    0.5
    """
    s, y = _checked_scores("precision_at_k", scores, labels), torch.as_tensor(labels, dtype=torch.bool)
    k = int(y.sum()) if k is None else k
    if k <= 0:
        return float("nan")
    top = torch.argsort(s, descending=True, stable=True)[:k]
    return float(y[top].double().mean())


def rank_correlation(a: Scores, b: Scores) -> float:
    """Spearman's rank correlation (average ranks for ties; NaN when either is constant).

    >>> round(rank_correlation([1.0, 2.0, 3.0], [10.0, 30.0, 20.0]), 6)
    0.5
    """
    ta = _checked_scores("rank_correlation", a)
    tb = _checked_scores("rank_correlation", b)
    if tb.numel() != ta.numel():
        raise ValueError(f"rank_correlation: {ta.numel()} scores against {tb.numel()}")
    ra, rb = _ranks(ta), _ranks(tb)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = ra.norm() * rb.norm()
    return float((ra * rb).sum() / denom) if float(denom) > 0 else float("nan")


def node_scores_from_edges(result: Attribution, writers: Sequence[str]) -> Attribution:
    """A node ranking from an edge method: each writer's summed ``|score|`` over its outgoing edges."""
    totals = dict.fromkeys(writers, 0.0)
    for name, s in zip(result.names, result.scores.tolist(), strict=True):
        w = name.split("->")[0]
        if w in totals:
            totals[w] += abs(s)
    return Attribution(result.method, list(totals), torch.tensor(list(totals.values())), result.seconds)


def score_method(
    result: Attribution, truth: Sequence[str], universe: Sequence[str], exact: Attribution | None = None
) -> dict[str, float]:
    """How ``result`` ranks the ground-truth members ``truth`` among ``universe`` (nodes or edges), by ``|score|``:
    ROC AUC, precision at k (k = number of members in ``universe``), and, given ``exact``, the rank correlation of
    ``|score|`` with ``|exact score|`` over ``universe``. Members outside ``universe`` (edges a method cannot score)
    are not ranked; a ``truth`` with no member in it is refused."""
    scores = result.as_dict()
    missing = [u for u in universe if u not in scores]
    if missing:
        raise ValueError(f"{result.method} scores no {missing[:3]}")
    inside = set(truth) & set(universe)
    if truth and not inside:  # a typo or edge names among nodes gave AUC NaN and k 0 without a word
        raise ValueError(
            f"no ground-truth member is in the universe scored ({len(universe)} items; e.g. {list(truth)[:3]} are "
            "not): nothing to rank"
        )
    if exact is not None:
        uncovered = [u for u in universe if u not in exact.as_dict()]
        if uncovered:
            raise ValueError(f"exact ({exact.method}) scores no {uncovered[:3]}: it must score the whole universe")
    s = torch.tensor([abs(scores[u]) for u in universe])
    members = set(truth)
    labels = torch.tensor([u in members for u in universe])
    out = {"auc": roc_auc(s, labels), "precision_at_k": precision_at_k(s, labels), "k": int(labels.sum())}
    if exact is not None:
        ex = exact.as_dict()
        out["rank_correlation"] = rank_correlation(s, torch.tensor([abs(ex[u]) for u in universe]))
    return out


__all__ = [
    "CIRCUIT_FORMAT",
    "THRESHOLD",
    "Circuit",
    "ablation_values",
    "acdc",
    "circuit_scores",
    "ground_truth_circuit",
    "ground_truth_inputs",
    "node_scores_from_edges",
    "precision_at_k",
    "rank_correlation",
    "reference_inputs",
    "roc_auc",
    "run_circuit",
    "score_method",
]
