"""First-order scores under a linearisation (``graph.Task.linearise``): the gradients a first-order method dots with
its differences (``output_grads``) and the scores they give (``first_order_scores``), for AtP, EAP and EAP-IG alike.

Under ``"live"`` and ``"held"`` a method's score of an item is its difference dotted with the gradient of the
batch-mean metric. Under ``"readout"`` the towers alone are linearised: each item's change of every tower output is
its difference dotted with the gradients of that output's coordinates (one backward pass per coordinate), and CLIP's
head after the towers (norms, cosine, temperature, metric) is evaluated exactly on the moved outputs. So on the
attention-only towers without LN a head's or a value's score is exact under CLIP's cosine, and with the QK fix a
query's, key's or score term's on one-layer towers; what stays first-order is the path inside the towers. Its cost is
one backward pass per output coordinate of each tower holding items (d_model = 128 on the zoo's models: ~1 s per
tower at batch 100 on one CPU thread), not one per item: cheaper than exact patching (one forward pass per item) once
the items outnumber those coordinates (2 x 128 on the whole CLIP); ``linearise="held"`` costs one backward pass.

Example:
    >>> from hooked_clip1d import load_model
    >>> from hooked_clip1d.analysis.circuits.node_attribution import atp, exact_patching
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 18 . . . . . . . 20 ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "18 is on the left of 20"])
    >>> task = mirror_task(m, imgs, caps, linearise="readout")  # CLIP's cosine, the towers linearised
    >>> bool(torch.allclose(atp(task, check=0).scores, exact_patching(task).scores, atol=1e-4))  # heads: exact
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from hooked_clip1d.analysis.circuits.attribution import Transform, Transforms, grads_of, run_task
from hooked_clip1d.analysis.circuits.task import Task

#: a method's contributions: ``contrib(grads, tower)`` -> one tensor [J, rows] per item (``None`` for an item outside
#: ``tower``; every item when ``tower`` is None), each the item's difference dotted with ``grads`` (by (tower, point),
#: each with a leading axis of J gradients) and summed over everything but that axis and the rows (examples)
Contrib = Callable[[Mapping[tuple[str, str], torch.Tensor], "str | None"], list["torch.Tensor | None"]]


@dataclass
class OutputGrads:
    """The gradients a first-order method dots with its differences, from one instrumented clean run
    (``output_grads``), and ``clean``, the captured clean activations. Under ``"live"`` / ``"held"``,
    ``by_tower[None]`` holds those of the batch-mean metric (a leading axis of 1). Under ``"readout"`` they are those
    of each coordinate ``j`` of each tower ``t``'s pooled output summed over the rows: ``columns(t)`` yields them one
    coordinate at a time from the run's graph (``towers`` names the towers), and ``materialised()`` stacks them into
    ``by_tower[t]`` (a leading axis of ``d``; EAP-IG averages them over its path)."""

    linearise: str
    by_tower: dict[str | None, dict[tuple[str, str], torch.Tensor]]
    clean: dict[tuple[str, str], torch.Tensor]
    #: readout before materialising: each tower's pooled output and the captured activations, in the graph
    graph: tuple[dict[str, torch.Tensor], dict[tuple[str, str], torch.Tensor]] | None = field(default=None, repr=False)

    @property
    def towers(self) -> list[str]:
        """The towers whose output coordinates have gradients here (readout)."""
        return list(self.graph[0]) if self.graph is not None else [t for t in self.by_tower if t is not None]

    def columns(self, tower: str) -> Iterator[dict[tuple[str, str], torch.Tensor]]:
        """Readout: ``d pooled[:, j].sum() / d act`` for each coordinate ``j`` of ``tower``'s output in turn, each with
        a leading axis of 1 (zeros where an activation does not reach it): one backward pass per coordinate (on the
        zoo's models 3-4x faster than ``is_grads_batched``; tiling the batch is no faster), nothing [d, ...] held."""
        if self.graph is None:
            stacked = self.by_tower[tower]
            d = next(iter(stacked.values())).shape[0] if stacked else 0
            for j in range(d):
                yield {k: v[j : j + 1] for k, v in stacked.items()}
            return
        pooled, acts = self.graph
        out = pooled[tower]
        keys = [k for k, a in acts.items() if a.requires_grad]
        zeros = {k: torch.zeros_like(a)[None] for k, a in acts.items()}
        for j in range(out.shape[-1]):
            got = torch.autograd.grad(out[:, j].sum(), [acts[k] for k in keys], retain_graph=True, allow_unused=True)
            col = dict(zeros)
            for k, g in zip(keys, got, strict=True):
                if g is not None:
                    col[k] = g.detach()[None]
            yield col

    def materialised(self) -> OutputGrads:
        """These gradients with every tower's columns stacked into ``by_tower`` (the graph released)."""
        if self.graph is None:
            return self
        by: dict[str | None, dict[tuple[str, str], torch.Tensor]] = {}
        for t in self.towers:
            cols = list(self.columns(t))
            by[t] = {k: torch.cat([c[k] for c in cols]) for k in cols[0]} if cols else {}
        return OutputGrads(self.linearise, by, self.clean)

    @staticmethod
    def mean(parts: Iterable[OutputGrads]) -> OutputGrads:
        """The average of several runs' gradients (EAP-IG's integral; summed as they come, so a generator holds one
        run at a time), with the first run's captured activations as ``clean`` (on EAP-IG's path that run is not the
        clean input; nothing reads them there: the QK fix, their one reader, is refused with ``steps``).

        >>> g = OutputGrads("live", {None: {("v", "x"): torch.ones(1, 2)}}, {})
        >>> OutputGrads.mean([g, g]).by_tower[None][("v", "x")].tolist()
        [[1.0, 1.0]]
        """
        first: OutputGrads | None = None
        n = 0
        for part in parts:
            p = part.materialised()
            if first is None:
                first = OutputGrads(p.linearise, {t: dict(g) for t, g in p.by_tower.items()}, p.clean)
            else:
                for t, g in p.by_tower.items():
                    for k, v in g.items():
                        first.by_tower[t][k] = first.by_tower[t][k] + v
            n += 1
        if first is None:
            raise ValueError("no gradients to average")
        first.by_tower = {t: {k: v / n for k, v in g.items()} for t, g in first.by_tower.items()}
        return first


def output_grads(
    task: Task,
    capture: Mapping[str, set[str]],
    pre: Transforms | None = None,
    post: Mapping[str, Mapping[str, Transform]] | None = None,
    linearise: str = "live",
    towers: Iterable[str] | None = None,
) -> OutputGrads:
    """One instrumented clean run of ``task`` (``run_task`` with ``grad=True``) and the gradients a first-order method
    needs under ``linearise`` (``OutputGrads``; ``graph.Task.linearise``): of the batch-mean metric (``"live"``,
    ``"held"``), or of every coordinate of each tower's pooled output (``"readout"``: the towers linearised, CLIP's
    head after them, norms and cosine included, evaluated exactly by ``first_order_scores``; ``towers``: the towers
    whose outputs to differentiate, default all: one backward pass per coordinate of each, taken as they are read).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> g = output_grads(mirror_task(m, img, cap), {"vision": {"blocks.0.attn.hook_z"}}, linearise="readout")
    >>> g.towers, g.materialised().by_tower["vision"][("vision", "blocks.0.attn.hook_z")].shape  # d_model of them
    (['vision', 'text'], torch.Size([128, 1, 11, 4, 32]))
    """
    pooled: dict[str, torch.Tensor] = {}
    value, acts = run_task(task, capture=capture, pre=pre, post=post, grad=True, linearise=linearise, pooled=pooled)
    clean = {k: a.detach() for k, a in acts.items()}
    if linearise != "readout" or task.linear_in_outputs():  # a metric linear in the outputs: readout is its gradient
        return OutputGrads(linearise, {None: {k: g[None] for k, g in grads_of(value, acts).items()}}, clean)
    keep = {t: p for t, p in pooled.items() if towers is None or t in set(towers)}
    return OutputGrads(linearise, {}, clean, graph=(keep, acts))


def per_row(x: torch.Tensor) -> torch.Tensor:
    """``x`` [J, rows, ...] summed over everything after the rows: [J, rows] (a contribution, ``Contrib``).

    >>> per_row(torch.ones(2, 3, 4, 5)).shape
    torch.Size([2, 3])
    """
    return x.reshape(x.shape[0], x.shape[1], -1).sum(-1)


def first_order_scores(task: Task, grads: OutputGrads, contrib: Contrib) -> torch.Tensor:
    """Each item's first-order score from its contributions (``Contrib``) under ``grads``' linearisation: the sum
    of its contributions to the batch-mean metric (``"live"``, ``"held"``, and ``"readout"`` where the metric is
    linear in the outputs, ``Task.linear_in_outputs``: the same number), or, under ``"readout"``, the exact
    change of the batch-mean metric when each tower's clean pooled output moves by the item's linearised change of it
    (the sum over its contributions per coordinate).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.circuits.task import mirror_task
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap)
    >>> g = OutputGrads("live", {None: {("v", "x"): torch.full((1, 2, 3), 0.5)}}, {})
    >>> first_order_scores(task, g, lambda gr, t: [per_row(gr[("v", "x")] * 2.0)]).tolist()  # 6 of 0.5 * 2
    [6.0]
    """
    if None in grads.by_tower:  # the batch-mean metric's gradient
        return torch.tensor([float(c.sum()) for c in contrib(grads.by_tower[None], None)])  # type: ignore[union-attr]
    base_pooled = task.clean_pooled()
    moves: dict[int, dict[str, torch.Tensor]] = {}
    n = 0
    for t in grads.towers:
        cols = [contrib(g, t) for g in grads.columns(t)]  # per coordinate: [1, rows] per item
        n = len(cols[0]) if cols else n
        for i in range(n):
            if cols[0][i] is not None:
                moves.setdefault(i, {})[t] = torch.cat([c[i] for c in cols]).T  # type: ignore[misc]  # [rows, d]
    with torch.no_grad():
        base = task.metric_of(base_pooled).mean()
        out = torch.zeros(n)
        for i, by_t in moves.items():
            pooled = {t: p + by_t[t] if t in by_t else p for t, p in base_pooled.items()}
            out[i] = task.metric_of(pooled).mean() - base
    return out


__all__ = ["Contrib", "OutputGrads", "first_order_scores", "output_grads", "per_row"]
