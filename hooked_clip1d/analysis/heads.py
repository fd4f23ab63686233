"""Per-head attention roles: which object the CLS token attends to most (Paper Sec. 4, Fig. 4c; App. F).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8), seed=0).eval()
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> bias = cls_object_bias(m.vision, ds.splits["val_unseen"])
    >>> sorted(bias)
    ['left', 'other', 'right']
    >>> bias["left"].shape
    torch.Size([1, 4])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hooked_clip1d.data import Split
from hooked_clip1d.encoders import HookedVisionEncoder


@torch.no_grad()
def cls_object_bias(
    model: HookedVisionEncoder, split: Split, fwd_hooks: Sequence[tuple[str | Callable, Callable]] = ()
) -> dict[str, torch.Tensor]:
    """For each layer and head, the fraction of two-object images whose CLS row attends most to the left object,
    to the right object, or to another token (``left``, ``right``, ``other``: each [n_layers, n_heads]).
    """
    if not isinstance(model, HookedVisionEncoder):
        raise TypeError("cls_object_bias needs the vision tower (model.vision)")
    pair = split.is_pair
    if not bool(pair.any()):
        raise ValueError(f"split {split.name!r} has no two-object images")
    images = split.images[pair].to(model.W_E.device)
    pos = split.positions[pair].to(model.W_E.device) + 1  # pixel index -> input position (CLS is 0)
    _, cache = model.run_with_cache(images, names_filter=lambda n: n.endswith("hook_pattern"), fwd_hooks=fwd_hooks)
    L = model.cfg.n_layers
    cls_rows = torch.stack([cache["pattern", layer][:, :, 0, :] for layer in range(L)])  # [L, b, h, k]
    top = cls_rows.argmax(-1)  # [L, b, h]
    left = (top == pos[None, :, 0, None]).float().mean(1)
    right = (top == pos[None, :, 1, None]).float().mean(1)
    return {"left": left, "right": right, "other": (1 - left - right).clamp(min=0.0)}
