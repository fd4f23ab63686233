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
from hooked_clip1d.settings import DataConfig, TrainConfig, field_names
from hooked_clip1d.training.run_config import RunConfig, check_init_model
from hooked_clip1d.training.stacked_support import SHAPE_FIELDS, check_supported, refuse_unknown

# TrainConfig fields that must be equal in a group (the rest may differ per member)
# how the engine treats each field is declared with the field (settings.knob's ``batched``): equal across a group,
# equal under a learning-rate schedule, or per member; a field declared "unsupported" is refused
_TRAIN_SHARED = field_names(TrainConfig, batched="shared")
_TRAIN_KNOWN = set(field_names(TrainConfig)) - set(field_names(TrainConfig, batched="unsupported"))
# with a learning-rate schedule every member follows the same one: these fields (and the training set's size, so
# the same steps per epoch) are equal in a group
_SCHEDULE_SHARED = field_names(TrainConfig, batched="schedule")
_DATA_SIZE = field_names(DataConfig, batched="schedule")


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
    key: dict[str, object] = {"towers": towers, "batch_size": bs, "train": shared}
    if model_cfg.objective != "contrastive":  # one objective a group; a captioner's vocabulary is its W_U's columns
        key |= {"objective": model_cfg.objective, "n_labels": model_cfg.n_labels}
    return json.dumps(key, sort_keys=True)


def mix_seeds(seeds: Sequence[int]) -> int:
    """One seed from the members' seeds (FNV-1a style, below 2**63): the seed of a group's shared dropout stream
    (``dropout_rng="fast"``); the same seeds in the same order give the same stream.

    Example:
        >>> mix_seeds([0, 1]) == mix_seeds([0, 1]) != mix_seeds([1, 0])
        True
    """
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

    def __post_init__(self) -> None:
        if self.init_model is not None:  # recorded under model_cfg: the weights must be of that config
            check_init_model(self.init_model, self.model_cfg)

    @classmethod
    def from_run(cls, run: RunConfig, name: str | None = None, init_model: CLIP1D | None = None) -> Member:
        """The member that trains ``run`` (a ``RunConfig``).

        Example:
            >>> from hooked_clip1d.settings import DataConfig, TrainConfig
            >>> run = RunConfig(CLIPConfig.from_preset("simplified", n_labels=10), DataConfig(n_labels=10),
            ...                 TrainConfig(seed=3))
            >>> Member.from_run(run, "s3").run == run
            True
        """
        return cls(run.model, run.data, run.train, name=name, init_model=init_model)

    @property
    def run(self) -> RunConfig:
        """The member's three configs as one ``RunConfig`` (constructing it checks that they fit together)."""
        return RunConfig(self.model_cfg, self.data_cfg, self.train_cfg)


def check_members(members: Sequence[Member]) -> list[str]:
    """Refuse members that cannot train as one group (not a ``Member``, configs that do not fit together, different
    ``group_key``s, repeated names); return the members' names (``name`` or ``member{index}``)."""
    if not members:
        raise ValueError("BatchedTrainer needs at least one member")
    for i, mb in enumerate(members):
        if not isinstance(mb, Member):
            raise TypeError(f"members[{i}] is a {type(mb).__name__}, expected training.members.Member")
        try:
            mb.run  # noqa: B018 - constructing it checks that the three fit together
        except ValueError as e:
            raise ValueError(f"member {i}: {e}") from None
    keys = [group_key(m.model_cfg, m.data_cfg, m.train_cfg) for m in members]
    if len(set(keys)) > 1:
        bad = next(i for i, k in enumerate(keys) if k != keys[0])
        raise ValueError(
            f"member {bad} cannot train in one group with member 0: shapes, batch size, betas, eps, device, "
            "optimizer or learning-rate schedule differ (see batched.group_key)"
        )
    names = [m.name or f"member{i}" for i, m in enumerate(members)]
    if len(set(names)) != len(names):
        raise ValueError(f"member names must be distinct, got {names}")
    return names
