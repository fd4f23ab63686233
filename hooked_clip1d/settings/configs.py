"""The dataset's and the optimiser's settings with the paper's defaults: ``DataConfig`` (Sec. 2.1), ``TrainConfig``
(Sec. 2.2), the parameter groups a run may exempt from weight decay or freeze, and the snapshot schedules.

Example:
    >>> DataConfig().n_pair, TrainConfig().weight_decay
    (15, 0.2)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hooked_clip1d.settings.checks import check_int, check_real, is_real
from hooked_clip1d.settings.fields import knob, legacy_values

MAX_IMAGES = 1_000_000  # a DataConfig whose splits would hold more images is refused before anything is built
MAX_D_IMAGE = 4_096  # building lists all C(d_image, 2) position pairs (8.4 M here; the paper's images have 10)


@dataclass(frozen=True)
class DataConfig:
    """Dataset settings with the paper's defaults (Sec. 2.1). Impossible settings raise ``ValueError``."""

    # batched "schedule": the training set's size (steps per epoch), equal in a group under a learning-rate schedule
    n_labels: int = knob(20, "Ntot: object categories 1..Ntot", batched="schedule")
    n_heldout: int = knob(5, "Nval: labels Npair+1..Ntot kept out of two-object training (unseen pairs)",
                          batched="schedule")  # fmt: skip
    n1: int = knob(5, "single-object training images per label", batched="schedule")
    n2: int = knob(10, "two-object training images per ordered training pair (layout diversity)", batched="schedule")
    n_val: int = knob(5, "validation images per label / ordered pair, in every validation split", batched="member")
    d_image: int = knob(10, "Dimage, pixels per image", batched="schedule")
    caption_mode: Literal["left", "left_right"] = knob(
        "left", "two-object captions: XLY only ('left'), or XLY and YRX ('left_right')", batched="schedule"
    )
    seed: int = knob(0, "seeds the generator: same seed, same dataset", batched="member")
    # a trained control (verdicts v3, docs/fidelity.md): the same images, captions that carry no order
    caption_order: Literal["ordered", "shuffled"] = knob(
        "ordered", "two-object training captions: ordered (the paper's), or shuffled (a trained control: each training "
        "image's caption names its two objects in a random order, drawn once per image from the data seed, so the "
        "captions carry the label set and not the order; the images and every validation caption are unchanged)",
        batched="member",
    )  # fmt: skip

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
        if self.caption_order not in ("ordered", "shuffled"):
            raise bad("caption_order", "must be 'ordered' or 'shuffled'")
        if self.d_image > MAX_D_IMAGE:  # building lists every position pair: d_image = 10**6 would hold 5e11
            raise bad("d_image", f"at most {MAX_D_IMAGE:,} pixels (the paper's images have 10), got {self.d_image:,}")
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


# groups that TrainConfig.no_decay may name
NO_DECAY_GROUPS = ("cls", "embeddings", "biases", "norms", "logit_scale")
# groups that TrainConfig.frozen may name
FROZEN_GROUPS = ("cls_pos", "qk_bias")


def check_groups(field: str, groups: Any, known: Sequence[str]) -> tuple[str, ...]:
    """Validate a ``no_decay`` / ``frozen`` value; return it as a sorted tuple of distinct names."""
    if isinstance(groups, str) or not isinstance(groups, list | tuple) or not all(isinstance(g, str) for g in groups):
        raise ValueError(f"TrainConfig.{field}: must be a tuple of group names from {list(known)}, got {groups!r}")
    unknown = sorted(set(groups) - set(known))
    if unknown:
        raise ValueError(f"TrainConfig.{field}: unknown groups {unknown}; choose from {list(known)}")
    return tuple(sorted(set(groups)))


def snapshot_schedule(snaps: Any, epochs: int) -> tuple[int, ...]:
    """``TrainConfig.snapshot_epochs`` checked and sorted: epochs (ints) in 0..``epochs`` (one past the end would never
    be made), each once.

    Example:
        >>> snapshot_schedule([5, 0, 5], 10)
        (0, 5)
    """
    if (
        isinstance(snaps, str)
        or not isinstance(snaps, tuple | list)
        or not all(isinstance(e, int) and not isinstance(e, bool) for e in snaps)
    ):
        raise ValueError(f"TrainConfig.snapshot_epochs must be a tuple of epochs (ints), got {snaps!r}")
    if any(e < 0 for e in snaps):
        raise ValueError(f"TrainConfig.snapshot_epochs must be epochs >= 0, got {sorted(snaps)}")
    past = sorted({e for e in snaps if e > epochs})
    if past:
        shown = str(past) if len(past) <= 5 else f"{past[:5]} and {len(past) - 5} more"
        raise ValueError(
            f"TrainConfig.snapshot_epochs {shown} are past the run's end (epochs={epochs}): they would never be made"
        )
    return tuple(sorted(set(snaps)))


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings with the paper's defaults (Sec. 2.2). Each field is declared once with ``knob``: its
    help, how the batched engine treats it, whether it is a recipe choice (``Recipe``), whether it changes results.
    """

    lr: float = knob(1e-4, "AdamW learning rate (paper: 1e-4)", batched="schedule")
    weight_decay: float = knob(0.2, "weight decay w (paper: 0.2; App. B varies it)", batched="member", recipe=True)
    # The paper does not say which parameters get weight decay; its attention has query/key biases (Sec. 4). The
    # defaults are DEFAULT_RECIPE, cls-exempt-init002-temp-nodecay-distinct: the recipe study's (reproduce
    # x8-recipe) with the paper's b_Q kept (the pre-registered b_Q decision, reproduce x10-dynamics), and since
    # 2026-11-28 the false-negatives study's choice (reproduce x17-negatives, docs/fidelity.md). no_decay: the CLS
    # row of the vision W_E exempt, as open_clip exempts a ViT class embedding, and the temperature logit_scale (as
    # open_clip does); () decays every parameter (what runs saved before the field were trained with)
    no_decay: tuple[str, ...] = knob(
        ("cls", "logit_scale"),
        "parameter groups exempt from weight decay, comma-separated: cls, embeddings, biases, norms, logit_scale "
        "('' = none)",
        batched="member", recipe=True, legacy=(),
    )  # fmt: skip
    # frozen: () trains them all, the paper's query/key biases included (Sec. 4: Q = XW_Q^T + B_Q^T; the b_Q decision
    # of docs/fidelity.md); "qk_bias" fixes b_Q = b_K = 0 (the recipe study's default until 2026-11-26); "cls_pos"
    # the vision W_pos[0] (CLS carries no positional embedding)
    frozen: tuple[str, ...] = knob(
        (), "groups held at 0: qk_bias (no query/key biases), cls_pos ('' = none)",
        batched="member", recipe=True, legacy=(),
    )  # fmt: skip
    qk_bias_decay_scale: float = knob(
        1.0, "b_Q and b_K decay at weight decay x this (beyond the paper; needs them trained)",
        batched="member", recipe=True,
    )  # fmt: skip
    epochs: int = knob(10_000, "Nepoch (paper: 10000)", batched="schedule")
    batch_size: int | None = knob(None, "bs; None = 50 for caption_mode 'left', 100 for 'left_right'", batched="batch")
    betas: tuple[float, float] = knob((0.9, 0.999), "AdamW betas (torch defaults)", batched="shared")
    eps: float = knob(1e-8, "AdamW eps (torch default)", batched="shared")
    seed: int = knob(0, "seeds weights, data order and dropout", batched="member")
    eval_every: int = knob(100, "epochs between metric lines", batched="member", results=False)
    checkpoint_every: int = knob(500, "epochs between atomic training checkpoints", batched="member", results=False)
    device: str = knob("cpu", "'cpu' or 'cuda'", batched="shared", results=False)
    threads: int | None = knob(None, "torch.set_num_threads for training; None leaves torch's default",
                               batched="member", results=False)  # fmt: skip
    keep_snapshots: bool = knob(
        False, "also keep the weights of every checkpoint as snapshots/epoch_NNNNN.safetensors",
        batched="member", results=False,
    )  # fmt: skip
    # a training trajectory (``dense_schedule`` gives one dense early, sparse late)
    snapshot_epochs: tuple[int, ...] = knob(
        (), "also keep the weights at these epochs (0: the initial weights) as snapshots/epoch_NNNNN.safetensors",
        batched="member", results=False,
    )  # fmt: skip
    # The optimiser and its schedule: the paper names lr and weight decay but no optimiser and no schedule.
    optimizer: Literal["adamw", "adam"] = knob(
        "adamw", "adamw (decoupled decay: p *= 1 - lr * w) or adam (coupled L2 decay, grad += w * p); the paper "
        "names none",
        batched="shared", recipe=True,
    )  # fmt: skip
    lr_schedule: Literal["constant", "warmup_cosine"] = knob(
        "constant", "constant, or warmup_cosine (linear warmup over --warmup-epochs, then cosine to 0, per step: "
        "open_clip's cosine_lr)",
        batched="shared", recipe=True,
    )  # fmt: skip
    warmup_epochs: int = knob(0, "epochs of linear warmup (warmup_cosine only)", batched="schedule", recipe=True)
    # CLIP's temperature: the paper says "the standard CLIP contrastive loss". CLIP learns the log inverse
    # temperature logit_scale (init 1/0.07, clamped at 100); whether it is weight-decayed is the no_decay group
    # "logit_scale" (open_clip exempts it). The temperature study (docs/fidelity.md) tests both and a fixed one
    fixed_temperature: float | None = knob(
        None, "hold CLIP's inverse temperature exp(logit_scale) at this value (no gradient, no decay); unset: learned, "
        "as CLIP does",
        batched="member", recipe=True,
    )  # fmt: skip

    # CLIP's loss and captions shared within a batch: standard CLIP (and open_clip) takes the diagonal as the only
    # positive, so an identical caption elsewhere in the batch is a negative (a "false negative"). Our data repeat
    # captions (each two-object caption is drawn by several images), so ~18 % of a batch's items share theirs. The
    # false-negatives study (docs/fidelity.md) tests the two alternatives (functional.symmetric_ce); by its
    # pre-registered rule the default is "distinct" since 2026-11-28 (reproduce x17-negatives); configs saved before
    # the field existed were trained with "all"
    negatives: Literal["all", "distinct", "shared"] = knob(
        "distinct", "how the contrastive loss treats two batch items with identical captions: all (standard CLIP: the "
        "other item's caption is a negative), distinct (neither positive nor negative: masked out in both directions), "
        "shared (multi-positive: targets spread evenly over the identical captions)",
        batched="member", recipe=True, legacy="all",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.negatives not in ("all", "distinct", "shared"):
            raise ValueError(f"TrainConfig.negatives must be 'all', 'distinct' or 'shared', got {self.negatives!r}")
        if self.optimizer not in ("adamw", "adam"):
            raise ValueError(f"TrainConfig.optimizer must be 'adamw' or 'adam', got {self.optimizer!r}")
        if self.lr_schedule not in ("constant", "warmup_cosine"):
            raise ValueError(f"TrainConfig.lr_schedule must be 'constant' or 'warmup_cosine', got {self.lr_schedule!r}")
        # the counts first (epochs before the warmup check, which would blame warmup_epochs); a NumPy int becomes int
        for f, lo in (("epochs", 1), ("warmup_epochs", 0), ("eval_every", 1), ("checkpoint_every", 1), ("seed", 0)):
            object.__setattr__(self, f, check_int(getattr(self, f), f"TrainConfig.{f}", minimum=lo))
        object.__setattr__(self, "threads", check_int(self.threads, "TrainConfig.threads", none_ok=True))
        if self.batch_size is not None:
            object.__setattr__(
                self, "batch_size", check_int(self.batch_size, "TrainConfig.batch_size (a contrastive loss)", minimum=2)
            )
        if self.warmup_epochs and self.lr_schedule == "constant":
            raise ValueError(
                "TrainConfig.warmup_epochs needs lr_schedule='warmup_cosine' (a constant lr has no warmup)"
            )
        if self.warmup_epochs >= self.epochs:
            raise ValueError(
                f"TrainConfig.warmup_epochs={self.warmup_epochs} must be less than epochs={self.epochs} (the cosine "
                "decay needs steps after the warmup)"
            )
        object.__setattr__(self, "snapshot_epochs", snapshot_schedule(self.snapshot_epochs, self.epochs))
        # checked, not converted: a sweep's group id hashes the values as the spec gives them
        check_real(self.lr, "TrainConfig.lr", strict=True)
        check_real(self.weight_decay, "TrainConfig.weight_decay")
        if (
            not isinstance(self.betas, tuple | list)
            or len(self.betas) != 2
            or not all(is_real(b) and 0 <= b < 1 for b in self.betas)
        ):
            raise ValueError(f"TrainConfig.betas must be two numbers in [0, 1), got {self.betas!r}")
        object.__setattr__(self, "betas", tuple(self.betas))  # a list: unhashable, and unequal to the same tuple
        check_real(self.eps, "TrainConfig.eps", strict=True)
        if not isinstance(self.device, str) or self.device.split(":")[0] not in ("cpu", "cuda", "mps"):
            raise ValueError(f"TrainConfig.device must be 'cpu' or 'cuda' (or 'cuda:N'), got {self.device!r}")
        if not isinstance(self.keep_snapshots, bool):
            raise ValueError(f"TrainConfig.keep_snapshots must be True or False, got {self.keep_snapshots!r}")
        object.__setattr__(self, "no_decay", check_groups("no_decay", self.no_decay, NO_DECAY_GROUPS))
        object.__setattr__(self, "frozen", check_groups("frozen", self.frozen, FROZEN_GROUPS))
        scale = self.qk_bias_decay_scale
        check_real(scale, "TrainConfig.qk_bias_decay_scale")
        if scale != 1 and ("qk_bias" in self.frozen or "biases" in self.no_decay):
            why = (
                "frozen=('qk_bias',) holds them at 0" if "qk_bias" in self.frozen else "no_decay 'biases' exempts them"
            )
            raise ValueError(
                f"TrainConfig.qk_bias_decay_scale={scale!r} scales the decay of b_Q and b_K, but {why}: "
                "drop one of the two"
            )
        object.__setattr__(self, "qk_bias_decay_scale", float(scale))
        temp = self.fixed_temperature
        if temp is not None:
            if not is_real(temp) or not temp > 0:
                raise ValueError(f"TrainConfig.fixed_temperature must be None or a finite number > 0, got {temp!r}")
            object.__setattr__(self, "fixed_temperature", float(temp))

    def lr_at(self, step: int, total_steps: int, steps_per_epoch: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based) of a run of ``total_steps`` steps.

        ``"constant"``: ``lr``. ``"warmup_cosine"``: open_clip's ``cosine_lr``: ``lr * (step + 1) / w`` for the
        first ``w = warmup_epochs * steps_per_epoch`` steps, then ``lr * (1 + cos(pi * (step - w) / (total - w))) / 2``.

        Example:
            >>> cfg = TrainConfig(lr=1.0, epochs=4, lr_schedule="warmup_cosine", warmup_epochs=1)
            >>> [round(cfg.lr_at(s, 8, 2), 3) for s in range(8)]
            [0.5, 1.0, 1.0, 0.933, 0.75, 0.5, 0.25, 0.067]
        """
        if self.lr_schedule == "constant":
            return self.lr
        w = self.warmup_epochs * steps_per_epoch
        if not 0 <= step < total_steps or total_steps <= w:  # -3 gave -lr; past the end the cosine climbed back
            raise ValueError(
                f"lr_at: step {step} is not a step of a {total_steps}-step run (0..{total_steps - 1}) after a "
                f"warmup of {w} steps"
            )
        if step < w:
            return self.lr * (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * (step - w) / (total_steps - w))) * self.lr

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        d["no_decay"], d["frozen"] = list(self.no_decay), list(self.frozen)
        d["snapshot_epochs"] = list(self.snapshot_epochs)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        for k in ("betas", "no_decay", "frozen", "snapshot_epochs"):
            if isinstance(d.get(k), list):  # JSON / TOML lists; a string stays one and is refused by name
                d[k] = tuple(d[k])
        for k, legacy in legacy_values(TrainConfig).items():  # saved before the field existed: trained without it
            d.setdefault(k, legacy)
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        if set(d) - known:
            raise ValueError(f"unknown TrainConfig fields {sorted(set(d) - known)}")
        return TrainConfig(**d)


def dense_schedule(
    epochs: int, early_every: int = 100, early_until: int = 2000, late_every: int = 500
) -> tuple[int, ...]:
    """Epochs at which a training trajectory keeps its weights: 0, 1, 2, 5, 10, 20, 50, then every ``early_every``
    to ``early_until``, then every ``late_every``, and ``epochs`` itself (for ``TrainConfig.snapshot_epochs``).

    Example:
        >>> s = dense_schedule(10_000)
        >>> s[:10], s[-3:], len(s)
        ((0, 1, 2, 5, 10, 20, 50, 100, 200, 300), (9000, 9500, 10000), 43)
    """
    epochs = check_int(epochs, "dense_schedule: epochs", minimum=0)  # -5 gave (-5,), True (0, 1)
    early_every = check_int(early_every, "dense_schedule: early_every")  # 0: a bare range() error
    early_until = check_int(early_until, "dense_schedule: early_until", minimum=0)
    late_every = check_int(late_every, "dense_schedule: late_every")  # -500 dropped every late epoch
    pts = {0, 1, 2, 5, 10, 20, 50, epochs}
    pts |= set(range(early_every, min(early_until, epochs) + 1, early_every))
    pts |= set(range(early_until + late_every, epochs + 1, late_every))
    return tuple(sorted(e for e in pts if e <= epochs))
