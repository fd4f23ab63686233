"""``x-circuits``: circuit-discovery methods scored against ground-truth circuits of zoo models (beyond the paper).

For each model with a shipped ground truth (``pretrained.circuit_files.CIRCUIT_MODELS``), the ground-truth circuit
is measured afresh (``analysis.circuits.ground_truth_circuit``: edge mean ablation, every unseen-pair image) and
each method runs on the whole CLIP's mirror task (``graph.mirror_task(..., "clip")``: images against their mirrors,
captions against their swaps, the left/right logit difference), on the same images:

- nodes (heads and MLPs of both towers): exact patching, AtP, AtP* (QK fix + GradDrop);
- edges (``graph.build_graph``): path patching (each edge's exact effect: the edge reference), EAP, EAP with AtP*'s
  corrections (ours), EAP-IG (20 steps), ACDC's greedy pruning (threshold 0.01 of the belief; its scores are the
  metric changes it thresholds). Edge methods also rank nodes by their summed ``|edge score|``.

Each ranking (by ``|score|``) is scored against the ground truth (ROC AUC; precision at k, k = the circuit's size)
and against exact patching (Spearman's rank correlation; path patching for edges), and each method's wall time is
recorded. The checks were written before the benchmark was first run. Nothing was tuned on the ground truth: every
method runs with its literature default (the ACDC threshold and EAP-IG's steps fixed beforehand).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register

METHODS = ("exact patching", "AtP", "AtP*", "path patching", "EAP", "EAP+AtP*", "EAP-IG", "ACDC")
ACDC_THRESHOLD = 0.01
IG_STEPS = 20
MIN_ACCURACY = 0.9  # a model that ranks the true caption first on fewer task images has no circuit to find
N_INPUTS: int | None = None  # task images per model (None: every unseen-pair image, as the shipped circuits)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _benchmark_model(name: str, model: CLIP1D) -> dict[str, Any]:
    """Ground truth, every method, and their scores on one model (module docstring)."""
    from hooked_clip1d.analysis.circuits import (
        acdc,
        ground_truth_circuit,
        ground_truth_inputs,
        node_scores_from_edges,
        score_method,
    )
    from hooked_clip1d.analysis.edge_attribution import eap, eap_ig
    from hooked_clip1d.analysis.graph import build_graph, mirror_task
    from hooked_clip1d.analysis.node_attribution import atp, atp_star, exact_patching
    from hooked_clip1d.analysis.path_patching import path_patching

    images, captions = ground_truth_inputs(model, n=N_INPUTS)
    task = mirror_task(model, images, captions, target="clip")
    belief = task.clean_metric()
    accuracy = float((belief > 0).float().mean())
    if accuracy < MIN_ACCURACY:
        return {"model": name, "accuracy": accuracy, "circuit": None}
    t0 = time.perf_counter()
    truth = ground_truth_circuit(model, images, captions, name=name)
    truth_seconds = time.perf_counter() - t0
    graph = build_graph(model)
    components = graph.components()
    has_mlp = any(".mlp" in c for c in components)
    kinds = ["heads", "mlp"] if has_mlp else ["heads"]
    edges_universe = [f"{w}->{p}" for w, p in graph.edges]

    runs = {
        "exact patching": lambda: exact_patching(task, kinds),
        "AtP": lambda: atp(task, kinds),
        "AtP*": lambda: atp_star(task, kinds),
        "path patching": lambda: path_patching(task),
        "EAP": lambda: eap(task),
        "EAP+AtP*": lambda: eap(task, qk_fix=True, grad_drop=True),
        "EAP-IG": lambda: eap_ig(task, steps=IG_STEPS),
        "ACDC": lambda: acdc(task, threshold=ACDC_THRESHOLD),
    }
    results = {}
    for method in METHODS:
        start = time.perf_counter()
        res = runs[method]()
        res.seconds = time.perf_counter() - start
        results[method] = res
    exact_nodes, exact_edges = results["exact patching"], results["path patching"]
    rows = []
    for method, res in results.items():
        edge_method = res.names and "->" in res.names[0]
        nodes = node_scores_from_edges(res, components) if edge_method else res
        node = score_method(nodes, truth.components(), components, exact=exact_nodes)
        edge = score_method(res, truth.edges, edges_universe, exact=exact_edges) if edge_method else {}
        moving = [e for e in edges_universe if not e.split("->")[0].endswith(".pos")]
        varying = score_method(res, truth.edges, moving) if edge_method else {}
        row = {
            "model": name,
            "method": method,
            "node_auc": node["auc"],
            "node_precision_at_k": node["precision_at_k"],
            "node_rank_correlation": node["rank_correlation"],
            "edge_auc": edge.get("auc"),
            "edge_precision_at_k": edge.get("precision_at_k"),
            "edge_rank_correlation": edge.get("rank_correlation"),
            "edge_auc_without_pos": varying.get("auc"),
            "seconds": res.seconds,
        }
        if method == "ACDC":
            row["acdc_kept"] = len(res.info["kept"])
        rows.append(row)
    pos_edges = [e for e in truth.edges if e.split("->")[0].endswith(".pos")]
    return {
        "model": name,
        "accuracy": accuracy,
        "circuit": {
            "nodes": truth.components(),
            "edges": truth.edges,
            "scores": truth.scores,
            "seconds": truth_seconds,
        },  # fmt: skip
        "n_components": len(components),
        "n_edges": len(edges_universe),
        "positional_truth_edges": pos_edges,
        "positional_edge_scores": {
            m: max((abs(results[m][e]) for e in pos_edges), default=0.0) for m in METHODS if "->" in results[m].names[0]
        },  # fmt: skip
        "rows": rows,
    }


def _same_as_shipped(name: str, measured: dict[str, Any]) -> bool | None:
    """Whether the fresh ground truth has the shipped file's nodes and edges (None: no file for this model)."""
    from hooked_clip1d.pretrained.circuit_files import list_circuits, load_circuit

    if name not in list_circuits() or measured["circuit"] is None:
        return None
    shipped = load_circuit(name)
    return shipped.components() == measured["circuit"]["nodes"] and shipped.edges == measured["circuit"]["edges"]


def _x_circuits(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.visualization.circuits import plot_circuit_benchmark

    per_model = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only wait for each other (the times are one thread's)
    try:
        for name, model in models.items():
            per_model[name] = _benchmark_model(name, model)
    finally:
        torch.set_num_threads(threads)
    for name, model in models.items():
        shipped_name = getattr(model, "manifest", {}).get("name", name)
        per_model[name]["matches_shipped_file"] = _same_as_shipped(name, per_model[name]) if shipped_name == name \
            else None  # fmt: skip
    measured = [m for m in per_model.values() if m["circuit"] is not None]
    rows = [r for m in measured for r in m["rows"]]

    def by(method: str, key: str) -> list[float]:
        return [r[key] for r in rows if r["method"] == method and r[key] is not None]

    def mean(values: list[float]) -> float | None:
        vals = [v for v in values if v == v]
        return sum(vals) / len(vals) if vals else None

    every = len(measured) == len(models) and bool(measured)
    faithful = every and all(m["circuit"]["scores"]["faithfulness"] >= 0.8 for m in measured)
    complete = every and all(m["circuit"]["scores"]["completeness"] >= 0.9 for m in measured)
    exact_auc = by("exact patching", "node_auc")
    atp_rho = by("AtP", "node_rank_correlation")
    ig_vs_eap = [
        ig >= e for ig, e in zip(by("EAP-IG", "edge_rank_correlation"), by("EAP", "edge_rank_correlation"), strict=True)
    ]
    star_vs_eap = [
        s >= e for s, e in zip(by("EAP+AtP*", "edge_rank_correlation"), by("EAP", "edge_rank_correlation"), strict=True)
    ]
    blind = every and all(all(v == 0.0 for v in m["positional_edge_scores"].values()) for m in measured)
    shipped_ok = [m["matches_shipped_file"] for m in per_model.values() if m["matches_shipped_file"] is not None]
    checks = [
        ("every model's ground-truth circuit is faithful (normalised faithfulness >= 0.8) and complete (>= 0.9)",
         faithful and complete),
        ("exact patching on the mirror task ranks the ground-truth heads / MLPs first (node ROC AUC >= 0.9 on every "
         "model)", every and all(a >= 0.9 for a in exact_auc)),
        ("AtP's node ranking agrees with exact patching (Spearman >= 0.8 on every model)",
         every and all(r >= 0.8 for r in atp_rho)),
        ("EAP-IG agrees with exact edge patching at least as well as EAP on most models (Hanna et al. 2024)",
         every and sum(ig_vs_eap) > len(ig_vs_eap) / 2),
        ("AtP*'s corrections bring EAP at least as close to exact edge patching on most models (Kramár et al. 2024)",
         every and sum(star_vs_eap) > len(star_vs_eap) / 2),
        ("no input-contrast method scores the ground truth's positional edges (pos -> head): 0 on every model",
         blind),
        ("the shipped circuit files are what ground_truth_circuit measures today", bool(shipped_ok) and
         all(shipped_ok)),
    ]  # fmt: skip
    secondary = {
        checks[5][0]: "true by construction: P is the same in an image and its mirror, so every patching-based "
        "score of a pos edge is 0 (the blind spot the benchmark exposes, not a finding about training)",
        checks[6][0]: "a consistency check of the tooling, not a finding",
    }
    values = {checks[1][0]: (min(exact_auc, default=0.0), ">"), checks[2][0]: (min(atp_rho, default=0.0), ">")}
    summary_rows = []
    for method in METHODS:
        summary_rows.append({
            "method": method,
            **{k: mean(by(method, k)) for k in ("node_auc", "node_precision_at_k", "node_rank_correlation",
                                                 "edge_auc", "edge_precision_at_k", "edge_rank_correlation",
                                                 "edge_auc_without_pos", "seconds")},
        })  # fmt: skip
    table = [
        f"Mean over the {len(measured)} models (AUC and precision at k against the ground truth; rank correlation "
        "with exact patching, path patching for edges; seconds per model):",
        "",
        "| method | node AUC | node P@k | node ρ | edge AUC | edge P@k | edge ρ | edge AUC w/o pos | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary_rows:
        table.append(
            f"| {s['method']} | {_fmt(s['node_auc'])} | {_fmt(s['node_precision_at_k'])} | "
            f"{_fmt(s['node_rank_correlation'])} | {_fmt(s['edge_auc'])} | {_fmt(s['edge_precision_at_k'])} | "
            f"{_fmt(s['edge_rank_correlation'])} | {_fmt(s['edge_auc_without_pos'])} | {s['seconds']:.2f} |"
            if s["seconds"] is not None
            else f"| {s['method']} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
        )
    table += ["", "Per model: node AUC / edge AUC (ρ of edges with path patching):", ""]
    table.append("| method | " + " | ".join(f"`{m['model']}`" for m in measured) + " |")
    table.append("|---|" + "---|" * len(measured))
    for method in METHODS:
        cells = []
        for m in measured:
            r = next(r for r in m["rows"] if r["method"] == method)
            cells.append(f"{_fmt(r['node_auc'])} / {_fmt(r['edge_auc'])} ({_fmt(r['edge_rank_correlation'])})")
        table.append(f"| {method} | " + " | ".join(cells) + " |")
    circ = "; ".join(
        f"{m['model']}: {len(m['circuit']['nodes'])} of {m['n_components']} components, {len(m['circuit']['edges'])} "
        f"of {m['n_edges']} edges, faithfulness {m['circuit']['scores']['faithfulness']:.2f}, completeness "
        f"{m['circuit']['scores']['completeness']:.2f}, minimality (min share) "
        f"{m['circuit']['scores']['minimality_min']:.2f}"
        for m in measured
    )
    skipped = [m["model"] for m in per_model.values() if m["circuit"] is None]
    best_edge = max((s for s in summary_rows if s["edge_auc"] is not None), key=lambda s: s["edge_auc"], default=None)
    summary = (
        f"ground-truth circuits (edge mean ablation, threshold 0.05) — {circ}. "
        + (f"Models that do not do the task (accuracy < {MIN_ACCURACY}): {skipped}. " if skipped else "")
        + "Mean node ROC AUC: "
        + ", ".join(f"{s['method']} {_fmt(s['node_auc'])}" for s in summary_rows)
        + ". Mean edge ROC AUC: "
        + ", ".join(f"{s['method']} {_fmt(s['edge_auc'])}" for s in summary_rows if s["edge_auc"] is not None)
        + (f" (best: {best_edge['method']})" if best_edge else "")
        + ". Every ground truth holds positional edges (pos -> a head's key or query: the paper's EP and PP terms) "
        "that no input-contrast method can score, since P is the same in an image and its mirror."
    )
    notes = (
        "What the scores measure: AUC = the probability that a ground-truth element outranks a non-member by |score| "
        "(0.5 = chance); P@k = the share of members among the k highest |scores|, k = the circuit's size; ρ = "
        "Spearman's rank correlation of |score| with the exact patching effect's |score| over all components (edges: "
        "with path patching, each edge's exact effect, so path patching's own ρ is 1 by construction). The ground "
        "truth is defined by mean ablation (zero for the constant pos), the methods by patching from the mirror: "
        "two different interventions, so exact patching is not 1 by construction. Edge methods rank nodes by their "
        "summed |edge scores|. Times are wall seconds on this machine's CPU (one thread), the ground truth's "
        "measurement excluded. The checks were written before the first run; AtP* on edges is our extension "
        "(AtP* defines its corrections for nodes). The 4-layer LayerNorm model has no ground truth: its single-edge "
        "rule keeps too few edges to be faithful (pretrained.circuit_files). The column 'edge AUC w/o pos' (the AUC "
        "over the edges whose writer is not pos, i.e. those an input contrast can move) was added after the first "
        "run, to show how much of the edge AUC's shortfall is the positional blind spot."
    )
    numbers = {
        "methods": list(METHODS),
        "acdc_threshold": ACDC_THRESHOLD,
        "eap_ig_steps": IG_STEPS,
        "models": per_model,
        "summary": summary_rows,
    }
    figs = {"benchmark": plot_circuit_benchmark(rows)} if rows else {}
    return Outcome(numbers, summary, checks, figs, notes=notes, table=tuple(table), values=values,
                   secondary=secondary)  # fmt: skip


def _models() -> tuple[str, ...]:
    from hooked_clip1d.pretrained.circuit_files import CIRCUIT_MODELS

    return CIRCUIT_MODELS


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x-circuits",
        "Circuit discovery on models whose circuit is known: AtP, AtP*, EAP, EAP-IG, path patching, ACDC",
        "Question: on CLIP models whose left/right circuit is measured (ground truth by edge mean ablation, with "
        "the paper's term ablations, mirror swaps and knockouts beside it), how well do the circuit-discovery "
        "methods interpretability researchers reach for first recover it, how close are the gradient "
        "approximations to exact patching, and at what cost?",
        _models(),
        _x_circuits,
        beyond_paper=True,
        data="val_unseen pairs, their mirrors and swapped captions",
    ),
)

__all__ = ["ACDC_THRESHOLD", "IG_STEPS", "METHODS", "SPECS"]
