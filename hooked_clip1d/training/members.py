"""The members of a batched group and which runs can share one: ``Member`` (one run's three configs and optional
starting weights) and ``group_key`` (equal for runs the stacked engine can train together: the same shapes and the
shared training settings; everything else may differ per member).

Example:
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> from hooked_clip1d.settings import DataConfig, TrainConfig
    >>> group_key(CLIPConfig.from_preset("simplified", n_labels=10), DataConfig(n_labels=10), TrainConfig()) == \\
    ...     group_key(CLIPConfig.from_preset("simplified", n_labels=20), DataConfig(n_labels=20), TrainConfig(seed=3))
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.settings import DataConfig, TrainConfig
from hooked_clip1d.training.stacked_support import SHAPE_FIELDS, check_supported, refuse_unknown

# TrainConfig fields that must be equal in a group (the rest may differ per member)
_TRAIN_SHARED = ("betas", "eps", "device", "optimizer", "lr_schedule")
_TRAIN_KNOWN = {"lr", "weight_decay", "epochs", "batch_size", "seed", "eval_every", "checkpoint_every", "threads"}
_TRAIN_KNOWN |= {"no_decay", "frozen", "qk_bias_decay_scale", "keep_snapshots"}  # per-member masks, snapshots
_TRAIN_KNOWN |= {"snapshot_epochs", "warmup_epochs"}
_TRAIN_KNOWN |= set(_TRAIN_SHARED)
# with a learning-rate schedule every member follows the same one: these fields (and the training set's size, so
# the same steps per epoch) are equal in a group
_SCHEDULE_SHARED = ("lr", "warmup_epochs", "epochs")
_DATA_SIZE = ("n_labels", "n_heldout", "n1", "n2", "d_image", "caption_mode")


def group_key(model_cfg: CLIPConfig, data_cfg: DataConfig, train_cfg: TrainConfig) -> str:
    """A string equal for runs that can train in one batched group (same shapes and shared settings).

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> a = group_key(CLIPConfig.from_preset("simplified", n_labels=10), DataConfig(n_labels=10), TrainConfig())
        >>> b = group_key(CLIPConfig.from_preset("simplified", n_labels=20), DataConfig(n_labels=20, n2=5),
        ...               TrainConfig(seed=3, weight_decay=0.1))
        >>> a == b
        True
    """
    check_supported(model_cfg)
    refuse_unknown(train_cfg, _TRAIN_KNOWN, "TrainConfig")
    towers = {}
    for name, tower in (("vision", model_cfg.vision), ("text", model_cfg.text)):
        towers[name] = {f: str(getattr(tower, f)) for f in SHAPE_FIELDS}
    bs = train_cfg.batch_size or data_cfg.batch_size
    shared = {f: str(getattr(train_cfg, f)) for f in _TRAIN_SHARED}
    if train_cfg.lr_schedule != "constant":
        shared |= {f: str(getattr(train_cfg, f)) for f in _SCHEDULE_SHARED}
        shared |= {f"data.{f}": str(getattr(data_cfg, f)) for f in _DATA_SIZE}
    return json.dumps({"towers": towers, "batch_size": bs, "train": shared}, sort_keys=True)


def _mix_seeds(seeds: Sequence[int]) -> int:
    h = 1469598103934665603
    for s in seeds:
        h = ((h ^ (int(s) & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) % (1 << 63)
    return h


@dataclass(frozen=True)
class Member:
    """One run of a batched group: the three configs ``training.Trainer`` takes, plus optional starting weights."""

    model_cfg: CLIPConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig
    name: str | None = None  # sub-directory of the group's out_dir (default: "member{index}")
    init_model: CLIP1D | None = None  # start from these weights instead of CLIP1D(model_cfg, seed)
