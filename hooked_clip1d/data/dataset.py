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
import functools
import itertools
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Int

from hooked_clip1d.data.vocab import Vocabulary
from hooked_clip1d.settings import DataConfig
from hooked_clip1d.settings.checks import check_int, is_int

SPLITS = ("train", "val_single", "val_seen", "val_unseen")
SPLIT_TITLES = {
    "train": "training set",
    "val_single": "single-object positional",
    "val_seen": "seen-pair configuration",
    "val_unseen": "unseen pair",
}


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
        return Vocabulary(self.config.n_labels)

    def training_pairs(self) -> tuple[Int[torch.Tensor, "m pos"], Int[torch.Tensor, "m 4"]]:
        """(image, caption) rows for contrastive training: each image once per true caption."""
        tr = self.splits["train"]
        rows, cols = (tr.targets >= 0).nonzero(as_tuple=True)
        return tr.images[rows], self.captions[tr.targets[rows, cols]]

    def describe(self, split: Split | str, i: int) -> str:
        """``'C . . 17 . . 19 . . . .  ->  17 is on the left of 19'`` for row ``i`` of a split."""
        if isinstance(split, str) and split not in self.splits:
            raise KeyError(f"no split {split!r}; the splits are {list(self.splits)}")
        s = self.splits[split] if isinstance(split, str) else split
        caps = [self.vocab.caption_to_text(self.captions[t]) for t in s.targets[i].tolist() if t >= 0]
        return f"{self.vocab.image_to_text(s.images[i])}  ->  {' | '.join(caps)}"


def build_dataset(cfg: DataConfig) -> Dataset:
    """Generate every split of ``cfg`` deterministically from ``cfg.seed`` (see the module docstring).

    The last few configs' datasets are kept (the figures and their null draws build the same one many times); each
    call returns tensors of its own, so a caller that writes into one changes no other call's dataset.

    Example:
        >>> cfg = DataConfig(n_labels=6, n_heldout=2, n2=2)
        >>> a, b = build_dataset(cfg), build_dataset(cfg)
        >>> a.splits["train"].images[0, 0] = 0
        >>> bool(b.splits["train"].images[0, 0] == Vocabulary(6).cls)
        True
    """
    if not isinstance(cfg, DataConfig):
        raise TypeError(f"build_dataset takes a DataConfig, got {type(cfg).__name__}")
    built = _built(cfg)
    return Dataset(
        config=built.config,
        captions=built.captions.clone(),
        splits={
            k: dataclasses.replace(
                sp, **{f: getattr(sp, f).clone() for f in ("images", "targets", "objects", "positions")}
            )
            for k, sp in built.splits.items()
        },
    )


def _to_split(name: str, r: list[tuple[list[int], list[int], tuple[int, int], tuple[int, int]]]) -> Split:
    return Split(
        name=name,
        images=torch.tensor([a[0] for a in r], dtype=torch.long),
        targets=torch.tensor([a[1] for a in r], dtype=torch.long),
        objects=torch.tensor([a[2] for a in r], dtype=torch.long),
        positions=torch.tensor([a[3] for a in r], dtype=torch.long),
    )


@functools.lru_cache(maxsize=8)
def _built(cfg: DataConfig) -> Dataset:
    """``build_dataset``'s work, kept for the last 8 configs (never handed out: ``build_dataset`` copies it)."""
    rng = np.random.default_rng(cfg.seed)
    vocab = Vocabulary(cfg.n_labels)
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

    # add and pair_targets run once per image: plain values hoisted out, each pair's captions built once
    blank = [vocab.cls] + [0] * D
    pair_caps: dict[tuple[int, int], list[int]] = {}

    def add(split: str, objects: dict[int, int], targets: list[int], objs: tuple[int, int], pos: tuple[int, int]):
        img = blank.copy()
        for p, x in objects.items():
            img[p + 1] = x
        rows[split].append((img, targets + [-1] * (2 - len(targets)), objs, pos))

    def pair_targets(x: int, y: int) -> list[int]:
        t = pair_caps.get((x, y))
        if t is None:
            t = [cap_id(vocab.left_caption(x, y))]
            if cfg.caption_mode == "left_right":
                t.append(cap_id(vocab.right_caption(x, y)))
            pair_caps[(x, y)] = t
        return t

    # Single-object images: n1 train + n_val validation positions per label, all distinct.
    for x in range(1, cfg.n_labels + 1):
        ps = rng.permutation(D)[: cfg.n1 + cfg.n_val].tolist()
        t = [cap_id(vocab.single_caption(x))]
        for i, p in enumerate(ps):
            add("train" if i < cfg.n1 else "val_single", {p: x}, t, (x, 0), (p, -1))

    # Two-object images of trained ordered pairs: n2 train + n_val seen-pair validation position pairs.
    # caption_order "shuffled": a training image's caption names its objects in a random order, from a generator of
    # its own (the images, and every other draw, are those of "ordered")
    swap = np.random.default_rng([cfg.seed, 1]) if cfg.caption_order == "shuffled" else None
    if swap is not None:  # the caption table in the order "ordered" builds it (a swapped caption registers early)
        for x, y in itertools.permutations(range(1, cfg.n_pair + 1), 2):
            pair_targets(x, y)
    for x, y in itertools.permutations(range(1, cfg.n_pair + 1), 2):
        idx = rng.permutation(len(pos_pairs))[: cfg.n2 + cfg.n_val].tolist()
        t = pair_targets(x, y)
        for i, j in enumerate(idx):
            p1, p2 = pos_pairs[j]
            train = i < cfg.n2
            ti = pair_targets(y, x) if train and swap is not None and swap.random() < 0.5 else t
            add("train" if train else "val_seen", {p1: x, p2: y}, ti, (x, y), (p1, p2))

    # Unseen pairs: ordered pairs of held-out labels, n_val distinct position pairs each.
    for x, y in itertools.permutations(range(cfg.n_pair + 1, cfg.n_labels + 1), 2):
        idx = rng.permutation(len(pos_pairs))[: cfg.n_val].tolist()
        t = pair_targets(x, y)
        for j in idx:
            p1, p2 = pos_pairs[j]
            add("val_unseen", {p1: x, p2: y}, t, (x, y), (p1, p2))

    return Dataset(
        config=cfg,
        captions=torch.tensor(caption_table, dtype=torch.long),
        splits={s: _to_split(s, rows[s]) for s in SPLITS},
    )


class EpochPermutations:
    """A run's per-epoch data order: ``torch.randperm(m)`` from a generator seeded with the training seed, drawn
    exactly as ``training.Trainer`` draws it (the batched engine keeps one per member; ``spe``: steps per epoch).

    Example:
        >>> order = EpochPermutations(m=10, bs=4, seed=0)
        >>> order.spe, sorted(order.perm(1).tolist()) == list(range(10))
        (3, True)
    """

    def __init__(self, m: int, bs: int, seed: int):
        m, bs = check_int(m, "EpochPermutations: m (training items)"), check_int(bs, "EpochPermutations: bs")
        if not is_int(seed):
            raise ValueError(f"EpochPermutations: seed must be an int, got {seed!r}")
        self.m, self.bs = m, bs
        self.spe = -(-m // bs)  # steps per epoch (the last batch may be short)
        self.gen = torch.Generator().manual_seed(seed)
        self.next_epoch = 0  # the next epoch whose permutation gen will draw
        self.states: dict[int, torch.Tensor] = {}  # epoch -> gen state before drawing its permutation
        self.perms: dict[int, torch.Tensor] = {}

    def perm(self, epoch: int) -> torch.Tensor:
        while self.next_epoch <= epoch:
            self.states[self.next_epoch] = self.gen.get_state()
            self.perms[self.next_epoch] = torch.randperm(self.m, generator=self.gen)
            self.next_epoch += 1
        if epoch not in self.perms:
            raise KeyError(self._gone(epoch, "permutation"))
        return self.perms[epoch]

    def _gone(self, epoch: int, what: str) -> str:
        if not is_int(epoch) or epoch < 0:
            return f"epoch must be an int >= 0, got {epoch!r}"
        kept = sorted(self.perms)
        return (
            f"epoch {epoch}'s {what} is no longer kept (forget_before / restore dropped it; kept: "
            f"{kept[0] if kept else 'none'}..{self.next_epoch - 1 if kept else ''}, next to draw: {self.next_epoch})"
        )

    def state_before(self, epoch: int) -> torch.Tensor:
        """Generator state before epoch ``epoch``'s permutation (``Trainer``'s ``rng.data`` after epoch-1)."""
        if epoch == self.next_epoch:
            return self.gen.get_state()
        if epoch not in self.states:
            raise KeyError(
                self._gone(epoch, "generator state")
                if not is_int(epoch) or epoch < self.next_epoch
                else f"epoch {epoch}'s generator state is not drawn yet (next to draw: {self.next_epoch}; "
                f"perm({epoch - 1}) draws up to it)"
            )
        return self.states[epoch]

    def restore(self, epoch: int, state: torch.Tensor) -> None:
        self.gen.set_state(state)
        self.next_epoch = epoch
        self.states, self.perms = {}, {}

    def forget_before(self, epoch: int) -> None:
        for e in [e for e in self.perms if e < epoch]:
            del self.perms[e]
            self.states.pop(e, None)
