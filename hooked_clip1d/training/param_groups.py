"""Which parameters get weight decay and which are held fixed: the recipe choices the paper leaves open.

The paper states "weight decay w = 0.2" (Sec. 2.2) and nothing about which parameters it applies to. The usual
codebases differ: ``torch.optim.AdamW(model.parameters())`` decays every parameter (our default before the recipe
study of ``reproduce x8-recipe``); minGPT exempts embeddings, biases and LayerNorm weights; open_clip
exempts every 1-D parameter (biases, LayerNorm, ``logit_scale`` and the ViT's ``class_embedding``).

How CLS is represented matters only through these groups. Our CLS token is the row ``W_E[CLS]`` of the vision
token embedding; open_clip's separate ``class_embedding`` parameter is the same function with the same gradient
(CLS only ever sits at position 0), so "CLS as its own parameter" is ``no_decay=("cls",)`` here, plus its init.

A CLS token without a positional embedding (CLS prepended after the positions are added, as some ViT codebases do)
is the other representation: ``frozen=("cls_pos",)`` holds the vision ``W_pos[0]`` at 0, so on the CLS row the
paper's P terms (PE, PP) vanish and its query is ``W_E[CLS] W_Q (+ b_Q)`` alone.

``TrainConfig.no_decay`` names groups exempt from decay, ``TrainConfig.frozen`` groups set to 0 and held there, i.e.
absent (``"qk_bias"``: ``b_Q`` and ``b_K``, which start at 0; ``"cls_pos"``: the vision ``W_pos[0]``), and
``TrainConfig.qk_bias_decay_scale`` multiplies the decay of ``b_Q`` and ``b_K`` (beyond the paper: a recipe that
limits the query bias), and ``TrainConfig.fixed_temperature`` holds ``logit_scale`` at a value (``held_value``).
Both trainers (``training.Trainer`` and the batched engine) read one rule per parameter, ``param_rule`` (held,
frozen and decay masks decided once, in that order of precedence), built from ``decay_mask`` / ``frozen_mask`` /
``held_value``. The group names (``NO_DECAY_GROUPS``, ``FROZEN_GROUPS``) and the named recipes
(``RECIPES``, ``DEFAULT_RECIPE``) are in ``settings``, beside ``TrainConfig``, where they can be read without torch.

Example:
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=5, d_model=8, d_head=4)
    >>> decay_mask("vision.embed.W_E", cfg, ("cls",))[:, 0].tolist()  # the CLS row (id 6) is exempt
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    >>> decay_mask("vision.blocks.0.attn.b_Q", cfg, ("biases",))
    0.0
    >>> decay_mask("vision.blocks.0.attn.W_Q", cfg, ("biases",)) is None  # decayed as usual
    True
    >>> decay_mask("vision.blocks.0.attn.b_Q", cfg, (), qk_bias_scale=10.0)  # decayed at 10 x weight_decay
    10.0
    >>> frozen_mask("text.blocks.0.attn.b_K", cfg, ("qk_bias",))
    0.0
    >>> frozen_mask("vision.pos_embed.W_pos", cfg, ("cls_pos",))[:2, 0].tolist()  # position 0 (CLS) held at 0
    [0.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from hooked_clip1d.model.clip import CLIPConfig
    from hooked_clip1d.settings import TrainConfig


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def decay_mask(
    name: str, cfg: CLIPConfig, no_decay: Sequence[str], qk_bias_scale: float = 1.0
) -> torch.Tensor | float | None:
    """How ``CLIP1D`` parameter ``name`` (a state-dict key) is decayed when ``no_decay`` groups are exempt and
    ``b_Q`` / ``b_K`` decay at ``qk_bias_scale`` times the weight decay (``TrainConfig.qk_bias_decay_scale``).

    None: decayed like every parameter (no exemption applies); 0.0: not decayed at all; another float: decayed at
    that multiple of the weight decay; a 0/1 tensor of the parameter's shape: decayed where 1 (``"cls"`` exempts one
    row of the vision ``W_E``).
    """
    groups = set(no_decay)
    leaf = _leaf(name)
    if "embeddings" in groups and leaf in ("W_E", "W_pos"):
        return 0.0
    if "biases" in groups and leaf.startswith("b_"):
        return 0.0
    if qk_bias_scale != 1 and leaf in ("b_Q", "b_K"):
        return float(qk_bias_scale)
    if "norms" in groups and (".ln" in name or name.startswith("ln")) and leaf in ("w", "b"):
        return 0.0
    if "logit_scale" in groups and name == "logit_scale":
        return 0.0
    if "cls" in groups and name == "vision.embed.W_E":
        mask = torch.ones(cfg.vision.d_vocab, cfg.vision.d_model)
        mask[cfg.vision.vocab.cls] = 0.0
        return mask
    return None


def frozen_mask(name: str, cfg: CLIPConfig, frozen: Sequence[str]) -> torch.Tensor | float | None:
    """Which entries of ``CLIP1D`` parameter ``name`` the ``frozen`` groups set to 0 and hold there.

    None: trained as usual; 0.0: the whole parameter is held at 0 (never moved, never decayed); a 0/1 tensor of the
    parameter's shape: trained where 1 (``"cls_pos"`` holds one row of the vision ``W_pos``).
    """
    groups = set(frozen)
    if "qk_bias" in groups and _leaf(name) in ("b_Q", "b_K"):
        return 0.0
    if "cls_pos" in groups and name == "vision.pos_embed.W_pos":
        mask = torch.ones(cfg.vision.n_ctx, cfg.vision.d_model)
        mask[0] = 0.0  # CLS sits at position 0
        return mask
    if "cls_pos" in groups and name == "vision.embed.W_E" and cfg.vision.positional != "learned":
        raise ValueError(
            f"TrainConfig.frozen 'cls_pos' holds the vision W_pos[0] at 0, but this model's vision tower has "
            f"positional={cfg.vision.positional!r} (no W_pos)"
        )
    return None


def held_value(name: str, fixed_temperature: float | None) -> float | None:
    """The value ``CLIP1D`` parameter ``name`` is set to and held at (no gradient, no decay), or None where it
    trains: ``logit_scale`` at ``log(fixed_temperature)`` when ``TrainConfig.fixed_temperature`` is set.

    Example:
        >>> round(held_value("logit_scale", 100.0), 4), held_value("logit_scale", None), held_value("W_proj", 100.0)
        (4.6052, None, None)
    """
    if fixed_temperature is not None and name == "logit_scale":
        return math.log(fixed_temperature)
    return None


def masks_needed(
    no_decay: Sequence[str], frozen: Sequence[str], qk_bias_scale: float = 1.0, fixed_temperature: float | None = None
) -> bool:
    """Whether a recipe differs from plain ``AdamW(model.parameters())`` at all."""
    return bool(no_decay) or bool(frozen) or qk_bias_scale != 1 or fixed_temperature is not None


@dataclass(frozen=True)
class ParamRule:
    """How one parameter trains under a recipe: ``held`` (set to this value and held: no gradient, no decay), else
    ``grad`` (``frozen_mask``: None trained; 0.0 held at 0 whole; a 0/1 tensor: trained where 1) and ``decay``
    (``decay_mask``; 0.0 for a held or wholly frozen parameter)."""

    held: float | None
    grad: torch.Tensor | float | None
    decay: torch.Tensor | float | None


def param_rule(name: str, cfg: CLIPConfig, train_cfg: TrainConfig) -> ParamRule:
    """The one place a recipe's choices for ``CLIP1D`` parameter ``name`` are decided, for both trainers: a held
    value first, then a frozen mask, then the decay mask.

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> from hooked_clip1d.settings import TrainConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=5, d_model=8, d_head=4)
        >>> param_rule("logit_scale", cfg, TrainConfig(fixed_temperature=100.0)).decay
        0.0
        >>> r = param_rule("vision.blocks.0.attn.b_Q", cfg, TrainConfig(frozen=("qk_bias",)))
        >>> r.held, r.grad, r.decay
        (None, 0.0, 0.0)
        >>> param_rule("vision.blocks.0.attn.W_Q", cfg, TrainConfig()).decay is None
        True
    """
    held = held_value(name, train_cfg.fixed_temperature)
    if held is not None:
        return ParamRule(held, 0.0, 0.0)
    grad = frozen_mask(name, cfg, train_cfg.frozen)
    if isinstance(grad, float):
        return ParamRule(None, grad, 0.0)
    return ParamRule(None, grad, decay_mask(name, cfg, train_cfg.no_decay, train_cfg.qk_bias_decay_scale))
