"""The model (Sec. 2.2, 4): configs and presets (``config``), the shared maths (``functional``), hooked components
with TransformerLens's hook and weight names (``components``), the two towers (``encoders``), the CLIP model
(``clip``) and its files (``checkpoint``: safetensors weights with their configs, loaded without running code).

Example:
    >>> from hooked_clip1d.model import CLIP1D, CLIPConfig
    >>> CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).cfg.vision.n_heads
    4
"""

import importlib
from typing import Any

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
_LAZY = {
    "CLIP1D": "hooked_clip1d.model.clip",
    "CLIPConfig": "hooked_clip1d.model.clip",
    "clip_loss": "hooked_clip1d.model.clip",
    "EncoderConfig": "hooked_clip1d.model.config",
    "TextConfig": "hooked_clip1d.model.config",
    "VisionConfig": "hooked_clip1d.model.config",
    "preset": "hooked_clip1d.model.config",
    "HookedEncoder": "hooked_clip1d.model.encoders",
    "HookedTextEncoder": "hooked_clip1d.model.encoders",
    "HookedVisionEncoder": "hooked_clip1d.model.encoders",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "CLIP1D",
    "CLIPConfig",
    "EncoderConfig",
    "HookedEncoder",
    "HookedTextEncoder",
    "HookedVisionEncoder",
    "TextConfig",
    "VisionConfig",
    "clip_loss",
    "preset",
]
