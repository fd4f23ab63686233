"""Attribution patching, the parts its methods share: the ``Attribution`` result, the instrumented runs every method
makes, AtP*'s two corrections, and ``linear_metric``. The methods, on either tower or on the whole CLIP:
``node_attribution`` (``exact_patching``, ``atp``, ``atp_star``: heads, MLPs, neurons, embeddings, residual
positions, queries / keys / values, score terms) and ``edge_attribution`` (``exact_edge_patching``, ``eap``,
``eap_ig``: the edges of ``graph.build_graph``).

Every method scores a ``graph.Task`` (clean input, corrupted input, metric per example; ``graph.mirror_task`` is the
default: images against their mirrors, the logit difference of the true caption and its left/right swap). Scores are
**noising** effects on the batch-mean metric ``M``: what happens to ``M`` of the clean run when a node (or an edge)
takes its value from the corrupted run.

AtP*'s corrections (Kramár et al. 2024, Sec. 3.1), applied to nodes by ``atp_star`` and, an extension of ours
(AtP* defines them for nodes), to edges into queries and keys by ``eap(qk_fix=..., grad_drop=...)``:

- the **QK fix** for what feeds an attention softmax directly (queries, keys, score terms; ``_qk_delta_scores``):
  the attention pattern after the patch is computed exactly, and only the pattern's effect is linearised,
  ``sum_t (A'_t - A_t) . dM/dA_t``;
- **GradDrop** against cancellation (``_grad_drop``): with the gradient through layer ``l``'s residual contribution
  (``hook_attn_out``, ``hook_mlp_out``) dropped, ``c_l(n)`` is recomputed for each layer ``l`` other than the
  item's own, and the score is ``mean_l |c_l(n)|`` (the paper's ``1/(L-1) sum_l |c_l(n)|``; a one-layer tower has
  no other layer: ``|c(n)|``). GradDrop scores are magnitudes.

**Exactness.** Where the metric is linear in the tower output and nothing non-linear lies between a node and the
output, AtP equals exact patching: ``freeze_pattern=True`` fixes every attention pattern at its clean value (in
every run a method makes), which makes the attention-only towers without LayerNorm linear in their embeddings, so
``atp`` and ``eap`` then equal ``exact_patching`` / ``exact_edge_patching`` to float tolerance. The QK fix is exact
for a score term, a query or a key when the pattern's effect is linear (a one-layer attention-only tower without
LN, linear metric). The tests check both.

Example:
    >>> scores = Attribution("AtP", ["vision.L0.H0", "vision.L0.H1"], torch.tensor([0.5, -2.0]))
    >>> scores.ranked(1), scores["vision.L0.H0"]
    ([('vision.L0.H1', -2.0)], 0.5)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.decompose import rotate
from hooked_clip1d.analysis.graph import Task
from hooked_clip1d.analysis.hooks import Hook


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


# ---- AtP*'s corrections ---------------------------------------------------------------------------------------------
def _qk_delta_scores(
    task: Task, tower_name: str, layer: int, kind: str, head: int, delta: torch.Tensor, clean: Mapping
) -> torch.Tensor:
    """Change of head ``head``'s scores [batch, query, key] in block ``layer`` of tower ``tower_name`` when its query
    (``kind="q"``) or key (``"k"``) vectors change by ``delta`` [batch, pos, d_head] (before RoPE), all else clean."""
    tower = task.towers[tower_name]
    rot = "hook_rot_" if tower.cfg.positional == "rope" else "hook_"
    other = clean[(tower_name, f"blocks.{layer}.attn.{rot}{'k' if kind == 'q' else 'q'}")][:, :, head]
    d = rotate(tower, layer, delta[:, :, None])[:, :, 0]
    prod = d @ other.transpose(-1, -2) if kind == "q" else other @ d.transpose(-1, -2)
    return prod / tower.cfg.attn_scale


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


def linear_metric(direction: Float[torch.Tensor, " d"]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A metric linear in a tower's pooled output, ``pooled @ direction`` (for exactness checks: with it and frozen
    patterns, AtP equals exact patching on the attention-only towers without LN).

    >>> linear_metric(torch.tensor([1.0, -1.0]))(torch.tensor([[3.0, 1.0]])).tolist()
    [2.0]
    """

    def metric(pooled: torch.Tensor) -> torch.Tensor:
        return pooled @ direction.to(pooled.dtype)

    return metric


__all__ = ["Attribution", "linear_metric"]
