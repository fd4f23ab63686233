"""The named training recipes (``RECIPES``, ``DEFAULT_RECIPE``): ``Recipe``'s fields are generated from the configs'
declarations (``knob(..., recipe=True)``), with ``TowerKnobs``, the tower fields a recipe sets (inherited by
``model.config.EncoderConfig``).

Example:
    >>> RECIPES[DEFAULT_RECIPE].fields()["train"]["negatives"]
    'distinct'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal  # noqa: F401  (Recipe's generated fields carry TrainConfig's annotations, read here)

from hooked_clip1d.settings.checks import is_real
from hooked_clip1d.settings.configs import FROZEN_GROUPS, NO_DECAY_GROUPS, TrainConfig, check_groups
from hooked_clip1d.settings.fields import knob


@dataclass(frozen=True)
class TowerKnobs:
    """The fields of a tower's ``EncoderConfig`` that are recipe choices, declared here, without torch, so that a
    ``Recipe``, the ``train`` command's flags and sweep specs are read without importing the model;
    ``model.config.EncoderConfig`` inherits them (they are its fields, set on both towers by a recipe)."""

    init_std: float = knob(
        0.02, "std of the N(0, std) init of W_E and W_pos (1.0 is nn.Embedding's); the paper does not say. 0.02 (GPT-2 "
        "/ HF CLIP's) is the recipe study's choice; configs saved before the field were trained at 1.0",
        batched="member", recipe=True, free=True, legacy=1.0,
    )  # fmt: skip
    attn_dropout: float = knob(
        0.0, "dropout on the attention probabilities (nn.TransformerEncoderLayer's placement); the paper does not say "
        "where its dropout goes", batched="shape", recipe=True, free=True,
    )  # fmt: skip
    embed_dropout: float = knob(
        0.0, "dropout on the embeddings E + P before block 0 (nanoGPT's, timm ViT's, BERT's placement)",
        batched="shape", recipe=True, free=True,
    )  # fmt: skip


class _RecipeMethods:
    """The methods of ``Recipe`` (whose fields are generated from the configs' declarations)."""

    HELP: dict[str, str]
    TRAIN_FIELDS: tuple[str, ...]
    MODEL_FIELDS: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "no_decay", check_groups("no_decay", self.no_decay, NO_DECAY_GROUPS))  # type: ignore[attr-defined]
        object.__setattr__(self, "frozen", check_groups("frozen", self.frozen, FROZEN_GROUPS))  # type: ignore[attr-defined]
        # the other fields checked now, by the config they expand into (negatives="bogus" or a warmup without a
        # cosine schedule were accepted here and refused only when a run expanded the recipe)
        try:
            TrainConfig(**{f: getattr(self, f) for f in self.TRAIN_FIELDS})
        except (ValueError, TypeError) as e:
            raise ValueError(f"Recipe: {e}") from None
        for f in self.MODEL_FIELDS:
            v = getattr(self, f)
            ok = is_real(v) and (v > 0 if f == "init_std" else 0 <= v < 1)  # init_std; the two dropouts
            if not ok:
                want = "a positive number" if f == "init_std" else "a number in [0, 1)"  # EncoderConfig's words
                raise ValueError(f"Recipe: {f}: must be {want}, got {v!r}")

    def fields(self) -> dict[str, dict[str, Any]]:
        """``{"train": {TrainConfig field: value}, "model": {EncoderConfig field: value}}`` (model: both towers)."""
        return {
            "train": {f: getattr(self, f) for f in self.TRAIN_FIELDS},
            "model": {f: getattr(self, f) for f in self.MODEL_FIELDS},
        }


def _make_recipe() -> type:
    """``Recipe``: one field per config field declared with ``knob(..., recipe=True)`` (``TrainConfig`` first, then
    ``TowerKnobs``), defaulting to its legacy value, so a recipe names only what it changes from the package's
    original behaviour and keeps its meaning when a config default changes."""
    train = [f for f in dataclasses.fields(TrainConfig) if f.metadata["recipe"]]
    model = [f for f in dataclasses.fields(TowerKnobs) if f.metadata["recipe"]]
    specs = [(f.name, f.type, dataclasses.field(default=f.metadata["legacy"])) for f in (*train, *model)]
    cls = dataclasses.make_dataclass(
        "Recipe", specs, bases=(_RecipeMethods,), frozen=True, namespace={"__module__": __name__}
    )
    cls.HELP = {f.name: f.metadata["help"] for f in (*train, *model)}
    cls.TRAIN_FIELDS = tuple(f.name for f in train)
    cls.MODEL_FIELDS = tuple(f.name for f in model)
    cls.__doc__ = """A training recipe: how a run makes the choices the paper leaves open. Its fields are generated:
    every ``TrainConfig`` field (``TRAIN_FIELDS``) and ``TowerKnobs`` field (``MODEL_FIELDS``, set on both towers)
    declared with ``knob(..., recipe=True)``, each defaulting to its legacy value (the package's original behaviour:
    every parameter decayed, N(0, 1) embeddings, ...), so a recipe names what it changes and means the same thing
    whatever the configs' defaults are. ``fields()`` is the one place a recipe is expanded (the ``train`` command
    and sweeps both use it). A new recipe field: declare it with ``knob(..., recipe=True)`` and use it.

    Example:
        >>> r = RECIPES["cls-exempt-init002-cosine"]
        >>> r.fields()["train"]["lr_schedule"], r.fields()["model"]["init_std"]
        ('warmup_cosine', 0.02)
        >>> RECIPES[DEFAULT_RECIPE].fields()["train"]["frozen"]
        ()
        >>> Recipe().init_std, Recipe().no_decay  # the legacy values: the package before the recipe study
        (1.0, ())
    """
    return cls


Recipe: Any = _make_recipe()


# lr x weight decay x optimizer steps of the flagship's protocol (1e-4 x 0.2 x 440,000 steps): how far decoupled
# weight decay has gone by the end of a run. The dynamics study's arm (c) holds it near 1 with a smaller decay.
FLAGSHIP_STEPS = 440_000
EXPOSURE1_WEIGHT_DECAY = round(1 / (1e-4 * FLAGSHIP_STEPS), 4)  # 0.0227


# Named recipes for sweeps (grid key ``recipe``) and ``train --recipe``: each sets every field it is about, so a
# recipe means the same thing whatever the defaults are. The candidates of the recipe study (reproduce x8-recipe);
# the package's default (TrainConfig / EncoderConfig) is DEFAULT_RECIPE.
RECIPES: dict[str, Recipe] = {
    # AdamW(model.parameters(), weight_decay=0.2) at nn.Embedding's N(0, 1) init: every parameter decayed, q/k
    # biases trained (the package's default before the recipe study; the flagship variant ...-all-decay)
    "all-decay": Recipe(),
    # open_clip's treatment of a ViT class embedding (a 1-D parameter): CLS exempt from decay
    "cls-exempt": Recipe(no_decay=("cls",)),
    # CLS exempt and no query/key biases (b_Q, b_K fixed at 0): the CLS query must come from W_E[CLS] + W_pos[0]
    "cls-exempt-no-qk-bias": Recipe(no_decay=("cls",), frozen=("qk_bias",)),
    # the same at GPT-2 / CLIP's small embedding init (0.02 instead of nn.Embedding's N(0, 1)): the recipe study's
    # choice, the package default from 2026-11-23 to 2026-11-26 (it drops the paper's b_Q)
    "cls-exempt-no-qk-bias-init002": Recipe(no_decay=("cls",), frozen=("qk_bias",), init_std=0.02),
    # CLS exempt at the small init, q/k biases trained and decayed: does the init alone do what fixing b_Q does? The
    # package default 2026-11-26 to 2026-11-28: the paper's model with b_Q, by the pre-registered rule
    "cls-exempt-init002": Recipe(no_decay=("cls",), init_std=0.02),
    # plain AdamW(model.parameters()) at the small init, q/k biases trained, and a CLS token without a positional
    # embedding (prepended after the positions are added): CLS then shares no parameter with position 0, so nothing
    # needs exempting (added after the five above; docs/fidelity.md states its hypothesis)
    "cls-nopos-init002": Recipe(frozen=("cls_pos",), init_std=0.02),
    # the same at nn.Embedding's N(0, 1) init, where the CLS query starts in W_E[CLS] rather than b_Q
    "cls-nopos": Recipe(frozen=("cls_pos",)),
    # the eighth and ninth (beyond the paper; docs/fidelity.md states their hypothesis, written before the runs):
    # cls-exempt-init002 with the q/k biases decayed 10x / 30x more strongly than the other weights, so that b_Q is
    # kept small and cannot take over the CLS query
    "cls-exempt-qkdecay10-init002": Recipe(no_decay=("cls",), init_std=0.02, qk_bias_decay_scale=10.0),
    "cls-exempt-qkdecay30-init002": Recipe(no_decay=("cls",), init_std=0.02, qk_bias_decay_scale=30.0),
    # the attention-dropout study (docs/fidelity.md states its hypothesis, written before the runs): the paper's
    # "dropout with rate p" read as nn.TransformerEncoderLayer applies it, on the attention probabilities as well
    # as on the sublayer outputs; on the default recipe, and on cls-exempt-init002 (q/k biases trained, as the
    # paper's Fig. 12-13 model has them)
    "cls-exempt-no-qk-bias-init002-attndrop": Recipe(
        no_decay=("cls",), frozen=("qk_bias",), init_std=0.02, attn_dropout=0.1
    ),
    "cls-exempt-init002-attndrop": Recipe(no_decay=("cls",), init_std=0.02, attn_dropout=0.1),
    # the dynamics study (docs/fidelity.md states its hypothesis and criteria, written before the runs): the paper's
    # b_Q trained (cls-exempt-init002) with (b) linear warmup + cosine decay of the lr, as CLIP / open_clip train;
    # (c) decay exposure lr x w x steps held near 1 by a smaller w (beyond the protocol's w = 0.2); (d) dropout on
    # the embeddings E + P (nanoGPT's, timm ViT's, BERT's placement); (e) Adam with coupled L2 decay (the paper
    # names no optimiser)
    "cls-exempt-init002-cosine": Recipe(
        no_decay=("cls",), init_std=0.02, lr_schedule="warmup_cosine", warmup_epochs=500
    ),
    "cls-exempt-init002-exposure1": Recipe(no_decay=("cls",), init_std=0.02, weight_decay=EXPOSURE1_WEIGHT_DECAY),
    "cls-exempt-init002-embdrop": Recipe(no_decay=("cls",), init_std=0.02, embed_dropout=0.1),
    "cls-exempt-init002-adam-l2": Recipe(no_decay=("cls",), init_std=0.02, optimizer="adam"),
    # open_clip's grouping: every 1-D parameter exempt (CLS, biases, LayerNorm, logit_scale)
    "open-clip": Recipe(no_decay=("cls", "biases", "norms", "logit_scale")),
    # minGPT's grouping: embeddings, biases and LayerNorm exempt
    "mingpt": Recipe(no_decay=("embeddings", "biases", "norms")),
    # the temperature study (docs/fidelity.md states its hypothesis, arms and decision rule, written before the
    # runs): every recipe above but open-clip decays CLIP's learnable temperature with the other weights. (b) the
    # temperature learned and exempt from decay (CLIP lets it rise to its clamp of 100, open_clip exempts it); (c)
    # held at 100; (d) open_clip's grouping at the small init (every 1-D parameter exempt)
    "cls-exempt-init002-temp-nodecay": Recipe(no_decay=("cls", "logit_scale"), init_std=0.02),
    "cls-exempt-init002-temp100": Recipe(no_decay=("cls",), init_std=0.02, fixed_temperature=100.0),
    "open-clip-init002": Recipe(no_decay=("cls", "biases", "norms", "logit_scale"), init_std=0.02),
    # the false-negatives study (docs/fidelity.md states its hypothesis, arms and decision rule, written before the
    # runs): standard CLIP counts an identical caption elsewhere in the batch as a negative (TrainConfig.negatives).
    # (a') such pairs masked out ("distinct"), temperature learned and decayed; (b') the same, temperature exempt
    # from decay (the package default since 2026-11-28, DEFAULT_RECIPE); (c') the same, held at 100; (d')
    # multi-positive ("shared"), held at 100
    "cls-exempt-init002-distinct": Recipe(no_decay=("cls",), init_std=0.02, negatives="distinct"),
    "cls-exempt-init002-temp-nodecay-distinct": Recipe(
        no_decay=("cls", "logit_scale"), init_std=0.02, negatives="distinct"
    ),
    "cls-exempt-init002-temp100-distinct": Recipe(
        no_decay=("cls",), init_std=0.02, fixed_temperature=100.0, negatives="distinct"
    ),
    "cls-exempt-init002-temp100-shared": Recipe(
        no_decay=("cls",), init_std=0.02, fixed_temperature=100.0, negatives="shared"
    ),
    # the RoPE interaction study (x21; docs/fidelity.md, pre-registered 2026-12-01 before its runs): masked negatives
    # with the temperature held at 25 (where x19's decayed arm settled) and at 50
    "cls-exempt-init002-temp25-distinct": Recipe(
        no_decay=("cls",), init_std=0.02, fixed_temperature=25.0, negatives="distinct"
    ),
    "cls-exempt-init002-temp50-distinct": Recipe(
        no_decay=("cls",), init_std=0.02, fixed_temperature=50.0, negatives="distinct"
    ),
}
# the package's default: the b_Q decision (cls-exempt-init002, 2026-11-26), then the false-negatives study's arm (b')
# (identical captions masked out, the temperature not decayed; 2026-11-28), each by its pre-registered rule
DEFAULT_RECIPE = "cls-exempt-init002-temp-nodecay-distinct"
