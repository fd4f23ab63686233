"""Causal interventions on both towers (A9): activation patching by hook x position set x head, mirror-swap
patching (IDs §2.1, Alg. 1), interchange interventions on the text tower and attention knockout (Binding §5.2).

Every experiment compares a **base** input with a paired **source** (counterfactual) input, patches source
activations into the base run through ordinary forward hooks, and scores the tower's pooled output with a batched
metric of the CLIP similarity (``hooked_clip1d.analysis.metrics``). The effect is reported as the fraction of the
belief shift recovered, ``(patched - base) / (source - base)`` on batch means (IDs Eq. 1): 0 = no effect, 1 = the
patched run believes what the source run believes.

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
- ``tl_patching(tower, base, source, metric, kind)``: the same normalised effect through
  ``transformer_lens.patching`` (per single position / head). Works on our towers: ``resid_pre``, ``attn_out``,
  ``head_{out,q,k,v}_{all_pos,by_pos}``, ``head_pattern_{all_pos,by_pos}``, ``head_{all_pos,by_pos}_every`` and,
  with an MLP, ``resid_mid``, ``mlp_out``, ``block_every``. TL's ``get_act_patch_direct_path*`` do not: they hook
  the bridge-only name ``blocks.{l}.attn.hook_{q,k,v}_input``.
- ``text_interchange(model, images, captions)``: does EOT read the subject by position or by identity?
  (Gur-Arieh et al. via Binding §5.2, adapted; see its docstring.)
- ``knockout_hooks`` / ``knockout_sweep``: remove chosen query -> key attention edges. ``method="scores"`` sets
  the pre-softmax score to -inf (the softmax renormalises over the remaining keys); ``method="pattern"`` zeroes
  the pattern entry and renormalises each row (identical result), or with ``renormalize=False`` just zeroes it
  (the row then sums to less than 1). A row with every key knocked out attends to nothing (its output is ``b_O``).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from jaxtyping import Bool, Int
from transformer_lens import patching as tl_patch
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.metrics import (
    caption_belief_metric,
    check_model,
    check_pair_captions,
    check_pair_images,
    check_paired,
    image_belief_metric,
    mirror_images,
    object_token_positions,
    shift_fraction,
    swap_captions,
)
from hooked_clip1d.clip import CLIP1D
from hooked_clip1d.encoders import HookedEncoder

Hook = tuple[str, Callable]
Metric = Callable[[torch.Tensor], torch.Tensor]

VISION_SETS = ("all", "pixels", "objects", "cls")
TEXT_SETS = ("all", "subject", "relation", "object", "eot", "labels")
_QUERY_KEY_HOOKS = ("hook_attn_scores", "hook_pattern")
_HEAD_HOOKS = (
    "hook_q",
    "hook_k",
    "hook_v",
    "hook_z",
    "hook_rot_q",
    "hook_rot_k",
    "hook_result",
    "hook_q_input",
    "hook_k_input",
    "hook_v_input",
    "hook_attn_in",
)


# ---- checks and small helpers ---------------------------------------------------------------------------------------
def _check_tower(tower: object) -> HookedEncoder:
    if isinstance(tower, CLIP1D):
        raise TypeError("pass one tower (model.vision or model.text), not the whole CLIP1D model")
    if not isinstance(tower, HookedEncoder):
        raise TypeError(f"expected a tower (model.vision or model.text), got {type(tower).__name__}")
    if tower.training:
        raise ValueError("the tower is in training mode (dropout is on); call model.eval() before intervening")
    return tower


def _check_model(model: object) -> CLIP1D:
    model = check_model(model)
    if model.training:
        raise ValueError("the model is in training mode (dropout is on); call model.eval() before intervening")
    return model


def _tower_name(tower: HookedEncoder) -> str:
    return tower.cfg.tower


def residual_hook_names(tower: HookedEncoder) -> list[str]:
    """The residual stream at every depth: ``blocks.0.hook_resid_pre`` (embeddings), then each ``hook_resid_post``.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, n_layers=2), seed=0)
    >>> residual_hook_names(m.vision)
    ['blocks.0.hook_resid_pre', 'blocks.0.hook_resid_post', 'blocks.1.hook_resid_post']
    """
    if not isinstance(tower, HookedEncoder):
        raise TypeError(f"expected a tower (model.vision or model.text), got {type(tower).__name__}")
    L = tower.cfg.n_layers
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(L)]


def depth_labels(tower: HookedEncoder) -> list[str]:
    """Readable names of ``residual_hook_names``: ``embed``, ``after L0``, ...

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> depth_labels(CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).text)
    ['embed', 'after L0']
    """
    return ["embed"] + [f"after L{layer}" for layer in range(tower.cfg.n_layers)]


def _hook_label(tower: HookedEncoder, name: str) -> str:
    names = residual_hook_names(tower)
    if name in names:
        return depth_labels(tower)[names.index(name)]
    return name.replace("blocks.", "L").replace(".attn.hook_", " ").replace(".hook_", " ")


def _axes(name: str) -> tuple[int, int | None]:
    """(position axis, head axis) of a hook's activation."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "hook_pooled":
        raise ValueError("hook_pooled has no position axis; patch the residual stream or an attention hook instead")
    if leaf in _QUERY_KEY_HOOKS:
        return 2, 1
    if leaf in _HEAD_HOOKS:
        return 1, 2
    return 1, None


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
    tower_name = _tower_name(tower)
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


def patch_hook(
    name: str,
    source: torch.Tensor,
    mask: Bool[torch.Tensor, "batch pos"],
    head: int | None = None,
) -> Hook:
    """A forward hook ``(name, fn)`` that writes ``source`` (the same hook's activation on the source input) into
    the run at the positions of ``mask`` (query rows for ``hook_pattern`` / ``hook_attn_scores``), only for
    ``head`` if given.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> a, b = m.vision.to_tokens("C 1 . 2 . . . . . . ."), m.vision.to_tokens("C 2 . 1 . . . . . . .")
    >>> _, cache = m.vision.run_with_cache(b)
    >>> name, everywhere = "blocks.0.hook_resid_pre", torch.ones(1, 11, dtype=torch.bool)
    >>> out = m.vision.run_with_hooks(a, fwd_hooks=[patch_hook(name, cache[name], everywhere)])
    >>> torch.allclose(out, m.vision(b))
    True
    """
    pos_axis, head_axis = _axes(name)
    if head is not None and head_axis is None:
        raise ValueError(f"{name} has no head axis; per-head patching needs hook_z, hook_q/k/v, hook_pattern, ...")
    if mask.dtype != torch.bool or mask.ndim != 2:
        raise TypeError(f"mask must be a bool tensor [batch, pos], got {mask.dtype} {tuple(mask.shape)}")

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        if act.shape != source.shape:
            raise ValueError(f"{name}: source activation {tuple(source.shape)} != run activation {tuple(act.shape)}")
        shape = [1] * act.ndim
        shape[0], shape[pos_axis] = mask.shape
        full = mask.view(shape)
        if head is not None:
            hshape = [1] * act.ndim
            hshape[head_axis] = act.shape[head_axis]  # type: ignore[index]
            hmask = torch.zeros(act.shape[head_axis], dtype=torch.bool, device=act.device)  # type: ignore[index]
            hmask[head] = True
            full = full & hmask.view(hshape)
        return torch.where(full, source.to(act.dtype), act)

    return name, fn


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


def _check_hooks(tower: HookedEncoder, names: Sequence[str], heads: bool) -> None:
    if not names:
        raise ValueError("hook_names is empty")
    inactive = tower.inactive_hook_names()
    for n in names:
        if n not in tower.hook_dict:
            raise KeyError(f"{type(tower).__name__} has no hook point {n!r} (see .hook_names())")
        if n in inactive:
            raise ValueError(f"hook point {n!r} does not fire with this tower's flags (e.g. set_use_attn_result)")
        if heads and _axes(n)[1] is None:
            raise ValueError(f"per-head patching needs hooks with a head axis (hook_z, hook_q, hook_pattern, ...): {n}")


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
    tower = _check_tower(tower)
    if not callable(metric):
        raise TypeError("metric must be a callable fn(pooled) -> [batch]")
    if hook_names is None:
        hook_names = (
            [f"blocks.{layer}.attn.hook_z" for layer in range(tower.cfg.n_layers)]
            if heads
            else residual_hook_names(tower)
        )
    hook_names = list(hook_names)
    _check_hooks(tower, hook_names, heads)
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
        masks = position_sets(tower, base, source, sets)
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
        tower=_tower_name(tower),
        hook_names=hook_names,
        labels=[_hook_label(tower, n) for n in hook_names],
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
    model = _check_model(model)
    check_pair_images(images)
    model.vision.validate_tokens(images)
    check_paired(images, captions)
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
    model = _check_model(model)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_paired(images, captions)
    metric = caption_belief_metric(model, images)
    return patch_sweep(
        model.text, captions, swap_captions(captions, model.text.cfg.vocab), metric, hook_names, sets, heads
    )


# ---- transformer_lens.patching --------------------------------------------------------------------------------------
TL_KINDS: dict[str, tuple[str, bool]] = {  # kind -> (transformer_lens.patching function, needs an MLP)
    "resid_pre": ("get_act_patch_resid_pre", False),
    "resid_mid": ("get_act_patch_resid_mid", True),
    "attn_out": ("get_act_patch_attn_out", False),
    "mlp_out": ("get_act_patch_mlp_out", True),
    "block_every": ("get_act_patch_block_every", True),
    "head_out_all_pos": ("get_act_patch_attn_head_out_all_pos", False),
    "head_out_by_pos": ("get_act_patch_attn_head_out_by_pos", False),
    "head_q_all_pos": ("get_act_patch_attn_head_q_all_pos", False),
    "head_q_by_pos": ("get_act_patch_attn_head_q_by_pos", False),
    "head_k_all_pos": ("get_act_patch_attn_head_k_all_pos", False),
    "head_k_by_pos": ("get_act_patch_attn_head_k_by_pos", False),
    "head_v_all_pos": ("get_act_patch_attn_head_v_all_pos", False),
    "head_v_by_pos": ("get_act_patch_attn_head_v_by_pos", False),
    "head_pattern_all_pos": ("get_act_patch_attn_head_pattern_all_pos", False),
    "head_pattern_by_pos": ("get_act_patch_attn_head_pattern_by_pos", False),
    "head_all_pos_every": ("get_act_patch_attn_head_all_pos_every", False),
    "head_by_pos_every": ("get_act_patch_attn_head_by_pos_every", False),
}


@torch.no_grad()
def tl_patching(
    tower: HookedEncoder,
    base: Int[torch.Tensor, "batch pos"],
    source: Int[torch.Tensor, "batch pos"],
    metric: Metric,
    kind: str = "resid_pre",
) -> torch.Tensor:
    """Recovered fraction per single position / head from ``transformer_lens.patching`` (kinds: ``TL_KINDS``).

    TL patches the *clean* cache into the *corrupted* run, so ``source`` plays TL's clean input and ``base`` the
    corrupted one; the output has TL's shape (e.g. ``resid_pre`` -> [n_layers, pos], ``head_out_by_pos`` ->
    [n_layers, pos, n_heads]).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.metrics import image_belief_metric
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> imgs = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
    >>> metric = image_belief_metric(m, m.text.to_tokens(["1 is on the left of 2"]))
    >>> tl_patching(m.vision, imgs, mirror_images(imgs), metric, "head_out_by_pos").shape
    torch.Size([1, 11, 4])
    """
    tower = _check_tower(tower)
    if kind not in TL_KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {sorted(TL_KINDS)}")
    fn_name, needs_mlp = TL_KINDS[kind]
    if needs_mlp and tower.cfg.attn_only:
        raise ValueError(f"kind {kind!r} patches MLP activations, but this tower is attention-only (no MLP)")
    tower.validate_tokens(base)
    tower.validate_tokens(source)
    if base.shape != source.shape:
        raise ValueError(f"base {tuple(base.shape)} and source {tuple(source.shape)} must have the same shape")
    dev = tower.W_E.device
    base, source = base.to(dev), source.to(dev)
    base_m = metric(tower(base)).mean()
    source_out, cache = tower.run_with_cache(source)
    source_m = metric(source_out).mean()
    res = getattr(tl_patch, fn_name)(tower, base, cache, lambda out: metric(out).mean())
    return shift_fraction(res.cpu()[..., None], base_m.cpu()[None], source_m.cpu()[None])


# ---- interchange interventions on the text tower --------------------------------------------------------------------
@dataclass
class InterchangeResult:
    """Caption beliefs of ``text_interchange`` (see its docstring); every tensor ends in a batch axis."""

    base: torch.Tensor  # [batch] beliefs of the captions X rel Y
    counterfactual: torch.Tensor  # [batch] beliefs of the swapped captions Y rel X
    slot_swap: torch.Tensor  # [n_layers, batch]: slots 0 and 2 exchanged in the residual before layer l
    position_id_swap: torch.Tensor | None  # [batch]: positional embeddings of slots 0 and 2 exchanged
    eot_pattern: torch.Tensor  # [n_layers, batch]: EOT's attention row of layer l from the counterfactual
    eot_pattern_heads: torch.Tensor  # [n_layers, n_heads, batch]: the same, one head at a time

    def fractions(self) -> dict[str, Any]:
        """Each intervention's fraction of the base -> counterfactual shift (1 = belief flipped like the swap)."""

        def f(x: torch.Tensor) -> Any:
            return shift_fraction(x, self.base, self.counterfactual).tolist()

        return {
            "slot_swap": f(self.slot_swap),
            "position_id_swap": None if self.position_id_swap is None else f(self.position_id_swap),
            "eot_pattern": f(self.eot_pattern),
            "eot_pattern_heads": f(self.eot_pattern_heads),
            "base_belief": float(self.base.mean()),
            "counterfactual_belief": float(self.counterfactual.mean()),
        }


def _swap_slots_hook(name: str, a: int = 0, b: int = 2) -> Hook:
    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.clone()
        out[:, a], out[:, b] = act[:, b], act[:, a]
        return out

    return name, fn


@torch.no_grad()
def text_interchange(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"]
) -> InterchangeResult:
    """Interchange interventions on the text tower: does EOT read the subject by position or by identity?

    Base ``X rel Y`` (subject X in slot 0, Y in slot 2), counterfactual ``Y rel X``; beliefs are caption beliefs
    against ``images[i]`` (which ``captions[i]`` describes) and its mirror. Three interventions, each reported as
    the fraction of the base -> counterfactual shift it produces:

    - ``slot_swap`` (per layer l, Feng & Steinhardt's binding-ID swap): exchange the residual vectors of slots 0
      and 2 before layer l. Each vector carries its label *and* whatever role/position information is bound to it.
      1 = EOT takes the subject from the *slot* (sequence position, reachable only through the causal mask of an
      earlier layer); 0 = the subject travels with the vector (read by identity of the bound vector). Before the
      last layer (so always, in a 1-layer tower) this is 0 by construction: EOT's output is a sum over its keys,
      blind to their order; only swaps before earlier layers can measure anything.
    - ``position_id_swap`` (learned positions only): exchange the positional embeddings of slots 0 and 2, tokens
      left in place. 1 = the subject is whichever label carries position embedding 0 (for a 1-layer tower this
      is exactly the counterfactual input, so 1 by construction).
    - ``eot_pattern`` (per layer, all heads / ``eot_pattern_heads`` per head; Gur-Arieh's query-side
      interchange): EOT's attention row from the counterfactual run, values from the base run. 0 = EOT attends by
      slot (the same weights whichever label sits there; exactly 0 if its attention ignores content); away from 0
      = the weights follow the labels (e.g. a head that prefers label 17 in either slot); 1 = the whole order
      signal rides on those weights, i.e. on how much of each slot's (position-carrying) value EOT mixes in.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
    >>> r = text_interchange(m, m.vision.to_tokens(["C 1 2 . . . . . . . .", "C . 3 . . 4 . . . . ."]),
    ...                      m.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"]))
    >>> fr = r.fractions()
    >>> abs(fr["slot_swap"][0]) < 1e-4, abs(fr["position_id_swap"] - 1) < 1e-4  # forced in a 1-layer text tower
    (True, True)
    """
    model = _check_model(model)
    text = model.text
    vocab = text.cfg.vocab
    check_pair_captions(captions, vocab)
    check_pair_images(images)
    check_paired(images, captions)
    dev = model.W_proj.device
    captions = captions.to(dev)
    metric = caption_belief_metric(model, images)
    cf = swap_captions(captions, vocab)
    base_m = metric(text(captions)).cpu()
    L, H = text.cfg.n_layers, text.cfg.n_heads
    _, cf_cache = text.run_with_cache(cf, names_filter=lambda n: n.endswith("hook_pattern"))

    resid = residual_hook_names(text)
    slot = torch.stack(
        [metric(text.run_with_hooks(captions, fwd_hooks=[_swap_slots_hook(resid[d])])) for d in range(L)]
    )
    pos_swap = None
    if text.cfg.positional == "learned":
        pos_swap = metric(text.run_with_hooks(captions, fwd_hooks=[_swap_slots_hook("hook_pos_embed")])).cpu()

    def eot_row_hook(layer: int, heads: list[int]) -> Hook:
        name = f"blocks.{layer}.attn.hook_pattern"
        src = cf_cache[name]

        def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            out = act.clone()
            out[:, heads, 3] = src[:, heads, 3]
            return out

        return name, fn

    eot = torch.stack(
        [metric(text.run_with_hooks(captions, fwd_hooks=[eot_row_hook(l_, list(range(H)))])) for l_ in range(L)]
    )
    eot_heads = torch.stack(
        [
            torch.stack([metric(text.run_with_hooks(captions, fwd_hooks=[eot_row_hook(l_, [h])])) for h in range(H)])
            for l_ in range(L)
        ]
    )
    return InterchangeResult(
        base=base_m,
        counterfactual=metric(text(cf)).cpu(),
        slot_swap=slot.cpu(),
        position_id_swap=pos_swap,
        eot_pattern=eot.cpu(),
        eot_pattern_heads=eot_heads.cpu(),
    )


# ---- attention knockout ---------------------------------------------------------------------------------------------
def _edge_mask(tower: HookedEncoder, edges: Any) -> torch.Tensor:
    P = tower.cfg.n_ctx
    if isinstance(edges, torch.Tensor):
        if edges.dtype != torch.bool:
            raise TypeError(f"an edge mask must be a bool tensor, got dtype {edges.dtype}")
        if edges.ndim not in (2, 3) or tuple(edges.shape[-2:]) != (P, P):
            raise ValueError(f"an edge mask must be [{P}, {P}] or [batch, {P}, {P}], got {tuple(edges.shape)}")
        return edges if edges.ndim == 3 else edges[None]
    m = torch.zeros(1, P, P, dtype=torch.bool)
    for e in edges:
        if len(e) != 2:
            raise ValueError(f"edges must be (query_pos, key_pos) pairs, got {e!r}")
        q, k = int(e[0]), int(e[1])
        if not (0 <= q < P and 0 <= k < P):
            raise ValueError(f"edge ({q}, {k}) is outside positions 0..{P - 1}")
        m[0, q, k] = True
    return m


def knockout_hooks(
    tower: HookedEncoder,
    edges: Any,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    method: Literal["scores", "pattern"] = "scores",
    renormalize: bool = True,
) -> list[Hook]:
    """Forward hooks that knock out query -> key attention edges in ``layers`` (default all) and ``heads``.

    ``edges`` is a bool mask [pos, pos] or [batch, pos, pos] (True = remove query -> key), or a list of
    ``(query_pos, key_pos)``. ``method="scores"`` puts -inf on the pre-softmax scores (``hook_attn_scores``);
    ``method="pattern"`` zeroes the pattern (``hook_pattern``) and, if ``renormalize``, rescales each row to sum
    to 1 again, which equals the -inf method.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . 2 . . . . . . .")
    >>> _, cache = m.vision.run_with_cache(img, fwd_hooks=knockout_hooks(m.vision, [(0, 1)]))
    >>> float(cache["pattern", 0][0, :, 0, 1].abs().max()), round(float(cache["pattern", 0][0, 0, 0].sum()), 4)
    (0.0, 1.0)
    """
    tower = _check_tower(tower)
    mask = _edge_mask(tower, edges)
    L, H = tower.cfg.n_layers, tower.cfg.n_heads
    layers = list(range(L)) if layers is None else [int(x) for x in layers]
    bad = [x for x in layers if not 0 <= x < L]
    if bad:
        raise ValueError(f"layers {bad} out of range 0..{L - 1}")
    head_mask = torch.ones(H, dtype=torch.bool)
    if heads is not None:
        bad = [h for h in heads if not 0 <= h < H]
        if bad:
            raise ValueError(f"heads {bad} out of range 0..{H - 1}")
        head_mask = torch.zeros(H, dtype=torch.bool)
        head_mask[list(heads)] = True
    if method not in ("scores", "pattern"):
        raise ValueError(f"method must be 'scores' or 'pattern', got {method!r}")

    def full_mask(act: torch.Tensor) -> torch.Tensor:
        m = mask.to(act.device)
        if m.shape[0] not in (1, act.shape[0]):
            raise ValueError(f"the edge mask has batch {m.shape[0]} but the run has batch {act.shape[0]}")
        return m[:, None] & head_mask.to(act.device)[None, :, None, None]

    def on_scores(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        return act.masked_fill(full_mask(act), float("-inf"))

    def on_pattern(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.masked_fill(full_mask(act), 0.0)
        if renormalize:
            s = out.sum(-1, keepdim=True)
            out = torch.where(s > 0, out / s.clamp(min=torch.finfo(out.dtype).tiny), out)
        return out

    fn = on_scores if method == "scores" else on_pattern
    leaf = "hook_attn_scores" if method == "scores" else "hook_pattern"
    return [(f"blocks.{layer}.attn.{leaf}", fn) for layer in layers]


def cls_object_edges(
    images: Int[torch.Tensor, "batch pos"], which: Literal["left", "right", "objects", "background"]
) -> Bool[torch.Tensor, "batch pos pos"]:
    """Per-image edge masks CLS -> (left object | right object | both objects | every background pixel).

    >>> cls_object_edges(torch.tensor([[7, 0, 1, 0, 2]]), "right")[0, 0].tolist()
    [False, False, False, False, True]
    """
    pos = object_token_positions(images)
    b, P = images.shape
    m = torch.zeros(b, P, P, dtype=torch.bool, device=images.device)
    rows = torch.arange(b, device=images.device)
    if which in ("left", "objects"):
        m[rows, 0, pos[:, 0]] = True
    if which in ("right", "objects"):
        m[rows, 0, pos[:, 1]] = True
    if which == "background":
        m[:, 0, 1:] = images[:, 1:] == 0
    if which not in ("left", "right", "objects", "background"):
        raise ValueError(f"which must be 'left', 'right', 'objects' or 'background', got {which!r}")
    return m


def eot_edges(which: Literal["subject", "relation", "object", "labels"]) -> Bool[torch.Tensor, "4 4"]:
    """Edge mask EOT (slot 3) -> subject (0) | relation (1) | object (2) | both labels, for ``X rel Y`` captions.

    >>> eot_edges("labels")[3].tolist()
    [True, False, True, False]
    """
    slots = {"subject": [0], "relation": [1], "object": [2], "labels": [0, 2]}
    if which not in slots:
        raise ValueError(f"which must be one of {list(slots)}, got {which!r}")
    m = torch.zeros(4, 4, dtype=torch.bool)
    m[3, slots[which]] = True
    return m


@dataclass
class KnockoutResult:
    """Beliefs with each edge set knocked out: ``knocked`` [n_sets, batch]; ``base`` [batch] unablated."""

    tower: str
    names: list[str]
    knocked: torch.Tensor
    base: torch.Tensor

    def retained(self) -> torch.Tensor:
        """Mean knocked-out belief / mean base belief, [n_sets] (1 = no effect, 0 = no relational belief left)."""
        return self.knocked.mean(-1) / self.base.mean()

    def accuracy(self) -> torch.Tensor:
        """Fraction of rows whose belief stays positive (the true relation still wins its swap), [n_sets]."""
        return (self.knocked > 0).float().mean(-1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tower": self.tower,
            "names": self.names,
            "retained": self.retained().tolist(),
            "accuracy": self.accuracy().tolist(),
            "base_belief": float(self.base.mean()),
            "base_accuracy": float((self.base > 0).float().mean()),
        }


@torch.no_grad()
def knockout_sweep(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    captions: Int[torch.Tensor, "batch 4"],
    tower: Literal["vision", "text"] = "vision",
    edge_sets: Mapping[str, Any] | None = None,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    method: Literal["scores", "pattern"] = "scores",
) -> KnockoutResult:
    """Beliefs with chosen attention edges knocked out, one edge set at a time (Binding App. G).

    Vision: image belief; default sets CLS -> left object / right object / both / background. Text: caption belief;
    default sets EOT -> subject / relation / object / both labels.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> r = knockout_sweep(m, img, cap)
    >>> r.names
    ['CLS->left', 'CLS->right', 'CLS->objects', 'CLS->background']
    """
    model = _check_model(model)
    check_pair_images(images)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_paired(images, captions)
    dev = model.W_proj.device
    images, captions = images.to(dev), captions.to(dev)
    if tower == "vision":
        enc: HookedEncoder = model.vision
        tokens, metric = images, image_belief_metric(model, captions)
        if edge_sets is None:
            edge_sets = {f"CLS->{w}": cls_object_edges(images, w) for w in ("left", "right", "objects", "background")}
    elif tower == "text":
        enc = model.text
        tokens, metric = captions, caption_belief_metric(model, images)
        if edge_sets is None:
            edge_sets = {f"EOT->{w}": eot_edges(w) for w in ("subject", "relation", "object", "labels")}
    else:
        raise ValueError(f"tower must be 'vision' or 'text', got {tower!r}")
    base = metric(enc(tokens))
    knocked = [
        metric(enc.run_with_hooks(tokens, fwd_hooks=knockout_hooks(enc, e, layers, heads, method)))
        for e in edge_sets.values()
    ]
    return KnockoutResult(tower=tower, names=list(edge_sets), knocked=torch.stack(knocked).cpu(), base=base.cpu())


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
