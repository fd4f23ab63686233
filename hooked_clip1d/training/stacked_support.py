"""Which configs the stacked engine implements: ``check_supported`` (a ``CLIPConfig``), ``refuse_unknown`` (a dataclass
against the fields an engine knows) and ``SHAPE_FIELDS`` (the tower fields every member of a batched group shares).

Every ``EncoderConfig`` field is listed here with how the stacked forward (``stacked_forward``) treats it: equal
across a group, per member, or read by hooks only. A field missing here (a new one) makes ``check_supported`` refuse
the config instead of silently training something else; ``members.group_key`` builds on these checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hooked_clip1d.model.clip import CLIPConfig

# EncoderConfig fields and how the stacked forward treats them. A field missing here (a new one) makes
# ``check_supported`` refuse the config instead of silently training something else.
SHAPE_FIELDS = (  # must be equal across a group; the stacked forward implements each
    "n_layers",
    "n_heads",
    "d_head",
    "d_model",
    "d_mlp",
    "attn_only",
    "normalization_type",
    "ln_position",
    "tied_repeats",
    "positional",
    "rotary_dim",
    "rotary_base",
    "dropout",
    "attn_dropout",
    "embed_dropout",
    "act_fn",
    "attention_dir",
    "n_ctx",
    "d_image",
    "device",
    "dtype",
    "n_key_value_heads",
    "final_rms",
)
_PER_MEMBER_FIELDS = ("n_labels", "init_seed", "init_std", "pruned_heads")  # may differ (padded / per-member mask)
_HOOK_FIELDS = ("use_attn_result", "use_split_qkv_input", "use_attn_in", "use_hook_mlp_in")  # hooks only
_KNOWN_FIELDS = set(SHAPE_FIELDS) | set(_PER_MEMBER_FIELDS) | set(_HOOK_FIELDS)

_CLIP_KNOWN = {"vision", "text", "init_logit_scale", "max_logit_scale"}


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
