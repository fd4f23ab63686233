"""Node attribution: ``exact_patching``, ``atp`` and ``atp_star`` score every node of the chosen kinds of either tower
or the whole CLIP (the task, the noising effects they measure, AtP*'s corrections and when AtP is exact:
``attribution``'s module docstring).

- ``exact_patching``: the effect itself, one forward pass per node, ``c(n) = M(clean | do(n <- n(corrupted))) -
  M(clean)`` (Kramár et al. 2024, Eq. 1; TransformerLens's ``patching`` with clean and corrupted exchanged).
- ``atp``: attribution patching (Nanda 2023; Kramár et al. 2024, Eq. 3), the first-order Taylor estimate from one
  clean forward and backward pass, ``(n(corrupted) - n(clean)) . dM/dn`` at the clean run.
- ``atp_star``: AtP* (Kramár et al. 2024, Sec. 3.1): AtP with the QK fix for nodes that feed an attention softmax
  directly (queries, keys, score terms) and GradDrop against cancellation. AtP* scores are magnitudes.

Node kinds (``nodes=``): ``heads`` (each head's ``z``), ``mlp`` (``hook_mlp_out``), ``neurons`` (each MLP neuron's
``hook_post``), ``embed`` / ``pos`` (the embeddings), ``resid`` (the residual stream at each depth and position,
named ``<tower>.resid{d}.pos{p}``, depth 0 = the embeddings, depth d = after block d-1), ``q`` / ``k`` / ``v`` (each
head's query, key, value vectors) and ``terms`` (each head's attention-score terms of ``terms.attention_terms``:
EE, EP, PE, PP, the bias terms and, past layer 0 or with LayerNorm, the R terms; named ``<tower>.L0.H2.EP``).

Example:
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.circuits.attribution import (
    CHECK_N,
    Attribution,
    apply_grad_drop,
    as_hooks,
    check_against_exact,
    check_freeze,
    frozen_patterns,
    qk_delta_scores,
    resolve_qk_fix,
    run_task,
)
from hooked_clip1d.analysis.circuits.first_order import first_order_scores, output_grads, per_row
from hooked_clip1d.analysis.circuits.task import Task, linearisation
from hooked_clip1d.analysis.interventions.terms import attention_terms
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.settings.checks import check_int

NODE_KINDS = ("heads", "mlp", "neurons", "embed", "pos", "resid", "q", "k", "v", "terms")


def model_node_kinds(model: CLIP1D) -> list[str]:
    """Every node kind the whole CLIP has, but neurons: MLPs only with an MLP, ``pos`` only with learned positions
    (``reproduce x-circuits``' and ``analyze attribution``'s default)."""
    towers = (model.vision.cfg, model.text.cfg)
    kinds = ["heads"] + (["mlp"] if any(not c.attn_only for c in towers) else []) + ["embed"]
    kinds += ["pos"] if any(c.positional == "learned" for c in towers) else []
    return kinds + ["resid", "q", "k", "v", "terms"]


# ---- node specifications --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeSpec:
    """Where a node lives: its ``name``, ``tower``, the hook ``point`` holding it (``hook_attn_scores`` for a score
    term), its index ``idx`` in that activation, the block ``layer`` it sits in (-1 for the embeddings; GradDrop
    needs it), its ``kind`` (``NODE_KINDS``) and, where it has them, its ``head`` and ``term``."""

    name: str
    tower: str
    point: str  # hook point holding the node (hook_attn_scores for terms)
    idx: tuple  # index of the node inside the activation
    layer: int  # for GradDrop: the block the node sits in (-1 for the embeddings)
    kind: str
    head: int | None = None
    term: str | None = None


def node_specs(task: Task, nodes: Sequence[str]) -> list[NodeSpec]:
    """The nodes of ``task`` of the given kinds (``NODE_KINDS``, in that order), or of the given node names (as
    ``exact_patching``'s ``.names`` spell them: ``vision.L0.H2``, ``vision.L0.H2.EP``, ``vision.resid1.pos3``, in
    the given order); kinds and names do not mix.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap, target="vision")
    >>> [s.name for s in node_specs(task, ["heads"])][:2], node_specs(task, ["vision.L0.H2.EP"])[0].kind
    (['vision.L0.H0', 'vision.L0.H1'], 'terms')
    """
    if isinstance(nodes, str):
        nodes = [nodes]
    if not nodes:
        raise ValueError(f"no nodes given: name node kinds ({list(NODE_KINDS)}) or node names")
    named = [n for n in nodes if n not in NODE_KINDS]
    if named and len(named) < len(nodes):
        raise ValueError(f"give node kinds or node names, not both: {list(nodes)[:4]}")
    if named:
        if any("." not in n for n in named):
            raise ValueError(f"unknown node kinds {[n for n in named if '.' not in n]}; known: {list(NODE_KINDS)}")
        every = {s.name: s for s in _kind_specs(task, NODE_KINDS, strict=False)}
        unknown = [n for n in named if n not in every]
        if unknown:
            raise ValueError(f"{unknown[:3]} are not nodes of this target (e.g. {list(every)[:4]})")
        return [every[n] for n in named]
    return _kind_specs(task, nodes, strict=True)


def _kind_specs(task: Task, nodes: Sequence[str], strict: bool) -> list[NodeSpec]:
    specs: list[NodeSpec] = []
    A, S = slice(None), NodeSpec
    for kind in dict.fromkeys(nodes):
        found = False
        for t, tower in task.towers.items():
            cfg = tower.cfg
            L, H = cfg.n_layers, cfg.n_heads
            if kind == "heads":
                specs += [
                    S(f"{t}.L{li}.H{h}", t, f"blocks.{li}.attn.hook_z", (A, A, h), li, kind, h)
                    for li in range(L)
                    for h in range(H)
                ]
            elif kind in ("q", "k", "v"):
                specs += [
                    S(f"{t}.L{li}.H{h}.{kind}", t, f"blocks.{li}.attn.hook_{kind}", (A, A, h), li, kind, h)
                    for li in range(L)
                    for h in range(H)
                ]
            elif kind == "embed":
                specs.append(S(f"{t}.embed", t, "hook_embed", (), -1, kind))
            elif kind == "pos":
                if cfg.positional == "learned":
                    specs.append(S(f"{t}.pos", t, "hook_pos_embed", (), -1, kind))
            elif kind == "mlp":
                if not cfg.attn_only:
                    specs += [S(f"{t}.L{li}.mlp", t, f"blocks.{li}.hook_mlp_out", (), li, kind) for li in range(L)]
            elif kind == "neurons":
                if not cfg.attn_only:
                    specs += [
                        S(f"{t}.L{li}.N{n}", t, f"blocks.{li}.mlp.hook_post", (..., n), li, kind)
                        for li in range(L)
                        for n in range(cfg.d_mlp)
                    ]
            elif kind == "resid":
                points = ["blocks.0.hook_resid_pre"] + [f"blocks.{li}.hook_resid_post" for li in range(L)]
                specs += [
                    S(f"{t}.resid{d}.pos{p}", t, point, (A, p), d - 1, kind)
                    for d, point in enumerate(points)
                    for p in range(cfg.n_ctx)
                ]
            elif kind == "terms":
                with torch.no_grad():
                    _, cache = tower.run_with_cache(task.tokens(t)[:1])
                for li in range(L):
                    names = list(attention_terms(tower, cache, li))
                    specs += [
                        S(f"{t}.L{li}.H{h}.{term}", t, f"blocks.{li}.attn.hook_attn_scores", (A, h), li, kind, h, term)
                        for h in range(H)
                        for term in names
                    ]
            found = found or any(s.kind == kind and s.tower == t for s in specs)
        if not found and strict:
            raise ValueError(
                f"no {kind!r} nodes in this target (e.g. no MLP in an attention-only tower, no learned "
                "positions with RoPE)"
            )
    return specs


# ---- exact patching of nodes ----------------------------------------------------------------------------------------
def _term_deltas(task: Task, specs: list[NodeSpec]) -> dict[str, torch.Tensor]:
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

    def __init__(self, spec: NodeSpec, value: torch.Tensor):
        self.spec, self.value = spec, value

    def __call__(self, act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.clone()
        if self.spec.kind == "terms":
            out[self.spec.idx] = out[self.spec.idx] + self.value
        else:
            out[self.spec.idx] = self.value
        return out


def _patch_fn(spec: NodeSpec, value: torch.Tensor) -> _PatchNode:
    return _PatchNode(spec, value)


def _corrupted_nodes(task: Task, nodes: Sequence[str], freeze_pattern: bool):
    """What exact patching and AtP both start from: the nodes' specs, the frozen patterns (if any), the hook points
    to cache per tower, the corrupted run's cache of them and each score term's corrupted-minus-clean value."""
    specs = node_specs(task, nodes)
    frozen = frozen_patterns(task, freeze_pattern)
    caps: dict[str, set[str]] = {}
    for s in specs:
        if s.kind != "terms":
            caps.setdefault(s.tower, set()).add(s.point)
    _, corr = run_task(task, "corrupted", caps, pre=frozen)
    return specs, frozen, caps, corr, _term_deltas(task, specs)


def exact_patching(task: Task, nodes: Sequence[str] = ("heads",), *, freeze_pattern: bool = False) -> Attribution:
    """The exact noising effect of each node (one forward pass per node): ``M(clean | n <- n(corrupted)) -
    M(clean)`` (module docstring). ``nodes``: node kinds, or node names (``node_specs``). A score term is patched by
    adding its corrupted-minus-clean value to the head's scores. ``freeze_pattern`` fixes every attention pattern at
    its clean value in every run."""
    start = time.perf_counter()
    specs, frozen, _, corr, deltas = _corrupted_nodes(task, nodes, freeze_pattern)
    base_hooks = as_hooks(frozen)
    base = task.run(base_hooks).mean()
    scores = []
    for s in specs:
        value = deltas[s.name] if s.kind == "terms" else corr[(s.tower, s.point)][s.idx]
        hooks = {t: list(h) for t, h in base_hooks.items()}
        hooks.setdefault(s.tower, []).append((s.point, _patch_fn(s, value)))
        scores.append(float(task.run(hooks).mean() - base))
    result = Attribution("exact", [s.name for s in specs], torch.tensor(scores), time.perf_counter() - start)
    result.info["noise_floor"] = task.noise_floor()  # effects below it are rounding (attribution.moved)
    return _finish(task, result, 0, freeze_pattern)


# ---- AtP and AtP* on nodes ------------------------------------------------------------------------------------------
def _node_contribs(
    task: Task,
    specs: list[NodeSpec],
    corr: Mapping,
    deltas: Mapping,
    clean: Mapping,
    grads: Mapping,
    tower: str | None,
    qk_fix: bool,
    cache: dict[str, torch.Tensor],
) -> list[torch.Tensor | None]:
    """Each node's contributions (``first_order.Contrib``): its corrupted-minus-clean value dotted with ``grads``
    (a leading axis of J gradients); for a score term, or a query / key with the QK fix, its change of the head's
    scores (or, with the QK fix, of its pattern, computed exactly once and kept in ``cache``) dotted with theirs."""
    out: list[torch.Tensor | None] = []
    for s in specs:
        if tower is not None and s.tower != tower:
            out.append(None)
            continue
        scores_key = (s.tower, f"blocks.{s.layer}.attn.hook_attn_scores")
        pat_key = (s.tower, f"blocks.{s.layer}.attn.hook_pattern")
        if s.kind not in ("terms", "q", "k") or (s.kind != "terms" and not qk_fix):
            if s.name not in cache:
                cache[s.name] = corr[(s.tower, s.point)][s.idx] - clean[(s.tower, s.point)][s.idx]
            out.append(per_row(cache[s.name] * grads[(s.tower, s.point)][(slice(None), *s.idx)]))
        elif not qk_fix:
            out.append(per_row(deltas[s.name] * grads[scores_key][:, :, s.head]))
        else:
            if s.name not in cache:
                if s.kind == "terms":
                    d_scores = deltas[s.name]
                else:
                    delta = (corr[(s.tower, s.point)] - clean[(s.tower, s.point)])[s.idx]
                    d_scores = qk_delta_scores(task, s.tower, s.layer, s.kind, s.head, delta, clean)  # type: ignore[arg-type]
                S, A = clean[scores_key][:, s.head], clean[pat_key][:, s.head]
                cache[s.name] = torch.softmax(S + d_scores, dim=-1) - A
            out.append(per_row(cache[s.name] * grads[pat_key][:, :, s.head]))
    return out


def _atp(
    task: Task, nodes: Sequence[str], qk_fix: bool, grad_drop: bool, freeze_pattern: bool, method: str, check: int
) -> Attribution:
    check_freeze(freeze_pattern, qk_fix)
    _check_n(check)
    start = time.perf_counter()
    specs, frozen, caps, corr, deltas = _corrupted_nodes(task, nodes, freeze_pattern)
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
        lin = linearisation(task, "AtP")
        g = output_grads(task, grad_caps, pre=frozen, post=post, linearise=lin, towers={s.tower for s in specs})

        cache: dict[str, torch.Tensor] = {}

        def contrib(grads: Mapping, tower: str | None) -> list[torch.Tensor | None]:
            return _node_contribs(task, specs, corr, deltas, g.clean, grads, tower, qk_fix, cache)

        return first_order_scores(task, g, contrib)

    scores = scores_with(None)
    if grad_drop:
        scores = apply_grad_drop(task, scores, [(s.tower, s.layer) for s in specs], scores_with)
    result = Attribution(method, [s.name for s in specs], scores, time.perf_counter() - start, signed=not grad_drop)
    return _finish(task, result, check, freeze_pattern)


def _check_n(check: object) -> None:
    check_int(check, "check (how many nodes to patch exactly as a check; 0: none)", minimum=0)


def _finish(task: Task, result: Attribution, check: int, freeze_pattern: bool) -> Attribution:
    if freeze_pattern:
        result.info["freeze_pattern"] = True
    if check:
        result.info["check"] = check_node_attribution(task, result, n=check)
    return result


def check_node_attribution(task: Task, result: Attribution, *, n: int = 8, seed: int = 0, warn: bool = True) -> dict:
    """The cheap check of a node attribution on ``task``: ``n`` of its nodes patched exactly (with the result's
    ``freeze_pattern``), compared and warned about (``attribution.check_against_exact``: an ``AttributionWarning``
    when the signs agree on fewer than 75 % of the moved nodes or Pearson's r < 0.5). Returns the agreement.

    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, norm="frozen")
    >>> check_node_attribution(task, atp(task), n=4)["sign_agreement"]  # heads, a metric linear in them: exact
    1.0
    """
    return check_against_exact(
        result,
        lambda names: exact_patching(task, names, freeze_pattern=result.info.get("freeze_pattern", False)),
        n=n,
        seed=seed,
        warn=warn,
    )


def atp(
    task: Task,
    nodes: Sequence[str] = ("heads",),
    *,
    qk_fix: bool | None = None,
    freeze_pattern: bool = False,
    check: int = CHECK_N,
) -> Attribution:
    """Attribution patching (AtP): ``(n(corrupted) - n(clean)) . dM/dn`` at the clean run, for every node of the
    ``nodes`` kinds or names (module docstring), from one corrupted forward pass and the clean run's gradients (one
    backward pass, or one per output coordinate under the task's ``linearise="readout"``, the default). For a score term
    the gradient is ``dM/d(scores)``. ``qk_fix`` (AtP*'s QK fix: the attention pattern after a query's, key's or score
    term's patch computed exactly, only its effect linearised) is on by default unless ``freeze_pattern`` (since
    2026-11-29: the method is then named ``"AtP+QK"``); ``qk_fix=False`` is AtP as Nanda (2023) defines it
    (``METHODS["AtP"]``). Exact wherever the metric and the path to the output are linear (``mirror_task(...,
    norm="frozen")``, heads and values of the attention-only towers without LN; with ``freeze_pattern=True`` every node
    of them). ``check=n`` patches ``n`` of the nodes exactly and warns when AtP disagrees (``check_node_attribution``;
    the agreement lands in ``info["check"]``)."""
    fix = resolve_qk_fix(qk_fix, freeze_pattern)
    return _atp(task, nodes, fix, False, freeze_pattern, "AtP+QK" if fix else "AtP", check)


def atp_star(
    task: Task,
    nodes: Sequence[str] = ("heads",),
    *,
    qk_fix: bool = True,
    grad_drop: bool = True,
    check: int = CHECK_N,
) -> Attribution:
    """AtP* (Kramár et al. 2024): AtP with the QK fix on queries, keys and score terms and with GradDrop (module
    docstring); the scores are magnitudes when ``grad_drop`` (the default; ``signed`` False, so ``check`` compares
    them with the exact effects' magnitudes). Either correction can be turned off. ``check`` as in ``atp`` (on by
    default since 2026-11-29, as the other methods' checks)."""
    name = "AtP*" if qk_fix and grad_drop else "AtP+QK" if qk_fix else "AtP+GD" if grad_drop else "AtP"
    return _atp(task, nodes, qk_fix, grad_drop, False, name, check)


__all__ = ["NODE_KINDS", "NodeSpec", "atp", "atp_star", "check_node_attribution", "exact_patching", "node_specs"]
