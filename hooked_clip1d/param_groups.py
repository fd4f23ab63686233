"""Which parameters get weight decay and which are held fixed: the recipe choices the paper leaves open.

The paper states "weight decay w = 0.2" (Sec. 2.2) and nothing about which parameters it applies to. The usual
codebases differ: ``torch.optim.AdamW(model.parameters())`` decays every parameter (our default before the recipe
study of ``reproduce x8-recipe``); minGPT exempts embeddings, biases and LayerNorm weights; open_clip
exempts every 1-D parameter (biases, LayerNorm, ``logit_scale`` and the ViT's ``class_embedding``).

How CLS is represented matters only through these groups. Our CLS token is the row ``W_E[CLS]`` of the vision
token embedding; open_clip's separate ``class_embedding`` parameter is the same function with the same gradient
(CLS only ever sits at position 0), so "CLS as its own parameter" is ``no_decay=("cls",)`` here, plus its init.

``TrainConfig.no_decay`` names groups exempt from decay, ``TrainConfig.frozen`` groups held at their initial value
(``"qk_bias"``: ``b_Q`` and ``b_K`` start at 0, so frozen they are absent). Both trainers (``training.Trainer``
and the batched engine) read the same masks from ``decay_mask`` / ``is_frozen``.

Example:
    >>> from hooked_clip1d.clip import CLIPConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=5, d_model=8, d_head=4)
    >>> decay_mask("vision.embed.W_E", cfg, ("cls",))[:, 0].tolist()  # the CLS row (id 6) is exempt
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    >>> decay_mask("vision.blocks.0.attn.b_Q", cfg, ("biases",))
    0.0
    >>> decay_mask("vision.blocks.0.attn.W_Q", cfg, ("biases",)) is None  # decayed as usual
    True
    >>> is_frozen("text.blocks.0.attn.b_K", ("qk_bias",))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hooked_clip1d.clip import CLIPConfig

# groups that TrainConfig.no_decay may name
NO_DECAY_GROUPS = ("cls", "embeddings", "biases", "norms", "logit_scale")
# groups that TrainConfig.frozen may name
FROZEN_GROUPS = ("qk_bias",)


def check_groups(field: str, groups: Any, known: Sequence[str]) -> tuple[str, ...]:
    """Validate a ``no_decay`` / ``frozen`` value; return it as a sorted tuple of distinct names."""
    if isinstance(groups, str) or not isinstance(groups, list | tuple) or not all(isinstance(g, str) for g in groups):
        raise ValueError(f"TrainConfig.{field}: must be a tuple of group names from {list(known)}, got {groups!r}")
    unknown = sorted(set(groups) - set(known))
    if unknown:
        raise ValueError(f"TrainConfig.{field}: unknown groups {unknown}; choose from {list(known)}")
    return tuple(sorted(set(groups)))


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def decay_mask(name: str, cfg: CLIPConfig, no_decay: Sequence[str]) -> torch.Tensor | float | None:
    """How ``CLIP1D`` parameter ``name`` (a state-dict key) is decayed when ``no_decay`` groups are exempt.

    None: decayed like every parameter (no exemption applies); 0.0: not decayed at all; a 0/1 tensor of the
    parameter's shape: decayed where 1 (``"cls"`` exempts one row of the vision ``W_E``).
    """
    groups = set(no_decay)
    leaf = _leaf(name)
    if "embeddings" in groups and leaf in ("W_E", "W_pos"):
        return 0.0
    if "biases" in groups and leaf.startswith("b_"):
        return 0.0
    if "norms" in groups and (".ln" in name or name.startswith("ln")) and leaf in ("w", "b"):
        return 0.0
    if "logit_scale" in groups and name == "logit_scale":
        return 0.0
    if "cls" in groups and name == "vision.embed.W_E":
        mask = torch.ones(cfg.vision.d_vocab, cfg.vision.d_model)
        mask[cfg.vision.vocab.cls] = 0.0
        return mask
    return None


def is_frozen(name: str, frozen: Sequence[str]) -> bool:
    """True when ``CLIP1D`` parameter ``name`` is held at its initial value (never updated, never decayed)."""
    return "qk_bias" in frozen and _leaf(name) in ("b_Q", "b_K")


def masks_needed(no_decay: Sequence[str], frozen: Sequence[str]) -> bool:
    """Whether a recipe differs from plain ``AdamW(model.parameters())`` at all."""
    return bool(no_decay) or bool(frozen)


# Named recipes for sweeps (grid key ``recipe``) and ``train --recipe``: each sets every field it is about, so a
# recipe means the same thing whatever the defaults are. The candidates of the recipe study (reproduce x8-recipe);
# the package's default (TrainConfig / EncoderConfig) is DEFAULT_RECIPE.
RECIPES: dict[str, dict[str, Any]] = {
    # AdamW(model.parameters(), weight_decay=0.2) at nn.Embedding's N(0, 1) init: every parameter decayed, q/k
    # biases trained (the package's default before the recipe study; the flagship variant ...-all-decay)
    "all-decay": {"train.no_decay": [], "train.frozen": [], "model.init_std": 1.0},
    # open_clip's treatment of a ViT class embedding (a 1-D parameter): CLS exempt from decay
    "cls-exempt": {"train.no_decay": ["cls"], "train.frozen": [], "model.init_std": 1.0},
    # CLS exempt and no query/key biases (b_Q, b_K fixed at 0): the CLS query must come from W_E[CLS] + W_pos[0]
    "cls-exempt-no-qk-bias": {"train.no_decay": ["cls"], "train.frozen": ["qk_bias"], "model.init_std": 1.0},
    # the same at GPT-2 / CLIP's small embedding init (0.02 instead of nn.Embedding's N(0, 1)): the default
    "cls-exempt-no-qk-bias-init002": {"train.no_decay": ["cls"], "train.frozen": ["qk_bias"], "model.init_std": 0.02},
    # CLS exempt at the small init, q/k biases trained and decayed: does the init alone do what fixing b_Q does?
    "cls-exempt-init002": {"train.no_decay": ["cls"], "train.frozen": [], "model.init_std": 0.02},
    # open_clip's grouping: every 1-D parameter exempt (CLS, biases, LayerNorm, logit_scale)
    "open-clip": {
        "train.no_decay": ["cls", "biases", "norms", "logit_scale"],
        "train.frozen": [],
        "model.init_std": 1.0,
    },
    # minGPT's grouping: embeddings, biases and LayerNorm exempt
    "mingpt": {"train.no_decay": ["embeddings", "biases", "norms"], "train.frozen": [], "model.init_std": 1.0},
}
DEFAULT_RECIPE = "cls-exempt-no-qk-bias-init002"
