"""Spatial IDs per position and steering a belief with their differences (IDs §2.2, §3), adapted to 1D CLIP.

**Extraction (IDs Eq. 2-4).** For each object label ``x`` and position ``p`` take the mean residual activation
``a_l(x, p)`` at depth ``l`` (``embed``, ``after L0``, ...). The object-specific spatial ID is
``a_l(x, p) - mean_p' a_l(x, p')`` (Eq. 3) and the universal ID ``ID_l(p)`` its mean over labels (Eq. 4).

- ``vision_spatial_ids``: ``p`` is the pixel of the object; the activation is read at the object's own token
  (``site="object"``, the analogue of the paper's object-word token) or at CLS (``site="cls"``), from
  single-object images of every label at every pixel (``context="single"``) or from every two-object image
  (``context="pair"``, each image counted for both of its objects). At depth 0 with learned positions,
  ``ID_0(p) = W_pos[p + 1] - mean_p' W_pos[p' + 1]`` exactly; with RoPE it is 0 (positions never enter the
  residual stream).
- ``text_role_ids``: the text-tower analogue, "where" being the caption slot: ``p`` in {subject slot 0,
  object slot 2} of ``X rel Y`` captions over all ordered label pairs.

**Steering (IDs §3, Alg. 2).** Add ``alpha`` times a difference of IDs to the residual stream at one depth and
watch the relational belief (``hooked_clip1d.analysis.metrics``) move toward the swapped relation:

- ``steer_vision``: for a two-object image (X at p1 < Y at p2), at X's token add ``alpha (ID(p2) - ID(p1))`` and
  at Y's token ``alpha (ID(p1) - ID(p2))``, i.e. exchange the objects' spatial IDs; the target is the image with
  X and Y exchanged (``swap_objects``). ``site="cls"`` instead adds to the CLS token
  ``alpha [(ID_X(p2) - ID_X(p1)) + (ID_Y(p1) - ID_Y(p2))]`` with object-specific IDs (universal ones cancel).
- ``steer_text``: at the subject slot add ``alpha (ID(object) - ID(subject))`` and the opposite at the object
  slot; the target is the swapped caption.

The effect is the fraction of the base -> target belief shift reached at each ``alpha``. At depth 0 with learned
positions and ``alpha = 1`` the steered residual *is* the target's (vision; any depth of model) or a reordering
of it that a 1-layer text tower cannot tell apart, so the fraction is exactly 1 there.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4, init_std=1.0), seed=0).eval()
    >>> ids = vision_spatial_ids(m.vision)
    >>> ids.ids.shape  # [depths, pixels, d_model]
    torch.Size([2, 10, 128])
    >>> torch.allclose(ids.ids[0], m.vision.W_pos[1:] - m.vision.W_pos[1:].mean(0), atol=1e-5)
    True
    >>> imgs = m.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . . 4 . . ."])
    >>> caps = m.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"])
    >>> res = steer_vision(m, imgs, caps, ids, depth=0, alphas=[0.0, 1.0])
    >>> [round(f, 4) for f in res.fraction().tolist()]
    [0.0, 1.0]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from jaxtyping import Int

from hooked_clip1d.analysis.hooks import add_hook, check_eval, depth_labels, residual_hook_names
from hooked_clip1d.analysis.metrics import (
    caption_belief_metric,
    check_captions_describe,
    check_model,
    check_pair_captions,
    check_pair_images,
    image_belief_metric,
    object_token_positions,
    pair_grid,
    shift_fraction,
    shift_is_defined,
    swap_captions,
    swap_objects,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedTextEncoder, HookedVisionEncoder
from hooked_clip1d.settings.checks import check_index, check_label_list, is_int


@dataclass
class SpatialIDs:
    """Mean activations ``a(x, p)`` per depth, label and position, and the IDs derived from them."""

    tower: str  # "vision" or "text"
    site: str  # "object" / "cls" (vision), "slot" (text)
    hook_names: list[str]
    labels: list[str]  # readable depth names
    positions: list[int]  # pixel indices (vision) or caption slots (text)
    object_labels: list[int]
    mean_acts: torch.Tensor  # [n_depths, n_labels, n_positions, d_model]

    @property
    def object_ids(self) -> torch.Tensor:
        """Object-specific spatial IDs (Eq. 3), [n_depths, n_labels, n_positions, d_model]."""
        return self.mean_acts - self.mean_acts.mean(2, keepdim=True)

    @property
    def ids(self) -> torch.Tensor:
        """Universal spatial IDs (Eq. 4), [n_depths, n_positions, d_model]."""
        return self.object_ids.mean(1)

    def direction(self, depth: int) -> torch.Tensor:
        """Unit horizontal direction at ``depth`` (Eq. 5: the mean of consecutive-position ID differences)."""
        ids = self.ids[depth]
        if len(self.positions) < 2:
            raise ValueError("a direction needs at least two positions")
        d = (ids[1:] - ids[:-1]).mean(0)
        n = d.norm()
        if not float(n) > 1e-6 * (1.0 + float(self.mean_acts[depth].abs().max())):  # zero up to rounding
            raise ValueError(f"the IDs at depth {depth} are all equal; there is no horizontal direction")
        return d / n

    def norms(self) -> torch.Tensor:
        """Mean norm of the universal IDs per depth, [n_depths] (how much position the residual carries)."""
        return self.ids.norm(dim=-1).mean(-1)

    def to_dict(self) -> dict[str, Any]:
        proj: list[Any] = []
        for d in range(len(self.labels)):
            try:
                proj.append((self.ids[d] @ self.direction(d)).tolist())
            except ValueError:  # no horizontal direction at this depth (e.g. RoPE embeddings)
                proj.append(None)
        return {
            "tower": self.tower,
            "site": self.site,
            "labels": self.labels,
            "positions": self.positions,
            "id_norm": self.norms().tolist(),
            "projection_on_direction": proj,
        }


def _labels(vocab_n: int, labels: Sequence[int] | None, need: int) -> list[int]:
    if labels is None:
        return list(range(1, vocab_n + 1))
    return sorted(check_label_list(labels, vocab_n, "labels", need))


@torch.no_grad()
def vision_spatial_ids(
    tower: HookedVisionEncoder,
    labels: Sequence[int] | None = None,
    site: Literal["object", "cls"] = "object",
    context: Literal["single", "pair"] = "single",
    hook_names: Sequence[str] | None = None,
) -> SpatialIDs:
    """Spatial IDs of the vision tower per pixel and depth (see the module docstring).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> vision_spatial_ids(m.vision, site="cls", context="pair").mean_acts.shape  # [depths, labels, pixels, d]
    torch.Size([2, 4, 10, 128])
    """
    if not isinstance(tower, HookedVisionEncoder):
        raise TypeError(f"vision_spatial_ids needs the vision tower (model.vision), got {type(tower).__name__}")
    check_eval(tower)
    if site not in ("object", "cls"):
        raise ValueError(f"site must be 'object' or 'cls', got {site!r}")
    if context not in ("single", "pair"):
        raise ValueError(f"context must be 'single' or 'pair', got {context!r}")
    vocab, D = tower.cfg.vocab, tower.cfg.d_image
    labs = _labels(vocab.n_labels, labels, 1 if context == "single" else 2)
    if isinstance(hook_names, str):  # its characters were read as hook names
        raise TypeError(f"hook_names must be a list of hook names, e.g. [{hook_names!r}], not a string")
    hook_names = residual_hook_names(tower) if hook_names is None else list(hook_names)
    dev = tower.W_E.device
    if context == "single":
        lab = torch.tensor([x for x in labs for _ in range(D)])
        pix = torch.tensor([p for _ in labs for p in range(D)])
        images = torch.zeros(len(lab), D + 1, dtype=torch.long)
        images[:, 0] = vocab.cls
        images[torch.arange(len(lab)), pix + 1] = lab
        rec_img, rec_lab, rec_pix = torch.arange(len(lab)), lab, pix
    else:
        images, objs, pos = pair_grid(vocab, D, labs)
        n = len(images)
        rec_img = torch.cat([torch.arange(n), torch.arange(n)])
        rec_lab = torch.cat([objs[:, 0], objs[:, 1]])
        rec_pix = torch.cat([pos[:, 0], pos[:, 1]])
    _, cache = tower.run_with_cache(images.to(dev), names_filter=hook_names)
    li = torch.tensor([labs.index(int(x)) for x in rec_lab])
    tok = torch.zeros_like(rec_pix) if site == "cls" else rec_pix + 1
    n_cells = len(labs) * D
    cell = li * D + rec_pix
    counts = torch.bincount(cell, minlength=n_cells).to(torch.float64)
    out = []
    for name in hook_names:
        if name not in cache or cache[name].ndim != 3:
            raise ValueError(f"{name} is not a residual-stream hook of this tower that fires")
        acts = cache[name][rec_img.to(dev), tok.to(dev)].cpu().double()  # [records, d]
        sums = torch.zeros(n_cells, acts.shape[-1], dtype=torch.float64).index_add_(0, cell, acts)
        out.append((sums / counts[:, None]).view(len(labs), D, -1))
    default = hook_names == residual_hook_names(tower)
    return SpatialIDs(
        tower="vision",
        site=site,
        hook_names=hook_names,
        labels=depth_labels(tower) if default else hook_names,
        positions=list(range(D)),
        object_labels=labs,
        mean_acts=torch.stack(out).to(tower.W_E.dtype),
    )


@torch.no_grad()
def text_role_ids(
    tower: HookedTextEncoder,
    labels: Sequence[int] | None = None,
    relation: Literal["left", "right"] = "left",
    hook_names: Sequence[str] | None = None,
) -> SpatialIDs:
    """Role IDs of the text tower: positions are the subject (0) and object (2) slots of ``X rel Y`` captions.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> ids = text_role_ids(m.text)
    >>> ids.positions, ids.ids.shape
    ([0, 2], torch.Size([2, 2, 128]))
    """
    if not isinstance(tower, HookedTextEncoder):
        raise TypeError(f"text_role_ids needs the text tower (model.text), got {type(tower).__name__}")
    check_eval(tower)
    if relation not in ("left", "right"):
        raise ValueError(f"relation must be 'left' or 'right', got {relation!r}")
    vocab = tower.cfg.vocab
    labs = _labels(vocab.n_labels, labels, 2)
    rel = vocab.left_of if relation == "left" else vocab.right_of
    pairs = torch.tensor(list(itertools.permutations(labs, 2)))
    caps = torch.stack(
        [pairs[:, 0], torch.full_like(pairs[:, 0], rel), pairs[:, 1], torch.full_like(pairs[:, 0], vocab.eot)], -1
    )
    hook_names = residual_hook_names(tower) if hook_names is None else list(hook_names)
    _, cache = tower.run_with_cache(caps.to(tower.W_E.device), names_filter=hook_names)
    li0 = torch.tensor([labs.index(int(x)) for x in pairs[:, 0]])
    li2 = torch.tensor([labs.index(int(x)) for x in pairs[:, 1]])
    out = []
    for name in hook_names:
        if name not in cache or cache[name].ndim != 3:
            raise ValueError(f"{name} is not a residual-stream hook of this tower that fires")
        act = cache[name].cpu().double()
        m = torch.zeros(len(labs), 2, act.shape[-1], dtype=torch.float64)
        m[:, 0] = torch.zeros(len(labs), act.shape[-1], dtype=torch.float64).index_add_(0, li0, act[:, 0])
        m[:, 1] = torch.zeros(len(labs), act.shape[-1], dtype=torch.float64).index_add_(0, li2, act[:, 2])
        out.append(m / (len(labs) - 1))
    default = hook_names == residual_hook_names(tower)
    return SpatialIDs(
        tower="text",
        site="slot",
        hook_names=hook_names,
        labels=depth_labels(tower) if default else hook_names,
        positions=[0, 2],
        object_labels=labs,
        mean_acts=torch.stack(out).to(tower.W_E.dtype),
    )


@dataclass
class SteeringResult:
    """Beliefs while steering: ``beliefs`` [n_alphas, batch]; ``base`` / ``target`` [batch] (no steering / the
    swapped input)."""

    tower: str
    depth: str
    site: str
    alphas: torch.Tensor  # [n_alphas]
    beliefs: torch.Tensor
    base: torch.Tensor
    target: torch.Tensor

    def fraction(self) -> torch.Tensor:
        """Fraction of the base -> target shift reached at each alpha, [n_alphas]."""
        return shift_fraction(self.beliefs, self.base, self.target)

    def flip_rate(self) -> torch.Tensor:
        """Fraction of rows whose belief changed sign relative to the base at each alpha, [n_alphas]."""
        return ((self.beliefs > 0) != (self.base > 0)[None]).float().mean(-1)

    def fraction_defined(self) -> bool:
        """Whether the swapped input moves the mean belief (``metrics.shift_is_defined``), so that ``fraction`` is
        defined (an untrained model's swap moves it by ~0)."""
        return shift_is_defined(self.base, self.target)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able lists; where the fraction is undefined (``fraction_defined`` False: the swap
        moves the mean belief by ~0), ``fraction`` is None (``fraction()`` itself raises there)."""
        defined = self.fraction_defined()
        return {
            "tower": self.tower,
            "depth": self.depth,
            "site": self.site,
            "alphas": self.alphas.tolist(),
            "fraction_defined": defined,
            "fraction": self.fraction().tolist() if defined else None,
            "flip_rate": self.flip_rate().tolist(),
            "mean_belief": self.beliefs.mean(-1).tolist(),
            "base_belief": float(self.base.mean()),
            "target_belief": float(self.target.mean()),
        }


def ids_are_zero(ids: SpatialIDs, depth: int) -> bool:
    """Whether the IDs at ``depth`` are zero up to rounding (relative to the activations they are read from), so
    that steering with them does nothing: the CLS token's embedding, or a RoPE tower before its first layer.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> ids = vision_spatial_ids(m.vision, site="cls")
    >>> ids_are_zero(ids, 0), ids_are_zero(ids, 1)  # CLS's embedding holds no position; after layer 0 it does
    (True, False)
    """
    depth = check_index(depth, len(ids.ids), "depth", f" ({ids.labels})")
    scale = 1.0 + float(ids.mean_acts[depth].abs().max())
    return not float(ids.ids[depth].abs().max()) > 1e-6 * scale


def _check_ids(ids: object, tower: str, depth: int) -> SpatialIDs:
    if not isinstance(ids, SpatialIDs):
        raise TypeError(f"ids must be SpatialIDs (from vision_spatial_ids / text_role_ids), got {type(ids).__name__}")
    if ids.tower != tower:
        raise ValueError(f"these IDs come from the {ids.tower} tower; steering here needs {tower} IDs")
    if not is_int(depth) or not 0 <= depth < len(ids.hook_names):
        raise ValueError(f"depth {depth} is outside 0..{len(ids.hook_names) - 1} ({ids.labels})")
    if ids_are_zero(ids, depth):
        if ids.site == "cls" and depth == 0:
            why = "the CLS token's embedding does not depend on where the objects are"
        else:
            why = "a RoPE tower carries no position in the residual stream before layer 0"
        raise ValueError(
            f"the spatial IDs at depth {depth} ({ids.labels[depth]}) are zero, so steering with them does nothing "
            f"({why}); choose a later depth"
        )
    return ids


def _alphas(alphas: Sequence[float] | torch.Tensor) -> torch.Tensor:
    a = torch.as_tensor(alphas, dtype=torch.float32).flatten()
    if a.numel() == 0:
        raise ValueError("alphas is empty")
    if not torch.isfinite(a).all():
        raise ValueError(f"alphas must be finite numbers, got {a.tolist()}")
    return a


@torch.no_grad()
def steer_vision(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    ids: SpatialIDs,
    depth: int,
    alphas: Sequence[float] | torch.Tensor = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
    specific: bool = False,
) -> SteeringResult:
    """Exchange the two objects' spatial IDs by steering (see the module docstring); beliefs are image beliefs.

    ``specific=True`` uses object-specific IDs (Eq. 3) instead of universal ones (always so for ``site="cls"``).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> ids = vision_spatial_ids(m.vision, site="cls")
    >>> r = steer_vision(m, m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"]),
    ...                  ids, depth=1, alphas=[0.0, 1.0])
    >>> r.beliefs.shape
    torch.Size([2, 1])
    """
    check_model(model)
    check_eval(model.vision)
    ids = _check_ids(ids, "vision", depth)
    check_pair_images(images)
    model.vision.validate_tokens(images)
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
    a = _alphas(alphas)
    dev = model.W_proj.device
    images = images.to(dev)
    metric = image_belief_metric(model, captions)
    pos = object_token_positions(images)  # token positions of X (left) and Y (right)
    p1, p2 = (pos[:, 0] - 1).cpu(), (pos[:, 1] - 1).cpu()
    rows = torch.arange(images.shape[0])
    if specific or ids.site == "cls":
        present = images[rows.to(dev), pos[:, 0]].cpu(), images[rows.to(dev), pos[:, 1]].cpu()
        missing = sorted({int(x) for x in torch.cat(present)} - set(ids.object_labels))
        if missing:
            raise ValueError(f"object-specific IDs are missing labels {missing} (extracted for {ids.object_labels})")
        lut = {x: i for i, x in enumerate(ids.object_labels)}
        ix = torch.tensor([lut[int(x)] for x in present[0]])
        iy = torch.tensor([lut[int(y)] for y in present[1]])
        oid = ids.object_ids[depth]
        dx = oid[ix, p2] - oid[ix, p1]  # [batch, d]
        dy = oid[iy, p1] - oid[iy, p2]
    else:
        uid = ids.ids[depth]
        dx = uid[p2] - uid[p1]
        dy = -dx
    d_model = dx.shape[-1]
    delta = torch.zeros(images.shape[0], images.shape[1], d_model, dtype=dx.dtype)
    if ids.site == "cls":
        delta[:, 0] = dx + dy
    else:
        delta[rows, pos[:, 0].cpu()] = dx
        delta[rows, pos[:, 1].cpu()] = dy
    name = ids.hook_names[depth]
    beliefs = torch.stack(
        [metric(model.vision.run_with_hooks(images, fwd_hooks=[add_hook(name, float(al) * delta)])).cpu() for al in a]
    )
    return SteeringResult(
        tower="vision",
        depth=ids.labels[depth],
        site=ids.site + (" (specific)" if specific and ids.site != "cls" else ""),
        alphas=a,
        beliefs=beliefs,
        base=metric(model.vision(images)).cpu(),
        target=metric(model.vision(swap_objects(images))).cpu(),
    )


@torch.no_grad()
def steer_text(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    ids: SpatialIDs,
    depth: int,
    alphas: Sequence[float] | torch.Tensor = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
) -> SteeringResult:
    """Exchange the subject and object role IDs of each caption by steering; beliefs are caption beliefs against
    ``images[i]`` (which ``captions[i]`` describes) and its mirror. The target is the swapped caption.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4, init_std=1.0), seed=0).eval()
    >>> r = steer_text(m, m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"]),
    ...                text_role_ids(m.text), depth=0, alphas=[0.0, 1.0])
    >>> [round(f, 4) for f in r.fraction().tolist()]  # exact in a 1-layer text tower
    [0.0, 1.0]
    """
    check_model(model)
    check_eval(model.text)
    ids = _check_ids(ids, "text", depth)
    vocab = model.text.cfg.vocab
    check_pair_captions(captions, vocab)
    check_pair_images(images)
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
    a = _alphas(alphas)
    captions = captions.to(model.W_proj.device)
    metric = caption_belief_metric(model, images)
    uid = ids.ids[depth]  # [2 (subject, object), d]
    diff = uid[1] - uid[0]
    delta = torch.zeros(captions.shape[0], 4, diff.shape[-1], dtype=diff.dtype)
    delta[:, 0] = diff
    delta[:, 2] = -diff
    name = ids.hook_names[depth]
    beliefs = torch.stack(
        [metric(model.text.run_with_hooks(captions, fwd_hooks=[add_hook(name, float(al) * delta)])).cpu() for al in a]
    )
    return SteeringResult(
        tower="text",
        depth=ids.labels[depth],
        site="slot",
        alphas=a,
        beliefs=beliefs,
        base=metric(model.text(captions)).cpu(),
        target=metric(model.text(swap_captions(captions, vocab))).cpu(),
    )


__all__ = [
    "SpatialIDs",
    "SteeringResult",
    "ids_are_zero",
    "steer_text",
    "steer_vision",
    "text_role_ids",
    "vision_spatial_ids",
]
