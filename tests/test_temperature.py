"""CLIP's temperature as a recipe choice (the temperature study, docs/fidelity.md): decayed with the other weights
(the default before the study), exempt from decay (no_decay group "logit_scale", open_clip's), or held fixed
(``TrainConfig.fixed_temperature``), on both engines."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_config

from hooked_clip1d import DataConfig
from hooked_clip1d.settings import RECIPES, Recipe, TrainConfig
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.trainer import Trainer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)


def _tc(**kw) -> TrainConfig:
    base = dict(batch_size=16, eval_every=5, checkpoint_every=10, epochs=20, lr=1e-2)
    base.update(kw)
    return TrainConfig(**base)


def test_fixed_temperature_is_held_on_both_engines(tmp_path):
    """A fixed temperature is set at the start and never moves (no gradient, no decay); both engines agree, and a
    group may mix held and learned members."""
    cfg = tiny_config()
    held, learned = _tc(fixed_temperature=100.0), _tc(seed=1)
    single = Trainer(cfg, D6, held, tmp_path / "single").run(progress=False)
    assert single.model.logit_scale.item() == pytest.approx(math.log(100.0), abs=1e-6)
    assert single.model.temperature_scale().item() == pytest.approx(100.0, rel=1e-5)
    runs = BatchedTrainer([Member(cfg, D6, held), Member(cfg, D6, learned)], tmp_path / "group").run(progress=False)
    assert runs[0].model.logit_scale.item() == pytest.approx(math.log(100.0), abs=1e-6)
    assert abs(runs[1].model.logit_scale.item() - math.log(1 / 0.07)) > 1e-3  # the learned one moved
    for k, v in single.model.state_dict().items():
        if not k.endswith("attn.b_K"):  # rounding noise only (test_batched explains)
            torch.testing.assert_close(runs[0].model.state_dict()[k], v, atol=2e-4, rtol=1e-3, msg=k)


def test_temperature_decay_exemption_changes_the_trajectory(tmp_path):
    """Decayed (the old default) and exempt logit_scale differ only by the decay of that one scalar."""
    cfg = tiny_config()
    decayed = Trainer(cfg, D6, _tc(weight_decay=5.0, no_decay=("cls",)), tmp_path / "a").run(progress=False)
    exempt = Trainer(cfg, D6, _tc(weight_decay=5.0, no_decay=("cls", "logit_scale")), tmp_path / "b").run(
        progress=False
    )
    assert exempt.model.logit_scale.item() > decayed.model.logit_scale.item() + 1e-3


def test_fixed_temperature_validation():
    with pytest.raises(ValueError, match="fixed_temperature must be None or a finite number > 0"):
        TrainConfig(fixed_temperature=0.0)
    with pytest.raises(ValueError, match="fixed_temperature must be None or a finite number > 0"):
        TrainConfig(fixed_temperature=float("inf"))
    with pytest.raises(ValueError, match="above the model's clamp"):
        RunConfig(tiny_config(), D6, TrainConfig(fixed_temperature=150.0))
    assert TrainConfig.from_dict(TrainConfig(fixed_temperature=100.0).to_dict()).fixed_temperature == 100.0
    assert TrainConfig.from_dict({"lr": 1e-4}).fixed_temperature is None  # saved before the field: learned


def test_temperature_arms_train_in_one_group():
    """The study's four arms differ only in per-member masks, so they batch together."""
    cfg = tiny_config()
    keys = {
        group_key(cfg, D6, TrainConfig(**{k: v for k, v in RECIPES[r].fields()["train"].items()}))
        for r in (
            "cls-exempt-init002",
            "cls-exempt-init002-temp-nodecay",
            "cls-exempt-init002-temp100",
            "open-clip-init002",
        )
    }
    assert len(keys) == 1
    assert isinstance(RECIPES["cls-exempt-init002-temp100"], Recipe)
