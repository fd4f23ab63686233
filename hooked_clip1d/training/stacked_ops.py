"""The stacked engine's two kernels, beside ``DropoutRNG`` (its two ways of drawing dropout masks: ``stacked``'s
module docstring says how they differ).

- ``keep_mask``: a CPU dropout mask from 32 random bits per element (``dropout_rng="fast"`` on the CPU).
- ``Adjacent``: the fused QKV projection's view of a block's q | k | v weights, which the flat layout
  (``StackedCLIP.flat_layout``) puts side by side, with a backward that splits the gradient back (or adds it to the
  flat gradient buffer in one kernel).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch

DropoutRNG = Literal["matched", "fast"]


def keep_mask(shape: tuple[int, ...] | torch.Size, keep: float, dtype: torch.dtype) -> torch.Tensor:
    """A CPU dropout mask ``Bernoulli(keep) / keep`` from 32 random bits per element, drawn 64 bits at a time.

    ``bernoulli_`` draws one double per element through the generator (~5 ns/element here); this draws half as
    many 64-bit words and compares 32-bit halves to a threshold: the keep probability is ``keep`` rounded to
    2**-32 (and the scale is its exact inverse), 3-4x cheaper. Used by ``dropout_rng="fast"`` on CPU.

    Example:
        >>> m = keep_mask((2, 1000), 0.9, torch.float32)
        >>> scale = 2**32 / round(0.9 * 2**32)  # 1 / keep, keep rounded to 2**-32
        >>> bool(((m == 0) | (m == scale)).all()), 0.85 < float((m > 0).float().mean()) < 0.95
        (True, True)
    """
    n = math.prod(shape)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64)
    bits = words.view(torch.int32)[:n]
    threshold = round(keep * 2**32)  # P(u32 < threshold) = threshold / 2**32
    mask = bits < (threshold - 2**31)  # int32 = u32 - 2**31
    return mask.view(shape).to(dtype).mul_(2**32 / threshold)


class Adjacent(torch.autograd.Function):
    """``[*rows, n * H * Dh]`` view of n per-head tensors ``[*rows, H, Dh]`` that lie side by side in one block of
    the flat layout (``StackedCLIP.flat_layout``: q | k | v of a block); its gradient splits back into the n.

    Example:
        >>> buf = torch.arange(12.0).view(2, 3, 1, 2)  # 2 rows of [q | k | v], 1 head of 2 dims
        >>> Adjacent.apply(buf[:, 0], buf[:, 1])  # q | k of each row, a view of buf
        tensor([[0., 1., 2., 3.],
                [6., 7., 8., 9.]])
    """

    @staticmethod
    def forward(ctx: Any, *ws: torch.Tensor) -> torch.Tensor:
        """The view; ``ctx.target``: the same view of the gradients when they are views of one buffer laid out like
        the weights (``StackedAdamW``'s flat gradients), where the backward then adds the gradient in one kernel."""
        w = ws[0]
        *rows, H, Dh = w.shape
        ptr = w.untyped_storage().data_ptr()
        for i, x in enumerate(ws):  # each next to the last, rows strided over all n: what flat_layout builds
            if (
                x.untyped_storage().data_ptr() != ptr
                or x.storage_offset() != w.storage_offset() + i * H * Dh
                or x.stride() != w.stride()
                or w.stride()[-2:] != (Dh, 1)
                or (len(rows) and w.stride(-3) < len(ws) * H * Dh)
            ):
                raise RuntimeError("fused QKV: the weights are not laid out side by side (StackedCLIP.flat_layout)")
        ctx.hd = (H, Dh)
        ctx.target = None
        grads = [x.grad for x in ws]
        g0 = grads[0]
        if g0 is not None and all(
            gr is not None
            and gr.untyped_storage().data_ptr() == g0.untyped_storage().data_ptr()
            and gr.storage_offset() - g0.storage_offset() == x.storage_offset() - w.storage_offset()
            and gr.stride() == x.stride()
            for gr, x in zip(grads, ws, strict=True)
        ):
            ctx.target = g0.as_strided((*rows, len(ws) * H * Dh), (*g0.stride()[:-2], 1), g0.storage_offset())
        return w.as_strided((*rows, len(ws) * H * Dh), (*w.stride()[:-2], 1), w.storage_offset())

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        H, Dh = ctx.hd
        n = g.shape[-1] // (H * Dh)
        if ctx.target is not None and not torch.is_grad_enabled():
            # the flat gradient buffer: one add for the n weights, instead of n accumulations into strided views
            # (autograd accepts those, with a warning that they break its gradient layout contract)
            ctx.target.add_(g)
            return (None,) * n
        return tuple(g[..., i * H * Dh : (i + 1) * H * Dh].unflatten(-1, (H, Dh)) for i in range(n))
