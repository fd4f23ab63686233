"""The synthetic 1D image-caption dataset of the paper (Sec. 2.1, 2.3, App. A), seeded and split.

``build_dataset(DataConfig(...))`` returns a ``Dataset`` with a table of every distinct caption of the training and
validation sets (the retrieval candidates of Sec. 2.3) and four splits:

=================  ==========================================================================================
split              contents
=================  ==========================================================================================
``train``          ``n1`` single-object images per label 1..Ntot at distinct random positions, and ``n2``
                   two-object images per ordered pair (X != Y) of labels 1..Npair at distinct position pairs
                   p1 < p2 (X at p1).
``val_single``     single-object positional: ``n_val`` images per label at positions not used in ``train``
                   for that label.
``val_seen``       seen-pair configuration: ``n_val`` images per trained ordered pair at position pairs not used
                   in ``train`` for that pair.
``val_unseen``     unseen pair: ``n_val`` images per ordered pair of the held-out labels Npair+1..Ntot.
=================  ==========================================================================================

Caption mode ``left`` pairs each two-object image with ``X is on the left of Y``; ``left_right`` pairs it with that
and ``Y is on the right of X`` (Sec. 7), so a split row has one or two true captions (``targets``, -1 padded).

Example:
    >>> ds = build_dataset(DataConfig(n_labels=20, n2=10, seed=0))
    >>> {k: len(s) for k, s in ds.splits.items()}
    {'train': 2200, 'val_single': 100, 'val_seen': 1050, 'val_unseen': 100}
    >>> ds.describe(ds.splits["val_unseen"], 0)  # doctest: +SKIP
    'C . . 17 . . 19 . . . .  ->  17 is on the left of 19'
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Int

from hooked_clip1d.vocab import Vocabulary

SPLITS = ("train", "val_single", "val_seen", "val_unseen")
SPLIT_TITLES = {
    "train": "training set",
    "val_single": "single-object positional",
    "val_seen": "seen-pair configuration",
    "val_unseen": "unseen pair",
}


MAX_IMAGES = 1_000_000  # a DataConfig whose splits would hold more images is refused before anything is built


@dataclass(frozen=True)
class DataConfig:
    """Dataset settings with the paper's defaults (Sec. 2.1). Impossible settings raise ``ValueError``."""

    n_labels: int = 20  # Ntot: object categories 1..Ntot
    n_heldout: int = 5  # Nval: labels Npair+1..Ntot kept out of two-object training (unseen pairs)
    n1: int = 5  # single-object training images per label
    n2: int = 10  # two-object training images per ordered training pair (layout diversity)
    n_val: int = 5  # validation images per label / ordered pair, in every validation split
    d_image: int = 10  # Dimage, pixels per image
    caption_mode: Literal["left", "left_right"] = "left"  # two-object captions: XLY only, or XLY and YRX
    seed: int = 0  # seeds the generator: same seed, same dataset

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"DataConfig.{field}={getattr(self, field)!r}: {why}")

        for f in ("n_labels", "n_heldout", "n1", "n2", "n_val", "d_image", "seed"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                raise bad(f, "must be an int")
        for f in ("n1", "n2", "n_val"):
            if getattr(self, f) < 1:
                raise bad(f, "must be >= 1")
        if self.seed < 0:
            raise bad("seed", "must be >= 0")
        if self.d_image < 2:
            raise bad("d_image", "a two-object image needs at least 2 pixels")
        if self.n_heldout < 2:
            raise bad("n_heldout", "the unseen-pair split needs at least 2 held-out labels to form an ordered pair")
        if self.n_pair < 2:
            raise bad(
                "n_labels",
                f"n_pair = n_labels - n_heldout = {self.n_pair}, but two-object training needs n_pair >= 2",
            )
        if self.n1 + self.n_val > self.d_image:
            raise bad(
                "n1",
                f"n1 + n_val = {self.n1 + self.n_val} distinct positions per label are needed for disjoint "
                f"single-object train/validation images, but an image has only d_image = {self.d_image} pixels",
            )
        n_pos_pairs = math.comb(self.d_image, 2)
        if self.n2 + self.n_val > n_pos_pairs:
            raise bad(
                "n2",
                f"n2 + n_val = {self.n2 + self.n_val} distinct position pairs per ordered label pair are needed "
                f"for disjoint train/seen-pair validation images, but d_image = {self.d_image} has only "
                f"{n_pos_pairs} position pairs p1 < p2",
            )
        if self.n_val > n_pos_pairs:
            raise bad("n_val", f"more than the {n_pos_pairs} position pairs that exist")
        if self.caption_mode not in ("left", "left_right"):
            raise bad("caption_mode", "must be 'left' or 'left_right'")
        if self.n_images > MAX_IMAGES:
            raise bad(
                "n_labels",
                f"this dataset would hold {self.n_images:,} images (more than MAX_IMAGES = {MAX_IMAGES:,}); the "
                "paper's largest has about 10,000",
            )

    @property
    def n_images(self) -> int:
        """Images in all splits together (train, val_single, val_seen, val_unseen), before any is built."""
        pairs = self.n_pair * (self.n_pair - 1)
        return (
            self.n_labels * (self.n1 + self.n_val)
            + pairs * (self.n2 + self.n_val)
            + self.n_heldout * (self.n_heldout - 1) * self.n_val
        )

    @property
    def n_pair(self) -> int:
        """Npair: labels 1..Npair appear in two-object training images."""
        return self.n_labels - self.n_heldout

    @property
    def vocab(self) -> Vocabulary:
        return Vocabulary(self.n_labels)

    @property
    def batch_size(self) -> int:
        """The paper's batch size for this caption mode: 50 (left) or 100 (left_right)."""
        return 50 if self.caption_mode == "left" else 100

    def replace(self, **changes: Any) -> DataConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DataConfig:
        known = {f.name for f in dataclasses.fields(DataConfig)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown DataConfig fields {unknown}")
        return DataConfig(**d)


@dataclass(frozen=True)
class Split:
    """One split: images, the indices of their true captions in ``Dataset.captions``, and scene metadata."""

    name: str
    images: Int[torch.Tensor, "n pos"]  # vision inputs, CLS at position 0
    targets: Int[torch.Tensor, "n 2"]  # caption-table rows of the true captions; -1 pads single-caption rows
    objects: Int[torch.Tensor, "n 2"]  # (left label, right label); (label, 0) for single-object images
    positions: Int[torch.Tensor, "n 2"]  # pixel index of each object (0..d_image-1); -1 where absent

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def is_pair(self) -> torch.Tensor:
        """Bool mask of two-object images."""
        return self.objects[:, 1] > 0


@dataclass(frozen=True)
class Dataset:
    """All splits of one ``DataConfig`` plus the caption table used as retrieval candidates."""

    config: DataConfig
    captions: Int[torch.Tensor, "n_captions 4"]  # every distinct caption of train + validation sets
    splits: dict[str, Split]

    @property
    def vocab(self) -> Vocabulary:
        return self.config.vocab

    def training_pairs(self) -> tuple[Int[torch.Tensor, "m pos"], Int[torch.Tensor, "m 4"]]:
        """(image, caption) rows for contrastive training: each image once per true caption."""
        tr = self.splits["train"]
        rows, cols = (tr.targets >= 0).nonzero(as_tuple=True)
        return tr.images[rows], self.captions[tr.targets[rows, cols]]

    def describe(self, split: Split | str, i: int) -> str:
        """``'C . . 17 . . 19 . . . .  ->  17 is on the left of 19'`` for row ``i`` of a split."""
        s = self.splits[split] if isinstance(split, str) else split
        caps = [self.vocab.caption_to_text(self.captions[t]) for t in s.targets[i].tolist() if t >= 0]
        return f"{self.vocab.image_to_text(s.images[i])}  ->  {' | '.join(caps)}"


def build_dataset(cfg: DataConfig) -> Dataset:
    """Generate every split of ``cfg`` deterministically from ``cfg.seed`` (see the module docstring)."""
    rng = np.random.default_rng(cfg.seed)
    vocab = cfg.vocab
    D = cfg.d_image
    pos_pairs = list(itertools.combinations(range(D), 2))  # all p1 < p2

    caption_table: list[tuple[int, ...]] = []
    caption_index: dict[tuple[int, ...], int] = {}

    def cap_id(c: torch.Tensor) -> int:
        key = tuple(c.tolist())
        if key not in caption_index:
            caption_index[key] = len(caption_table)
            caption_table.append(key)
        return caption_index[key]

    rows: dict[str, list[tuple[list[int], list[int], tuple[int, int], tuple[int, int]]]] = {s: [] for s in SPLITS}

    def add(split: str, objects: dict[int, int], targets: list[int], objs: tuple[int, int], pos: tuple[int, int]):
        img = [vocab.cls] + [0] * D
        for p, x in objects.items():
            img[p + 1] = x
        rows[split].append((img, targets + [-1] * (2 - len(targets)), objs, pos))

    def pair_targets(x: int, y: int) -> list[int]:
        t = [cap_id(vocab.left_caption(x, y))]
        if cfg.caption_mode == "left_right":
            t.append(cap_id(vocab.right_caption(x, y)))
        return t

    # Single-object images: n1 train + n_val validation positions per label, all distinct.
    for x in range(1, cfg.n_labels + 1):
        ps = rng.permutation(D)[: cfg.n1 + cfg.n_val].tolist()
        t = [cap_id(vocab.single_caption(x))]
        for i, p in enumerate(ps):
            add("train" if i < cfg.n1 else "val_single", {p: x}, t, (x, 0), (p, -1))

    # Two-object images of trained ordered pairs: n2 train + n_val seen-pair validation position pairs.
    for x, y in itertools.permutations(range(1, cfg.n_pair + 1), 2):
        idx = rng.permutation(len(pos_pairs))[: cfg.n2 + cfg.n_val].tolist()
        t = pair_targets(x, y)
        for i, j in enumerate(idx):
            p1, p2 = pos_pairs[j]
            add("train" if i < cfg.n2 else "val_seen", {p1: x, p2: y}, t, (x, y), (p1, p2))

    # Unseen pairs: ordered pairs of held-out labels, n_val distinct position pairs each.
    for x, y in itertools.permutations(range(cfg.n_pair + 1, cfg.n_labels + 1), 2):
        idx = rng.permutation(len(pos_pairs))[: cfg.n_val].tolist()
        t = pair_targets(x, y)
        for j in idx:
            p1, p2 = pos_pairs[j]
            add("val_unseen", {p1: x, p2: y}, t, (x, y), (p1, p2))

    def to_split(name: str) -> Split:
        r = rows[name]
        return Split(
            name=name,
            images=torch.tensor([a[0] for a in r], dtype=torch.long),
            targets=torch.tensor([a[1] for a in r], dtype=torch.long),
            objects=torch.tensor([a[2] for a in r], dtype=torch.long),
            positions=torch.tensor([a[3] for a in r], dtype=torch.long),
        )

    return Dataset(
        config=cfg,
        captions=torch.tensor(caption_table, dtype=torch.long),
        splits={s: to_split(s) for s in SPLITS},
    )
