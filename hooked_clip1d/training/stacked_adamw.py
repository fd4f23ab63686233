"""``StackedAdamW``: torch's AdamW over parameters stacked on a leading model axis, with per-member ``lr``,
``weight_decay``, decay masks and gradient masks (``TrainConfig.no_decay`` / ``frozen``).

Flat buffers: when the parameters are views that tile one buffer (``StackedCLIP(flat=True)``, the default), the
gradients and both moments are views of buffers of the same layout, and a step is one fused AdamW call on one tensor
(plus one multiply for masks or per-member decay) instead of a call over ~70 tensors; ``zero_grad`` zeroes the
gradient buffer, which the backward accumulates into. Every update is elementwise, so each entry gets exactly what
the per-tensor path gives it (bit for bit on the CPU: ``tests/test_fast_step.py``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


class StackedAdamW:
    """AdamW over stacked parameters with per-member ``lr`` and ``weight_decay`` (torch's AdamW update rule).

    When every member has the same ``lr`` and ``weight_decay`` it is ``torch.optim.AdamW(fused=True)`` on the stacked
    tensors (elementwise, so each member's slice gets exactly the single-model update); otherwise the same formula
    with per-member factors (``torch._foreach_*`` ops). ``state[i]`` holds ``step``, ``exp_avg``, ``exp_avg_sq``
    of parameter ``i``, ``torch.optim.AdamW``'s layout with a leading model axis.

    Example:
        >>> p = nn.Parameter(torch.ones(2, 3))
        >>> opt = StackedAdamW([p], lr=[0.1, 0.2], weight_decay=[0.0, 0.0])
        >>> p.grad = torch.ones(2, 3)
        >>> opt.step()
        >>> [round(v, 4) for v in p.detach()[:, 0].tolist()]
        [0.9, 0.8]
    """

    def __init__(
        self,
        params: Sequence[nn.Parameter],
        lr: Sequence[float],
        weight_decay: Sequence[float],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        decay_masks: Sequence[torch.Tensor | None] | None = None,
        grad_masks: Sequence[torch.Tensor | None] | None = None,
        coupled: bool = False,
        flat: bool | None = None,
        fold_decay: bool = True,
    ):
        """``coupled``: Adam with L2 decay in the gradient (``grad += wd * mask * p``, torch's
        ``Adam(weight_decay=wd)``; ``TrainConfig.optimizer="adam"``) instead of AdamW's decoupled decay.
        ``flat``: one fused update over flat buffers (module docstring); None: when the parameters tile one buffer;
        True: a ``ValueError`` when they do not; False: per tensor. ``fold_decay``: where some parameters' decay is
        masked (so the group is not ``uniform``), let the fused kernel decay the unmasked ones itself, in the same
        pass as their update, instead of a multiply over them first; done only on the CPU and where the kernel's
        factor ``float32(1 - lr * wd)`` is the very float the multiply uses (``decay_folds``), so every update is bit
        for bit the same either way (False: always the separate multiply, as before 2026-11-26)."""
        self.params = list(params)
        # per parameter, None or a 0/1 tensor of its stacked shape: decayed where 1 (TrainConfig.no_decay); the
        # gradient is kept where 1 (0: TrainConfig.frozen, never moved: zero gradient, zero Adam moments, no decay)
        self.decay_masks = list(decay_masks) if decay_masks is not None else [None] * len(self.params)
        self.grad_masks = list(grad_masks) if grad_masks is not None else [None] * len(self.params)
        if len(self.decay_masks) != len(self.params) or len(self.grad_masks) != len(self.params):
            raise ValueError("StackedAdamW needs one decay mask and one gradient mask (or None) per parameter")
        self.masked = any(m is not None for m in [*self.decay_masks, *self.grad_masks])
        with torch.no_grad():
            for p, gm in zip(self.params, self.grad_masks, strict=True):
                if gm is not None:
                    p.mul_(gm)  # frozen entries are 0 (and stay there)
        self.lr, self.wd = [float(v) for v in lr], [float(v) for v in weight_decay]
        if not self.params or len(self.lr) != self.params[0].shape[0] or len(self.wd) != len(self.lr):
            raise ValueError("StackedAdamW needs one lr and one weight_decay per member (leading axis)")
        self.betas, self.eps = betas, eps
        self.coupled = coupled
        dev = self.params[0].device
        self.state: list[dict[str, torch.Tensor]] = [
            {
                "step": torch.zeros((), dtype=torch.float32, device=dev),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
            for p in self.params
        ]
        self.fused = dev.type in ("cpu", "cuda")
        self._fold_decay = fold_decay
        if flat not in (None, True, False):
            raise ValueError(f"flat must be None, True or False, got {flat!r}")
        self.flat_requested = flat
        self._bind_flat()
        self._set_factors(self.lr, self.wd)

    # ---- flat buffers ---------------------------------------------------------------------------------------------
    def rebind(self, flat: bool | None = None) -> None:
        """Follow a change of the parameters' layout (``StackedCLIP.flat_layout``): moments kept, gradients
        dropped; ``flat`` as in the constructor."""
        self.flat_requested = flat
        for st in self.state:
            st["exp_avg"], st["exp_avg_sq"] = st["exp_avg"].clone(), st["exp_avg_sq"].clone()
        for p in self.params:
            p.grad = None
        self._bind_flat()
        self._set_factors(self.lr, self.wd)

    def _bind_flat(self) -> None:
        """Put the moments (values kept) and the gradients into buffers laid out like the parameters' one buffer,
        when they tile one and ``flat`` allows it; else the per-tensor layout."""
        self.flat_param: torch.Tensor | None = None
        base = None if self.flat_requested is False else _flat_base(self.params)
        if base is None:
            if self.flat_requested:
                raise ValueError(
                    "StackedAdamW(flat=True) needs parameters that tile one buffer (StackedCLIP(flat=True))"
                )
            return
        lo = base.storage_offset()
        self._views = [(tuple(p.shape), tuple(p.stride()), p.storage_offset() - lo) for p in self.params]
        m, v = torch.zeros_like(base), torch.zeros_like(base)
        for st, view in zip(self.state, self._views, strict=True):
            for key, buf in (("exp_avg", m), ("exp_avg_sq", v)):
                new = buf.as_strided(*view)
                new.copy_(st[key])
                st[key] = new
        self.flat_param, self._m, self._v = base, m, v
        self._g = torch.zeros_like(base)
        self._grads = [self._g.as_strided(*view) for view in self._views]
        for p, g in zip(self.params, self._grads, strict=True):
            p.grad = g

    def _flatten(self, per_param: Sequence[torch.Tensor | float | None], fill: float) -> torch.Tensor:
        """One flat tensor holding each parameter's factor (a tensor broadcast to its shape, a number, or None for
        ``fill``) where that parameter lies in the buffer."""
        assert self.flat_param is not None
        out = torch.full_like(self.flat_param, fill)
        for f, view in zip(per_param, self._views, strict=True):
            if f is not None:
                t = out.as_strided(*view)
                t.copy_(torch.as_tensor(f, dtype=t.dtype, device=t.device).expand_as(t))
        return out

    def set_lr(self, lr: float) -> None:
        """Give every member the learning rate ``lr`` from the next step on (a schedule: ``TrainConfig.lr_at``)."""
        lrs = [float(lr)] * len(self.lr)
        if lrs != self.lr:
            self._set_factors(lrs, self.wd)

    @property
    def fold_decay(self) -> bool:
        """Whether the fused kernel decays the parameters it can decay exactly (the constructor's ``fold_decay``);
        settable (False: the separate multiply for every parameter, the path of before; the same numbers)."""
        return self._fold_decay

    @fold_decay.setter
    def fold_decay(self, on: bool) -> None:
        self._fold_decay = bool(on)
        self._set_factors(self.lr, self.wd)

    def _set_factors(self, lr: list[float], wd: list[float]) -> None:
        self.lr, self.wd = lr, wd
        self.uniform = len(set(lr)) == 1 and len(set(wd)) == 1 and not self.masked
        if self.coupled:  # per parameter: wd (per member) x decay mask, the factor of p added to the gradient
            dev = self.params[0].device
            wd_t = torch.tensor(wd, device=dev)
            self._l2 = []
            for p, mask in zip(self.params, self.decay_masks, strict=True):
                f = wd_t.view(-1, *([1] * (p.ndim - 1))).to(p.dtype)
                self._l2.append(f if mask is None else f * mask)
        if not self.uniform:
            dev = self.params[0].device
            lr_t, wd_t = torch.tensor(lr, device=dev), torch.tensor(wd, device=dev)
            self._lr = [lr_t.view(-1, *([1] * (p.ndim - 1))).to(p.dtype) for p in self.params]
            self._decay = []
            for p, mask in zip(self.params, self.decay_masks, strict=True):
                lw = (lr_t * wd_t).view(-1, *([1] * (p.ndim - 1))).to(p.dtype)
                d = 1 - lw if mask is None else 1 - lw * mask
                # on a GPU, full-shape factors: a _foreach_mul_ over same-shape lists takes torch's multi-tensor fast
                # path (a few kernels), broadcast factors the per-tensor one (a launch per parameter, ~2 of 8 ms of
                # a full-model step on an H100); on the CPU broadcasting reads less memory (0.8 vs 1.3 ms, K = 18)
                self._decay.append(d.expand_as(p).contiguous() if dev.type == "cuda" else d)
        # parameters whose decay the fused kernel applies itself (one lr, one weight decay, no mask): it multiplies by
        # float32(1 - lr * wd) computed in double, which must be the float32 factor of _decay to fold exactly
        # (the CPU kernel's form; CUDA's kernel writes its decay another way, so on a GPU the multiply stays)
        folds = self._fold_decay and self.fused and not self.coupled and len(set(lr)) == 1 and len(set(wd)) == 1
        folds = folds and not self.uniform and self.params[0].device.type == "cpu" and decay_folds(lr[0], wd[0])
        self._folded = [folds and mask is None for mask in self.decay_masks]
        if self.flat_param is not None:  # the same factors, each where its parameter lies in the flat buffer
            self._flat_gmask = (
                None if not any(m is not None for m in self.grad_masks) else self._flatten(self.grad_masks, 1.0)
            )
            self._flat_l2 = self._flatten(self._l2, 0.0) if self.coupled else None
            self._flat_decay = None if self.uniform else self._flatten(self._decay, 1.0)
            self._flat_lr = None if self.uniform else self._flatten(self._lr, 0.0)

    def zero_grad(self) -> None:
        """Gradients to None (per tensor), or the flat gradient buffer to zero (its views stay the gradients)."""
        if self.flat_param is None:
            for p in self.params:
                p.grad = None
            return
        self._g.zero_()
        for p, g in zip(self.params, self._grads, strict=True):
            if p.grad is not g:
                p.grad = g

    @torch.no_grad()
    def step(self) -> None:
        if self.flat_param is not None:
            self._step_flat()
            return
        b1, b2 = self.betas
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        idx = [i for i, p in enumerate(self.params) if p.grad is not None]
        gm = [i for i in idx if self.grad_masks[i] is not None]
        if gm:  # full-shape masks: one multi-tensor op
            torch._foreach_mul_([self.params[i].grad for i in gm], [self.grad_masks[i] for i in gm])
        grads = [self.params[i].grad for i in idx]
        m = [self.state[i]["exp_avg"] for i in idx]
        v = [self.state[i]["exp_avg_sq"] for i in idx]
        steps = [self.state[i]["step"] for i in idx]
        if self.coupled:
            for i in idx:  # L2 decay enters the gradient (and so the Adam moments), as torch.optim.Adam's
                self.params[i].grad.addcmul_(self.params[i], self._l2[i])
            if self.fused and len(set(self.lr)) == 1:
                torch._foreach_add_(steps, 1)
                torch._fused_adamw_(
                    params,
                    grads,
                    m,
                    v,
                    [],
                    steps,
                    lr=self.lr[0],
                    beta1=b1,
                    beta2=b2,
                    weight_decay=0.0,
                    eps=self.eps,
                    amsgrad=False,
                    maximize=False,
                )
                return
        if self.uniform and self.fused and not self.coupled:
            torch._foreach_add_(steps, 1)
            torch._fused_adamw_(
                params,
                grads,
                m,
                v,
                [],
                steps,
                lr=self.lr[0],
                beta1=b1,
                beta2=b2,
                weight_decay=self.wd[0],
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        if self.fused and len(set(self.lr)) == 1 and not self.coupled:
            # per-member or masked decay, one lr: decay first (as AdamW does), then the fused kernel without decay;
            # the parameters whose decay folds into the kernel (_folded) are decayed there, in the same pass
            torch._foreach_add_(steps, 1)
            for part, wd in (
                ([j for j, i in enumerate(idx) if not self._folded[i]], 0.0),
                ([j for j, i in enumerate(idx) if self._folded[i]], self.wd[0]),
            ):
                if not part:
                    continue
                ps = [params[j] for j in part]
                if not wd:
                    torch._foreach_mul_(ps, [self._decay[idx[j]] for j in part])
                torch._fused_adamw_(
                    ps,
                    [grads[j] for j in part],
                    [m[j] for j in part],
                    [v[j] for j in part],
                    [],
                    [steps[j] for j in part],
                    lr=self.lr[0],
                    beta1=b1,
                    beta2=b2,
                    weight_decay=wd,
                    eps=self.eps,
                    amsgrad=False,
                    maximize=False,
                )
            return
        torch._foreach_add_(steps, 1)
        step = float(steps[0].item())
        bc1 = 1 - b1**step
        bc2_sqrt = math.sqrt(1 - b2**step)
        if self.coupled:
            pass  # the decay is in the gradient
        elif self.uniform:
            torch._foreach_mul_(params, 1 - self.lr[0] * self.wd[0])
        else:
            torch._foreach_mul_(params, [self._decay[i] for i in idx])
        torch._foreach_lerp_(m, grads, 1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, 1 - b2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        upd = torch._foreach_div(m, denom)
        if self.uniform:
            torch._foreach_mul_(upd, self.lr[0] / bc1)
        else:
            torch._foreach_mul_(upd, [self._lr[i] / bc1 for i in idx])
        torch._foreach_sub_(params, upd)

    @torch.no_grad()
    def _step_flat(self) -> None:
        """``step`` on the flat buffers: the per-tensor path's operations, each once over the whole buffer."""
        b1, b2 = self.betas
        p, g, m, v = self.flat_param, self._g, self._m, self._v
        for i, (q, view) in enumerate(zip(self.params, self._grads, strict=True)):
            if q.grad is not view:  # replaced (nn.Module.zero_grad(), an assignment): take it into the buffer
                if q.grad is None:
                    raise RuntimeError(
                        f"StackedAdamW (flat): parameter {i} has no gradient; zero the gradients with "
                        "StackedAdamW.zero_grad(), which keeps them in the flat buffer"
                    )
                view.copy_(q.grad)
                q.grad = view
        steps = [st["step"] for st in self.state]  # one per parameter (saved per parameter), equal
        if self._flat_gmask is not None:
            g.mul_(self._flat_gmask)
        if self.coupled:
            g.addcmul_(p, self._flat_l2)  # L2 decay enters the gradient, as torch.optim.Adam's
        one_lr = len(set(self.lr)) == 1
        if self.fused and one_lr:
            torch._foreach_add_(steps, 1)
            decay_in_kernel = self.uniform and not self.coupled
            if not decay_in_kernel and not self.coupled:
                p.mul_(self._flat_decay)  # per-member or masked decay first (as AdamW does), then no decay
            torch._fused_adamw_(
                [p],
                [g],
                [m],
                [v],
                [],
                steps[:1],
                lr=self.lr[0],
                beta1=b1,
                beta2=b2,
                weight_decay=self.wd[0] if decay_in_kernel else 0.0,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        torch._foreach_add_(steps, 1)
        step = float(steps[0].item())
        bc1 = 1 - b1**step
        bc2_sqrt = math.sqrt(1 - b2**step)
        if self.coupled:
            pass
        elif self.uniform:
            p.mul_(1 - self.lr[0] * self.wd[0])
        else:
            p.mul_(self._flat_decay)
        m.lerp_(g, 1 - b1)
        v.mul_(b2)
        v.addcmul_(g, g, value=1 - b2)
        denom = v.sqrt()
        denom.div_(bc2_sqrt)
        denom.add_(self.eps)
        upd = m / denom
        if self.uniform:
            upd.mul_(self.lr[0] / bc1)
        else:
            upd.mul_(self._flat_lr / bc1)
        p.sub_(upd)

    def keep(self, members: Sequence[int], params: Sequence[nn.Parameter]) -> None:
        """Restrict to ``members`` after ``StackedCLIP.keep`` replaced the parameters with ``params``."""
        idx = torch.tensor(list(members), device=self.params[0].device)
        self.params = list(params)
        for st in self.state:
            st["exp_avg"] = st["exp_avg"].index_select(0, idx).clone()
            st["exp_avg_sq"] = st["exp_avg_sq"].index_select(0, idx).clone()
        self.decay_masks = [None if m is None else m.index_select(0, idx) for m in self.decay_masks]
        self.grad_masks = [None if m is None else m.index_select(0, idx) for m in self.grad_masks]
        self._bind_flat()
        self._set_factors([self.lr[i] for i in members], [self.wd[i] for i in members])


def decay_folds(lr: float, weight_decay: float) -> bool:
    """Whether torch's fused AdamW kernel, given ``lr`` and ``weight_decay``, multiplies a parameter by exactly the
    decay factor ``StackedAdamW`` multiplies by itself: the kernel rounds ``1 - lr * wd``, computed in double, to
    float32; ``StackedAdamW`` computes it in float32 (``1 - float32(lr) * float32(wd)``). They agree for the paper's
    ``lr = 1e-4``, ``wd = 0.2`` but not for every pair.

    Example:
        >>> decay_folds(1e-4, 0.2), decay_folds(0.019019267774246368, 0.08507777529137683)
        (True, False)
    """
    in_float32 = 1 - torch.tensor(lr, dtype=torch.float32) * torch.tensor(weight_decay, dtype=torch.float32)
    return bool(in_float32 == torch.tensor(1 - lr * weight_decay, dtype=torch.float32))


def _flat_base(params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """A 1-D view of the buffer the parameters are views of, when they tile it exactly (each entry in exactly one
    parameter, as ``StackedCLIP.flat_layout`` lays them out); else None.

    Example:
        >>> buf = torch.zeros(6)
        >>> _flat_base([buf[:2].view(2, 1), buf[2:]]).shape, _flat_base([buf[:2], buf[3:]])
        (torch.Size([6]), None)
    """
    p0 = params[0]
    ptr = p0.untyped_storage().data_ptr()
    if any(p.untyped_storage().data_ptr() != ptr or p.dtype != p0.dtype for p in params):
        return None
    lo = min(p.storage_offset() for p in params)
    total = sum(p.numel() for p in params)
    if (lo + total) * p0.element_size() > p0.untyped_storage().nbytes():
        return None
    cover = torch.zeros(total, dtype=torch.int32)
    for p in params:
        last = p.storage_offset() - lo + sum((n - 1) * st for n, st in zip(p.shape, p.stride(), strict=True))
        if p.numel() and last >= total:
            return None
        cover.as_strided(tuple(p.shape), tuple(p.stride()), p.storage_offset() - lo).add_(1)
    if not bool((cover == 1).all()):
        return None
    return p0.detach().as_strided((total,), (1,), lo)
