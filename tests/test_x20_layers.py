"""x20-layers (reproduce/spatial_id_studies.py, pre-registered in docs/fidelity.md on 2026-12-01): a check needs a
depth before the last layer (a one-layer model, where CLS after layer 0 is the readout, fails it whatever it carries),
an untrained model has no fraction, and the shipped full model is read only at protocol."""

from __future__ import annotations

import copy

import pytest

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
from hooked_clip1d.pretrained import load_model
from hooked_clip1d.reproduce import FIGURES
from hooked_clip1d.reproduce.core import FLAGSHIP, FULL
from hooked_clip1d.reproduce.replicates import TRAINED_CONTROLS
from hooked_clip1d.reproduce.spatial_id_studies import (
    APP_L,
    MIRROR_FLIP_MIN,
    X20_A,
    X20_B,
    X20_C,
    _x_layers,
    depth_fractions,
)


@pytest.fixture(scope="module")
def flagship() -> CLIP1D:
    return load_model(FLAGSHIP)


def test_a_one_layer_model_fails_every_check_even_where_its_cls_carries_the_whole_shift(flagship):
    """The flagship (one layer, generalizing) in both slots: its belief flips under mirroring and CLS after layer 0
    carries all of the shift, but that depth is its readout (an identity), so no check can hold on it."""
    r = depth_fractions(flagship)
    assert r["flip_rate"] >= MIRROR_FLIP_MIN and r["n_layers"] == 1
    assert r["cls"] == pytest.approx([1.0], abs=1e-5)  # the identity x20 does not read
    assert r["first_depth"] is None and len(r["heads"]) == 1 and len(r["heads"][0]) == 4
    out = _x_layers({FULL: flagship, APP_L: flagship})
    assert [ok for _, ok in out.checks] == [False, False, False]
    assert [c for c, _ in out.checks] == [X20_A, X20_B, X20_C] and not out.not_run


def test_an_untrained_deep_model_has_no_fraction():
    """Untrained, mirroring does not flip the belief: every fraction is undefined (None), never a number read."""
    m = CLIP1D(CLIPConfig.from_preset("full", n_labels=6), seed=1).eval()
    m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    r = depth_fractions(m)
    assert r["n_layers"] == 4 and r["flip_rate"] < MIRROR_FLIP_MIN
    assert r["cls"] is None and r["objects"] is None and r["heads"] is None and r["first_depth"] is None


def test_the_full_model_is_read_only_at_protocol(flagship):
    """A model named as the zoo's full model that stopped before its planned epochs is not run (as Fig. 11a)."""
    partial = copy.copy(flagship)
    partial.manifest = {**flagship.manifest, "name": FULL, "epochs": 1000, "epochs_planned": 10000}
    out = _x_layers({FULL: partial, APP_L: flagship})
    assert "partial run, 1,000 of its 10,000 epochs" in out.not_run


def test_x20_is_registered_with_its_controls():
    spec = FIGURES["x20-layers"]
    assert spec.models == (FULL, APP_L) and spec.beyond_paper
    assert set(TRAINED_CONTROLS["x20-layers"]) == {FULL, APP_L}
