"""TransformerLens 3.x and 4.x behind one interface: the behaviour that differs between them where it touches us.

The package runs on ``transformer-lens>=3.3,<5`` (SAELens 6 needs ``<4``; TL 4 is the default install). From 3.3 on,
``HookedRootModule`` is a top-level export (4.x removed the older ``transformer_lens.hook_points`` path) and
``HookedRootModule.list_hooks`` exists; 3.0-3.2 lack both. What still differs, and what this module does about it:

- ``run_with_cache(..., remove_batch_dim=True)``: TL 3.x slices the position axis by the activation's rank *before*
  it drops the batch axis, so a hook without a position axis (our ``hook_pooled`` ``[batch, d_model]``) raises an
  ``IndexError``. :func:`remove_batch_dim` does TL 4's drop (a leading axis of size 1 only) after the run, so the
  cache is the same on both.

Example:
    >>> from hooked_clip1d.model.tl_compat import TL_VERSION, HookedRootModule
    >>> TL_VERSION >= (3, 3)
    True
    >>> HookedRootModule.__name__
    'HookedRootModule'
"""

from __future__ import annotations

from importlib.metadata import version as _dist_version
from typing import Any

import torch
from transformer_lens import HookedRootModule  # top level from TL 3.3 on (the floor of the pin)


def _parse(v: str) -> tuple[int, int]:
    parts = (v.split(".") + ["0"])[:2]
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts)  # type: ignore[return-value]


TL_VERSION: tuple[int, int] = _parse(_dist_version("transformer-lens"))  # (major, minor) of the installed TL

__all__ = ["HookedRootModule", "TL_VERSION", "remove_batch_dim", "slice_positions"]

_HEAD_POS_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result")  # position axis third from last (TL's rule)


def remove_batch_dim(cache: dict[str, torch.Tensor], pos_slice: Any = None) -> dict[str, torch.Tensor]:
    """TL 4's ``remove_batch_dim`` (and ``pos_slice``) applied to a cache made with the batch axis kept.

    Each tensor loses a leading axis of size 1 (one of another size stays, as in TL 4); then ``pos_slice`` (TL's
    ``Slice`` or anything ``Slice.unwrap`` takes) cuts the position axis where the activation has one: third from
    last on ``hook_q/k/v/z/result``, second from last elsewhere. Keys (gradient ones ``*_grad`` included) keep
    their order.

    Example:
        >>> import torch
        >>> c = remove_batch_dim({"hook_pooled": torch.zeros(1, 8), "blocks.0.attn.hook_z": torch.zeros(1, 5, 2, 4)})
        >>> {k: tuple(v.shape) for k, v in c.items()}
        {'hook_pooled': (8,), 'blocks.0.attn.hook_z': (5, 2, 4)}
        >>> tuple(remove_batch_dim({"blocks.0.hook_resid_post": torch.zeros(1, 5, 8)}, pos_slice=0)[
        ...     "blocks.0.hook_resid_post"].shape)
        (1, 8)
    """
    out = {name: t.squeeze(0) if t.ndim > 0 and t.shape[0] == 1 else t for name, t in cache.items()}
    return slice_positions(out, pos_slice, batch_dim=False)


def slice_positions(cache: dict[str, torch.Tensor], pos_slice: Any, batch_dim: bool = True) -> dict[str, torch.Tensor]:
    """TL's ``pos_slice`` applied to every activation that has a position axis (third from last on
    ``hook_q/k/v/z/result``, second from last elsewhere); one without (``hook_pooled`` [batch, d_model]) is left
    whole: TL's rule (dim -2) would cut its batch axis.

    Example:
        >>> import torch
        >>> c = slice_positions({"hook_pooled": torch.zeros(3, 8), "blocks.0.hook_resid_post": torch.zeros(3, 5, 8)}, 0)
        >>> {k: tuple(v.shape) for k, v in c.items()}
        {'hook_pooled': (3, 8), 'blocks.0.hook_resid_post': (3, 1, 8)}
    """
    if pos_slice is None:
        return dict(cache)
    from transformer_lens.utilities.slice import Slice

    sl = Slice.unwrap(pos_slice)
    out: dict[str, torch.Tensor] = {}
    for name, t in cache.items():
        point = name.removesuffix("_grad")
        pos_dim = -3 if point.endswith(_HEAD_POS_HOOKS) else -2
        has_pos = t.dim() >= -pos_dim + (1 if batch_dim else 0) and not point.endswith("hook_pooled")
        out[name] = sl.apply(t, dim=pos_dim) if has_pos else t
    return out
