"""Attribution patching, what its methods build on: the ``Attribution`` result, the instrumented runs every method
makes, AtP*'s two corrections, ``linear_metric``, and the agreement of a method with exact patching (and the check
that warns when it is poor). The methods, on either tower or on the whole CLIP: ``node_attribution``
(``exact_patching``, ``atp``, ``atp_star``: heads, MLPs, neurons, embeddings, residual positions, queries / keys /
values, score terms), ``edge_attribution`` (``exact_edge_patching``, ``eap``, ``eap_ig``: the edges of
``graph.build_graph``), ``path_patching`` and ``circuits.acdc``; ``methods.METHODS`` names them all.

Every method scores a ``graph.Task`` (clean input, corrupted input, metric per example; ``graph.mirror_task`` is the
default: images against their mirrors, the logit difference of the true caption and its left/right swap). Scores are
**noising** effects on the batch-mean metric ``M``: what happens to ``M`` of the clean run when a node (or an edge)
takes its value from the corrupted run.

**What a method builds on** (public, so a new method is one function in its own module; ``methods.register_method``
adds it to the registry the benchmark iterates):

- ``run_task(task, which, capture=, pre=, post=, grad=)``: one run of every tower of the task with composite forward
  hooks (``pre`` transforms, a capture of the result, a ``post`` transform, per tower and hook point); returns the
  batch-mean metric and the captured activations. With ``grad=True`` they are in the autograd graph.
- ``grads_of(value, acts)``: ``dvalue / dact`` for each captured activation (zeros where it does not reach the value).
- ``frozen_patterns(task)``: pre-transforms that hold every attention pattern at its clean value;
  ``merge_transforms`` combines transform maps; ``as_hooks`` turns them into forward hooks for ``Task.run``.
- ``check_freeze`` / ``resolve_qk_fix`` (``qk_fix``, re-exported here): the one combination a method must refuse
  (the QK fix with frozen patterns), and ``atp``'s and ``eap``'s default (the fix on unless the patterns are frozen).
- AtP*'s corrections: ``qk_delta_scores`` (a query's or key's change as a change of its head's scores) and
  ``apply_grad_drop`` (GradDrop over the layers, from a ``scores_with(post)`` callback; ``drop_layer_posts`` is the
  ``post`` that detaches one layer).
- ``agreement(result, exact)`` and ``check_against_exact(result, exact_on)``: sign agreement, Pearson correlation and
  top-k overlap with exact patching over the items exact patching moves; the check samples a few items, patches them
  exactly and warns (``AttributionWarning``) when the method disagrees.

AtP*'s corrections (Kramár et al. 2024, Sec. 3.1), applied to nodes by ``atp_star`` and, an extension of ours
(AtP* defines them for nodes), to edges into queries and keys by ``eap(qk_fix=..., grad_drop=...)``. The QK fix is
on by default in ``atp`` and ``eap`` too (since 2026-11-29, issue 49: without it their signs agree with exact
patching on 85-95 % of the items above the floor, with it on 100 %, at the same cost); ``qk_fix=False`` gives the
methods as Nanda (2023) and Syed et al. (2023) define them (``METHODS["AtP"]``, ``METHODS["EAP"]``):

- the **QK fix** for what feeds an attention softmax directly (queries, keys, score terms; ``qk_delta_scores``):
  the attention pattern after the patch is computed exactly, and only the pattern's effect is linearised,
  ``sum_t (A'_t - A_t) . dM/dA_t``;
- **GradDrop** against cancellation (``apply_grad_drop``): with the gradient through layer ``l``'s residual
  contribution (``hook_attn_out``, ``hook_mlp_out``) dropped, ``c_l(n)`` is recomputed for each layer ``l`` other
  than the item's own, and the score is ``mean_l |c_l(n)|`` (the paper's ``1/(L-1) sum_l |c_l(n)|``; a one-layer
  tower has no other layer: ``|c(n)|``). GradDrop scores are magnitudes (``Attribution.signed`` is False).

**Exactness.** Where the metric is linear in the tower output and nothing non-linear lies between a node and the
output, AtP equals exact patching. The package's belief is a cosine by default (``norm="live"``), which is not
linear: ``graph.mirror_task(..., norm="frozen")`` (the embeddings' norms held at their clean values) or
``norm="none"`` (the pre-normalisation logit difference) are (``metrics`` module docstring). Then, in the
attention-only towers without LayerNorm, heads and values are exact, and the attention softmax is what remains:
``freeze_pattern=True`` fixes every attention pattern at its clean value (in every run a method makes), which makes
these towers linear in their embeddings, so ``atp`` and ``eap`` equal ``exact_patching`` / ``exact_edge_patching``
to float tolerance; the QK fix is exact for a score term, a query or a key when the pattern's effect is linear (a
one-layer attention-only tower without LN, linear metric). The tests check each.

Example:
    >>> scores = Attribution("AtP", ["vision.L0.H0", "vision.L0.H1"], torch.tensor([0.5, -2.0]))
    >>> scores.ranked(1), scores["vision.L0.H0"]
    ([('vision.L0.H1', -2.0)], 0.5)
"""

from __future__ import annotations

import operator
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from jaxtyping import Float
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.circuits.qk_fix import check_freeze, remedy_for, resolve_qk_fix  # noqa: F401 (re-exported)
from hooked_clip1d.analysis.circuits.task import Task
from hooked_clip1d.analysis.hooks import Hook
from hooked_clip1d.analysis.interventions.decompose import rotate
from hooked_clip1d.analysis.metrics import held_norms
from hooked_clip1d.settings.checks import check_int


# ---- results --------------------------------------------------------------------------------------------------------
@dataclass
class Attribution:
    """Scores of one method: ``names`` (nodes, or edges ``"writer->port"``) and ``scores`` [n] (estimated or exact
    change of the batch-mean metric; magnitudes for AtP*, ``signed=False``), with the method's wall time in
    ``seconds``."""

    method: str
    names: list[str]
    scores: torch.Tensor
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    #: False where the scores are magnitudes (AtP* with GradDrop, ACDC): no sign to compare
    signed: bool = True

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
        if k is not None:
            if isinstance(k, bool) or not hasattr(k, "__index__"):
                raise TypeError(f"ranked(k): k must be an int >= 0 (how many to list) or None (all), got {k!r}")
            k = operator.index(k)
            if k < 0:
                raise ValueError(f"ranked(k): k must be an int >= 0 (how many to list) or None (all), got {k!r}")
        key = self.scores.abs() if by_abs else self.scores
        order = torch.argsort(key, descending=True, stable=True).tolist()
        return [(self.names[i], float(self.scores[i])) for i in order[:k]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: method, seconds and the scores by name."""
        return {"method": self.method, "seconds": self.seconds, "scores": self.as_dict(), **self.info}

    def subset(self, names: Sequence[str]) -> Attribution:
        """The scores of ``names`` only (in that order).

        >>> Attribution("x", ["a", "b"], torch.tensor([1.0, 2.0])).subset(["b"]).as_dict()
        {'b': 2.0}
        """
        missing = [n for n in names if n not in self.names]
        if missing:
            raise KeyError(f"{missing[:3]} are not scored by {self.method}")
        idx = torch.tensor([self.names.index(n) for n in names], dtype=torch.long)
        return Attribution(self.method, list(names), self.scores[idx], self.seconds, dict(self.info), self.signed)


# ---- runs -----------------------------------------------------------------------------------------------------------
#: an activation -> activation map applied inside a forward hook
Transform = Callable[[torch.Tensor], torch.Tensor]
#: transforms per tower and hook point (``{"vision": {"blocks.0.attn.hook_pattern": [f, ...]}}``)
Transforms = Mapping[str, Mapping[str, Sequence[Transform]]]


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


def _leaf(a: torch.Tensor) -> torch.Tensor:
    return a.detach().requires_grad_(True)


def run_task(
    task: Task,
    which: Literal["clean", "corrupted"] = "clean",
    capture: Mapping[str, set[str]] | None = None,
    pre: Transforms | None = None,
    post: Mapping[str, Mapping[str, Transform]] | None = None,
    grad: bool = False,
    linearise: str = "live",
    pooled: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[tuple[str, str], torch.Tensor]]:
    """Run every tower of ``task`` on its ``which`` input with composite hooks: at each hook point, the ``pre``
    transforms of that tower and point in order, then the ``capture`` (points per tower), then the ``post``
    transform. Return the batch-mean metric and the captured activations by (tower, point). With ``grad`` the
    embeddings become leaves that require grad, so activations downstream are in the autograd graph (whatever the
    parameters' ``requires_grad``), ready for ``grads_of``; ``linearise="held"`` holds the embeddings' norms out of
    that graph (``graph.Task``; the value is the same). A dict given as ``pooled`` receives each tower's pooled
    output (in the graph with ``grad``; ``output_grads`` differentiates it).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap, target="vision")
    >>> value, acts = run_task(task, capture={"vision": {"blocks.0.attn.hook_z"}}, grad=True)
    >>> acts[("vision", "blocks.0.attn.hook_z")].shape, grads_of(value, acts)[("vision", "blocks.0.attn.hook_z")].shape
    (torch.Size([1, 11, 4, 32]), torch.Size([1, 11, 4, 32]))
    """
    captured: dict[tuple[str, str], torch.Tensor] = {}
    outs: dict[str, torch.Tensor] = {}
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        for t, tower in task.towers.items():
            pre_t = {k: list(v) for k, v in (pre or {}).get(t, {}).items()}
            if grad:
                for point in ("hook_embed", "hook_pos_embed"):
                    if point in tower.hook_dict:
                        pre_t.setdefault(point, []).append(_leaf)
            post_t = dict((post or {}).get(t, {}))
            cap_t = set((capture or {}).get(t, set()))
            hooks = []
            for point in dict.fromkeys([*pre_t, *post_t, *cap_t]):
                keep = (lambda a, key=(t, point): captured.__setitem__(key, a)) if point in cap_t else None
                hooks.append((point, _Composite(pre_t.get(point, []), keep, post_t.get(point))))
            outs[t] = tower.run_with_hooks(task.tokens(t, which), fwd_hooks=hooks)
        with held_norms(grad and linearise == "held"):  # the value is the same either way
            value = task.metric_of(outs).mean()
    if pooled is not None:
        pooled.update(outs)
    return value, captured


def grads_of(value: torch.Tensor, acts: Mapping[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
    """``d value / d act`` for each activation of ``acts`` (detached; zeros where ``act`` does not reach ``value``
    or is not in the autograd graph).

    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> grads_of((3 * x).sum(), {"x": x, "y": torch.ones(1)})
    {'x': tensor([3., 3.]), 'y': tensor([0.])}
    """
    keys = [k for k, a in acts.items() if a.requires_grad]
    got = torch.autograd.grad(value, [acts[k] for k in keys], allow_unused=True) if keys else []
    out = {k: torch.zeros_like(a) for k, a in acts.items()}
    for k, g in zip(keys, got, strict=True):
        if g is not None:
            out[k] = g.detach()
    return out


def frozen_patterns(task: Task, freeze_pattern: bool = True) -> dict[str, dict[str, list[Transform]]]:
    """Pre-transforms that replace every attention pattern of every tower by its value on the clean run (``{}``
    when ``freeze_pattern`` is False), for ``run_task(pre=...)`` or, through ``as_hooks``, ``Task.run``.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> list(frozen_patterns(mirror_task(m, img, cap))["vision"])
    ['blocks.0.attn.hook_pattern']
    """
    if not freeze_pattern:
        return {}
    caps = {t: {f"blocks.{li}.attn.hook_pattern" for li in range(tw.cfg.n_layers)} for t, tw in task.towers.items()}
    _, clean = run_task(task, capture=caps)
    return {t: {p: [lambda a, v=clean[(t, p)].detach(): v] for p in pts} for t, pts in caps.items()}


def merge_transforms(*parts: Transforms) -> dict[str, dict[str, list[Transform]]]:
    """One transform map from several: per tower and hook point, the transforms of each part in order.

    >>> merged = merge_transforms({"vision": {"hook_embed": [abs]}}, {"vision": {"hook_embed": [float]}})
    >>> merged["vision"]["hook_embed"] == [abs, float]
    True
    """
    out: dict[str, dict[str, list[Transform]]] = {}
    for part in parts:
        for t, by_point in part.items():
            for p, fs in by_point.items():
                out.setdefault(t, {}).setdefault(p, []).extend(fs)
    return out


def as_hooks(pre: Transforms) -> dict[str, list[Hook]]:
    """Forward hooks per tower (for ``Task.run`` and ``graph.run_with_edges(extra_hooks=...)``) that apply the
    transforms of ``pre``.

    >>> hooks = as_hooks({"vision": {"blocks.0.attn.hook_pattern": [lambda a: a]}})
    >>> [name for name, _ in hooks["vision"]]
    ['blocks.0.attn.hook_pattern']
    """
    return {t: [(p, _Composite(fs, None, None)) for p, fs in by_point.items()] for t, by_point in pre.items()}


def drop_layer_posts(task: Task, tower: str, layer: int) -> dict[str, dict[str, Transform]]:
    """GradDrop's ``post`` transforms: detach block ``layer``'s residual contributions of ``tower`` (its
    ``hook_attn_out`` and ``hook_mlp_out``), so no gradient flows through them; forward values are unchanged.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> list(drop_layer_posts(mirror_task(m, img, cap), "vision", 0)["vision"])
    ['blocks.0.hook_attn_out']
    """
    cfg = task.towers[tower].cfg
    points = [f"blocks.{layer}.hook_attn_out"] + ([] if cfg.attn_only else [f"blocks.{layer}.hook_mlp_out"])
    return {tower: {p: (lambda a: a.detach()) for p in points}}


# ---- AtP*'s corrections ---------------------------------------------------------------------------------------------
def qk_delta_scores(
    task: Task,
    tower_name: str,
    layer: int,
    kind: Literal["q", "k"],
    head: int,
    delta: Float[torch.Tensor, "batch pos d_head"],
    clean: Mapping[tuple[str, str], torch.Tensor],
) -> Float[torch.Tensor, "batch query key"]:
    """Change of head ``head``'s scores [batch, query, key] in block ``layer`` of tower ``tower_name`` when its query
    (``kind="q"``) or key (``"k"``) vectors change by ``delta`` [batch, pos, d_head] (before RoPE), all else clean.
    ``clean`` holds the clean run's (rotated, with RoPE) queries and keys by (tower, hook point), as ``run_task``
    captures them.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap, target="vision")
    >>> _, clean = run_task(task, capture={"vision": {"blocks.0.attn.hook_k"}})
    >>> qk_delta_scores(task, "vision", 0, "q", 2, torch.ones(1, 11, 32), clean).shape
    torch.Size([1, 11, 11])
    """
    tower = task.towers[tower_name]
    rot = "hook_rot_" if tower.cfg.positional == "rope" else "hook_"
    other = clean[(tower_name, f"blocks.{layer}.attn.{rot}{'k' if kind == 'q' else 'q'}")][:, :, head]
    d = rotate(tower, layer, delta[:, :, None])[:, :, 0]
    prod = d @ other.transpose(-1, -2) if kind == "q" else other @ d.transpose(-1, -2)
    return prod / tower.cfg.attn_scale


def apply_grad_drop(
    task: Task,
    plain: torch.Tensor,
    where: Sequence[tuple[str, int]],
    scores_with: Callable[[Mapping | None], torch.Tensor],
) -> torch.Tensor:
    """AtP*'s GradDrop: for item ``i`` at (tower, layer) ``where[i]``, the mean over the layers ``l`` of its tower
    other than its own of ``|c_l(i)|``, where ``c_l = scores_with(drop_layer_posts(task, tower, l))`` is every
    item's score with block ``l``'s residual contributions detached; ``|plain|`` where there is no other layer.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap, target="vision")
    >>> apply_grad_drop(task, torch.tensor([-2.0]), [("vision", 0)], lambda post: torch.zeros(1))  # one layer
    tensor([2.])
    """
    total = torch.zeros_like(plain)
    count = torch.zeros_like(plain)
    for t, tower in task.towers.items():
        for layer in range(tower.cfg.n_layers):
            mask = torch.tensor([wt == t and wl != layer for wt, wl in where])
            if not bool(mask.any()):
                continue
            dropped = scores_with(drop_layer_posts(task, t, layer))
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

    metric.linear_in_output = True  # type: ignore[attr-defined]  # first_order: readout is exact
    return metric


# ---- agreement with exact patching ----------------------------------------------------------------------------------
class AttributionWarning(UserWarning):
    """An attribution method disagrees with exact patching on a sample of its items (``check_against_exact``)."""


#: below this share of matching signs (on the items exact patching moves), ``check_against_exact`` warns
MIN_SIGN_AGREEMENT = 0.75
# items a first-order method patches exactly as its default check (a warning when they disagree; ~0.1 s on the zoo's
# models); check=0 turns it off
CHECK_N = 8
#: below this Pearson correlation with exact patching, ``check_against_exact`` warns
MIN_PEARSON = 0.5


def moved(exact: Attribution, rel: float = 1e-6) -> torch.Tensor:
    """Which items exact patching moves: ``|exact| > rel * max |exact|`` and above the task's float resolution
    ``exact.info["noise_floor"]`` (``Task.noise_floor``; set by exact patching) where given. An item whose writer
    or node is the same on the clean and corrupted inputs, e.g. ``pos`` under a mirror, has an effect of exactly 0,
    and so has every method's score of it: no method can score it; one below the floor has a sign set by rounding.

    >>> moved(Attribution("exact", ["a", "b", "c"], torch.tensor([2.0, 0.0, -1.0]))).tolist()
    [True, False, True]
    """
    mag = exact.scores.abs()
    floor = float(exact.info.get("noise_floor", 0.0))
    return mag > max(rel * float(mag.max()), floor) if len(mag) else mag > 0


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson's correlation of two 1-D tensors (NaN when either is constant or has fewer than 2 values).

    >>> round(pearson(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([2.0, 4.0, 8.0])), 6)
    1.0
    """
    a, b = a.double().flatten(), b.double().flatten()
    if a.numel() < 2:
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    denom = a.norm() * b.norm()
    return float((a * b).sum() / denom) if float(denom) > 0 else float("nan")


def top_k_overlap(a: torch.Tensor, b: torch.Tensor, k: int) -> float:
    """The share of the ``k`` largest ``|a|`` that are among the ``k`` largest ``|b|`` (ties broken by order).

    >>> top_k_overlap(torch.tensor([3.0, -2.0, 0.1]), torch.tensor([1.0, 0.0, -5.0]), k=2)
    0.5
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, a.numel())
    ta = set(torch.argsort(a.abs(), descending=True, stable=True)[:k].tolist())
    tb = set(torch.argsort(b.abs(), descending=True, stable=True)[:k].tolist())
    return len(ta & tb) / k if k else float("nan")


def agreement(result: Attribution, exact: Attribution, k: int | None = None) -> dict[str, Any]:
    """How well ``result`` matches ``exact`` (exact patching of the same items, same task and metric), over the items
    exact patching moves (``moved``; the others every method scores 0):

    - ``sign_agreement``: the share of them whose score has the exact effect's sign (None for magnitudes,
      ``result.signed`` False);
    - ``pearson``: Pearson's correlation of the scores with the exact effects (with ``|exact|`` for magnitudes);
    - ``top_k_overlap``: the share of the ``k`` largest ``|score|`` among the ``k`` largest ``|exact|`` (default
      ``k = min(10, n)``);
    - ``weighted_sign_agreement``: the same share weighted by ``|exact|`` (are the large effects right? small ones
      are where a sign is easiest to miss and matters least);
    - ``n`` (moved items), ``k``, ``n_unmoved`` (items exact patching does not move, or by less than its floor).

    >>> ex = Attribution("exact", ["a", "b", "c", "d"], torch.tensor([2.0, -1.0, 0.5, 0.0]))
    >>> est = Attribution("AtP", ["a", "b", "c", "d"], torch.tensor([1.5, 0.3, 0.4, 0.0]))
    >>> out = agreement(est, ex, k=1)
    >>> out["sign_agreement"], out["n"], out["top_k_overlap"]
    (0.6666666666666666, 3, 1.0)
    """
    missing = [n for n in exact.names if n not in result.names]
    if missing:
        raise ValueError(f"{result.method} does not score {missing[:3]}, which exact patching scored")
    e = exact.scores.double()
    r = result.subset(exact.names).scores.double()
    keep = moved(exact)
    e, r = e[keep], r[keep]
    n = int(keep.sum())
    k = min(10, n) if k is None else min(k, n)
    target = e if result.signed else e.abs()
    match = (torch.sign(r) == torch.sign(e)).double()
    return {
        "n": n,
        "n_unmoved": int((~keep).sum()),
        "sign_agreement": (float(match.mean()) if n else float("nan")) if result.signed else None,
        "weighted_sign_agreement": (float((match * e.abs()).sum() / e.abs().sum()) if n else float("nan"))
        if result.signed
        else None,
        "pearson": pearson(r, target),
        "top_k_overlap": top_k_overlap(r, e, k) if k >= 1 else float("nan"),
        "k": k,
    }


def sample_names(result: Attribution, n: int, seed: int = 0) -> list[str]:
    """``n`` of ``result``'s names to check: the ``ceil(n / 2)`` largest ``|score|`` (the ones a user acts on) and the
    rest drawn at random from the others (a generator seeded with ``seed``; the global RNG is untouched), in
    ``result``'s order; all of them when ``n`` covers them.

    >>> names = sample_names(Attribution("x", ["a", "b", "c", "d"], torch.tensor([0.1, 5.0, -3.0, 0.2])), 3)
    >>> len(names), {"b", "c"} <= set(names)  # the two largest, one of the others
    (3, True)
    """
    n = check_int(n, "n (items to check)")
    if n >= len(result.names):
        return list(result.names)
    order = torch.argsort(result.scores.abs(), descending=True, stable=True)
    top = order[: (n + 1) // 2]
    rest = order[(n + 1) // 2 :]
    drawn = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed))[: n - len(top)]]
    chosen = set(top.tolist()) | set(drawn.tolist())
    return [name for i, name in enumerate(result.names) if i in chosen]


def check_against_exact(
    result: Attribution,
    exact_on: Callable[[list[str]], Attribution],
    *,
    n: int = 8,
    seed: int = 0,
    min_sign_agreement: float = MIN_SIGN_AGREEMENT,
    min_pearson: float = MIN_PEARSON,
    warn: bool = True,
) -> dict[str, Any]:
    """The cheap check: patch ``n`` of ``result``'s items exactly (``sample_names``; ``exact_on(names)`` returns
    their exact ``Attribution``), compare (``agreement``) and, when the signs agree on fewer than
    ``min_sign_agreement`` of the moved items or Pearson's correlation is below ``min_pearson``, warn
    (``AttributionWarning``, with the worst item, the wrong-signed one of largest exact effect where any is, and
    what to try). Returns the agreement with ``poor`` (bool),
    ``sample`` and ``worst`` (name, score, exact effect) added. ``methods.check_attribution`` calls it with the
    right exact method for a node or edge result.

    >>> est = Attribution("AtP", ["a", "b", "c"], torch.tensor([1.0, 2.0, 3.0]))
    >>> exact = lambda names: Attribution("exact", names, -torch.ones(len(names)))
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     out = check_against_exact(est, exact)
    >>> out["poor"], out["sign_agreement"], caught[0].category.__name__
    (True, 0.0, 'AttributionWarning')
    """
    names = sample_names(result, n, seed)
    exact = exact_on(names)
    if exact.names != names:
        raise ValueError(f"exact_on returned scores of {exact.names[:3]}..., not of the {len(names)} sampled names")
    out = agreement(result, exact, k=(len(names) + 1) // 2)
    sign, rho = out["sign_agreement"], out["pearson"]
    poor = out["n"] > 0 and ((sign is not None and sign < min_sign_agreement) or (rho == rho and rho < min_pearson))
    mine = result.subset(names).scores
    keep = moved(exact)
    worst = None
    if out["n"]:
        target = exact.scores if result.signed else exact.scores.abs()
        wrong = keep & (torch.sign(mine) != torch.sign(target)) if result.signed else torch.zeros_like(keep)
        # the worst item: the largest exact effect given the wrong sign, else the largest gap (a sample whose signs
        # all agree is poor by Pearson alone)
        gap = (
            torch.where(wrong, exact.scores.abs(), -1.0)
            if bool(wrong.any())
            else torch.where(keep, (mine - target).abs(), -1.0)
        )
        i = int(gap.argmax())
        worst = (names[i], float(mine[i]), float(exact.scores[i]))
    out.update(poor=bool(poor), sample=names, worst=worst)
    if poor and warn:
        what = (
            f"signs agree on {sign:.0%} of the {out['n']} items it moves"
            if sign is not None
            else f"{out['n']} items moved"
        )
        warnings.warn(
            AttributionWarning(
                f"{result.method} disagrees with exact patching on a sample of {len(names)} of its {len(result.names)} "
                f"items: {what}, Pearson {rho:.2f} (thresholds: signs {min_sign_agreement:.0%}, Pearson "
                f"{min_pearson}); worst {worst[0]}: {result.method} {worst[1]:+.3g}, exact {worst[2]:+.3g}. A "
                "first-order estimate is wrong where the metric or the path is non-linear: linearise the towers "
                "only (mirror_task(..., linearise='readout'), AtP's and EAP's default), "
                + remedy_for(result.method)
                + "a metric linear in the output (mirror_task(..., norm='frozen')), or exact patching"
            ),
            stacklevel=_user_level(sys._getframe(1)),
        )
    return out


def _user_level(frame: Any) -> int:
    """``warnings.warn``'s ``stacklevel`` that names the first frame outside the package (the user's call), given
    the frame at level 2 (the caller of the function that warns); type checkers' wrappers around the package's
    functions (jaxtyping, beartype) count as the package."""
    level = 2
    inside = ("hooked_clip1d.", "jaxtyping", "beartype")
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


__all__ = [
    "MIN_PEARSON",
    "MIN_SIGN_AGREEMENT",
    "Attribution",
    "AttributionWarning",
    "Transform",
    "Transforms",
    "agreement",
    "apply_grad_drop",
    "as_hooks",
    "check_against_exact",
    "check_freeze",
    "drop_layer_posts",
    "frozen_patterns",
    "grads_of",
    "linear_metric",
    "merge_transforms",
    "moved",
    "pearson",
    "qk_delta_scores",
    "run_task",
    "sample_names",
    "top_k_overlap",
]
