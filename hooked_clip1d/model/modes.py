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

from torch import nn


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


__all__ = ["eval_mode"]
