"""Spatial IDs (extraction per position and depth) and steering a belief with ID differences."""

from __future__ import annotations

import json

import pytest
import torch

from hooked_clip1d import build_dataset, load_model
from hooked_clip1d.analysis.mechanism.spatial_ids import (
    SpatialIDs,
    add_hook,
    steer_text,
    steer_vision,
    text_role_ids,
    vision_spatial_ids,
)
from hooked_clip1d.analysis.metrics import image_belief, pair_inputs, swap_objects
from hooked_clip1d.visualization.patching import plot_spatial_ids, plot_steering_curves

ATOL = 1e-5


@pytest.fixture(scope="module")
def pairs(dataset):
    a = pair_inputs(dataset.splits["val_seen"], dataset.vocab, n=10, seed=2)
    b = pair_inputs(dataset.splits["val_unseen"], dataset.vocab)
    return torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])


@pytest.mark.parametrize("context", ["single", "pair"])
def test_vision_ids_at_depth0_are_the_centred_positional_embeddings(any_model, rope_model, context):
    enc = any_model.vision
    ids = vision_spatial_ids(enc, context=context)
    L = enc.cfg.n_layers
    assert ids.ids.shape == (L + 1, 10, enc.cfg.d_model)
    assert ids.mean_acts.shape == (L + 1, 6, 10, enc.cfg.d_model)
    if any_model is rope_model:
        assert ids.ids[0].abs().max() < ATOL  # RoPE: no position in the residual before layer 0
    else:
        P = enc.W_pos[1:]
        torch.testing.assert_close(ids.ids[0], P - P.mean(0), atol=ATOL, rtol=0)
    # Eq. 3 and 4: object-specific IDs are centred over positions, universal ones are their mean over labels
    torch.testing.assert_close(ids.object_ids.mean(2), torch.zeros_like(ids.object_ids.mean(2)), atol=ATOL, rtol=0)
    torch.testing.assert_close(ids.ids, ids.object_ids.mean(1))
    assert ids.ids[L].abs().max() > 1e-3  # deeper: position is still carried at the object token
    json.dumps(ids.to_dict())


def test_cls_ids_are_zero_before_layer0_and_steering_there_is_refused(simplified_model, pairs):
    ids = vision_spatial_ids(simplified_model.vision, site="cls")
    assert ids.ids[0].abs().max() < ATOL  # CLS's embedding does not depend on the image
    assert ids.ids[1].abs().max() > 1e-3
    with pytest.raises(ValueError, match="are zero") as err:
        steer_vision(simplified_model, *pairs, ids, depth=0)
    # the reason given is the CLS token's, not RoPE's (this model has learned positions)
    assert "CLS token's embedding" in str(err.value) and "RoPE" not in str(err.value)


def test_steering_at_depth0_with_alpha_1_is_the_object_swap(any_model, rope_model, pairs):
    imgs, caps = pairs
    ids = vision_spatial_ids(any_model.vision)
    if any_model is rope_model:
        with pytest.raises(ValueError, match="RoPE"):
            steer_vision(any_model, imgs, caps, ids, depth=0)
        return
    r = steer_vision(any_model, imgs, caps, ids, depth=0, alphas=[0.0, 0.5, 1.0])
    torch.testing.assert_close(r.beliefs[0], r.base, atol=ATOL, rtol=0)
    torch.testing.assert_close(r.beliefs[2], r.target, atol=ATOL, rtol=0)  # row by row, any depth of model
    torch.testing.assert_close(r.target, image_belief(any_model, swap_objects(imgs), caps).cpu())
    assert abs(r.fraction()[1] - 0.5) > 1e-4 or any_model.vision.cfg.n_layers == 1  # not linear in general
    # object-specific IDs at depth 0 are the same differences of positional embeddings
    rs = steer_vision(any_model, imgs, caps, ids, depth=0, alphas=[1.0], specific=True)
    torch.testing.assert_close(rs.beliefs[0], r.target, atol=ATOL, rtol=0)


def test_steering_deeper_changes_beliefs_and_cls_steering_runs(two_layer_model, pairs):
    imgs, caps = pairs
    ids = vision_spatial_ids(two_layer_model.vision)
    r = steer_vision(two_layer_model, imgs, caps, ids, depth=1, alphas=[0.0, 1.0])
    assert not torch.allclose(r.beliefs[1], r.base)  # layer 1 still reads the object tokens
    last = steer_vision(two_layer_model, imgs, caps, ids, depth=2, alphas=[1.0])
    torch.testing.assert_close(last.beliefs[0], last.base, atol=ATOL, rtol=0)  # object tokens after the last layer
    cls_ids = vision_spatial_ids(two_layer_model.vision, site="cls", context="pair")
    c = steer_vision(two_layer_model, imgs, caps, cls_ids, depth=2, alphas=[0.0, 1.0])
    assert not torch.allclose(c.beliefs[1], c.base)
    assert c.site == "cls"


def test_text_role_id_steering(simplified_model, two_layer_model, pairs):
    ids = text_role_ids(simplified_model.text)
    assert ids.positions == [0, 2]
    torch.testing.assert_close(ids.ids[:, 0], -ids.ids[:, 1])  # two positions, centred
    P = simplified_model.text.W_pos
    torch.testing.assert_close(ids.ids[0, 1] - ids.ids[0, 0], P[2] - P[0], atol=ATOL, rtol=0)
    r = steer_text(simplified_model, *pairs, ids, depth=0, alphas=[0.0, 1.0, 2.0])
    # 1-layer text tower: at alpha 1 the subject slot holds E_X + P_2 and the object slot E_Y + P_0, the swapped
    # caption's vectors in another order, which EOT cannot tell apart
    torch.testing.assert_close(r.beliefs[1], r.target, atol=1e-4, rtol=0)
    torch.testing.assert_close(r.beliefs[0], r.base, atol=ATOL, rtol=0)
    r2 = steer_text(two_layer_model, *pairs, text_role_ids(two_layer_model.text), depth=1, alphas=[0.0, 1.0])
    assert r2.beliefs.shape == (2, len(pairs[0]))
    json.dumps(r2.to_dict())


def test_shipped_model_ids_and_steering():
    model = load_model("simplified-ntot20-n2-10")
    ds = build_dataset(model.data_config)
    imgs, caps = pair_inputs(ds.splits["val_seen"], ds.vocab, n=40, seed=0)
    ids = vision_spatial_ids(model.vision)
    r = steer_vision(model, imgs, caps, ids, depth=0, alphas=[0.0, 1.0])
    torch.testing.assert_close(r.fraction(), torch.tensor([0.0, 1.0]), atol=1e-4, rtol=0)
    assert r.flip_rate()[1] > 0.5  # seen pairs: the swapped image is believed the other way round
    c = steer_vision(model, imgs, caps, vision_spatial_ids(model.vision, site="cls"), depth=1, alphas=[0.0, 2.0])
    assert c.fraction()[1] > 0.05  # CLS steering with object-specific IDs moves the belief toward the swap


def test_add_hook_and_bad_inputs(simplified_model, dataset, pairs, tmp_path):
    m = simplified_model
    imgs, caps = pairs
    delta = torch.zeros(len(imgs), 11, 16)
    delta[:, 0] = 1.0
    _, cache = m.vision.run_with_cache(imgs, fwd_hooks=[add_hook("blocks.0.hook_resid_pre", delta)])
    _, clean = m.vision.run_with_cache(imgs)
    torch.testing.assert_close(cache["blocks.0.hook_resid_pre"], clean["blocks.0.hook_resid_pre"] + delta)
    vids, tids = vision_spatial_ids(m.vision), text_role_ids(m.text)
    with pytest.raises(ValueError, match="text tower"):
        steer_vision(m, imgs, caps, tids, depth=0)
    with pytest.raises(ValueError, match="depth 5"):
        steer_vision(m, imgs, caps, vids, depth=5)
    with pytest.raises(ValueError, match="missing labels"):
        steer_vision(m, imgs, caps, vision_spatial_ids(m.vision, labels=[1, 2]), depth=0, specific=True)
    with pytest.raises(ValueError, match="two-object"):
        steer_vision(m, dataset.splits["val_single"].images[:2], caps[:2], vids, depth=0)
    with pytest.raises(ValueError, match="alphas"):
        steer_text(m, imgs, caps, tids, depth=0, alphas=[])
    with pytest.raises(TypeError, match="vision tower|tower"):
        vision_spatial_ids(m.text)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        vision_spatial_ids(m.vision, labels=[0, 1])
    with pytest.raises((ValueError, TypeError), match="site"):
        vision_spatial_ids(m.vision, site="pixel")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 2"):
        text_role_ids(m.text, labels=[1])
    r = steer_vision(m, imgs, caps, vids, depth=1, alphas=[0.0, 1.0, 2.0])
    for name, fig in {"curves": plot_steering_curves({"depth 1": r}), "ids": plot_spatial_ids(vids)}.items():
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert isinstance(vids, SpatialIDs)
