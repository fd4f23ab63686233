"""CLIP1D as one hooked model: run_with_cache / run_with_hooks / hooks over both towers and the head."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import ActivationCache

from hooked_clip1d import CLIP1D, load_model
from hooked_clip1d.model.clip import HEAD_HOOKS, CLIPCache

IMGS = ["C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . ."]
CAPS = ["17 is on the left of 19", "19 is on the left of 17"]


@pytest.fixture(scope="module")
def model() -> CLIP1D:
    return load_model("simplified-ntot20-n2-10")


def _inputs(m):
    return m.vision.to_tokens(IMGS), m.text.to_tokens(CAPS)


def test_cache_has_both_towers_with_tl_keys_and_equals_the_towers_own(model):
    img, cap = _inputs(model)
    logits, cache = model.run_with_cache(img, cap)
    assert isinstance(cache, CLIPCache) and isinstance(cache.vision, ActivationCache)
    _, vc = model.vision.run_with_cache(img)
    _, tc = model.text.run_with_cache(cap)
    assert set(vc.keys()) == set(cache.vision.keys()) and set(tc.keys()) == set(cache.text.keys())
    for k in vc.keys():
        torch.testing.assert_close(cache.vision[k], vc[k], atol=0, rtol=0)
    torch.testing.assert_close(cache.vision["pattern", 0], vc["pattern", 0])
    torch.testing.assert_close(cache["hook_logits"], logits)
    torch.testing.assert_close(logits, model(img, cap))
    feat = cache["hook_image_feat"] @ cache["hook_text_feat"].T * model.temperature_scale()
    torch.testing.assert_close(feat, logits)
    assert all(h in cache for h in HEAD_HOOKS)
    # the accumulated residual etc. of TransformerLens work on the tower view
    assert cache.vision.accumulated_resid(layer=1).shape[0] == 2


def test_hooks_on_one_tower_change_the_logits_scored_by_the_other(model):
    img, cap = _inputs(model)
    base = model(img, cap)

    def zero_heads(z, hook):
        z[:, :, :] = 0.0
        return z

    patched = model.run_with_hooks(img, cap, fwd_hooks=[("vision.blocks.0.attn.hook_z", zero_heads)])
    assert not torch.allclose(patched, base)
    assert torch.equal(model(img, cap), base)  # removed again
    with model.hooks([("hook_text_feat", lambda x, hook: torch.zeros_like(x))]):
        assert model(img, cap).abs().max() == 0


def test_names_and_return_types_are_checked(model):
    img, cap = _inputs(model)
    with pytest.raises(KeyError, match="no hook point 'hook_nope'"):
        model.run_with_hooks(img, cap, fwd_hooks=[("hook_nope", lambda x, hook: x)])
    with pytest.raises(KeyError, match="vision.hook_patern"):
        model.run_with_cache(img, cap, names_filter=["vision.hook_patern"])
    with pytest.raises(ValueError, match="unknown return_type 'los'"):
        model(img, cap, return_type="los")
    with pytest.raises(ValueError, match="shape"):
        model.run_with_hooks(img, cap, fwd_hooks=[("hook_logits", lambda x, hook: x[:1])])


def test_gradients_end_to_end(model):
    img, cap = _inputs(model)
    loss, cache = model.run_with_cache(
        img, cap, names_filter=lambda n: n.endswith(("hook_pooled", "hook_z")), return_type="loss", incl_bwd=True
    )
    assert loss.ndim == 0
    assert cache["vision.hook_pooled_grad"].shape == cache["vision.hook_pooled"].shape
    assert cache["text.blocks.0.attn.hook_z_grad"].abs().sum() > 0
    model.zero_grad(set_to_none=True)
