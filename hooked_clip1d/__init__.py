"""hooked_clip1d: train, load, hook, dissect and visualise the tiny 1D CLIP models of
"Left-Right Symmetry Breaking in CLIP-style Vision-Language Models" (arXiv 2601.12809).

Example:
    >>> from hooked_clip1d import build_dataset, load_model
    >>> model = load_model("simplified-ntot20-n2-10")
    >>> ds = build_dataset(model.data_config)
    >>> out, cache = model.vision.run_with_cache(ds.splits["val_unseen"].images[:4])
    >>> cache["pattern", 0].shape
    torch.Size([4, 4, 11, 11])
"""

import importlib
from typing import Any

from hooked_clip1d._version import __version__ as __version__

# the public names and their modules: imported on first use (PEP 562), so `import hooked_clip1d` and the command
# line's --help do not load torch and TransformerLens
_LAZY = {
    "BatchedTrainer": "hooked_clip1d.batched",
    "Member": "hooked_clip1d.batched",
    "train_batched": "hooked_clip1d.batched",
    "train_fast": "hooked_clip1d.batched",
    "CLIP1D": "hooked_clip1d.clip",
    "CLIPConfig": "hooked_clip1d.clip",
    "clip_loss": "hooked_clip1d.clip",
    "EncoderConfig": "hooked_clip1d.config",
    "TextConfig": "hooked_clip1d.config",
    "VisionConfig": "hooked_clip1d.config",
    "preset": "hooked_clip1d.config",
    "DataConfig": "hooked_clip1d.settings",
    "Dataset": "hooked_clip1d.data",
    "Split": "hooked_clip1d.data",
    "build_dataset": "hooked_clip1d.data",
    "HookedEncoder": "hooked_clip1d.encoders",
    "HookedTextEncoder": "hooked_clip1d.encoders",
    "HookedVisionEncoder": "hooked_clip1d.encoders",
    "evaluate": "hooked_clip1d.evaluation",
    "list_pretrained": "hooked_clip1d.pretrained",
    "load_model": "hooked_clip1d.pretrained",
    "resolve_model": "hooked_clip1d.pretrained",
    "load_spec": "hooked_clip1d.sweep",
    "run_sweep": "hooked_clip1d.sweep",
    "TrainConfig": "hooked_clip1d.settings",
    "Trainer": "hooked_clip1d.training",
    "train": "hooked_clip1d.training",
    "Vocabulary": "hooked_clip1d.vocab",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hooked_clip1d' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "BatchedTrainer",
    "Member",
    "CLIP1D",
    "CLIPConfig",
    "clip_loss",
    "DataConfig",
    "Dataset",
    "EncoderConfig",
    "HookedEncoder",
    "HookedTextEncoder",
    "HookedVisionEncoder",
    "Split",
    "TrainConfig",
    "Trainer",
    "TextConfig",
    "VisionConfig",
    "Vocabulary",
    "build_dataset",
    "evaluate",
    "list_pretrained",
    "load_model",
    "load_spec",
    "resolve_model",
    "run_sweep",
    "preset",
    "train",
    "train_batched",
    "train_fast",
]
