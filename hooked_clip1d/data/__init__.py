"""Data (Sec. 2.1): the token vocabulary of images and captions (``vocab``) and the seeded dataset with its splits
and per-epoch data order (``dataset``).

Example:
    >>> from hooked_clip1d.data import DataConfig, build_dataset
    >>> ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    >>> sorted(ds.splits)
    ['train', 'val_seen', 'val_single', 'val_unseen']
"""

import importlib
from typing import Any

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
_LAZY = {
    "SPLITS": "hooked_clip1d.data.dataset",
    "SPLIT_TITLES": "hooked_clip1d.data.dataset",
    "DataConfig": "hooked_clip1d.data.dataset",
    "Dataset": "hooked_clip1d.data.dataset",
    "EpochPermutations": "hooked_clip1d.data.dataset",
    "Split": "hooked_clip1d.data.dataset",
    "build_dataset": "hooked_clip1d.data.dataset",
    "Vocabulary": "hooked_clip1d.data.vocab",
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
    "DataConfig",
    "Dataset",
    "EpochPermutations",
    "SPLITS",
    "SPLIT_TITLES",
    "Split",
    "Vocabulary",
    "build_dataset",
]
