"""Attribution patching on either tower and on the whole CLIP: AtP, AtP*, EAP, EAP-IG, and the exact patching they
approximate.

Every method scores a ``graph.Task`` (clean input, corrupted input, metric per example; ``graph.mirror_task`` is the
default: images against their mirrors, the logit difference of the true caption and its left/right swap). Scores are
**noising** effects on the batch-mean metric ``M``: what happens to ``M`` of the clean run when a node (or an edge)
takes its value from the corrupted run. Definitions, with the literature they follow:

- ``exact_patching``: the effect itself, one forward pass per node, ``c(n) = M(clean | do(n <- n(corrupted))) -
  M(clean)`` (Kramár et al. 2024, Eq. 1; TransformerLens's ``patching`` with clean and corrupted exchanged).
- ``atp``: attribution patching (Nanda 2023; Kramár et al. 2024, Eq. 3), the first-order Taylor estimate from one
  clean forward and backward pass, ``(n(corrupted) - n(clean)) . dM/dn`` at the clean run.
- ``atp_star``: AtP* (Kramár et al. 2024, Sec. 3.1): (1) the **QK fix** for nodes that feed an attention softmax
  directly (queries, keys, score terms): the attention pattern after the patch is computed exactly, and only the
  pattern's effect is linearised, ``sum_t (A'_t - A_t) . dM/dA_t``; (2) **GradDrop** against cancellation: with
  the gradient through layer ``l``'s residual contribution (``hook_attn_out``, ``hook_mlp_out``) dropped,
  ``c_l(n)`` is recomputed for each layer ``l`` other than the node's own, and the score is ``mean_l |c_l(n)|``
  (the paper's ``1/(L-1) sum_l |c_l(n)|``; a one-layer tower has no other layer: ``|c(n)|``). AtP* scores are
  magnitudes.
- ``eap``: edge attribution patching (Syed et al. 2023), AtP on the edges of ``graph.build_graph``: ``(w(corrupted)
  - w(clean)) . dM/d(port input)`` for edge ``w -> port``; with ``qk_fix`` / ``grad_drop`` the two AtP* corrections
  are applied to edges into queries and keys (an extension of ours: AtP* defines them for nodes).
- ``eap_ig``: EAP with integrated gradients (Hanna et al. 2024, ``eap.attribute.get_scores_eap_ig``): the port
  gradients are averaged over ``steps`` inputs on the straight line from the corrupted to the clean embeddings,
  ``x_k = x_corr + (k / steps) (x_clean - x_corr)``, ``k = 0 .. steps-1``, times the same activation difference.
  The whole CLIP has two inputs: each tower's edges are integrated along that tower's own line with the other
  tower's input clean (so ``mirror_task``'s joint corruption, which flips both towers, is not integrated jointly).
- ``exact_edge_patching``: each edge's exact effect (the port reads the writer's corrupted value, nothing else
  changes: ``path_patching`` with one receiver).

Node kinds (``nodes=``): ``heads`` (each head's ``z``), ``mlp`` (``hook_mlp_out``), ``neurons`` (each MLP neuron's
``hook_post``), ``embed`` / ``pos`` (the embeddings), ``resid`` (the residual stream at each depth and position,
named ``<tower>.resid{d}.pos{p}``, depth 0 = the embeddings, depth d = after block d-1), ``q`` / ``k`` / ``v`` (each
head's query, key, value vectors) and ``terms`` (each head's attention-score terms of ``terms.attention_terms``:
EE, EP, PE, PP, the bias terms and, past layer 0 or with LayerNorm, the R terms; named ``<tower>.L0.H2.EP``).

**Exactness.** Where the metric is linear in the tower output and nothing non-linear lies between a node and the
output, AtP equals exact patching: ``freeze_pattern=True`` fixes every attention pattern at its clean value (in
every run a method makes), which makes the attention-only towers without LayerNorm linear in their embeddings, so
``atp`` and ``eap`` then equal ``exact_patching`` / ``exact_edge_patching`` to float tolerance. The QK fix is exact
for a score term, a query or a key when the pattern's effect is linear (a one-layer attention-only tower without
LN, linear metric). The tests check both.

Example:
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.graph import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, target="vision")
    >>> exact, approx = exact_patching(task), atp(task)
    >>> exact.names
    ['vision.L0.H0', 'vision.L0.H1', 'vision.L0.H2', 'vision.L0.H3']
    >>> approx.ranked(1)[0][0] == exact.ranked(1)[0][0]  # both put the same head first
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.decompose import rotate
from hooked_clip1d.analysis.graph import (
    Edge,
    Task,
    build_graph,
    check_nodes,
    edge_name,
    graph_flags,
    parse_node,
    port_hook,
    run_with_edges,
    writer_activations,
)
from hooked_clip1d.analysis.hooks import Hook
from hooked_clip1d.analysis.terms import attention_terms
from hooked_clip1d.model.functional import layer_norm

NODE_KINDS = ("heads", "mlp", "neurons", "embed", "pos", "resid", "q", "k", "v", "terms")


# ---- results --------------------------------------------------------------------------------------------------------
@dataclass
class Attribution:
    """Scores of one method: ``names`` (nodes, or edges ``"writer->port"``) and ``scores`` [n] (estimated or exact
    change of the batch-mean metric; magnitudes for AtP*), with the method's wall time in ``seconds``."""

    method: str
    names: list[str]
    scores: torch.Tensor
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scores.shape != (len(self.names),):
            raise ValueError(f"{len(self.names)} names but scores of shape {tuple(self.scores.shape)}")

    def __getitem__(self, name: str) -> float:
        if name not in self.names:
            raise KeyError(f"{name!r} is not scored here ({len(self.names)} names, e.g. {self.names[:3]})")
        return float(self.scores[self.names.index(name)])

    def as_dict(self) -> dict[str, float]:
        """``{name: score}``."""
        return {n: float(s) for n, s in zip(self.names, self.scores.tolist(), strict=True)}

    def ranked(self, k: int | None = None, by_abs: bool = True) -> list[tuple[str, float]]:
        """The ``k`` (default all) highest-scoring names with their scores, by ``|score|`` unless ``by_abs=False``."""
        key = self.scores.abs() if by_abs else self.scores
        order = torch.argsort(key, descending=True, stable=True).tolist()
        return [(self.names[i], float(self.scores[i])) for i in order[:k]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: method, seconds and the scores by name."""
        return {"method": self.method, "seconds": self.seconds, "scores": self.as_dict(), **self.info}


# ---- node specifications --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Spec:
    name: str
    tower: str
    point: str  # hook point holding the node (hook_attn_scores for terms)
    idx: tuple  # index of the node inside the activation
    layer: int  # for GradDrop: the block the node sits in (-1 for the embeddings)
    kind: str
    head: int | None = None
    term: str | None = None


def _node_specs(task: Task, nodes: Sequence[str]) -> list[_Spec]:
    if isinstance(nodes, str):
        nodes = [nodes]
    bad = [n for n in nodes if n not in NODE_KINDS]
    if bad or not nodes:
        raise ValueError(f"unknown node kinds {bad or nodes}; known: {list(NODE_KINDS)}")
    specs: list[_Spec] = []
    A = slice(None)
    for kind in dict.fromkeys(nodes):
        found = False
        for t, tower in task.towers.items():
            cfg = tower.cfg
            L, H = cfg.n_layers, cfg.n_heads
            if kind == "heads":
                specs += [_Spec(f"{t}.L{li}.H{h}", t, f"blocks.{li}.attn.hook_z", (A, A, h), li, kind, h)
                          for li in range(L) for h in range(H)]  # fmt: skip
            elif kind in ("q", "k", "v"):
                specs += [_Spec(f"{t}.L{li}.H{h}.{kind}", t, f"blocks.{li}.attn.hook_{kind}", (A, A, h), li, kind, h)
                          for li in range(L) for h in range(H)]  # fmt: skip
            elif kind == "embed":
                specs.append(_Spec(f"{t}.embed", t, "hook_embed", (), -1, kind))
            elif kind == "pos":
                if cfg.positional == "learned":
                    specs.append(_Spec(f"{t}.pos", t, "hook_pos_embed", (), -1, kind))
            elif kind == "mlp":
                if not cfg.attn_only:
                    specs += [_Spec(f"{t}.L{li}.mlp", t, f"blocks.{li}.hook_mlp_out", (), li, kind) for li in range(L)]
            elif kind == "neurons":
                if not cfg.attn_only:
                    specs += [_Spec(f"{t}.L{li}.N{n}", t, f"blocks.{li}.mlp.hook_post", (..., n), li, kind)
                              for li in range(L) for n in range(cfg.d_mlp)]  # fmt: skip
            elif kind == "resid":
                points = ["blocks.0.hook_resid_pre"] + [f"blocks.{li}.hook_resid_post" for li in range(L)]
                specs += [_Spec(f"{t}.resid{d}.pos{p}", t, point, (A, p), d - 1, kind)
                          for d, point in enumerate(points) for p in range(cfg.n_ctx)]  # fmt: skip
            elif kind == "terms":
                with torch.no_grad():
                    _, cache = tower.run_with_cache(task.tokens(t)[:1])
                for li in range(L):
                    names = list(attention_terms(tower, cache, li))
                    specs += [_Spec(f"{t}.L{li}.H{h}.{term}", t, f"blocks.{li}.attn.hook_attn_scores", (A, h), li, kind,
                                    h, term) for h in range(H) for term in names]  # fmt: skip
            found = found or any(s.kind == kind and s.tower == t for s in specs)
        if not found:
            raise ValueError(f"no {kind!r} nodes in this target (e.g. no MLP in an attention-only tower, no learned "
                             "positions with RoPE)")  # fmt: skip
    return specs


# ---- runs -----------------------------------------------------------------------------------------------------------
Transform = Callable[[torch.Tensor], torch.Tensor]


class _Composite:
    """Forward hook: ``pre`` transforms, then ``capture`` (sees the result), then ``post`` (a class, not a closure:
    a run builds many, and a nested function would be re-decorated by the test suite's type checker each time)."""

    def __init__(self, pre: Sequence[Transform], capture: Callable | None, post: Transform | None):
        self.pre, self.capture, self.post = list(pre), capture, post

    def __call__(self, act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        for f in self.pre:
            act = f(act)
        if self.capture is not None:
            self.capture(act)
        return self.post(act) if self.post is not None else act


def _compose(pre: Sequence[Transform], capture: Callable | None, post: Transform | None) -> _Composite:
    return _Composite(pre, capture, post)


def _run(
    task: Task,
    which: str = "clean",
    capture: Mapping[str, set[str]] | None = None,
    pre: Mapping[str, Mapping[str, list[Transform]]] | None = None,
    post: Mapping[str, Mapping[str, Transform]] | None = None,
    grad: bool = False,
) -> tuple[torch.Tensor, dict[tuple[str, str], torch.Tensor]]:
    """Run every tower on its ``which`` input with composite hooks; return the batch-mean metric and the captured
    activations by (tower, point). With ``grad`` the embeddings become leaves that require grad, so activations
    downstream are in the autograd graph (whatever the parameters' ``requires_grad``)."""
    captured: dict[tuple[str, str], torch.Tensor] = {}
    pooled = {}
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        for t, tower in task.towers.items():
            pre_t = {k: list(v) for k, v in (pre or {}).get(t, {}).items()}
            if grad:
                for point in ("hook_embed", "hook_pos_embed"):
                    if point in tower.hook_dict:
                        pre_t.setdefault(point, []).append(lambda a: a.detach().requires_grad_(True))
            post_t = dict((post or {}).get(t, {}))
            cap_t = set((capture or {}).get(t, set()))
            hooks = []
            for point in dict.fromkeys([*pre_t, *post_t, *cap_t]):
                keep = (lambda a, key=(t, point): captured.__setitem__(key, a)) if point in cap_t else None
                hooks.append((point, _compose(pre_t.get(point, []), keep, post_t.get(point))))
            pooled[t] = tower.run_with_hooks(task.tokens(t, which), fwd_hooks=hooks)
        value = task.metric_of(pooled).mean()
    return value, captured


def _grads(value: torch.Tensor, acts: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
    keys = [k for k, a in acts.items() if a.requires_grad]
    got = torch.autograd.grad(value, [acts[k] for k in keys], allow_unused=True) if keys else []
    out = {k: torch.zeros_like(a) for k, a in acts.items()}
    for k, g in zip(keys, got, strict=True):
        if g is not None:
            out[k] = g.detach()
    return out


def _freeze(task: Task, freeze_pattern: bool) -> dict[str, dict[str, list[Transform]]]:
    """Pre-transforms that replace every attention pattern by its clean value (``freeze_pattern``)."""
    if not freeze_pattern:
        return {}
    caps = {t: {f"blocks.{li}.attn.hook_pattern" for li in range(tw.cfg.n_layers)} for t, tw in task.towers.items()}
    _, clean = _run(task, capture=caps)
    return {t: {p: [lambda a, v=clean[(t, p)].detach(): v] for p in pts} for t, pts in caps.items()}


def _merge(*parts: Mapping[str, Mapping[str, list[Transform]]]) -> dict[str, dict[str, list[Transform]]]:
    out: dict[str, dict[str, list[Transform]]] = {}
    for part in parts:
        for t, by_point in part.items():
            for p, fs in by_point.items():
                out.setdefault(t, {}).setdefault(p, []).extend(fs)
    return out


def _as_hooks(pre: Mapping[str, Mapping[str, list[Transform]]]) -> dict[str, list[Hook]]:
    return {t: [(p, _compose(fs, None, None)) for p, fs in by_point.items()] for t, by_point in pre.items()}


def _drop_posts(task: Task, tower: str, layer: int) -> dict[str, dict[str, Transform]]:
    """GradDrop: detach block ``layer``'s residual contributions of ``tower`` (forward values unchanged)."""
    cfg = task.towers[tower].cfg
    points = [f"blocks.{layer}.hook_attn_out"] + ([] if cfg.attn_only else [f"blocks.{layer}.hook_mlp_out"])
    return {tower: {p: (lambda a: a.detach()) for p in points}}


def _check_freeze(freeze_pattern: bool, qk_fix: bool) -> None:
    if freeze_pattern and qk_fix:
        raise ValueError("qk_fix corrects the attention pattern's non-linearity; with freeze_pattern there is none")


# ---- exact patching of nodes ----------------------------------------------------------------------------------------
def _term_deltas(task: Task, specs: list[_Spec]) -> dict[str, torch.Tensor]:
    """Corrupted minus clean value [batch, query, key] of each term node."""
    out: dict[str, torch.Tensor] = {}
    for t in {s.tower for s in specs if s.kind == "terms"}:
        tower = task.towers[t]
        with torch.no_grad():
            _, c_clean = tower.run_with_cache(task.tokens(t, "clean"))
            _, c_corr = tower.run_with_cache(task.tokens(t, "corrupted"))
        for layer in {s.layer for s in specs if s.kind == "terms" and s.tower == t}:
            clean, corr = attention_terms(tower, c_clean, layer), attention_terms(tower, c_corr, layer)
            for s in specs:
                if s.kind == "terms" and s.tower == t and s.layer == layer:
                    out[s.name] = (corr[s.term] - clean[s.term])[:, s.head]
    return out


class _PatchNode:
    """Forward hook writing a node's corrupted value into the run (a term's difference is added to the scores)."""

    def __init__(self, spec: _Spec, value: torch.Tensor):
        self.spec, self.value = spec, value

    def __call__(self, act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.clone()
        if self.spec.kind == "terms":
            out[self.spec.idx] = out[self.spec.idx] + self.value
        else:
            out[self.spec.idx] = self.value
        return out


def _patch_fn(spec: _Spec, value: torch.Tensor) -> _PatchNode:
    return _PatchNode(spec, value)


def exact_patching(task: Task, nodes: Sequence[str] = ("heads",), *, freeze_pattern: bool = False) -> Attribution:
    """The exact noising effect of each node (one forward pass per node): ``M(clean | n <- n(corrupted)) -
    M(clean)`` (module docstring). A score term is patched by adding its corrupted-minus-clean value to the head's
    scores. ``freeze_pattern`` fixes every attention pattern at its clean value in every run."""
    start = time.perf_counter()
    specs = _node_specs(task, nodes)
    frozen = _freeze(task, freeze_pattern)
    caps: dict[str, set[str]] = {}
    for s in specs:
        if s.kind != "terms":
            caps.setdefault(s.tower, set()).add(s.point)
    _, corr = _run(task, "corrupted", caps, pre=frozen)
    deltas = _term_deltas(task, specs)
    base_hooks = _as_hooks(frozen)
    base = task.run(base_hooks).mean()
    scores = []
    for s in specs:
        value = deltas[s.name] if s.kind == "terms" else corr[(s.tower, s.point)][s.idx]
        hooks = {t: list(h) for t, h in base_hooks.items()}
        hooks.setdefault(s.tower, []).append((s.point, _patch_fn(s, value)))
        scores.append(float(task.run(hooks).mean() - base))
    return Attribution("exact", [s.name for s in specs], torch.tensor(scores), time.perf_counter() - start)


# ---- AtP and AtP* on nodes ------------------------------------------------------------------------------------------
def _qk_delta_scores(task: Task, s: _Spec, delta: torch.Tensor, clean: Mapping) -> torch.Tensor:
    """Change of head ``s.head``'s scores [batch, query, key] when its query (key) vectors change by ``delta``
    [batch, pos, d_head] (before RoPE), all else clean."""
    tower = task.towers[s.tower]
    rot = "hook_rot_" if tower.cfg.positional == "rope" else "hook_"
    other = clean[(s.tower, f"blocks.{s.layer}.attn.{rot}{'k' if s.kind == 'q' else 'q'}")][:, :, s.head]
    d = rotate(tower, s.layer, delta[:, :, None])[:, :, 0]
    prod = d @ other.transpose(-1, -2) if s.kind == "q" else other @ d.transpose(-1, -2)
    return prod / tower.cfg.attn_scale


def _node_scores(
    task: Task, specs: list[_Spec], corr: Mapping, deltas: Mapping, clean: Mapping, grads: Mapping, qk_fix: bool
) -> torch.Tensor:
    out = []
    for s in specs:
        if s.kind == "terms":
            d_scores = deltas[s.name]
        elif qk_fix and s.kind in ("q", "k"):
            d_scores = _qk_delta_scores(task, s, (corr[(s.tower, s.point)] - clean[(s.tower, s.point)])[s.idx], clean)
        else:
            diff = corr[(s.tower, s.point)][s.idx] - clean[(s.tower, s.point)][s.idx]
            out.append(float((diff * grads[(s.tower, s.point)][s.idx]).sum()))
            continue
        scores_key = (s.tower, f"blocks.{s.layer}.attn.hook_attn_scores")
        if qk_fix:
            pat_key = (s.tower, f"blocks.{s.layer}.attn.hook_pattern")
            S = clean[scores_key][:, s.head]
            A = clean[pat_key][:, s.head]
            out.append(float(((torch.softmax(S + d_scores, dim=-1) - A) * grads[pat_key][:, s.head]).sum()))
        else:
            out.append(float((d_scores * grads[scores_key][:, s.head]).sum()))
    return torch.tensor(out)


def _atp(task: Task, nodes: Sequence[str], qk_fix: bool, grad_drop: bool, freeze_pattern: bool, method: str):
    _check_freeze(freeze_pattern, qk_fix)
    start = time.perf_counter()
    specs = _node_specs(task, nodes)
    frozen = _freeze(task, freeze_pattern)
    caps: dict[str, set[str]] = {}
    for s in specs:
        if s.kind != "terms":
            caps.setdefault(s.tower, set()).add(s.point)
    _, corr = _run(task, "corrupted", caps, pre=frozen)
    deltas = _term_deltas(task, specs)
    grad_caps = {t: set(v) for t, v in caps.items()}
    for s in specs:
        if s.kind in ("terms", "q", "k"):
            grad_caps.setdefault(s.tower, set()).update(
                {f"blocks.{s.layer}.attn.hook_attn_scores", f"blocks.{s.layer}.attn.hook_pattern"}
            )
            if qk_fix and s.kind in ("q", "k"):
                rope = task.towers[s.tower].cfg.positional == "rope"
                grad_caps[s.tower].update({f"blocks.{s.layer}.attn.hook_{'rot_' if rope else ''}{c}" for c in "qk"})

    def scores_with(post: Mapping | None) -> torch.Tensor:
        value, acts = _run(task, capture=grad_caps, pre=frozen, post=post, grad=True)
        grads = _grads(value, acts)
        clean = {k: a.detach() for k, a in acts.items()}
        return _node_scores(task, specs, corr, deltas, clean, grads, qk_fix)

    scores = scores_with(None)
    if grad_drop:
        scores = _grad_drop(task, scores, [(s.tower, s.layer) for s in specs], scores_with)
    return Attribution(method, [s.name for s in specs], scores, time.perf_counter() - start)


def _grad_drop(
    task: Task, plain: torch.Tensor, where: list[tuple[str, int]], scores_with: Callable[[Mapping], torch.Tensor]
) -> torch.Tensor:
    """AtP*'s GradDrop: mean over the layers ``l`` of the item's tower other than its own of ``|c_l|`` (``c_l``:
    the score with block ``l``'s residual contributions detached); ``|plain|`` where there is no other layer."""
    total = torch.zeros_like(plain)
    count = torch.zeros_like(plain)
    for t, tower in task.towers.items():
        for layer in range(tower.cfg.n_layers):
            mask = torch.tensor([wt == t and wl != layer for wt, wl in where])
            if not bool(mask.any()):
                continue
            dropped = scores_with(_drop_posts(task, t, layer))
            total += torch.where(mask, dropped.abs(), 0.0)
            count += mask.float()
    return torch.where(count > 0, total / count.clamp(min=1), plain.abs())


def atp(task: Task, nodes: Sequence[str] = ("heads",), *, freeze_pattern: bool = False) -> Attribution:
    """Attribution patching (AtP): ``(n(corrupted) - n(clean)) . dM/dn`` at the clean run, for every node of the
    ``nodes`` kinds (module docstring), from one corrupted forward pass and one clean forward and backward pass.
    For a score term the gradient is ``dM/d(scores)``. Exact wherever the path to the output is linear (e.g. with
    ``freeze_pattern=True`` on the attention-only towers without LN and a linear metric)."""
    return _atp(task, nodes, False, False, freeze_pattern, "AtP")


def atp_star(
    task: Task, nodes: Sequence[str] = ("heads",), *, qk_fix: bool = True, grad_drop: bool = True
) -> Attribution:
    """AtP* (Kramár et al. 2024): AtP with the QK fix on queries, keys and score terms and with GradDrop (module
    docstring); the scores are magnitudes when ``grad_drop`` (the default). Either correction can be turned off."""
    name = "AtP*" if qk_fix and grad_drop else "AtP+QK" if qk_fix else "AtP+GD" if grad_drop else "AtP"
    return _atp(task, nodes, qk_fix, grad_drop, False, name)


# ---- edges ----------------------------------------------------------------------------------------------------------
def _edges(task: Task, edges: Sequence[Edge] | None) -> list[Edge]:
    graph = build_graph(task.target)
    if edges is None:
        return list(graph.edges)
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


def _qk_edge_scores(task: Task, edges: list[Edge], delta: Mapping[str, torch.Tensor], clean: Mapping, grads: Mapping):
    """QK fix for edges into ``.q`` / ``.k`` ports: the head's pattern recomputed exactly with the port's input
    changed by the writer's difference (through ``ln1``), its effect linearised through ``dM/d(pattern)``."""
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
        spec = _Spec(p, t, point, (), ref.layer, ref.channel, head)  # type: ignore[arg-type]
        d_scores = _qk_delta_scores(task, spec, d, clean)
        S = clean[(t, f"blocks.{ref.layer}.attn.hook_attn_scores")][:, head]
        A = clean[(t, f"blocks.{ref.layer}.attn.hook_pattern")][:, head]
        g = grads[(t, f"blocks.{ref.layer}.attn.hook_pattern")][:, head]
        out[(w, p)] = float(((torch.softmax(S + d_scores, dim=-1) - A) * g).sum())
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
) -> Attribution:
    _check_freeze(freeze_pattern, qk_fix)
    if steps and (qk_fix or grad_drop):
        raise ValueError("EAP-IG takes neither qk_fix nor grad_drop")
    start = time.perf_counter()
    edge_list = _edges(task, edges)
    with graph_flags(task.target):
        frozen = _freeze(task, freeze_pattern)
        fh = _as_hooks(frozen)
        clean_w = writer_activations(task, "clean", extra_hooks=fh)
        corr_w = writer_activations(task, "corrupted", extra_hooks=fh)
        delta = {w: corr_w[w] - clean_w[w] for w in {w for w, _ in edge_list}}
        caps: dict[str, set[str]] = {}
        for _, p in edge_list:
            t, point, _ = _port_key(task, p)
            caps.setdefault(t, set()).add(point)
            ref = parse_node(p)
            if qk_fix and ref.channel in ("q", "k"):
                rope = task.towers[t].cfg.positional == "rope"
                caps[t].update({f"blocks.{ref.layer}.attn.hook_{x}" for x in ("attn_scores", "pattern")})
                caps[t].update({f"blocks.{ref.layer}.attn.hook_{'rot_' if rope else ''}{c}" for c in "qk"})

        def grads_with(pre: Mapping | None = None, post: Mapping | None = None) -> tuple[dict, dict]:
            value, acts = _run(task, capture=caps, pre=_merge(frozen, pre or {}), post=post, grad=True)
            return _grads(value, acts), {k: a.detach() for k, a in acts.items()}

        def scores_with(post: Mapping | None) -> torch.Tensor:
            grads, clean = grads_with(post=post)
            fixed = _qk_edge_scores(task, edge_list, delta, clean, grads) if qk_fix else {}
            return _edge_dot(task, edge_list, delta, grads, fixed)

        if steps:
            # each tower's edges are integrated along that tower's own straight line, the other tower clean
            emb = _embedding_inputs(task)
            avg: dict = {}
            for tw in emb:
                total: dict | None = None
                for k in range(steps):
                    pre = {tw: {point: [lambda a, c=c, x=x, al=k / steps: x + al * (c - x)]
                                for point, (c, x) in emb[tw].items()}}  # fmt: skip
                    grads, _ = grads_with(pre=pre)
                    total = grads if total is None else {key: total[key] + g for key, g in grads.items()}
                assert total is not None
                avg.update({key: g / steps for key, g in total.items() if key[0] == tw})
            scores = _edge_dot(task, edge_list, delta, avg, {})
        else:
            scores = scores_with(None)
            if grad_drop:
                where = [(parse_node(p).tower, _port_layer(task, p)) for _, p in edge_list]
                scores = _grad_drop(task, scores, where, scores_with)
    names = [edge_name(e) for e in edge_list]
    return Attribution(method, names, scores, time.perf_counter() - start, info={"steps": steps} if steps else {})


def _edge_dot(task: Task, edges: list[Edge], delta: Mapping, grads: Mapping, fixed: Mapping) -> torch.Tensor:
    out = []
    for w, p in edges:
        if (w, p) in fixed:
            out.append(fixed[(w, p)])
            continue
        t, point, head = _port_key(task, p)
        g = grads[(t, point)]
        g = g if head is None else g[:, :, head]
        out.append(float((delta[w] * g).sum()))
    return torch.tensor(out)


def _embedding_inputs(task: Task) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """(clean, corrupted) outputs of each tower's embedding hooks, the end points of EAP-IG's straight line."""
    out: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    caps = {t: {p for p in ("hook_embed", "hook_pos_embed") if p in tw.hook_dict} for t, tw in task.towers.items()}
    _, clean = _run(task, "clean", caps)
    _, corr = _run(task, "corrupted", caps)
    for (t, p), c in clean.items():
        out.setdefault(t, {})[p] = (c, corr[(t, p)])
    return out


def eap(
    task: Task,
    edges: Sequence[Edge] | None = None,
    *,
    qk_fix: bool = False,
    grad_drop: bool = False,
    freeze_pattern: bool = False,
) -> Attribution:
    """Edge attribution patching (Syed et al. 2023): for each edge ``w -> port`` of ``graph.build_graph`` (or the
    given ``edges``), ``(w(corrupted) - w(clean)) . dM/d(port input)`` at the clean run; ``qk_fix`` / ``grad_drop``
    add AtP*'s corrections (module docstring). Returns edge scores named ``"w->port"``; ``.ranked()`` lists them
    best first."""
    name = "EAP" + ("+QK" if qk_fix else "") + ("+GD" if grad_drop else "")
    return _eap(task, edges, qk_fix=qk_fix, grad_drop=grad_drop, freeze_pattern=freeze_pattern, method=name)


def eap_ig(task: Task, edges: Sequence[Edge] | None = None, *, steps: int = 20) -> Attribution:
    """EAP-IG (Hanna et al. 2024): EAP with the port gradients averaged over ``steps`` points on the straight line
    from the corrupted to the clean embeddings (per tower on the whole CLIP: module docstring)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    return _eap(task, edges, steps=steps, method="EAP-IG")


def exact_edge_patching(
    task: Task, edges: Sequence[Edge] | None = None, *, freeze_pattern: bool = False
) -> Attribution:
    """The exact effect of each edge: the port reads its writer's corrupted activation, everything else is clean
    (one forward pass of the edge's tower per edge; ``path_patching.path_patch`` with a single receiver)."""
    start = time.perf_counter()
    edge_list = _edges(task, edges)
    with graph_flags(task.target):
        frozen = _freeze(task, freeze_pattern)
        fh = _as_hooks(frozen)
        corr_w = writer_activations(task, "corrupted", extra_hooks=fh)
        base = task.run(fh).mean()
        scores = [float(run_with_edges(task, {e: corr_w[e[0]]}, extra_hooks=fh).mean() - base) for e in edge_list]
    return Attribution("exact", [edge_name(e) for e in edge_list], torch.tensor(scores), time.perf_counter() - start)


def linear_metric(direction: Float[torch.Tensor, " d"]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A metric linear in a tower's pooled output, ``pooled @ direction`` (for exactness checks: with it and frozen
    patterns, AtP equals exact patching on the attention-only towers without LN).

    >>> linear_metric(torch.tensor([1.0, -1.0]))(torch.tensor([[3.0, 1.0]])).tolist()
    [2.0]
    """

    def metric(pooled: torch.Tensor) -> torch.Tensor:
        return pooled @ direction.to(pooled.dtype)

    return metric


__all__ = [
    "NODE_KINDS",
    "Attribution",
    "atp",
    "atp_star",
    "eap",
    "eap_ig",
    "exact_edge_patching",
    "exact_patching",
    "linear_metric",
]
