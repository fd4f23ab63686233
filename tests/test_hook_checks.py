"""Hook return values and hook names are checked (issue: reliability): no wrong shapes, no silent no-ops."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig

IMGS = ["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."]


@pytest.fixture
def model() -> CLIP1D:
    return CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=16, d_head=4), seed=0).eval()


def test_wrong_shape_return_names_the_hook_and_both_shapes(model):
    imgs = model.vision.to_tokens(IMGS)
    with pytest.raises(ValueError, match=r"'hook_pooled' returned a tensor of shape \[1, 16\].*\[2, 16\]"):
        model.vision.run_with_hooks(imgs, fwd_hooks=[("hook_pooled", lambda x, hook: x[:1])])
    with pytest.raises(ValueError, match="blocks.0.attn.hook_z"):
        model.vision.run_with_hooks(imgs, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: z[..., :2])])
    with pytest.raises(ValueError, match="float64"):
        model.vision.run_with_hooks(imgs, fwd_hooks=[("hook_pooled", lambda x, hook: x.double())])


def test_non_tensor_return_is_an_error_and_none_keeps_the_activation(model):
    imgs = model.vision.to_tokens(IMGS)
    with pytest.raises(TypeError, match="returned a float"):
        model.vision.run_with_hooks(imgs, fwd_hooks=[("hook_pooled", lambda x, hook: 1.0)])
    want = model.vision(imgs)
    got = model.vision.run_with_hooks(imgs, fwd_hooks=[("hook_pooled", lambda x, hook: None)])
    assert torch.equal(got, want)
    # add_hook is checked too
    model.vision.add_hook("hook_pooled", lambda x, hook: x[:1])
    with pytest.raises(ValueError, match="hook_pooled"):
        model.vision(imgs)
    model.vision.reset_hooks()


def test_unknown_names_in_names_filter_and_empty_predicates_are_errors(model):
    imgs = model.vision.to_tokens(IMGS)
    with pytest.raises(KeyError, match="hook_patern"):
        model.vision.run_with_cache(imgs, names_filter="blocks.0.attn.hook_patern")
    with pytest.raises(KeyError, match="hook_nope"):
        model.vision.run_with_cache(imgs, names_filter=["hook_pooled", "hook_nope"])
    with pytest.raises(ValueError, match="matches no hook point"):
        model.vision.run_with_cache(imgs, names_filter=lambda n: n.endswith("hook_patern"))
    with pytest.raises(ValueError, match="matches no hook point"):
        model.vision.run_with_hooks(imgs, fwd_hooks=[(lambda n: "mlp" in n, lambda x, hook: x)])
    _, cache = model.vision.run_with_cache(imgs, names_filter=lambda n: n.endswith("hook_pattern"))
    assert list(cache.keys()) == ["blocks.0.attn.hook_pattern"]


def test_loss_needs_paired_batches(model):
    imgs = model.vision.to_tokens(IMGS + ["C 3 . . . . . . . . ."])
    caps = model.text.to_tokens(["1 is on the left of 2", "2 is on the left of 1"])
    with pytest.raises(ValueError, match="3 images but 2 captions"):
        model(imgs, caps, return_type="loss")
    assert model(imgs, caps).shape == (3, 2)  # logits of unpaired batches are a similarity matrix: fine


def test_evaluate_refuses_nan_similarities(model):
    from hooked_clip1d import DataConfig, build_dataset, evaluate

    ds = build_dataset(DataConfig(n_labels=5, n_heldout=2, n2=2))
    with pytest.raises(ValueError, match="not finite"):
        evaluate(model, ds, vision_hooks=[("hook_pooled", lambda x, hook: x * float("nan"))])


def test_steering_refuses_nan_alphas():
    from hooked_clip1d.analysis.mechanism.spatial_ids import _alphas

    with pytest.raises(ValueError, match="finite"):
        _alphas([0.0, float("nan")])


@pytest.mark.parametrize(
    "ids",
    [
        lambda v: [1, v.left_of, 1, v.eot],  # a repeated label
        lambda v: [1, v.eot, 2, v.eot],  # EOT in the middle
        lambda v: [1, v.left_of, v.eot, 2],  # misplaced EOT
        lambda v: [1, v.is_, 2, v.eot],  # "1 is 2"
        lambda v: [v.left_of, 1, 2, v.eot],
    ],
)
def test_captions_the_vocabulary_cannot_produce_are_refused(model, ids):
    v = model.cfg.text.vocab
    with pytest.raises(ValueError, match="not one the vocabulary produces"):
        model.text(torch.tensor([ids(v)]))
