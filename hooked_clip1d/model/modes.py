"""Every submodule's train / eval mode kept: a function that needs eval mode for a moment gives the caller's back.

``module.train(was)`` restores the top module's mode and sets every submodule to it: a tower left in train mode
inside an eval model (or one block in train mode) came back changed. ``eval_mode`` records each submodule's own.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> _ = m.vision.blocks[0].train()
    >>> with eval_mode(m):
    ...     m.vision.blocks[0].training
    False
    >>> m.training, m.vision.blocks[0].training
    (False, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

from torch import nn

M = TypeVar("M", bound=nn.Module)


@contextlib.contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """``modules`` in eval mode inside the block; after it, each of their submodules in the mode it had before."""
    modes = [(mod, mod.training) for m in modules for mod in m.modules()]
    try:
        for m in modules:
            m.eval()
        yield
    finally:
        for mod, training in modes:
            mod.training = training


def check_eval(module: M, what: str = "this analysis") -> M:
    """``module`` (a model or a tower) if it and every submodule are in eval mode, else a ``ValueError`` naming the
    submodules in training mode: dropout would add noise to every measurement and draw the global RNG. A tower left
    in train mode inside an eval model counts (``model.eval(); model.vision.train()``).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> check_eval(m) is m
        True
        >>> _ = m.vision.train()
        >>> try:
        ...     check_eval(m, "evaluate()")
        ... except ValueError as err:
        ...     print(str(err)[:59])
        evaluate() needs the model in eval mode (call model.eval())
    """
    in_train = [name or "model" for name, mod in module.named_modules() if mod.training]
    if in_train:
        more = f" and {len(in_train) - 3} more" if len(in_train) > 3 else ""
        raise ValueError(
            f"{what} needs the model in eval mode (call model.eval()); in training mode: {in_train[:3]}{more} "
            "(dropout would add noise)"
        )
    return module


__all__ = ["check_eval", "eval_mode"]
