"""``x-circuits``: circuit-discovery methods scored against ground-truth circuits of zoo models and against exact
patching (beyond the paper).

For each model with a shipped ground truth (``pretrained.circuit_files.CIRCUIT_MODELS``), the ground-truth circuit
is measured afresh (``analysis.circuits.scores.ground_truth_circuit``: edge mean ablation, edges in both directions,
every
unseen-pair image), and its faithfulness and minimality are measured again on 100 seen pairs and 100 training pairs
(the inputs it was not chosen on). Every method of the registry (``analysis.circuits.methods.METHODS``, in its
order, with
its defaults: ACDC's threshold 0.01, EAP-IG's 20 steps) runs on the whole CLIP's mirror task
(``graph.mirror_task(..., "clip")``: images against their mirrors, captions against their swaps, the left/right
logit difference) on the same images, under each of the three forms of the belief (``norm``: ``live``, CLIP's
cosine, the default; ``frozen``, the embeddings' norms held at their clean values; ``none``, the pre-normalisation
logit difference). Node methods score every node kind the model has (heads, MLPs, embeddings, residual positions,
queries, keys, values, score terms); edge methods every edge of ``graph.build_graph``.

Two scores per method:

- **against exact patching** (the estimates only; ``exact patching`` for nodes, ``path patching``, each edge's
  exact effect, for edges), over the items the mirror moves (an item whose activation is the same in an image and
  its mirror, such as ``pos``, has an exact effect of 0 and every method scores it 0: no method could score it):
  sign agreement (and the same weighted by ``|exact|``), Pearson's correlation of the signed scores (of magnitudes
  with ``|exact|`` for AtP* and EAP+AtP*) and the top-10 overlap;
- **against the ground truth** (every method): ROC AUC and precision at k (k = the circuit's size) of ``|score|``,
  for nodes (heads and MLPs; edge methods rank a node by its summed ``|edge score|``) and for edges, over the edges
  the mirror moves (``edge AUC``) and over all edges (``edge AUC, all``: the positional edges of the ground truth,
  which no input contrast can move, count as misses there).

Each method's wall time is recorded. Nothing was tuned on the ground truth.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hooked_clip1d.analysis.metrics import NORMS
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.core import FigureSpec, Outcome, register
from hooked_clip1d.reproduce.readings import at_least
from hooked_clip1d.reproduce.records import check_id

DEFAULT_NORM = "live"
MIN_ACCURACY = 0.9  # a model that ranks the true caption first on fewer task images has no circuit to find
N_INPUTS: int | None = None  # task images per model (None: every unseen-pair image, as the shipped circuits)
TRANSFER_SPLITS = ("val_seen", "train")  # inputs the circuit was not measured on
N_TRANSFER = 100  # pairs of each, drawn with seed 0
TOP_K = 10  # top-k overlap with exact patching
OVERRIDES: dict[str, dict[str, Any]] = {}  # per-method keyword overrides of the registry's defaults (tests)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.2f}"


def _kinds(model: CLIP1D) -> list[str]:
    from hooked_clip1d.analysis.circuits.node_attribution import model_node_kinds

    return model_node_kinds(model)


def _transfer(model: CLIP1D, truth: Any, split: str) -> dict[str, Any]:
    """The ground truth's scores on ``N_TRANSFER`` pairs of ``split`` (inputs it was not chosen on)."""
    from hooked_clip1d.analysis.circuits.scores import circuit_scores, ground_truth_inputs

    images, captions = ground_truth_inputs(model, split, n=N_TRANSFER, seed=0)
    s = circuit_scores(model, images, captions, truth)
    keys = ("faithfulness", "completeness", "minimality_min", "minimal_fraction", "full_accuracy")
    return {"n": int(images.shape[0]), **{k: s[k] for k in keys}}


def _run_methods(model: CLIP1D, images: torch.Tensor, captions: torch.Tensor, norm: str) -> dict[str, Any]:
    """Every registered method on the mirror task with belief ``norm``, timed."""
    from hooked_clip1d.analysis.circuits.methods import METHODS
    from hooked_clip1d.analysis.circuits.task import mirror_task

    task = mirror_task(model, images, captions, target="clip", norm=norm)
    kinds = _kinds(model)
    results = {}
    for name, method in METHODS.items():
        start = time.perf_counter()
        res = method(task, kinds if method.unit == "node" else None, **OVERRIDES.get(name, {}))
        res.seconds = time.perf_counter() - start
        results[name] = res
    return results


def _agreement_fields(prefix: str, out: dict[str, Any] | None) -> dict[str, Any]:
    keys = ("sign_agreement", "weighted_sign_agreement", "pearson", "top_k_overlap", "n")
    return {f"{prefix}_{k}": (None if out is None else out[k]) for k in keys}


def _method_rows(name: str, norm: str, results: dict[str, Any], truth: Any, graph: Any) -> list[dict[str, Any]]:
    """One row per method: its agreement with exact patching and its recovery of the ground truth."""
    from hooked_clip1d.analysis.circuits.attribution import agreement, moved
    from hooked_clip1d.analysis.circuits.methods import METHODS
    from hooked_clip1d.analysis.circuits.scores import node_scores_from_edges, score_method

    components = graph.components()
    exact_nodes, exact_edges = results["exact patching"], results["path patching"]
    all_edges = [f"{w}->{p}" for w, p in graph.edges]
    scorable = [n for n, keep in zip(exact_edges.names, moved(exact_edges).tolist(), strict=True) if keep]
    rows = []
    for method_name, res in results.items():
        method = METHODS[method_name]
        edge_method = method.unit == "edge"
        nodes = node_scores_from_edges(res, components) if edge_method else res.subset(components)
        node = score_method(nodes, truth.components(), components)
        edge = score_method(res, truth.edges, scorable) if edge_method else {}
        edge_all = score_method(res, truth.edges, all_edges) if edge_method else {}
        compare = method.estimate and not method.exact
        node_agree = agreement(res, exact_nodes, k=TOP_K) if compare and not edge_method else None
        edge_agree = agreement(res, exact_edges, k=TOP_K) if compare and edge_method else None
        row = {
            "model": name,
            "norm": norm,
            "method": method_name,
            "node_auc": node["auc"],
            "node_precision_at_k": node["precision_at_k"],
            "edge_auc": edge.get("auc"),
            "edge_precision_at_k": edge.get("precision_at_k"),
            "edge_auc_all": edge_all.get("auc"),
            **_agreement_fields("node", node_agree),
            **_agreement_fields("edge", edge_agree),
            "seconds": res.seconds,
        }
        if method_name == "ACDC":
            row["acdc_kept"] = len(res.info["kept"])
        rows.append(row)
    return rows


def _benchmark_model(name: str, model: CLIP1D) -> dict[str, Any]:
    """Ground truth (and its scores on other inputs), every method under every norm, and their scores on one model
    (module docstring)."""
    from hooked_clip1d.analysis.circuits.graph import build_graph
    from hooked_clip1d.analysis.circuits.scores import ground_truth_circuit, ground_truth_inputs
    from hooked_clip1d.analysis.circuits.task import mirror_task

    images, captions = ground_truth_inputs(model, n=N_INPUTS)
    belief = mirror_task(model, images, captions, target="clip").clean_metric()
    accuracy = float((belief > 0).float().mean())
    if not at_least(accuracy, MIN_ACCURACY):  # a float32 share: 90 of 100 passes 0.9
        return {"model": name, "accuracy": accuracy, "circuit": None}
    t0 = time.perf_counter()
    truth = ground_truth_circuit(model, images, captions, name=name)
    truth_seconds = time.perf_counter() - t0
    graph = build_graph(model)
    rows, positional = [], {}
    pos_edges = [e for e in truth.edges if e.split("->")[0].endswith(".pos")]
    for norm in NORMS:
        results = _run_methods(model, images, captions, norm)
        rows += _method_rows(name, norm, results, truth, graph)
        if norm == DEFAULT_NORM:
            positional = {
                m: max((abs(r[e]) for e in pos_edges), default=0.0)
                for m, r in results.items()
                if r.names and "->" in r.names[0]
            }
    return {
        "model": name,
        "accuracy": accuracy,
        "one_layer": model.vision.cfg.n_layers == 1 and model.text.cfg.n_layers == 1,
        "circuit": {
            "nodes": truth.components(),
            "edges": truth.edges,
            "scores": truth.scores,
            "seconds": truth_seconds,
        },
        "transfer": {split: _transfer(model, truth, split) for split in TRANSFER_SPLITS},
        "n_components": len(graph.components()),
        "n_edges": len(graph.edges),
        "positional_truth_edges": pos_edges,
        "positional_edge_scores": positional,
        "rows": rows,
    }


def _same_as_shipped(name: str, measured: dict[str, Any]) -> bool | None:
    """Whether the fresh ground truth has the shipped file's nodes and edges (None: no file for this model)."""
    from hooked_clip1d.pretrained.circuit_files import list_circuits, load_circuit

    if name not in list_circuits() or measured["circuit"] is None:
        return None
    shipped = load_circuit(name)
    return shipped.components() == measured["circuit"]["nodes"] and shipped.edges == measured["circuit"]["edges"]


def _value(rows: list[dict[str, Any]], model: str, method: str, norm: str, key: str) -> float | None:
    for r in rows:
        if r["model"] == model and r["method"] == method and r["norm"] == norm:
            return r[key]
    return None


def _flags(per_model: dict[str, Any], models: dict[str, CLIP1D]) -> dict[str, Any]:
    """What ``_checks`` judges, measured on the models whose circuit was found: each claim's truth value, and the two
    scalars its value lines state (``exact_auc``, ``atp_sign``). Where some model's circuit was not found (below
    ``MIN_ACCURACY``: e.g. every untrained null draw), the claims have no truth value (None), which ``Outcome``
    refuses: the run is an error (a null draw's, a failed control run), never a fail that lets a trained pass count
    (until 2026-11-30 every flag was False there, so the untrained null failed every claim by construction)."""
    measured = [m for m in per_model.values() if m["circuit"] is not None]
    rows = [r for m in measured for r in m["rows"]]
    names = [m["model"] for m in measured]
    every = len(measured) == len(models) and bool(measured)

    def v(model: str, method: str, key: str, norm: str = DEFAULT_NORM) -> float:
        x = _value(rows, model, method, norm, key)
        return float("nan") if x is None else x

    def most(flags: list[bool]) -> bool:
        return every and sum(flags) > len(flags) / 2

    exact_auc = [v(n, "exact patching", "node_auc") for n in names]
    atp_sign = [v(n, "AtP", "node_sign_agreement") for n in names]
    linear_helps = [
        v(n, m, f"{u}_pearson", "frozen") > v(n, m, f"{u}_pearson")
        for n in names
        for m, u in (("AtP", "node"), ("EAP", "edge"))
    ]
    one_layer = [m["model"] for m in measured if m["one_layer"]]
    qk_exact = [
        v(n, "EAP+QK", "edge_pearson", "frozen") >= 0.999 and v(n, "EAP+QK", "edge_sign_agreement", "frozen") == 1.0
        for n in one_layer
    ]
    shipped_ok = [m["matches_shipped_file"] for m in per_model.values() if m["matches_shipped_file"] is not None]
    if not every:
        missing = [m["model"] for m in per_model.values() if m["circuit"] is None]
        return {
            "exact_auc": exact_auc,
            "atp_sign": atp_sign,
            "missing": missing,
            **dict.fromkeys(("faithful_complete", "auc", "atp", "linear_helps", "qk_exact", "ig", "qk"), None),
            **dict.fromkeys(("blind", "minimal"), None),
            "shipped": bool(shipped_ok) and all(shipped_ok),
        }
    return {
        "exact_auc": exact_auc,
        "atp_sign": atp_sign,
        "faithful_complete": every
        and all(m["circuit"]["scores"]["faithfulness"] >= 0.8 for m in measured)
        and all(m["circuit"]["scores"]["completeness"] >= 0.9 for m in measured),
        "auc": every and all(a >= 0.9 for a in exact_auc),
        "atp": every and all(a >= 0.75 for a in atp_sign),
        "linear_helps": every and all(linear_helps),
        "qk_exact": every and bool(qk_exact) and all(qk_exact),
        # ordering claims: a tie fails (2026-11-30; was ">=", no model's values were tied)
        "ig": most([v(n, "EAP-IG", "edge_pearson") > v(n, "EAP", "edge_pearson") for n in names]),
        "qk": most([v(n, "EAP+QK", "edge_pearson") > v(n, "EAP", "edge_pearson") for n in names]),
        "blind": every and all(all(x == 0.0 for x in m["positional_edge_scores"].values()) for m in measured),
        "minimal": every and all(t["minimal_fraction"] == 1.0 for m in measured for t in m["transfer"].values()),
        "shipped": bool(shipped_ok) and all(shipped_ok),
    }


# the two ordering claims, strict since 2026-11-30 (a tie fails); their ids are those of the ">=" sentences before
IG_CHECK = (
    "EAP-IG agrees with exact edge patching better than EAP (higher signed Pearson, cosine belief; a tie fails) on "
    "most models (Hanna et al. 2024)"
)
QK_CHECK = (
    "the QK fix brings EAP closer to exact edge patching (higher signed Pearson, cosine belief; a tie fails) on most "
    "models (Kramár et al. 2024)"
)
CHECK_IDS = {
    IG_CHECK: check_id(
        "EAP-IG agrees with exact edge patching at least as well as EAP (signed Pearson, cosine belief) on most "
        "models (Hanna et al. 2024)"
    ),
    QK_CHECK: check_id(
        "the QK fix brings EAP at least as close to exact edge patching (signed Pearson, cosine belief) on most "
        "models (Kramár et al. 2024)"
    ),
}


def _checks(per_model: dict[str, Any], models: dict[str, CLIP1D]) -> tuple[list, dict, dict]:
    """The claims (restated for issue 45, before this version was first run), their scalars and what is secondary."""
    f = _flags(per_model, models)
    exact_auc, atp_sign = f["exact_auc"], f["atp_sign"]
    checks = [
        (
            "every model's ground-truth circuit is faithful (normalised faithfulness >= 0.8) and complete (>= 0.9)",
            f["faithful_complete"],
        ),
        (
            "exact patching on the mirror task ranks the ground-truth heads / MLPs first (node ROC AUC >= 0.9 on every "
            "model)",
            f["auc"],
        ),
        (
            "AtP gets the sign of exact patching right under CLIP's cosine belief (sign agreement >= 0.75 over every "
            "node the mirror moves, on every model)",
            f["atp"],
        ),
        (
            "a belief linear in the embeddings (norm='frozen') brings AtP (nodes) and EAP (edges) closer to exact "
            "patching than the cosine (higher Pearson, every model, both)",
            f["linear_helps"],
        ),
        (
            "with norm='frozen', EAP with the QK fix is exact on the one-layer models (Pearson >= 0.999, every sign "
            "right)",
            f["qk_exact"],
        ),
        (
            IG_CHECK,
            f["ig"],
        ),
        (
            QK_CHECK,
            f["qk"],
        ),
        (
            "no input-contrast method scores the ground truth's positional edges (pos -> head): 0 on every model",
            f["blind"],
        ),
        (
            f"every ground-truth circuit stays minimal on inputs it was not measured on (every edge moves the belief "
            f"by >= 0.05 of the circuit's effect on {N_TRANSFER} seen and {N_TRANSFER} training pairs)",
            f["minimal"],
        ),
        (
            "the shipped circuit files are what ground_truth_circuit measures today",
            f["shipped"],
        ),
    ]
    secondary = {
        checks[7][0]: "true by construction: P is the same in an image and its mirror, so every patching-based "
        "score of a pos edge is 0 (the blind spot the benchmark exposes, not a finding about training)",
        checks[9][0]: "a consistency check of the tooling, not a finding",
    }
    values = {checks[1][0]: (min(exact_auc, default=0.0), ">"), checks[2][0]: (min(atp_sign, default=0.0), ">")}
    return checks, values, secondary


SUMMARY_KEYS = (
    "node_auc",
    "node_precision_at_k",
    "edge_auc",
    "edge_precision_at_k",
    "edge_auc_all",
    "node_sign_agreement",
    "node_weighted_sign_agreement",
    "node_pearson",
    "node_top_k_overlap",
    "edge_sign_agreement",
    "edge_weighted_sign_agreement",
    "edge_pearson",
    "edge_top_k_overlap",
    "seconds",
)


def _summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The mean over models per (norm, method)."""

    def mean(values: list[Any]) -> float | None:
        vals = [x for x in values if x is not None and x == x]
        return sum(vals) / len(vals) if vals else None

    out = []
    for norm in NORMS:
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == method and r["norm"] == norm]
            out.append({"norm": norm, "method": method, **{k: mean([r[k] for r in mine]) for k in SUMMARY_KEYS}})
    return out


def _tables(measured: list[dict[str, Any]], summary: list[dict[str, Any]]) -> list[str]:
    rows = [r for m in measured for r in m["rows"]]
    table = [
        f"Against exact patching, mean over the {len(measured)} models (items the mirror moves; nodes: every kind; "
        "sign: share of matching signs, weighted: by |exact|; r: Pearson of the signed scores, of magnitudes for "
        f"AtP* and EAP+AtP*; top-{TOP_K}: overlap):",
        "",
        "| belief | method | node sign | weighted | node r | node top-k | edge sign | weighted | edge r | edge top-k |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        if s["node_pearson"] is None and s["edge_pearson"] is None:
            continue
        table.append(f"| {s['norm']} | {s['method']} | " + " | ".join(_fmt(s[k]) for k in SUMMARY_KEYS[5:13]) + " |")
    table += [
        "",
        "Per model (sign agreement / Pearson against exact patching): AtP on nodes, EAP, EAP+QK and EAP-IG on edges:",
        "",
        "| belief | method | " + " | ".join(f"`{m['model']}`" for m in measured) + " |",
        "|---|---|" + "---|" * len(measured),
    ]
    for norm in NORMS:
        for method, unit in (
            ("AtP", "node"),
            ("AtP+QK", "node"),
            ("EAP", "edge"),
            ("EAP+QK", "edge"),
            ("EAP-IG", "edge"),
        ):
            cells = [
                f"{_fmt(_value(rows, m['model'], method, norm, f'{unit}_sign_agreement'))} / "
                f"{_fmt(_value(rows, m['model'], method, norm, f'{unit}_pearson'))}"
                for m in measured
            ]
            table.append(f"| {norm} | {method} | " + " | ".join(cells) + " |")
    table += [
        "",
        "Against the ground truth, cosine belief (the default), mean over the models (AUC and precision at k of "
        "|score|; edges: over the edges the mirror moves, and over all edges; seconds per model, every node kind):",
        "",
        "| method | node AUC | node P@k | edge AUC | edge P@k | edge AUC, all | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        if s["norm"] == DEFAULT_NORM:
            table.append(
                f"| {s['method']} | " + " | ".join(_fmt(s[k]) for k in SUMMARY_KEYS[:5]) + f" | {_fmt(s['seconds'])} |"
            )
    title = "Ground truths on inputs they were not measured on (faithfulness / minimal fraction / min share):"
    table += ["", title, ""]
    table.append("| model | val_unseen (measured on) | " + " | ".join(TRANSFER_SPLITS) + " |")
    table.append("|---|---|" + "---|" * len(TRANSFER_SPLITS))
    for m in measured:
        sc = m["circuit"]["scores"]
        cells = [
            f"{_fmt(t['faithfulness'])} / {_fmt(t['minimal_fraction'])} / {_fmt(t['minimality_min'])}"
            for t in m["transfer"].values()
        ]
        table.append(
            f"| `{m['model']}` | {_fmt(sc['faithfulness'])} / {_fmt(sc['minimal_fraction'])} / "
            f"{_fmt(sc['minimality_min'])} | " + " | ".join(cells) + " |"
        )
    return table


def _summary(per_model: dict[str, Any], summary: list[dict[str, Any]]) -> str:
    measured = [m for m in per_model.values() if m["circuit"] is not None]
    circ = "; ".join(
        f"{m['model']}: {len(m['circuit']['nodes'])} of {m['n_components']} components, {len(m['circuit']['edges'])} "
        f"of {m['n_edges']} edges, faithfulness {m['circuit']['scores']['faithfulness']:.2f}, minimal fraction "
        f"{m['circuit']['scores']['minimal_fraction']:.2f} (seen pairs "
        f"{m['transfer']['val_seen']['minimal_fraction']:.2f}, training pairs "
        f"{m['transfer']['train']['minimal_fraction']:.2f})"
        for m in measured
    )
    skipped = [m["model"] for m in per_model.values() if m["circuit"] is None]

    def get(norm: str, method: str, key: str) -> str:
        return _fmt(next((s[key] for s in summary if s["norm"] == norm and s["method"] == method), None))

    agree = "; ".join(
        f"{norm}: AtP sign {get(norm, 'AtP', 'node_sign_agreement')} r {get(norm, 'AtP', 'node_pearson')}, EAP sign "
        f"{get(norm, 'EAP', 'edge_sign_agreement')} r {get(norm, 'EAP', 'edge_pearson')}, EAP+QK sign "
        f"{get(norm, 'EAP+QK', 'edge_sign_agreement')} r {get(norm, 'EAP+QK', 'edge_pearson')}, EAP-IG sign "
        f"{get(norm, 'EAP-IG', 'edge_sign_agreement')} r {get(norm, 'EAP-IG', 'edge_pearson')}"
        for norm in NORMS
    )
    return (
        f"ground-truth circuits (edge mean ablation, both directions, threshold 0.05) — {circ}. "
        + (f"Models that do not do the task (accuracy < {MIN_ACCURACY}): {skipped}. " if skipped else "")
        + f"Against exact patching (mean over models, items the mirror moves) — {agree}. "
        + "Mean edge ROC AUC against the ground truth over the edges the mirror moves (cosine belief): "
        + ", ".join(
            f"{s['method']} {_fmt(s['edge_auc'])}"
            for s in summary
            if s["norm"] == DEFAULT_NORM and s["edge_auc"] is not None
        )
        + ". Every ground truth holds positional edges (pos -> a head's key or query) that no input-contrast method "
        "can score, since P is the same in an image and its mirror."
    )


NOTES = (
    "Scoring changed for issue 45 (the record before it scored |score| over all edges, 26-34 of which the mirror "
    "cannot move and every method scores exactly 0, so every gradient method read 0.98-1.00 against exact "
    "patching): agreement with exact patching is now on signed scores over the items the mirror moves, with sign "
    "agreement and top-10 overlap, for every node kind (not only heads and MLPs) and under three forms of the "
    "belief; the ground truth counts edges in both directions (it counted only edges that help, hence its "
    "faithfulness above 1) and is scored again on seen and training pairs. The checks were restated for this "
    "version after issue 45's measurements (default metric, heads and edges) had been read, and before this version "
    "was run. AUC = the probability that a ground-truth element outranks a non-member by |score| (0.5 = chance); "
    "P@k = the share of members among the k highest |scores|, k = the circuit's size. The ground truth is defined "
    "by mean ablation (zero for the constant pos), the methods by patching from the mirror: two different "
    "interventions, so exact patching is not 1 by construction. EAP-IG integrates over the whole input's straight "
    "line, so its score of an edge includes how the other edges' changes move the attention: it is not an "
    "estimate of the single-edge effect, and small edges can differ in sign even where the large ones agree. Times "
    "are wall seconds on this machine's CPU (one thread), the ground truth's measurement excluded. AtP* on edges "
    "(EAP+AtP*) is our extension. The 4-layer LayerNorm model has no ground truth: its single-edge rule keeps too "
    "few edges to be faithful (pretrained.circuit_files)."
)


def _x_circuits(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.circuits.methods import METHODS
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
        per_model[name]["matches_shipped_file"] = (
            _same_as_shipped(name, per_model[name]) if shipped_name == name else None
        )
    missing = {m["model"]: m["accuracy"] for m in per_model.values() if m["circuit"] is None}
    if missing:  # no circuit to judge the claims on: an error (a null draw's: a failed control run), never a fail
        raise ValueError(
            f"x-circuits: models that do not do the task (mirror-task accuracy < {MIN_ACCURACY}) have no ground-truth "
            f"circuit to judge the claims on: {missing}"
        )
    measured = [m for m in per_model.values() if m["circuit"] is not None]
    rows = [r for m in measured for r in m["rows"]]
    checks, values, secondary = _checks(per_model, models)
    summary = _summary_rows(rows) if rows else []
    numbers = {
        "methods": {
            n: {"unit": m.unit, "signed": m.signed, "kwargs": {**m.kwargs, **OVERRIDES.get(n, {})}}
            for n, m in METHODS.items()
        },
        "norms": list(NORMS),
        "top_k": TOP_K,
        "models": per_model,
        "summary": summary,
    }
    default_rows = [r for r in rows if r["norm"] == DEFAULT_NORM]
    figs = {"benchmark": plot_circuit_benchmark(default_rows)} if default_rows else {}
    return Outcome(
        numbers,
        _summary(per_model, summary),
        checks,
        figs,
        notes=NOTES,
        table=tuple(_tables(measured, summary)) if measured else (),
        values=values,
        secondary=secondary,
        check_ids=dict(CHECK_IDS),
    )


def _models() -> tuple[str, ...]:
    """The models with a shipped circuit, the flagship first (its circuit shipped with the flagship switch,
    2026-11-28, after the record of 2026-11-26 was measured on the others; the rerun of 2026-11-29 adds it)."""
    from hooked_clip1d.pretrained.circuit_files import CIRCUIT_MODELS

    return tuple(CIRCUIT_MODELS)


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x-circuits",
        "Circuit discovery on models whose circuit is known: AtP, AtP*, EAP, EAP-IG, path patching, ACDC",
        "Question: on CLIP models whose left/right circuit is measured (ground truth by edge mean ablation, with "
        "the paper's term ablations, mirror swaps and knockouts beside it), how well do the circuit-discovery "
        "methods interpretability researchers reach for first recover it, how close are the gradient "
        "approximations to exact patching (in sign and size, under CLIP's cosine belief and under beliefs linear "
        "in the embeddings), and at what cost?",
        _models(),
        _x_circuits,
        beyond_paper=True,
        data="val_unseen pairs, their mirrors and swapped captions; seen and training pairs for the circuits' "
        "minimality",
    ),
)

__all__ = ["DEFAULT_NORM", "OVERRIDES", "SPECS", "TOP_K"]
