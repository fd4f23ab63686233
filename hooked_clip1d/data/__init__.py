"""Data (Sec. 2.1): the token vocabulary of images and captions (``vocab``) and the seeded dataset with its splits
and per-epoch data order (``dataset``).

Example:
    >>> from hooked_clip1d.data import DataConfig, build_dataset
    >>> ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    >>> sorted(ds.splits)
    ['train', 'val_seen', 'val_single', 'val_unseen']
"""

from hooked_clip1d.lazy import lazy_exports

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SPLITS": "hooked_clip1d.data.dataset",
        "SPLIT_TITLES": "hooked_clip1d.data.dataset",
        "DataConfig": "hooked_clip1d.data.dataset",
        "Dataset": "hooked_clip1d.data.dataset",
        "EpochPermutations": "hooked_clip1d.data.dataset",
        "Split": "hooked_clip1d.data.dataset",
        "build_dataset": "hooked_clip1d.data.dataset",
        "Vocabulary": "hooked_clip1d.data.vocab",
    },
)


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
