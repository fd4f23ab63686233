"""Activation patching on both towers (A9): by hook x position set (x head), mirror swaps (IDs §2.1, Alg. 1) and
caption swaps.

Every experiment compares a **base** input with a paired **source** (counterfactual) input, patches source
activations into the base run through ordinary forward hooks (``hooks.patch_hook``), and scores the tower's pooled
output with a batched metric of the CLIP similarity (``hooked_clip1d.analysis.metrics``). The effect is reported as
the fraction of the belief shift recovered, ``(patched - base) / (source - base)`` on batch means (IDs Eq. 1):
0 = no effect, 1 = the patched run believes what the source run believes.

- ``patch_sweep(tower, base, source, metric, hook_names, sets, heads)``: the general sweep. Position sets are
  boolean masks [batch, pos] (per example, because objects sit at different pixels); ``heads=True`` patches one
  head at a time (hooks with a head axis: ``hook_z``, ``hook_q/k/v``, ``hook_result``, ``hook_pattern``, ...).
  Positions index the residual stream; for ``hook_pattern`` / ``hook_attn_scores`` they select query rows.
- ``mirror_swap_patching(model, images, captions)``: base = two-object images, source = their mirrors (relation
  flipped), metric = image belief; sets ``all`` (every token), ``pixels`` (all image tokens), ``objects`` (the
  positions holding an object in the image *or* its mirror) and ``cls``. Default hooks: the residual stream at
  every depth (``blocks.0.hook_resid_pre`` = the embeddings, then each ``hook_resid_post``). Patching ``all`` at
  depth 0 recovers the full shift exactly (the whole input is replaced); so does ``objects`` at depth 0, because
  every other position holds the same background token in both images.
- ``caption_swap_patching``: the text-tower counterpart (``X left of Y`` vs ``Y left of X``, caption belief).

The other causal interventions have their own modules, and their names are re-exported here:
``tl_adapter.tl_patching`` (the same effect through ``transformer_lens.patching``), ``interchange.text_interchange``
(does EOT read the subject by position or by identity?) and ``knockout.knockout_sweep`` (attention-edge knockout).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> imgs = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . . 4 . . . ."])
    >>> caps = m.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"])
    >>> res = mirror_swap_patching(m, imgs, caps)
    >>> res.set_names, res.labels
    (['all', 'pixels', 'objects', 'cls'], ['embed', 'after L0'])
    >>> [round(v, 4) for v in res.fraction()[0].tolist()]  # depth 0: all, pixels, objects recover fully; cls not
    [1.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Int

from hooked_clip1d.analysis.hooks import (
    Metric,
    check_eval,
    check_hook_names,
    check_tower,
    depth_labels,
    hook_label,
    knockout_hooks,
    patch_hook,
    residual_hook_names,
)
from hooked_clip1d.analysis.interventions.interchange import InterchangeResult, text_interchange
from hooked_clip1d.analysis.interventions.knockout import KnockoutResult, cls_object_edges, eot_edges, knockout_sweep
from hooked_clip1d.analysis.interventions.tl_adapter import TL_KINDS, tl_patching
from hooked_clip1d.analysis.metrics import (
    caption_belief_metric,
    check_captions_describe,
    check_model,
    check_pair_captions,
    check_pair_images,
    image_belief_metric,
    mirror_images,
    shift_fraction,
    swap_captions,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder

VISION_SETS = ("all", "pixels", "objects", "cls")
TEXT_SETS = ("all", "subject", "relation", "object", "eot", "labels")


def position_sets(
    tower: HookedEncoder,
    base: Int[torch.Tensor, "batch pos"],
    source: Int[torch.Tensor, "batch pos"] | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, Bool[torch.Tensor, "batch pos"]]:
    """Boolean masks [batch, pos] of named position sets.

    Vision (``VISION_SETS``): ``all``; ``pixels`` (every image token, not CLS); ``objects`` (positions holding an
    object in ``base`` or ``source``); ``cls``. Text (``TEXT_SETS``, captions ``X rel Y <eot>``): ``all``,
    ``subject`` (slot 0), ``relation`` (1), ``object`` (2), ``eot`` (3), ``labels`` (0 and 2).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
    >>> img = m.vision.to_tokens("C 1 . 2 . . . . . . .")
    >>> position_sets(m.vision, img, mirror_images(img), ["objects"])["objects"].nonzero()[:, 1].tolist()
    [1, 3, 8, 10]
    """
    tower_name = tower.cfg.tower
    known = VISION_SETS if tower_name == "vision" else TEXT_SETS
    names = list(known if names is None else names)
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown {tower_name} position sets {bad}; known: {list(known)}")
    tower.validate_tokens(base)
    if source is not None:
        tower.validate_tokens(source)
        if source.shape != base.shape:
            raise ValueError(f"base {tuple(base.shape)} and source {tuple(source.shape)} must have the same shape")
    b, p = base.shape
    pos = torch.arange(p, device=base.device)[None].expand(b, p)
    out: dict[str, torch.Tensor] = {}
    for n in names:
        if n == "all":
            m = torch.ones(b, p, dtype=torch.bool, device=base.device)
        elif n == "pixels":
            m = pos >= 1
        elif n == "cls":
            m = pos == 0
        elif n == "objects":
            m = (base > 0) & (pos >= 1)
            if source is not None:
                m |= (source > 0) & (pos >= 1)
        else:
            slots = {"subject": (0,), "relation": (1,), "object": (2,), "eot": (3,), "labels": (0, 2)}[n]
            m = torch.zeros(b, p, dtype=torch.bool, device=base.device)
            m[:, list(slots)] = True
        out[n] = m
    return out


# ---- the general sweep ----------------------------------------------------------------------------------------------
@dataclass
class PatchSweep:
    """Beliefs of a patching sweep. ``patched`` is [n_hooks, n_sets, batch], or [n_hooks, n_sets, n_heads, batch]
    with per-head patching; ``base`` / ``source`` are the unpatched beliefs [batch]."""

    tower: str  # "vision" or "text"
    hook_names: list[str]
    labels: list[str]  # readable hook names (depth labels for the residual stream)
    set_names: list[str]
    per_head: bool
    patched: torch.Tensor
    base: torch.Tensor
    source: torch.Tensor

    def fraction(self) -> torch.Tensor:
        """Recovered fraction of the belief shift, [n_hooks, n_sets] (or [n_hooks, n_sets, n_heads])."""
        return shift_fraction(self.patched, self.base, self.source)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (fractions and mean beliefs)."""
        return {
            "tower": self.tower,
            "hook_names": self.hook_names,
            "labels": self.labels,
            "set_names": self.set_names,
            "per_head": self.per_head,
            "fraction": self.fraction().tolist(),
            "base_belief": float(self.base.mean()),
            "source_belief": float(self.source.mean()),
            "patched_belief": self.patched.mean(-1).tolist(),
        }


@torch.no_grad()
def patch_sweep(
    tower: HookedEncoder,
    base: Int[torch.Tensor, "batch pos"],
    source: Int[torch.Tensor, "batch pos"],
    metric: Metric,
    hook_names: Sequence[str] | None = None,
    sets: Sequence[str] | Mapping[str, Bool[torch.Tensor, "batch pos"]] | None = None,
    heads: bool = False,
) -> PatchSweep:
    """Patch ``source`` activations into the ``base`` run, one (hook, position set[, head]) at a time.

    ``metric(pooled) -> [batch]`` scores the tower output (e.g. ``image_belief_metric``). ``hook_names`` defaults
    to the residual stream at every depth (with ``heads=True``: every layer's ``hook_z``); ``sets`` are names of
    ``position_sets`` or explicit masks.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.metrics import image_belief_metric
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> imgs = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . . 4 . . . ."])
    >>> metric = image_belief_metric(m, m.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"]))
    >>> res = patch_sweep(m.vision, imgs, mirror_images(imgs), metric, heads=True, sets=["cls"])
    >>> res.patched.shape  # [hooks (hook_z of each layer), sets, heads, batch]
    torch.Size([1, 1, 4, 2])
    """
    tower = check_eval(check_tower(tower))
    if not callable(metric):
        raise TypeError("metric must be a callable fn(pooled) -> [batch]")
    if hook_names is None:
        hook_names = (
            [f"blocks.{layer}.attn.hook_z" for layer in range(tower.cfg.n_layers)]
            if heads
            else residual_hook_names(tower)
        )
    hook_names = list(hook_names)
    check_hook_names(tower, hook_names, heads)
    if isinstance(sets, Mapping):
        masks = dict(sets)
        tower.validate_tokens(base)
        for k, v in masks.items():
            if not isinstance(v, torch.Tensor) or v.dtype != torch.bool or v.shape != base.shape:
                raise ValueError(f"position set {k!r} must be a bool mask shaped like base {tuple(base.shape)}")
        if source.shape != base.shape:
            raise ValueError(f"base {tuple(base.shape)} and source {tuple(source.shape)} must have the same shape")
        tower.validate_tokens(source)
    else:
        if isinstance(sets, str):
            raise TypeError(f"sets must be a list of position-set names, e.g. [{sets!r}], not a string")
        masks = position_sets(tower, base, source, sets)
    if not masks:  # an empty sweep returned without a word
        raise ValueError("sets is empty: name at least one position set (or pass None for every set)")
    empty = [k for k, v in masks.items() if not bool(v.any())]
    if empty:  # nothing patched read as "no effect" (fraction 0)
        raise ValueError(f"position sets {empty} select no position in any row: nothing would be patched")
    dev = tower.W_E.device
    base, source = base.to(dev), source.to(dev)
    base_m = metric(tower(base))
    source_out, cache = tower.run_with_cache(source, names_filter=hook_names)
    source_m = metric(source_out)
    if base_m.shape != (base.shape[0],):
        raise ValueError(f"metric must return one value per example [batch], got shape {tuple(base_m.shape)}")
    H = tower.cfg.n_heads
    head_list: list[int | None] = list(range(H)) if heads else [None]
    out = torch.empty(len(hook_names), len(masks), len(head_list), base.shape[0], dtype=base_m.dtype)
    for i, name in enumerate(hook_names):
        for j, mask in enumerate(masks.values()):
            for k, head in enumerate(head_list):
                hook = patch_hook(name, cache[name], mask.to(dev), head)
                out[i, j, k] = metric(tower.run_with_hooks(base, fwd_hooks=[hook])).cpu()
    return PatchSweep(
        tower=tower.cfg.tower,
        hook_names=hook_names,
        labels=[hook_label(tower, n) for n in hook_names],
        set_names=list(masks),
        per_head=heads,
        patched=out if heads else out[:, :, 0],
        base=base_m.cpu(),
        source=source_m.cpu(),
    )


def mirror_swap_patching(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    hook_names: Sequence[str] | None = None,
    sets: Sequence[str] = VISION_SETS,
    heads: bool = False,
) -> PatchSweep:
    """Mirror-swap patching on the vision tower (IDs §2.1, Alg. 1; see the module docstring).

    ``images`` are two-object images and ``captions[i]`` the caption scored for image ``i`` (usually its true
    ``X is on the left of Y``); the belief is the image belief (caption vs its swap). Patches activations of the
    mirrored images into the original run.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> res = mirror_swap_patching(m, m.vision.to_tokens(["C 1 2 . . . . . . . ."]),
    ...                            m.text.to_tokens(["1 is on the left of 2"]), heads=True)
    >>> res.fraction().shape  # [layers (hook_z), sets, heads]
    torch.Size([1, 4, 4])
    """
    model = check_eval(check_model(model))
    check_pair_images(images)
    model.vision.validate_tokens(images)
    check_pair_captions(captions, model.text.cfg.vocab)  # relation captions first: the clearer error
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
    metric = image_belief_metric(model, captions)
    return patch_sweep(model.vision, images, mirror_images(images), metric, hook_names, sets, heads)


def caption_swap_patching(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    hook_names: Sequence[str] | None = None,
    sets: Sequence[str] = TEXT_SETS,
    heads: bool = False,
) -> PatchSweep:
    """The text-tower counterpart of mirror swapping: base ``X rel Y``, source ``Y rel X``, caption belief
    against ``images[i]`` (an image the caption describes) and its mirror.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> res = caption_swap_patching(m, m.vision.to_tokens(["C 1 2 . . . . . . . ."]),
    ...                             m.text.to_tokens(["1 is on the left of 2"]), sets=["labels", "eot"])
    >>> [round(v, 4) for v in res.fraction()[0].tolist()]  # depth 0: the labels carry the whole shift
    [1.0, 0.0]
    """
    model = check_eval(check_model(model))
    check_pair_captions(captions, model.text.cfg.vocab)
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
    metric = caption_belief_metric(model, images)
    return patch_sweep(
        model.text, captions, swap_captions(captions, model.text.cfg.vocab), metric, hook_names, sets, heads
    )


__all__ = [
    "TEXT_SETS",
    "TL_KINDS",
    "VISION_SETS",
    "InterchangeResult",
    "KnockoutResult",
    "PatchSweep",
    "caption_swap_patching",
    "cls_object_edges",
    "depth_labels",
    "eot_edges",
    "knockout_hooks",
    "knockout_sweep",
    "mirror_swap_patching",
    "patch_hook",
    "patch_sweep",
    "position_sets",
    "residual_hook_names",
    "text_interchange",
    "tl_patching",
]
