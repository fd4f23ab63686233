"""x20-layers (reproduce/spatial_id_studies.py, pre-registered in docs/fidelity.md on 2026-12-01): a check needs a
depth before the last layer (a one-layer model, where CLS after layer 0 is the readout, fails it whatever it carries),
the depths read on crafted 4-layer sweeps, an untrained model has no fraction, a model stopped before its planned
epochs is not read (nothing of it measured), and the trained controls run through the figure and pass nothing."""

from __future__ import annotations

import copy

import matplotlib.pyplot as plt
import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
from hooked_clip1d.analysis.interventions.patching import PatchSweep
from hooked_clip1d.pretrained import load_model
from hooked_clip1d.reproduce import FIGURES
from hooked_clip1d.reproduce.core import FLAGSHIP, FULL
from hooked_clip1d.reproduce.replicates import SHUFFLED_DISTINCT, SHUFFLED_DISTINCT_VISION2, TRAINED_CONTROLS
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
    for fig in out.figures.values():
        plt.close(fig)


def _fake_sweeps(monkeypatch, cls: list[float], n_layers: int = 4) -> None:
    """mirror_swap_patching replaced by crafted sweeps: residual-stream fractions ``cls`` at CLS by depth
    (embeddings first), 0.5 at the objects, every belief flipped by the mirror (base +1, source -1)."""
    import hooked_clip1d.analysis.interventions.patching as patching

    def fake(model, imgs, caps, hook_names=None, sets=(), heads=False):
        b = imgs.shape[0]
        base, source = torch.ones(b), -torch.ones(b)
        to_belief = lambda f: (1 - 2 * torch.tensor(f))[..., None].expand(*torch.tensor(f).shape, b)  # noqa: E731
        if heads:
            frac = [[[0.25] * 4] for _ in range(n_layers)]  # [layer, set (cls), head]
        else:
            frac = [[0.5, c] for c in cls]  # [depth, set (objects, cls)]
        labels = [str(i) for i in range(len(frac))]
        return PatchSweep("vision", labels, labels, list(sets), heads, to_belief(frac), base, source)

    monkeypatch.setattr(patching, "mirror_swap_patching", fake)


@pytest.mark.parametrize(
    ("cls", "expected", "first"),
    [
        ([0.0, 0.5, 0.9, 0.95, 1.0], [False, True, False], 1),  # after L1 first; App. L's slot reads after L0: 0.5
        ([0.0, 0.85, 0.9, 0.95, 1.0], [True, True, True], 0),
        ([0.0, 0.1, 0.2, 0.3, 1.0], [False, False, False], None),  # only the last layer: the identity is not read
        ([0.0, 0.1, 0.2, 0.8, 1.0], [False, True, False], 2),  # exactly 0.8 holds (>=)
    ],
)
def test_the_depths_read_on_a_four_layer_sweep(monkeypatch, flagship, cls, expected, first):
    """Crafted 4-layer sweeps (App. L's slot reads the same, as if 4 layers): "after layer 0" is the first row after
    the embeddings, check (b) reads layers 0-2 and never the last."""
    _fake_sweeps(monkeypatch, cls)
    # what x20 reads of a model besides the (faked) patching: its dataset, depth and manifest
    deep = CLIP1D(CLIPConfig.from_preset("full", n_labels=20), seed=0).eval()
    deep.data_config, deep.manifest = flagship.data_config, {"name": "deep", "epochs": 1}
    out = _x_layers({FULL: deep, APP_L: deep})
    assert [ok for _, ok in out.checks] == expected
    assert out.numbers[FULL]["first_depth"] == first and out.numbers[FULL]["cls"] == pytest.approx(cls[1:])
    assert out.numbers[FULL]["objects"] == pytest.approx([0.5] * 4)
    for fig in out.figures.values():
        plt.close(fig)


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
    assert out.numbers == {} and out.figures == {}  # nothing of the blind model measured or published
    substitute = copy.copy(flagship)  # a run folder or snapshot in its place stopped early: the same
    substitute.manifest = {"name": "runs/seed-0", "epochs": 5000, "epochs_planned": 10000}
    assert _x_layers({FULL: substitute, APP_L: flagship}).not_run
    finished = copy.copy(flagship)
    finished.manifest = {**flagship.manifest, "name": FULL, "epochs": 10000, "epochs_planned": 10000}
    out = _x_layers({FULL: finished, APP_L: flagship})
    assert not out.not_run and FULL in out.numbers
    for fig in out.figures.values():
        plt.close(fig)
    no_epochs = copy.copy(flagship)
    no_epochs.manifest = {"name": FULL}
    with pytest.raises(ValueError, match="no epochs in its manifest"):
        _x_layers({FULL: no_epochs, APP_L: flagship})


def test_x20_is_registered_with_its_controls():
    spec = FIGURES["x20-layers"]
    assert spec.models == (FULL, APP_L) and spec.beyond_paper
    want = {FULL: (SHUFFLED_DISTINCT, True), APP_L: (SHUFFLED_DISTINCT_VISION2, False)}
    assert TRAINED_CONTROLS["x20-layers"] == want


def test_the_trained_control_runs_through_x20_and_fails_every_check():
    """The control substitution (the flagship's one-layer order-blind control in the full model's place, App. L's
    own control in its place) runs through the figure and passes nothing."""
    from hooked_clip1d.reproduce.replicates import trained_control_runs

    runs, status = trained_control_runs(FIGURES["x20-layers"], None)
    assert runs, status
    for _, models in runs:
        out = _x_layers(models)
        assert not out.not_run and [ok for _, ok in out.checks] == [False, False, False]
        for fig in out.figures.values():
            plt.close(fig)
