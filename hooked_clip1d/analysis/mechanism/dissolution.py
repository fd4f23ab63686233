"""Where the late training signal comes from: the contrastive loss and its gradient split by whether an item's
caption is shared with another item of its batch (the false-negatives study, record x18; docs/fidelity.md).

Standard CLIP's loss (``TrainConfig.negatives="all"``) has each image's own caption as its only positive, so when two
items of a batch share their caption, each one's caption is a negative for the other that can never be beaten: a
floor on the loss, and a gradient that pushes two layouts of one ordered pair apart. ``caption_split(model,
dataset, seed, epoch)`` measures that on one training epoch in the run's own data order (``data.EpochPermutations``,
the order ``Trainer`` draws): the loss is a sum over items (each item's image->text and text->image terms), so it
and its gradient split exactly into the items whose caption is unique in their batch and those that share it,
``g = g_unique + g_shared``; the shared items' share of the gradient on a parameter is ``<g_shared, g> / <g, g>``
(the two shares sum to 1), reported for each vision head's ``W_Q`` and ``W_K`` slices and the vision positional
table ``W_pos``, beside the gradient norms.

The model is read in eval mode (no dropout: the loss the weights were driven towards, not one dropout draw).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> data = DataConfig(n_labels=8, n_heldout=3, n2=3)
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, d_model=16, d_head=4), seed=0)
    >>> r = caption_split(m, build_dataset(data), seed=0, epoch=0, batch_size=16)
    >>> 0 < r["shared_items"] < 1, abs(r["loss"] - r["loss_unique"] - r["loss_shared"]) < 1e-5
    (True, True)
    >>> s = r["share"]["W_pos"]; abs(s["shared"] + s["unique"] - 1) < 1e-4
    True
"""

from __future__ import annotations

from typing import Any

import torch

from hooked_clip1d.analysis.metrics import check_model
from hooked_clip1d.data.dataset import Dataset, EpochPermutations
from hooked_clip1d.model.captioning import check_contrastive
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.functional import NEGATIVES, same_caption
from hooked_clip1d.model.modes import eval_mode
from hooked_clip1d.settings.checks import check_int


def _item_losses(logits: torch.Tensor, same: torch.Tensor, negatives: str) -> torch.Tensor:
    """Each item's ``0.5 * (image->text + text->image)`` cross-entropy under ``negatives`` (``[B]``); their mean is
    ``functional.symmetric_ce`` of the batch."""
    B = logits.shape[0]
    eye = torch.eye(B, dtype=torch.bool)
    off = same & ~eye
    drop = off if negatives == "distinct" else torch.zeros_like(off)
    if negatives == "shared":
        targets = same.float() / same.float().sum(-1, keepdim=True)
    else:
        targets = eye.float()
    zero = targets == 0

    def direction(x: torch.Tensor) -> torch.Tensor:
        lsm = torch.log_softmax(x.masked_fill(drop, float("-inf")), dim=-1)
        return -(targets * lsm.masked_fill(zero, 0.0)).sum(-1)

    return 0.5 * (direction(logits) + direction(logits.T))


def _slices(model: CLIP1D) -> dict[str, tuple[torch.Tensor, Any]]:
    """The parameter slices the split is read on: each vision head's W_Q and W_K, the positional table."""
    attn = model.vision.blocks[0].attn
    out: dict[str, tuple[torch.Tensor, Any]] = {"W_pos": (model.vision.pos_embed.W_pos, slice(None))}
    for h in range(attn.W_Q.shape[0]):
        out[f"W_Q.{h}"] = (attn.W_Q, h)
        out[f"W_K.{h}"] = (attn.W_K, h)
    return out


def _split_record(
    epoch: int,
    negatives: str,
    loss: dict[str, float],
    shared_items: float,
    grads: dict[str, dict[str, torch.Tensor]],
) -> dict[str, Any]:
    """``caption_split``'s result from its sums: the two parts' losses and each slice's gradient norm and shares."""
    out: dict[str, Any] = {
        "epoch": epoch,
        "negatives": negatives,
        "loss": loss["unique"] + loss["shared"],
        "loss_unique": loss["unique"],
        "loss_shared": loss["shared"],
        "shared_items": shared_items,
        "share": {},
        "norm": {},
    }
    for k in grads["unique"]:
        gu, gs = grads["unique"][k].flatten(), grads["shared"][k].flatten()
        g = gu + gs
        gg = float(g @ g)
        out["norm"][k] = gg**0.5
        out["share"][k] = (
            {"shared": float(gs @ g) / gg, "unique": float(gu @ g) / gg} if gg > 0 else {"shared": None, "unique": None}
        )
    return out


def caption_split(
    model: CLIP1D,
    dataset: Dataset,
    seed: int,
    epoch: int,
    batch_size: int | None = None,
    negatives: str = "all",
    orders: EpochPermutations | None = None,
) -> dict[str, Any]:
    """The loss and its gradient over training epoch ``epoch`` (0-based; the batches of ``seed``'s data order),
    split into the items whose caption is unique in their batch and those that share it (module docstring).

    Returns ``loss`` (the epoch's mean batch loss), ``loss_unique`` + ``loss_shared`` (= ``loss``), ``shared_items``
    (the fraction of items that share their caption), and per parameter slice (``W_pos``, ``W_Q.h``, ``W_K.h``):
    ``norm`` (of the whole gradient) and ``share`` (``{"shared": <g_shared, g> / <g, g>, "unique": ...}``). The
    model's mode and gradients are given back as they were. ``orders``: the run's ``EpochPermutations`` (``seed``'s,
    at this batch size), kept by a caller that reads many snapshots of one run (each epoch's order is drawn once).
    """
    if negatives not in NEGATIVES:
        raise ValueError(f"caption_split: negatives must be one of {list(NEGATIVES)}, got {negatives!r}")
    check_model(model)
    check_contrastive(model, "caption_split (the contrastive loss's split)")
    epoch = check_int(epoch, "caption_split: epoch (0-based)", minimum=0)
    images, captions = dataset.training_pairs()
    bs = dataset.config.batch_size if batch_size is None else check_int(batch_size, "caption_split: batch_size", 2)
    if orders is None:
        orders = EpochPermutations(len(images), bs, seed)
    elif (orders.m, orders.bs) != (len(images), bs):
        raise ValueError(
            f"caption_split: orders are of {orders.m} items in batches of {orders.bs}, the data of "
            f"{len(images)} in batches of {bs}"
        )
    order = orders.perm(epoch)
    params = [p for p in model.parameters()]
    saved = [None if p.grad is None else p.grad.clone() for p in params]
    restore_modes = eval_mode(model)  # each submodule's own mode given back on leaving
    restore_modes.__enter__()
    slices = _slices(model)
    grads = {part: {k: torch.zeros_like(t[idx]) for k, (t, idx) in slices.items()} for part in ("unique", "shared")}
    loss = {"unique": 0.0, "shared": 0.0}
    n_batches = -(-len(images) // bs)
    n_shared = 0
    try:
        for start in range(0, len(images), bs):
            idx = order[start : start + bs]
            caps = captions[idx]
            same = same_caption(caps)
            shared = same.sum(-1) > 1
            n_shared += int(shared.sum().detach())
            logits = model(images[idx], caps)
            items = _item_losses(logits, same, negatives) / (len(idx) * n_batches)  # the epoch mean, by item
            for part, mask in (("unique", ~shared), ("shared", shared)):
                if not bool(mask.any()):
                    continue
                total = items[mask].sum()
                loss[part] += float(total.detach())
                model.zero_grad(set_to_none=True)
                total.backward(retain_graph=part == "unique")
                for k, (t, i) in slices.items():
                    if t.grad is not None:
                        grads[part][k] += t.grad[i].detach()
    finally:
        restore_modes.__exit__(None, None, None)
        for p, g in zip(params, saved, strict=True):
            p.grad = g
    return _split_record(epoch, negatives, loss, n_shared / len(images), grads)
