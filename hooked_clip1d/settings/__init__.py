"""What a user sets for a run, importable without torch: the dataset, the optimiser and the named recipes.

``DataConfig`` (the dataset, Sec. 2.1), ``TrainConfig`` (AdamW and the schedule, Sec. 2.2), the parameter groups a
recipe may exempt from weight decay or freeze, and the named recipes of the recipe study (``RECIPES``). They live
here, below the modules that use them (``data`` and ``training`` re-export ``DataConfig`` and ``TrainConfig``;
``param_groups`` turns the group names into weight-decay masks), so that reading a default
(``hooked-clip1d train --help``, ``sweep_spec``) never imports torch or TransformerLens.

Example:
    >>> from hooked_clip1d.settings import DEFAULT_RECIPE, DataConfig, TrainConfig
    >>> DataConfig().n_pair, TrainConfig().weight_decay, DEFAULT_RECIPE
    (15, 0.2, 'cls-exempt-init002-temp-nodecay-distinct')
    >>> TrainConfig(no_decay=("cls", "biases")).no_decay
    ('biases', 'cls')
"""

from hooked_clip1d.settings.configs import (
    FROZEN_GROUPS,
    MAX_IMAGES,
    NO_DECAY_GROUPS,
    DataConfig,
    TrainConfig,
    check_groups,
    dense_schedule,
    snapshot_schedule,
)
from hooked_clip1d.settings.fields import BATCHED, field_names, knob, legacy_values
from hooked_clip1d.settings.recipes import (
    DEFAULT_RECIPE,
    EXPOSURE1_WEIGHT_DECAY,
    FLAGSHIP_STEPS,
    RECIPES,
    Recipe,
    TowerKnobs,
)

__all__ = [
    "BATCHED",
    "DEFAULT_RECIPE",
    "EXPOSURE1_WEIGHT_DECAY",
    "FLAGSHIP_STEPS",
    "FROZEN_GROUPS",
    "MAX_IMAGES",
    "NO_DECAY_GROUPS",
    "RECIPES",
    "DataConfig",
    "Recipe",
    "TowerKnobs",
    "TrainConfig",
    "check_groups",
    "dense_schedule",
    "field_names",
    "knob",
    "legacy_values",
    "snapshot_schedule",
]
