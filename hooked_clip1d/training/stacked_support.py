"""Which configs the stacked engine implements: ``check_supported`` (a ``CLIPConfig``), ``refuse_unknown`` (a dataclass
against the fields an engine knows) and ``SHAPE_FIELDS`` (the tower fields every member of a batched group shares).

Every ``EncoderConfig`` field declares how the stacked forward (``stacked_forward``) treats it (``settings.knob``'s
``batched``): equal across a group, per member, or read by hooks only; a field declared "unsupported" makes
``check_supported`` refuse the config instead of silently training something else; ``members.group_key`` builds on
these checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hooked_clip1d.model.clip import CLIPConfig
from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.settings import field_names

# EncoderConfig fields and how the stacked forward treats them, as each field declares it (settings.knob's
# ``batched``): a field declared "unsupported" (or a new one the engine does not know) makes ``check_supported``
# refuse the config instead of silently training something else.
SHAPE_FIELDS = field_names(EncoderConfig, batched="shape")  # must be equal across a group; the forward implements each
_PER_MEMBER_FIELDS = field_names(EncoderConfig, batched="member")  # may differ (padded / per-member mask)
_HOOK_FIELDS = field_names(EncoderConfig, batched="hook")  # hooks only
_KNOWN_FIELDS = set(SHAPE_FIELDS) | set(_PER_MEMBER_FIELDS) | set(_HOOK_FIELDS)

_CLIP_KNOWN = {"vision", "text", "init_logit_scale", "max_logit_scale", "objective"}


def refuse_unknown(obj: Any, known: set[str], what: str) -> None:
    """Raise ``ValueError`` if a dataclass ``obj`` sets a field outside ``known`` to a non-default value.

    Example:
        >>> from hooked_clip1d.training.trainer import TrainConfig
        >>> refuse_unknown(TrainConfig(lr=0.01), {"lr"}, "TrainConfig")  # a known field may take any value
        >>> refuse_unknown(TrainConfig(lr=0.01), set(), "TrainConfig")
        Traceback (most recent call last):
        ...
        ValueError: the batched trainer does not implement TrainConfig.lr=0.01; train this run with training.Trainer
    """
    for f in dataclasses.fields(obj):
        if f.init and f.name not in known and getattr(obj, f.name) != f.default:
            raise ValueError(
                f"the batched trainer does not implement {what}.{f.name}={getattr(obj, f.name)!r}; "
                "train this run with training.Trainer"
            )


def check_supported(cfg: CLIPConfig) -> None:
    """Raise ``ValueError`` if ``cfg`` uses a setting the stacked forward does not implement.

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> check_supported(CLIPConfig.from_preset("full", n_labels=8, positional="rope"))
    """
    if not isinstance(cfg, CLIPConfig):
        raise TypeError(f"expected a CLIPConfig, got {type(cfg).__name__}")
    refuse_unknown(cfg, _CLIP_KNOWN, "CLIPConfig")
    for tower in (cfg.vision, cfg.text):
        refuse_unknown(tower, _KNOWN_FIELDS, type(tower).__name__)
        if tower.act_fn != "gelu":
            raise ValueError(f"the batched trainer implements act_fn='gelu' only, got {tower.act_fn!r}")
        if tower.n_key_value_heads is not None or tower.final_rms:
            raise ValueError("the batched trainer does not implement n_key_value_heads or final_rms")
