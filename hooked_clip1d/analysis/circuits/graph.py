"""The computational graph that circuit discovery scores: nodes, edges, a patching task, and edge-level interventions.

Circuit-discovery methods (``node_attribution``: AtP, AtP*; ``edge_attribution``: EAP, EAP-IG; ``path_patching``;
``circuits``: ground truth, faithfulness, ACDC-style pruning) share one graph per tower, in the convention of ACDC
(Conmy et al. 2023) and EAP (Syed et al. 2023; Hanna et al. 2024): the residual stream is a sum of **writers**, and
every component reads it through **ports**.

- writers (upstream nodes): ``<tower>.embed`` (token embedding E, ``hook_embed``), ``<tower>.pos`` (positional
  embedding P, ``hook_pos_embed``, learned positions only), ``<tower>.L{l}.H{h}`` (one head's output
  ``z_h @ W_O[h]``, ``hook_result`` without ``b_O``), ``<tower>.L{l}.mlp`` (``hook_mlp_out``).
- ports (downstream inputs): ``<tower>.L{l}.H{h}.q`` / ``.k`` / ``.v`` (that head's query, key and value input,
  ``hook_q_input`` etc. before ``ln1``), ``<tower>.L{l}.mlp`` (``hook_mlp_in``) and ``<tower>.readout`` (the final
  residual, read at CLS / EOT after ``ln_final``).
- edges ``writer -> port`` wherever the writer comes earlier in the residual stream (a head feeds the MLP of its own
  layer and every later layer). Constant parts of the residual (``b_O``; with LN, ``ln1.b``) are no node.

In the whole CLIP the two towers' graphs sit side by side (``vision.*`` and ``text.*``) and both readouts feed the
logits; a vision node reaches the logits through the image embedding, a text node through the caption embedding.

A ``Task`` is what every method scores: a **clean** input, a **corrupted** (counterfactual) input of the same shape,
and a metric of the output, per example. A node's or edge's effect is **noising**, as in AtP (Kramár et al. 2024,
``c(n) = L(M(x_clean | do(n <- n(x_noise)))) - L(M(x_clean))``) and EAP: the change of the batch-mean metric when
that node (edge) takes its corrupted value in the clean run. ``mirror_task`` builds the package's default task:
two-object images against their mirrors (the relation flips), the metric the logit difference between the true
caption and its left/right swap.

An edge intervention changes one port's input only: the port reads ``clean input - writer's value + writer's
replacement`` (``run_with_edges``; what ACDC and path patching do), so the writer's other readers are untouched.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> g = build_graph(m.vision)
    >>> g.writers
    ('vision.embed', 'vision.pos', 'vision.L0.H0', 'vision.L0.H1', 'vision.L0.H2', 'vision.L0.H3')
    >>> len(g.edges), g.edges[0]
    (30, ('vision.embed', 'vision.L0.H0.q'))
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.hooks import Hook, check_eval
from hooked_clip1d.analysis.metrics import (
    NORMS,
    check_model,
    check_pair_captions,
    check_pair_images,
    check_paired,
    mirror_images,
    normalize,
    swap_captions,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder

Target = HookedEncoder | CLIP1D
Inputs = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
#: one edge: (writer node, port)
Edge = tuple[str, str]
TOWERS = ("vision", "text")
CHANNELS = ("q", "k", "v")

_NODE = re.compile(r"^(vision|text)\.(?:(embed|pos|readout)|L(\d+)\.(?:H(\d+)(?:\.([qkv]))?|(mlp)))$")


# ---- names ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRef:
    """A parsed node or port name: ``tower``, ``kind`` (embed, pos, head, mlp, readout), ``layer``, ``head`` and, for a
    head's port, ``channel`` (q, k or v)."""

    tower: str
    kind: str
    layer: int | None = None
    head: int | None = None
    channel: str | None = None


def parse_node(name: str) -> NodeRef:
    """The parts of a node or port name (module docstring).

    >>> parse_node("vision.L1.H2.k")
    NodeRef(tower='vision', kind='head', layer=1, head=2, channel='k')
    >>> parse_node("vision.head2")
    Traceback (most recent call last):
    ValueError: 'vision.head2' is not a node name; e.g. vision.embed, vision.pos, vision.L0.H2(.q), vision.L0.mlp
    """
    m = _NODE.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"{name!r} is not a node name; e.g. vision.embed, vision.pos, vision.L0.H2(.q), vision.L0.mlp")
    tower, flat, layer, head, channel, mlp = m.groups()
    if flat is not None:
        return NodeRef(tower, flat)
    if mlp is not None:
        return NodeRef(tower, "mlp", int(layer))
    return NodeRef(tower, "head", int(layer), int(head), channel)


def edge_name(edge: Edge) -> str:
    """``"writer->port"``, the edge's name in records.

    >>> edge_name(("vision.pos", "vision.L0.H2.k"))
    'vision.pos->vision.L0.H2.k'
    """
    return f"{edge[0]}->{edge[1]}"


# ---- the graph ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Graph:
    """The writers, ports and edges of a tower or of the whole CLIP (module docstring), in forward order."""

    writers: tuple[str, ...]
    ports: tuple[str, ...]
    edges: tuple[Edge, ...]

    def heads(self) -> list[str]:
        """The head writers (``<tower>.L{l}.H{h}``)."""
        return [w for w in self.writers if parse_node(w).kind == "head"]

    def components(self) -> list[str]:
        """The writers a circuit chooses among: heads and MLPs (the embeddings are its inputs)."""
        return [w for w in self.writers if parse_node(w).kind in ("head", "mlp")]


def _order(ref: NodeRef, writer: bool) -> int:
    """Position in the residual stream: a writer at ``order`` feeds every port with a larger order."""
    if ref.kind in ("embed", "pos"):
        return -1
    if ref.kind == "readout":
        return 10**6
    assert ref.layer is not None
    return 2 * ref.layer + (1 if ref.kind == "mlp" else 0)


def build_graph(target: Target) -> Graph:
    """The graph of one tower (``model.vision`` / ``model.text``) or of the whole ``CLIP1D`` (both towers)."""
    towers = _towers(target)
    key = tuple(
        (t.cfg.tower, t.cfg.n_layers, t.cfg.n_heads, t.cfg.attn_only, t.cfg.positional) for t in towers.values()
    )
    return _graph_of(key)


@functools.lru_cache(maxsize=64)
def _graph_of(key: tuple[tuple[str, int, int, bool, str], ...]) -> Graph:
    """The graph of towers described by (tower, n_layers, n_heads, attn_only, positional): it depends on nothing
    else, so it is built once per architecture."""
    writers: list[str] = []
    ports: list[str] = []
    for tower, n_layers, n_heads, attn_only, positional in key:
        writers += [f"{tower}.embed"] + ([f"{tower}.pos"] if positional == "learned" else [])
        for layer in range(n_layers):
            writers += [f"{tower}.L{layer}.H{h}" for h in range(n_heads)]
            ports += [f"{tower}.L{layer}.H{h}.{c}" for h in range(n_heads) for c in CHANNELS]
            if not attn_only:
                writers.append(f"{tower}.L{layer}.mlp")
                ports.append(f"{tower}.L{layer}.mlp")
        ports.append(f"{tower}.readout")
    w_ref = {w: parse_node(w) for w in writers}
    p_ref = {p: parse_node(p) for p in ports}
    edges = [
        (w, p)
        for p in ports
        for w in writers
        if w_ref[w].tower == p_ref[p].tower and _order(w_ref[w], True) < _order(p_ref[p], False)
    ]
    return Graph(tuple(writers), tuple(ports), tuple(edges))


@functools.lru_cache(maxsize=64)
def _edge_set(graph: Graph) -> frozenset[Edge]:
    return frozenset(graph.edges)


def writer_hook(name: str) -> tuple[str, str, int | None]:
    """(tower, hook point, head index or None) where writer ``name``'s activation [batch, pos, d_model] is read."""
    ref = parse_node(name)
    if ref.kind == "embed":
        return ref.tower, "hook_embed", None
    if ref.kind == "pos":
        return ref.tower, "hook_pos_embed", None
    if ref.kind == "mlp":
        return ref.tower, f"blocks.{ref.layer}.hook_mlp_out", None
    if ref.kind == "head" and ref.channel is None:
        return ref.tower, f"blocks.{ref.layer}.attn.hook_result", ref.head
    raise ValueError(f"{name!r} is not a writer (embed, pos, a head or an MLP)")


def port_hook(name: str, tower: HookedEncoder) -> tuple[str, str, int | None]:
    """(tower, hook point, head index or None) of port ``name``'s input [batch, pos, d_model]."""
    ref = parse_node(name)
    if ref.kind == "readout":
        return ref.tower, f"blocks.{tower.cfg.n_layers - 1}.hook_resid_post", None
    if ref.kind == "mlp":
        return ref.tower, f"blocks.{ref.layer}.hook_mlp_in", None
    if ref.kind == "head" and ref.channel is not None:
        return ref.tower, f"blocks.{ref.layer}.hook_{ref.channel}_input", ref.head
    raise ValueError(f"{name!r} is not a port (a head's .q/.k/.v, an MLP or the readout)")


def check_nodes(graph: Graph, names: Sequence[str], kind: Literal["writer", "port"]) -> list[str]:
    """``names`` as a list, each a writer (or port) of ``graph``; otherwise an error naming the bad one."""
    if isinstance(names, str):
        raise TypeError(f"expected a list of {kind} names, e.g. [{names!r}], not a string")
    known = graph.writers if kind == "writer" else graph.ports
    out = []
    for n in names:
        parse_node(n)
        if n not in known:
            raise ValueError(f"{n!r} is not a {kind} of this graph; {kind}s: {list(known)}")
        out.append(n)
    return out


# ---- the task -------------------------------------------------------------------------------------------------------
def _towers(target: object) -> dict[str, HookedEncoder]:
    if isinstance(target, CLIP1D):
        towers = {"vision": target.vision, "text": target.text}
    elif isinstance(target, HookedEncoder):
        towers = {target.cfg.tower: target}
    else:
        raise TypeError(f"expected a tower (model.vision / model.text) or a CLIP1D model, got {type(target).__name__}")
    for tower in towers.values():
        if tower.cfg.normalization_type == "LN" and getattr(tower.cfg, "ln_position", "pre") == "post":
            raise ValueError(
                f"the {tower.cfg.tower} tower is post-LN (ln_position='post'): its residual stream is normalised "
                "after every block, so it is not a sum of component outputs and has no writer/port graph"
            )
    return towers


#: how first-order methods differentiate a task's metric (``Task.linearise``), and each method's own choice where the
#: task names none: measured on the two zoo models with shipped circuits (benchmarks/attribution_signs.py), signs of
#: the items above 5 % of the largest exact effect: AtP 55/71 held vs 37/71 live, EAP 22/28 vs 20/28, EAP-IG 20/28
#: vs 26/28
LINEARISE = ("held", "live")
DEFAULT_LINEARISE = {"AtP": "held", "EAP": "held", "EAP-IG": "live"}


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
    metric's value and exact patching unchanged: ``"held"`` holds each embedding's norm out of the backward pass, as
    attribution patching holds LayerNorm's scale (``metrics.held_norms``); ``"live"`` differentiates the cosine itself
    (whose curvature in the norm turns large patches' first-order estimates wrong-signed); None (the default): each
    method's own, measured against exact patching of CLIP's logits (``DEFAULT_LINEARISE``: held for AtP and EAP, live
    for EAP-IG, whose integral along the path already follows the curvature; docs/analyses.md has the table).

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
    norm: str = "live"  # "live", "frozen" or "none" (NORMS)
    linearise: str | None = None  # how first-order methods differentiate the metric (LINEARISE); None: each its own
    _pooled: dict[Any, dict[str, torch.Tensor]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        towers = _towers(self.target)
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
        return _towers(self.target)

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

    def clean_pooled(self) -> dict[str, torch.Tensor]:
        """Each tower's pooled output on the clean input (computed once per setting of the towers' hook flags, which
        choose between float-equivalent code paths)."""
        key = tuple((t.cfg.use_attn_result, t.cfg.use_split_qkv_input, t.cfg.use_attn_in) for t in self.towers.values())
        if key not in self._pooled:
            with torch.no_grad():
                self._pooled[key] = {k: t(self.tokens(k)) for k, t in self.towers.items()}
        return self._pooled[key]

    def clean_metric(self) -> Float[torch.Tensor, " batch"]:
        """The metric of the clean run, per example."""
        with torch.no_grad():
            return self.metric_of(self.clean_pooled())

    def corrupted_metric(self) -> Float[torch.Tensor, " batch"]:
        """The metric of the corrupted run, per example."""
        with torch.no_grad():
            return self.metric_of({k: t(self.tokens(k, "corrupted")) for k, t in self.towers.items()})

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

    return metric


def mirror_task(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    target: Literal["clip", "vision", "text"] = "clip",
    norm: str = "live",  # "live", "frozen" or "none" (NORMS)
    linearise: str | None = None,  # "held", "live" or None (each method's own; LINEARISE, Task)
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
    check_pair_images(images)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_paired(images, captions)
    dev = model.W_proj.device
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
@contextlib.contextmanager
def graph_flags(target: Target) -> Iterator[None]:
    """Turn on the hook points the graph reads (per-head ``hook_result``, split ``hook_{q,k,v}_input``,
    ``hook_mlp_in``) on every tower of ``target``, and restore each tower's own flags on exit (also after an
    error)."""
    saved = []
    try:
        for tower in _towers(target).values():
            cfg = tower.cfg
            saved.append((tower, cfg.use_attn_result, cfg.use_split_qkv_input, cfg.use_attn_in, cfg.use_hook_mlp_in))
            _set_flags(tower, True, True, False, not cfg.attn_only)
        yield
    finally:
        for tower, *flags in saved:
            _set_flags(tower, *flags)


def _set_flags(tower: HookedEncoder, result: bool, split: bool, attn_in: bool, mlp_in: bool) -> None:
    tower.set_use_attn_result(result)
    tower.set_use_split_qkv_input(split)
    tower.set_use_attn_in(attn_in)
    if not tower.cfg.attn_only:
        tower.set_use_hook_mlp_in(mlp_in)


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
    known = _edge_set(build_graph(task.target))
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
    "CHANNELS",
    "NORMS",
    "TOWERS",
    "Edge",
    "Graph",
    "NodeRef",
    "Task",
    "build_graph",
    "check_nodes",
    "clip_belief_metric",
    "edge_name",
    "graph_flags",
    "mirror_task",
    "parse_node",
    "port_hook",
    "run_with_edges",
    "writer_activations",
    "writer_hook",
]
