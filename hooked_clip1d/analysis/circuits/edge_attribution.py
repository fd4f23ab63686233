"""Edge attribution: ``exact_edge_patching``, ``eap`` and ``eap_ig`` score the edges ``writer -> port`` of
``graph.build_graph`` (one tower or the whole CLIP), named ``"writer->port"`` (the task, the noising effects they
measure, AtP*'s corrections and when EAP is exact: ``attribution``'s module docstring).

- ``eap``: edge attribution patching (Syed et al. 2023), AtP on the edges: ``(w(corrupted) - w(clean)) .
  dM/d(port input)`` for edge ``w -> port``; with ``qk_fix`` / ``grad_drop`` the two AtP* corrections are applied
  to edges into queries and keys (an extension of ours: AtP* defines them for nodes).
- ``eap_ig``: EAP with integrated gradients: the port gradients averaged over ``steps`` points of a straight line
  from corrupted to clean, times the same activation difference. ``line="inputs"`` is Hanna et al. 2024's
  (``eap.attribute.get_scores_eap_ig``): the embeddings move, ``x_k = x_corr + (k / steps) (x_clean - x_corr)``,
  ``k = 0 .. steps-1``; the whole CLIP has two inputs, so each tower's edges are integrated along that tower's own
  line with the other tower's input clean (``mirror_task``'s joint corruption, which flips both towers, is not
  integrated jointly). ``line="ports"`` (the default since 2026-12-01): each port's input moves alone, from its
  input with every edge into it corrupted to its clean input, everything else clean; the edges into a port share
  its line (IG's completeness holds per port: their scores sum to the port's patching effect up to the Riemann
  error).
- ``exact_edge_patching``: each edge's exact effect (the port reads the writer's corrupted value, nothing else
  changes: ``path_patching`` with one receiver).

Example:
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision")
    >>> edges = [("vision.embed", "vision.L0.H2.k"), ("vision.pos", "vision.L0.H2.k")]
    >>> exact, approx = exact_edge_patching(task, edges), eap(task, edges)
    >>> approx.names
    ['vision.embed->vision.L0.H2.k', 'vision.pos->vision.L0.H2.k']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import torch

from hooked_clip1d.analysis.circuits.attribution import (
    CHECK_N,
    Attribution,
    apply_grad_drop,
    as_hooks,
    check_against_exact,
    check_freeze,
    frozen_patterns,
    merge_transforms,
    qk_delta_scores,
    resolve_qk_fix,
    run_task,
)
from hooked_clip1d.analysis.circuits.first_order import OutputGrads, first_order_scores, output_grads, per_row
from hooked_clip1d.analysis.circuits.graph import (
    Edge,
    build_graph,
    check_nodes,
    edge_name,
    graph_flags,
    parse_node,
    port_hook,
)
from hooked_clip1d.analysis.circuits.task import Task, linearisation, run_with_edges, writer_activations
from hooked_clip1d.model.functional import layer_norm
from hooked_clip1d.settings.checks import check_int


# ---- edges ----------------------------------------------------------------------------------------------------------
def _edges(task: Task, edges: Sequence[Edge] | None) -> list[Edge]:
    graph = build_graph(task.target)
    if edges is None:
        return list(graph.edges)
    if isinstance(edges, str):  # one edge name ('writer->port') would be read as a list of letters
        raise TypeError(
            f"edges must be a list of (writer, port) pairs, got the string {edges!r}; e.g. "
            f"[{tuple(edges.split('->', 1)) if '->' in edges else ('writer', 'port')!r}]"
        )
    out = []
    for e in edges:
        if not (isinstance(e, tuple | list) and len(e) == 2):
            raise TypeError(f"edges must be (writer, port) pairs, got {e!r}")
        w, p = check_nodes(graph, [e[0]], "writer")[0], check_nodes(graph, [e[1]], "port")[0]
        if (w, p) not in graph.edges:
            raise ValueError(f"{edge_name((w, p))} is not an edge: a writer feeds only later ports of its own tower")
        out.append((w, p))
    return out


def _port_key(task: Task, port: str) -> tuple[str, str, int | None]:
    return port_hook(port, task.towers[parse_node(port).tower])


def _port_layer(task: Task, port: str) -> int:
    ref = parse_node(port)
    return task.towers[ref.tower].cfg.n_layers if ref.kind == "readout" else ref.layer  # type: ignore[return-value]


def _qk_edge_contribs(task: Task, edges: list[Edge], delta: Mapping[str, torch.Tensor], clean: Mapping):
    """QK fix for edges into ``.q`` / ``.k`` ports: each one's change of its head's pattern, computed exactly with
    the port's input changed by the writer's difference (through ``ln1``); ``_edge_contribs`` dots it with
    ``dM/d(pattern)``."""
    out = {}
    for w, p in edges:
        ref = parse_node(p)
        if ref.channel not in ("q", "k"):
            continue
        tower = task.towers[ref.tower]
        blk = tower.blocks[ref.layer]
        t, point, head = _port_key(task, p)
        x = clean[(t, point)][:, :, head]
        W = blk.attn.W_Q if ref.channel == "q" else blk.attn.W_K
        with torch.no_grad():
            y, y0 = x + delta[w], x
            if tower.cfg.normalization_type == "LN":
                y, y0 = layer_norm(y, blk.ln1.w, blk.ln1.b), layer_norm(y0, blk.ln1.w, blk.ln1.b)
            d = y @ W[head] - y0 @ W[head]
        d_scores = qk_delta_scores(task, t, ref.layer, ref.channel, head, d, clean)  # type: ignore[arg-type]
        S = clean[(t, f"blocks.{ref.layer}.attn.hook_attn_scores")][:, head]
        A = clean[(t, f"blocks.{ref.layer}.attn.hook_pattern")][:, head]
        out[(w, p)] = (t, f"blocks.{ref.layer}.attn.hook_pattern", head, torch.softmax(S + d_scores, dim=-1) - A)
    return out


def _eap(
    task: Task,
    edges: Sequence[Edge] | None,
    *,
    steps: int = 0,
    qk_fix: bool = False,
    grad_drop: bool = False,
    freeze_pattern: bool = False,
    method: str = "EAP",
    check: int = CHECK_N,
    line: str = "inputs",
) -> Attribution:
    check_freeze(freeze_pattern, qk_fix)
    check = check_int(check, "check (how many edges to patch exactly as a check; 0: none)", minimum=0)
    if steps and (qk_fix or grad_drop):
        raise ValueError("EAP-IG takes neither qk_fix nor grad_drop")
    start = time.perf_counter()
    edge_list = _edges(task, edges)
    with graph_flags(task.target):
        frozen = frozen_patterns(task, freeze_pattern)
        fh = as_hooks(frozen)
        clean_w = writer_activations(task, "clean", extra_hooks=fh)
        corr_w = writer_activations(task, "corrupted", extra_hooks=fh)
        delta = {w: corr_w[w] - clean_w[w] for w in {w for w, _ in edge_list}}
        caps = _port_captures(task, edge_list, qk_fix)

        def grads_with(
            pre: Mapping | None = None, post: Mapping | None = None, towers: Sequence[str] | None = None
        ) -> OutputGrads:
            pre_all = merge_transforms(frozen, pre or {})
            lin = linearisation(task, "EAP-IG" if steps else "EAP")
            return output_grads(task, caps, pre=pre_all, post=post, linearise=lin, towers=towers or list(caps))

        def scores_of(g: OutputGrads) -> torch.Tensor:
            fixed = _qk_edge_contribs(task, edge_list, delta, g.clean) if qk_fix else {}

            def contrib(grads: Mapping, tower: str | None) -> list[torch.Tensor | None]:
                return _edge_contribs(task, edge_list, delta, grads, fixed, tower)

            return first_order_scores(task, g, contrib)

        def scores_with(post: Mapping | None) -> torch.Tensor:
            return scores_of(grads_with(post=post))

        if steps and line == "ports":
            port_delta = _port_deltas(task, edge_list, lambda w: delta[w] if w in delta else corr_w[w] - clean_w[w])
            scores = _integrated_ports(task, edge_list, steps, port_delta, grads_with, scores_of)
        elif steps:
            scores = _integrated(task, edge_list, steps, grads_with, scores_of)
        else:
            scores = scores_with(None)
            if grad_drop:
                where = [(parse_node(p).tower, _port_layer(task, p)) for _, p in edge_list]
                scores = apply_grad_drop(task, scores, where, scores_with)
    names = [edge_name(e) for e in edge_list]
    result = Attribution(
        method, names, scores, time.perf_counter() - start, info={"steps": steps} if steps else {}, signed=not grad_drop
    )
    return _finish(task, result, check, freeze_pattern)


def _port_captures(task: Task, edges: list[Edge], qk_fix: bool) -> dict[str, set[str]]:
    """The hook points to capture per tower: each edge's port, and what the QK fix reads for edges into q / k."""
    caps: dict[str, set[str]] = {}
    for _, p in edges:
        t, point, _ = _port_key(task, p)
        caps.setdefault(t, set()).add(point)
        ref = parse_node(p)
        if qk_fix and ref.channel in ("q", "k"):
            rope = task.towers[t].cfg.positional == "rope"
            caps[t].update({f"blocks.{ref.layer}.attn.hook_{x}" for x in ("attn_scores", "pattern")})
            caps[t].update({f"blocks.{ref.layer}.attn.hook_{'rot_' if rope else ''}{c}" for c in "qk"})
    return caps


def _integrated(
    task: Task,
    edges: list[Edge],
    steps: int,
    grads_with: Callable[..., OutputGrads],
    scores_of: Callable[[OutputGrads], torch.Tensor],
) -> torch.Tensor:
    """EAP-IG's scores: each tower's edges with the gradients averaged over ``steps`` points of that tower's own
    straight line from the corrupted to the clean embeddings, the other tower clean."""
    emb = _embedding_inputs(task)
    scores = torch.zeros(len(edges))
    for tw in emb:
        mine = torch.tensor([parse_node(p).tower == tw for _, p in edges])
        if not bool(mine.any()):
            continue
        ends = emb[tw]
        path = (
            grads_with(
                pre={tw: {pt: [lambda a, c=c, x=x, al=k / steps: x + al * (c - x)] for pt, (c, x) in ends.items()}},
                towers=[tw],
            )
            for k in range(steps)
        )
        scores = torch.where(mine, scores_of(_own_tower(OutputGrads.mean(path), tw)), scores)
    return scores


def _port_deltas(task: Task, edges: list[Edge], delta_of: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each port's input change when every edge of the graph into it carries its writer's corrupted value (the far
    end of the port's own line; the edges asked for do not change it). ``delta_of(writer)`` is a writer's corrupted
    minus clean output, for every writer of the graph into those ports, asked for or not."""
    ports = {p for _, p in edges}
    out: dict[str, torch.Tensor] = {}
    for w, p in build_graph(task.target).edges:
        if p in ports:
            out[p] = out[p] + delta_of(w) if p in out else delta_of(w)
    return out


class _PortShift:
    """Pre-transform moving one port's input (its head's slice, or the whole point) by ``scale * d``."""

    def __init__(self, head: int | None, d: torch.Tensor, scale: float):
        self.head, self.d, self.scale = head, d, scale

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            return a + self.scale * self.d
        pad = torch.zeros_like(a)
        pad[:, :, self.head] = self.d
        return a + self.scale * pad


def _integrated_ports(
    task: Task,
    edges: list[Edge],
    steps: int,
    port_delta: Mapping[str, torch.Tensor],
    grads_with: Callable[..., OutputGrads],
    scores_of: Callable[[OutputGrads], torch.Tensor],
) -> torch.Tensor:
    """EAP-IG along each port's own line: the port's input moved alone from its corrupted to its clean value
    (``x_k = x_clean + (1 - k / steps) d``, ``k = 0 .. steps-1``), everything else clean; each edge into the port
    scored as its writer's difference dotted with the port's gradients averaged along that line."""
    scores = torch.zeros(len(edges))
    for port in sorted({p for _, p in edges}):
        mine = torch.tensor([p == port for _, p in edges])
        tw, point, head = _port_key(task, port)
        path = (
            grads_with(pre={tw: {point: [_PortShift(head, port_delta[port], 1.0 - k / steps)]}}, towers=[tw])
            for k in range(steps)
        )
        scores = torch.where(mine, scores_of(_own_tower(OutputGrads.mean(path), tw)), scores)
    return scores


def _finish(task: Task, result: Attribution, check: int, freeze_pattern: bool) -> Attribution:
    if freeze_pattern:
        result.info["freeze_pattern"] = True
    if check:
        result.info["check"] = check_edge_attribution(task, result, n=check)
    return result


def check_edge_attribution(task: Task, result: Attribution, *, n: int = 8, seed: int = 0, warn: bool = True) -> dict:
    """The cheap check of an edge attribution on ``task``: ``n`` of its edges patched exactly
    (``exact_edge_patching``, with the result's ``freeze_pattern``), compared and warned about
    (``attribution.check_against_exact``). Returns the agreement.

    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision", norm="frozen")
    >>> readout = [(f"vision.L0.H{h}", "vision.readout") for h in range(4)]
    >>> check_edge_attribution(task, eap(task, readout), n=4)["pearson"] > 0.999  # linear path, linear metric
    True
    """
    freeze = result.info.get("freeze_pattern", False)
    edges = [tuple(name.split("->")) for name in result.names]
    if not all(len(e) == 2 for e in edges):
        raise ValueError(f"{result.method} scores nodes, not edges 'writer->port': use check_node_attribution")

    def exact_on(names: list[str]) -> Attribution:
        return exact_edge_patching(task, [tuple(n.split("->")) for n in names], freeze_pattern=freeze)  # type: ignore[misc]

    return check_against_exact(result, exact_on, n=n, seed=seed, warn=warn)


def _edge_contribs(
    task: Task, edges: list[Edge], delta: Mapping, grads: Mapping, fixed: Mapping, tower: str | None
) -> list[torch.Tensor | None]:
    """Each edge's contributions (``attribution.Contrib``): the writer's difference dotted with the gradients at the
    port's input, or, for an edge the QK fix handles (``fixed``), its exact change of the head's pattern dotted with
    the gradients at the pattern."""
    out: list[torch.Tensor | None] = []
    for w, p in edges:
        if tower is not None and parse_node(p).tower != tower:
            out.append(None)
        elif (w, p) in fixed:
            t, point, head, d_pattern = fixed[(w, p)]
            out.append(per_row(d_pattern * grads[(t, point)][:, :, head]))
        else:
            t, point, head = _port_key(task, p)
            g = grads[(t, point)]
            out.append(per_row(delta[w] * (g if head is None else g[:, :, :, head])))
    return out


def _own_tower(g: OutputGrads, tower: str) -> OutputGrads:
    """``g`` with only ``tower``'s gradients: EAP-IG integrates each tower along its own line."""
    if None not in g.by_tower:  # readout: each tower's own output coordinates
        return OutputGrads(g.linearise, {tower: g.by_tower[tower]}, g.clean)
    own = {k: v if k[0] == tower else torch.zeros_like(v) for k, v in g.by_tower[None].items()}
    return OutputGrads(g.linearise, {None: own}, g.clean)


def _embedding_inputs(task: Task) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """(clean, corrupted) outputs of each tower's embedding hooks, the end points of EAP-IG's straight line."""
    out: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    caps = {t: {p for p in ("hook_embed", "hook_pos_embed") if p in tw.hook_dict} for t, tw in task.towers.items()}
    _, clean = run_task(task, "clean", caps)
    _, corr = run_task(task, "corrupted", caps)
    for (t, p), c in clean.items():
        out.setdefault(t, {})[p] = (c, corr[(t, p)])
    return out


def eap(
    task: Task,
    edges: Sequence[Edge] | None = None,
    *,
    qk_fix: bool | None = None,
    grad_drop: bool = False,
    freeze_pattern: bool = False,
    check: int = CHECK_N,
) -> Attribution:
    """Edge attribution patching (Syed et al. 2023): for each edge ``w -> port`` of ``graph.build_graph`` (or the
    given ``edges``), ``(w(corrupted) - w(clean)) . dM/d(port input)`` at the clean run; ``qk_fix`` / ``grad_drop``
    add AtP*'s corrections (module docstring): the QK fix is on by default unless ``freeze_pattern`` (since
    2026-11-29; ``qk_fix=False`` is EAP as Syed et al. define it, ``METHODS["EAP"]``), GradDrop off. Returns edge
    scores named ``"w->port"``; ``.ranked()`` lists them best first. Exact for edges into values and the readout of
    the attention-only towers without LN when the metric is linear (``mirror_task(..., norm="frozen")``), and with
    ``qk_fix`` for edges into a one-layer tower's queries and keys too. ``check=n`` patches ``n`` edges exactly and
    warns when EAP disagrees (``check_edge_attribution``)."""
    qk_fix = resolve_qk_fix(qk_fix, freeze_pattern)
    name = "EAP" + ("+QK" if qk_fix else "") + ("+GD" if grad_drop else "")
    return _eap(
        task, edges, qk_fix=qk_fix, grad_drop=grad_drop, freeze_pattern=freeze_pattern, method=name, check=check
    )


def eap_ig(
    task: Task, edges: Sequence[Edge] | None = None, *, steps: int = 20, check: int = CHECK_N, line: str = "ports"
) -> Attribution:
    """EAP with integrated gradients: each edge's writer difference dotted with its port's gradients averaged over
    ``steps`` points of a straight line from corrupted to clean. ``line``: ``"ports"`` (the default since 2026-12-01,
    named ``EAP-IG-ports``): each port's input moved alone along its own line, everything else clean (one line per
    port, so ``steps`` x ports runs: 6-30x the time of ``"inputs"`` on the zoo's models); ``"inputs"``: the line of
    Hanna et al. 2024 (``METHODS["EAP-IG"]``): the embeddings, so every port moves at once (per tower on the whole
    CLIP: module docstring). Signs against exact edge patching of CLIP's logit on six zoo models (docs/analyses.md):
    ``"ports"`` every edge above the 5 % floor right; ``"inputs"`` 11/13 on ``-no-qk-bias``, whose weak head's
    marginal effect has the other sign along the joint line. ``check`` as in ``eap``.

    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision")
    >>> edges = [("vision.embed", "vision.L0.H2.k"), ("vision.embed", "vision.L0.H2.v")]
    >>> eap_ig(task, edges, steps=4, check=0).method, eap_ig(task, edges, steps=4, line="inputs", check=0).method
    ('EAP-IG-ports', 'EAP-IG')
    """
    steps = check_int(steps, "steps")
    if line not in ("inputs", "ports"):
        raise ValueError(f"line must be 'ports' (each port on its own line) or 'inputs' (Hanna et al.), got {line!r}")
    name = "EAP-IG" if line == "inputs" else "EAP-IG-ports"
    return _eap(task, edges, steps=steps, method=name, check=check, line=line)


def exact_edge_patching(
    task: Task, edges: Sequence[Edge] | None = None, *, freeze_pattern: bool = False
) -> Attribution:
    """The exact effect of each edge: the port reads its writer's corrupted activation, everything else is clean
    (one forward pass of the edge's tower per edge; ``path_patching.path_patch`` with a single receiver)."""
    start = time.perf_counter()
    edge_list = _edges(task, edges)
    with graph_flags(task.target):
        frozen = frozen_patterns(task, freeze_pattern)
        fh = as_hooks(frozen)
        corr_w = writer_activations(task, "corrupted", extra_hooks=fh)
        base = task.run(fh).mean()
        scores = [float(run_with_edges(task, {e: corr_w[e[0]]}, extra_hooks=fh).mean() - base) for e in edge_list]
    result = Attribution("exact", [edge_name(e) for e in edge_list], torch.tensor(scores), time.perf_counter() - start)
    result.info["noise_floor"] = task.noise_floor()  # effects below it are rounding (attribution.moved)
    return _finish(task, result, 0, freeze_pattern)


__all__ = ["check_edge_attribution", "eap", "eap_ig", "exact_edge_patching"]
