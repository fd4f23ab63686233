"""A patching task: what every circuit-discovery method scores (``Task``: the target, clean and corrupted inputs, a
metric per example), how the first-order methods linearise its metric (``linearisation``), and the package's
default task (``mirror_task``: two-object images against their mirrors, the belief in the true caption over its
left/right swap). The graph the methods score on is ``analysis.circuits.graph``.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap)
    >>> task.clean_metric().shape, linearisation(task, "AtP"), linearisation(task, "EAP-IG")
    (torch.Size([1]), 'readout', 'live')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.circuits.graph import (
    Edge,
    Inputs,
    Target,
    build_graph,
    edge_name,
    edge_set,
    parse_node,
    port_hook,
    towers_of,
    writer_hook,
)
from hooked_clip1d.analysis.hooks import Hook, check_eval
from hooked_clip1d.analysis.metrics import (
    NORMS,
    check_captions_describe,
    check_model,
    check_pair_captions,
    check_pair_images,
    mirror_images,
    normalize,
    swap_captions,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder

#: how first-order methods differentiate a task's metric (``Task.linearise``), and each method's own choice where the
#: task names none. Measured (benchmarks/attribution_signs.py, 2026-11-29) on the flagship and -no-qk-bias, signs of
#: the items above 5 % of the largest exact effect: AtP readout 32/34 and 29/33 (held 27/34, 26/33; live 30/34,
#: 11/33), with the QK fix 34/34 and 33/33; EAP readout 15/16 and 11/13 (held 13/16, 10/13), with the QK fix 16/16
#: and 13/13; EAP-IG live 16/16 and 11/13, readout 14/16 and 13/13 at 5-20x the time (one backward pass per output
#: coordinate at each of its steps): live stays its default. Held-out models: docs/analyses.md
LINEARISE = ("held", "live", "readout")
DEFAULT_LINEARISE = {"AtP": "readout", "EAP": "readout", "EAP-IG": "live"}


def linearisation(task: Task, method: str) -> str:
    """How ``method`` (a family: ``"AtP"``, ``"EAP"``, ``"EAP-IG"``) differentiates ``task``'s metric: the task's
    ``linearise`` or, where it names none, the method's own (``DEFAULT_LINEARISE``)."""
    return task.linearise or DEFAULT_LINEARISE[method]


@dataclass
class Task:
    """A patching task: the ``target`` (one tower or the whole ``CLIP1D``), ``clean`` and ``corrupted`` inputs of the
    same shape, and a ``metric`` giving one number per example.

    For a tower, inputs are token ids [batch, pos] and ``metric(pooled [batch, d_model]) -> [batch]`` (the package's
    ``image_belief_metric`` / ``caption_belief_metric``). For the whole CLIP, inputs are ``(images, captions)`` and
    ``metric(logits [n_images, n_captions]) -> [n_images]``. Effects are differences of the batch mean (noising:
    module docstring).

    ``norm`` (the whole CLIP only; a tower's metric normalises itself) is how the logits treat the two embeddings'
    norms: ``"live"`` (CLIP's cosine, the default), ``"frozen"`` (each embedding divided by its norm on the clean
    run, a constant: the clean value is the same, and the logits are linear in each embedding) or ``"none"`` (the
    pre-normalisation logits ``s * img @ txt.T``). ``linearise`` is how the first-order methods differentiate it, the
    metric's value and exact patching unchanged: ``"readout"`` linearises the towers only: each item's change of every
    tower output is first-order (one backward pass per output coordinate), and CLIP's head after the towers (norms,
    cosine, temperature, metric) is evaluated exactly on the moved outputs; ``"held"`` holds each embedding's norm
    out of the backward pass, as attribution patching holds LayerNorm's scale (``metrics.held_norms``); ``"live"``
    differentiates the cosine itself (whose curvature in the norm turns large patches' first-order estimates
    wrong-signed); None (the default): each method's own, measured against exact patching of CLIP's logits
    (``DEFAULT_LINEARISE``: readout for AtP and EAP, live for EAP-IG; docs/analyses.md has the table).

    The metric is checked once on the clean run when the task is built, and in every run after: it must return
    floating-point values, one per example ([batch]; [n_images] for the whole CLIP), all finite. A metric that
    returns one number for a batch, integers, or NaN is refused with an error naming the problem.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.metrics import image_belief_metric
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
    >>> cap = m.text.to_tokens(["1 is on the left of 2"])
    >>> task = Task(m.vision, img, mirror_images(img), image_belief_metric(m, cap))
    >>> task.clean_metric().shape
    torch.Size([1])
    """

    target: Target
    clean: Inputs
    corrupted: Inputs
    metric: Callable[[torch.Tensor], torch.Tensor]
    # "live", "frozen" or "none" (NORMS): how the whole CLIP's head normalises the embeddings; a tower's task keeps
    # "live", its metric normalising itself (mirror_task(..., target="vision", norm="frozen") freezes it in the metric)
    norm: str = "live"
    linearise: str | None = None  # how first-order methods differentiate the metric (LINEARISE); None: each its own
    _pooled: dict[Any, dict[str, torch.Tensor]] = field(default_factory=dict, init=False, repr=False)
    _floors: dict[tuple, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        towers = towers_of(self.target)
        for tower in towers.values():
            check_eval(tower)
        if not callable(self.metric):
            raise TypeError("metric must be a callable: fn(pooled) -> [batch] for a tower, fn(logits) -> [n_images]")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.linearise is not None and self.linearise not in LINEARISE:
            raise ValueError(f"linearise must be None or one of {LINEARISE}, got {self.linearise!r}")
        if self.norm != "live" and not isinstance(self.target, CLIP1D):
            raise ValueError(
                f"norm={self.norm!r} applies to the whole CLIP's logits; a tower's metric normalises itself (e.g. "
                "image_belief_metric(model, captions, norm='frozen', images=images))"
            )
        for what in ("clean", "corrupted"):
            value = getattr(self, what)
            if isinstance(self.target, CLIP1D):
                if not (isinstance(value, tuple | list) and len(value) == 2):
                    raise TypeError(f"{what}: the whole CLIP takes (images, captions), got {type(value).__name__}")
                self.target.vision.validate_tokens(value[0])
                self.target.text.validate_tokens(value[1])
                setattr(self, what, (value[0].to(self.device), value[1].to(self.device)))
            else:
                (tower,) = towers.values()
                tower.validate_tokens(value)
                setattr(self, what, value.to(self.device))
        for k in towers:
            if self.tokens(k, "clean").shape != self.tokens(k, "corrupted").shape:
                raise ValueError(
                    f"{k}: clean {tuple(self.tokens(k, 'clean').shape)} and corrupted "
                    f"{tuple(self.tokens(k, 'corrupted').shape)} inputs must have the same shape"
                )
        self.clean_metric()  # the metric's shape, dtype and values, checked before any method runs

    @property
    def n_examples(self) -> int:
        """How many values the metric returns: the batch of a tower, the number of images of the whole CLIP."""
        return int(self.tokens(next(iter(self.towers)), "clean").shape[0])

    @property
    def towers(self) -> dict[str, HookedEncoder]:
        """The towers the task runs, each checked to be in eval mode at every use (a model switched to train mode
        after the task was built would patch with dropout on: noisy scores, the global RNG drawn)."""
        towers = towers_of(self.target)
        for tower in towers.values():
            check_eval(tower)
        return towers

    @property
    def device(self) -> torch.device:
        return next(iter(self.towers.values())).W_E.device

    def tokens(self, tower: str, which: Literal["clean", "corrupted"] = "clean") -> torch.Tensor:
        """The ``clean`` or ``corrupted`` token ids of ``tower``."""
        value = getattr(self, which)
        if isinstance(self.target, CLIP1D):
            return value[0] if tower == "vision" else value[1]
        return value  # type: ignore[return-value]

    def metric_of(self, pooled: Mapping[str, torch.Tensor]) -> Float[torch.Tensor, " batch"]:
        """The metric per example from each tower's pooled output (the CLIP head in between for the whole model)."""
        if isinstance(self.target, CLIP1D):
            m = self.target
            img, txt = pooled["vision"], m.project_text(pooled["text"])
            if self.norm == "live":
                img, txt = normalize(img), normalize(txt)
            elif self.norm == "frozen":
                img_norm, txt_norm = self._clean_norms()
                img, txt = img / img_norm[:, None], txt / txt_norm[:, None]
            out = self.metric(m.temperature_scale() * img @ txt.T)
        else:
            out = self.metric(next(iter(pooled.values())))
        return self._checked(out)

    def _checked(self, out: object) -> torch.Tensor:
        n = self.n_examples
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"metric must return one value per example, a tensor [{n}], got {type(out).__name__}")
        if tuple(out.shape) != (n,):
            raise ValueError(
                f"metric must return one value per example: [{n}] for this batch of {n}, got shape "
                f"{tuple(out.shape)} (a metric that reduces the batch would score example 0 only)"
            )
        if not out.is_floating_point():
            raise TypeError(
                f"metric returned dtype {out.dtype}: it must return floating-point values (e.g. a logit "
                "difference), not counts or labels, which have no gradient or mean effect"
            )
        bad = int((~torch.isfinite(out)).sum())
        if bad:
            raise ValueError(
                f"metric returned {bad} non-finite value(s) (NaN or inf) of {n}: every score would be "
                "NaN (and ACDC would keep every edge); fix the metric or the inputs"
            )
        return out

    def _clean_norms(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The clean run's norm of each image embedding and each projected caption embedding (``norm="frozen"``)."""
        pooled = self.clean_pooled()
        with torch.no_grad():
            img = pooled["vision"].norm(dim=-1)
            txt = self.target.project_text(pooled["text"]).norm(dim=-1)  # type: ignore[union-attr]
        return img.clamp_min(1e-12), txt.clamp_min(1e-12)

    def _state(self) -> tuple:
        """What the clean outputs depend on besides the inputs: each tower's hook flags (float-equivalent code paths),
        its weights (each parameter's storage and in-place version: an edit after the task was built) and the hooks
        attached to it (a ``hooks()`` context or ``add_hook`` around a later call). A method's own hooks are
        temporary (``run_with_hooks``) and gone whenever the clean outputs are read."""
        key = []
        for t in self.towers.values():
            key.append((t.cfg.use_attn_result, t.cfg.use_split_qkv_input, t.cfg.use_attn_in))
            key.append(tuple((p.data_ptr(), p._version) for p in t.parameters()))
            key.append(
                tuple(
                    (name, tuple(m._forward_hooks), tuple(m._forward_pre_hooks))
                    for name, m in t.named_modules()
                    if m._forward_hooks or m._forward_pre_hooks
                )
            )
        return tuple(key)

    def clean_pooled(self) -> dict[str, torch.Tensor]:
        """Each tower's pooled output on the clean input, computed once per state of the towers (``_state``: hook
        flags, weights, attached hooks), so a task reused after an edit or under hooks reads the clean run as a new
        task would."""
        key = self._state()
        if key not in self._pooled:
            if len(self._pooled) >= 8:  # old states: kept only while they may come back (flags toggled per method)
                self._pooled.clear()
            with torch.no_grad():
                self._pooled[key] = {k: t(self.tokens(k)) for k, t in self.towers.items()}
        return self._pooled[key]

    def linear_in_outputs(self) -> bool:
        """Whether the metric is declared linear in each tower's pooled output (then a first-order method's
        ``"readout"`` is its plain gradient: ``first_order``): the whole CLIP with frozen or no norms and a metric
        linear in the logits (``clip_belief_metric``), or a tower's metric marked ``linear_in_output``
        (``image_belief_metric`` / ``caption_belief_metric`` with ``norm`` frozen or none, ``linear_metric``)."""
        if isinstance(self.target, CLIP1D):
            return self.norm != "live" and bool(getattr(self.metric, "linear_in_logits", False))
        return bool(getattr(self.metric, "linear_in_output", False))

    def clean_metric(self) -> Float[torch.Tensor, " batch"]:
        """The metric of the clean run, per example."""
        with torch.no_grad():
            return self.metric_of(self.clean_pooled())

    def corrupted_metric(self) -> Float[torch.Tensor, " batch"]:
        """The metric of the corrupted run, per example."""
        with torch.no_grad():
            return self.metric_of({k: t(self.tokens(k, "corrupted")) for k, t in self.towers.items()})

    def noise_floor(self, draws: int = 8, factor: float = 30.0) -> float:
        """The float resolution of an effect (a difference of the metric's batch mean): ``factor`` times the largest
        change of the mean over ``draws`` perturbations of every tower's clean output by one rounding unit of its
        dtype (random sign and size, a generator seeded with 0; the global RNG is untouched). An exact effect below
        it is rounding, not an effect (``attribution.moved``): on an untrained model, whose effects are ~1e-9, float32
        exact patching returns ~1e-7 with arbitrary signs. ``factor`` covers the rounding inside the towers, measured
        against float64 exact patching of nodes (and edges on the flagship) on four zoo models and their untrained
        configurations (flagship, full model, two-layer vision, two-layer text), each target: float32's largest error
        was 0.24 of this floor (the full model; <= 0.15 on the others).

        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
        >>> 0 < mirror_task(m, img, cap).noise_floor() < 1e-4
        True
        """
        key = (draws, factor, self._state())
        if key not in self._floors:
            pooled = self.clean_pooled()
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                base = self.metric_of(pooled).double().mean()
                devs = [0.0]
                for _ in range(draws):
                    moved = {
                        k: v + v * torch.finfo(v.dtype).eps * (2 * torch.rand(v.shape, generator=gen) - 1).to(v)
                        for k, v in pooled.items()
                    }
                    devs.append(float((self.metric_of(moved).double().mean() - base).abs()))
            self._floors[key] = factor * max(devs)
        return self._floors[key]

    def run(self, hooks: Mapping[str, Sequence[Hook]]) -> Float[torch.Tensor, " batch"]:
        """The metric per example with forward ``hooks`` per tower (``{"vision": [...]}``); a tower without hooks
        keeps its clean output. No gradients."""
        pooled = dict(self.clean_pooled())
        with torch.no_grad():
            for k, hs in hooks.items():
                if hs:
                    pooled[k] = self.towers[k].run_with_hooks(self.tokens(k), fwd_hooks=list(hs))
            return self.metric_of(pooled)


def clip_belief_metric(n_images: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The belief of the whole CLIP for captions laid out ``[true..., swapped...]`` (``mirror_task``): row ``i`` ->
    ``logits[i, i] - logits[i, n_images + i]``.

    >>> clip_belief_metric(2)(torch.tensor([[3.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 5.0]])).tolist()
    [2.0, -3.0]
    """

    def metric(logits: Float[torch.Tensor, "n_images n_captions"]) -> Float[torch.Tensor, " n_images"]:
        if logits.shape != (n_images, 2 * n_images):
            raise ValueError(
                f"expected logits [{n_images}, {2 * n_images}] (true, then swapped captions), got {tuple(logits.shape)}"
            )
        rows = torch.arange(n_images, device=logits.device)
        return logits[rows, rows] - logits[rows, n_images + rows]

    metric.linear_in_logits = True  # type: ignore[attr-defined]  # Task.linear_in_outputs
    return metric


def mirror_task(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    target: Literal["clip", "vision", "text"] = "clip",
    norm: str = "live",  # "live", "frozen" or "none" (NORMS)
    linearise: str | None = None,  # "readout", "held", "live" or None (each method's own; LINEARISE, Task)
) -> Task:
    """The package's default task: the left/right belief, corrupted by mirroring.

    - ``"vision"``: clean images vs their mirrors, ``image_belief_metric`` (captions fixed).
    - ``"text"``: clean captions vs their swap (``X rel Y`` -> ``Y rel X``), ``caption_belief_metric``.
    - ``"clip"``: the whole model on images and captions ``[true..., swapped...]``; the corrupted input mirrors every
      image *and* swaps the two caption halves, so each vision node's noising effect is the image mirror's and each
      text node's is the caption swap's (one patch changes one tower only); the metric is ``clip_belief_metric``.

    ``norm`` chooses how the embeddings' norms enter the belief (``Task``; for a tower, the metric's ``norm``):
    ``"live"`` (the cosine, CLIP's own logits), ``"frozen"`` (divided by their clean norms: the same clean value,
    linear in each embedding, so attribution patching is exact wherever the rest of the path is linear) or
    ``"none"`` (the pre-normalisation logit difference). ``linearise`` (``Task``): how AtP, EAP and EAP-IG
    differentiate the belief, its value and exact patching unchanged (None: each method's own).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> task = mirror_task(m, img, cap)
    >>> task.tokens("text").shape, task.clean_metric().shape
    (torch.Size([2, 4]), torch.Size([1]))
    >>> torch.allclose(mirror_task(m, img, cap, norm="frozen").clean_metric(), task.clean_metric())
    True
    """
    from hooked_clip1d.analysis.metrics import caption_belief_metric, image_belief_metric

    model = check_model(model)
    if model.cfg.objective != "contrastive" and target != "vision":
        raise ValueError(
            f"mirror_task(target={target!r}): a captioning model's decoder reads the image, so its text tower has no "
            "belief of its own and the whole model's logits are log-likelihoods of every pair; use target='vision' "
            "(the vision tower, scored by the log-likelihood belief: metrics.image_belief_metric)"
        )
    check_pair_images(images)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_captions_describe(images, captions)
    dev = model.vision.W_E.device
    images, captions = images.to(dev), captions.to(dev)
    swapped = swap_captions(captions, model.text.cfg.vocab)
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if target == "vision":
        metric = image_belief_metric(model, captions, norm=norm, images=images)
        return Task(model.vision, images, mirror_images(images), metric, linearise=linearise)
    if target == "text":
        metric = caption_belief_metric(model, images, norm=norm, captions=captions)
        return Task(model.text, captions, swapped, metric, linearise=linearise)
    if target == "clip":
        clean = (images, torch.cat([captions, swapped]))
        corrupted = (mirror_images(images), torch.cat([swapped, captions]))
        return Task(model, clean, corrupted, clip_belief_metric(images.shape[0]), norm=norm, linearise=linearise)
    raise ValueError(f"target must be 'clip', 'vision' or 'text', got {target!r}")


# ---- flags and activations ------------------------------------------------------------------------------------------


def _select(act: torch.Tensor, head: int | None) -> torch.Tensor:
    return act if head is None else act[:, :, head]


def writer_activations(
    task: Task,
    which: Literal["clean", "corrupted"] = "clean",
    tokens: Mapping[str, torch.Tensor] | None = None,
    extra_hooks: Mapping[str, Sequence[Hook]] | None = None,
) -> dict[str, torch.Tensor]:
    """Every writer's activation [batch, pos, d_model] on the task's clean or corrupted input (or on ``tokens`` per
    tower). Call inside ``graph_flags``."""
    graph = build_graph(task.target)
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for k, tower in task.towers.items():
            names = {writer_hook(w)[1] for w in graph.writers if parse_node(w).tower == k}
            toks = tokens[k] if tokens is not None else task.tokens(k, which)
            hooks = list((extra_hooks or {}).get(k, ()))
            _, cache = tower.run_with_cache(toks, names_filter=lambda n, s=names: n in s, fwd_hooks=hooks)
            for w in graph.writers:
                tw, point, head = writer_hook(w)
                if tw == k:
                    out[w] = _select(cache[point], head).clone()
    return out


class _Capture:
    """Forward hook keeping each writer's live activation (its head's slice) in ``store`` (a class, not a closure:
    hot loops build many, and a nested function would be re-decorated by the test suite's type checker each time)."""

    def __init__(self, writers: list[tuple[str, int | None]], store: dict[str, torch.Tensor]):
        self.writers, self.store = writers, store

    def __call__(self, act: torch.Tensor, hook: HookPoint) -> None:
        for w, head in self.writers:
            self.store[w] = _select(act, head)


class _AddDeltas:
    """Forward hook on a port: add, per (head, writers) entry, each writer's replacement minus its live value."""

    def __init__(self, entries: list[tuple[int | None, list[tuple[str, torch.Tensor]]]], live: dict[str, torch.Tensor]):
        self.entries, self.live = entries, live

    def __call__(self, act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.clone()
        for head, ws in self.entries:
            delta = sum(value.to(act.dtype) - self.live[w] for w, value in ws)
            if head is None:
                out = out + delta
            else:
                out[:, :, head] = out[:, :, head] + delta
        return out


def run_with_edges(
    task: Task,
    replaced: Mapping[Edge, torch.Tensor],
    extra_hooks: Mapping[str, Sequence[Hook]] | None = None,
) -> Float[torch.Tensor, " batch"]:
    """The metric per example when each edge ``(writer, port)`` of ``replaced`` carries the given activation of its
    writer [batch or 1, pos, d_model] instead of the writer's live one: the port reads ``input - live + replacement``
    (ACDC's edge patching; several edges at once compose). Towers without replaced edges keep their clean output.
    Call inside ``graph_flags``."""
    known = edge_set(build_graph(task.target))
    by_port: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for (w, p), value in replaced.items():
        if (w, p) not in known:
            raise ValueError(f"{edge_name((w, p))} is not an edge of this graph")
        by_port.setdefault(p, []).append((w, value))
    hooks: dict[str, list[Hook]] = {k: list(v) for k, v in (extra_hooks or {}).items()}
    live: dict[str, torch.Tensor] = {}
    writers_needed = {w for ws in by_port.values() for w, _ in ws}
    points: dict[tuple[str, str], list[str]] = {}
    for w in writers_needed:
        tw, point, _ = writer_hook(w)
        points.setdefault((tw, point), []).append(w)

    for (tw, point), ws in points.items():
        hooks.setdefault(tw, []).append((point, _Capture([(w, writer_hook(w)[2]) for w in ws], live)))
    port_points: dict[tuple[str, str], list[tuple[int | None, list[tuple[str, torch.Tensor]]]]] = {}
    for p, ws in by_port.items():
        tw, point, head = port_hook(p, task.towers[parse_node(p).tower])
        port_points.setdefault((tw, point), []).append((head, ws))
    for (tw, point), entries in port_points.items():
        hooks.setdefault(tw, []).append((point, _AddDeltas(entries, live)))
    return task.run(hooks)


__all__ = [
    "DEFAULT_LINEARISE",
    "LINEARISE",
    "Task",
    "clip_belief_metric",
    "linearisation",
    "mirror_task",
    "run_with_edges",
    "writer_activations",
]
