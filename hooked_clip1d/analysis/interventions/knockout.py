"""Attention knockout (Binding §5.2, App. G): beliefs with chosen query -> key attention edges removed.

- ``cls_object_edges`` / ``eot_edges``: the edge masks of the paper's questions (CLS -> each object or the
  background; EOT -> each caption slot).
- ``knockout_sweep(model, images, captions, tower)``: the relational belief with one edge set knocked out at a time,
  as a ``KnockoutResult`` (retained belief, accuracy).

The hooks themselves come from ``hooks.knockout_hooks`` (re-exported here): ``method="scores"`` sets the
pre-softmax score to -inf (the softmax renormalises over the remaining keys); ``method="pattern"`` zeroes the
pattern entry and renormalises each row (identical result), or with ``renormalize=False`` just zeroes it (the row
then sums to less than 1). A row with every key knocked out attends to nothing (its output is ``b_O``).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens(["C 1 . 2 . . . . . . ."]), m.text.to_tokens(["1 is on the left of 2"])
    >>> knockout_sweep(m, img, cap, tower="text").names
    ['EOT->subject', 'EOT->relation', 'EOT->object', 'EOT->labels']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from jaxtyping import Bool, Int

from hooked_clip1d.analysis.hooks import check_eval, knockout_hooks
from hooked_clip1d.analysis.metrics import (
    caption_belief_metric,
    check_captions_describe,
    check_model,
    check_pair_captions,
    check_pair_images,
    image_belief_metric,
    object_token_positions,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedEncoder


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
    model = check_eval(check_model(model))
    check_pair_images(images)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
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


__all__ = ["KnockoutResult", "cls_object_edges", "eot_edges", "knockout_hooks", "knockout_sweep"]
