"""init_std and pruned_heads: config fields that change the weights' init and the forward pass."""

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, VisionConfig
from hooked_clip1d.checkpoint import load_model_file, save_model


def test_init_std_scales_both_embeddings():
    big = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=20), seed=0)
    small = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=20, init_std=0.02), seed=0)
    for name in ("W_E", "W_pos"):
        ratio = (getattr(small.vision, name).std() / getattr(big.vision, name).std()).item()
        assert ratio == pytest.approx(0.02, rel=1e-4)
    # the other weights are drawn identically
    assert torch.equal(small.vision.W_Q, big.vision.W_Q)


@pytest.mark.parametrize("bad", [0.0, -1.0, True, "0.02"])
def test_init_std_must_be_positive_number(bad):
    with pytest.raises((ValueError, TypeError), match="init_std|init_std"):
        VisionConfig(init_std=bad)


def test_pruned_heads_zero_those_heads_outputs():
    cfg = CLIPConfig.from_preset(
        "simplified", n_labels=6, n_layers=2, vision_overrides={"pruned_heads": ((1, 2), (0, 0))}
    )
    m = CLIP1D(cfg, seed=0).eval()
    assert m.cfg.vision.pruned_heads == ((0, 0), (1, 2))  # canonical order
    full = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, n_layers=2), seed=0).eval()
    img = m.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . . 4 . . ."])
    _, cache = m.vision.run_with_cache(img)
    assert cache["z", 0][:, :, 0].abs().max() == 0 and cache["z", 1][:, :, 2].abs().max() == 0
    assert cache["z", 0][:, :, 1].abs().max() > 0

    def zero(layer_head):
        def fn(z, hook):
            z[:, :, layer_head] = 0
            return z

        return fn

    expected = full.vision.run_with_hooks(
        img, fwd_hooks=[("blocks.0.attn.hook_z", zero(0)), ("blocks.1.attn.hook_z", zero(2))]
    )
    torch.testing.assert_close(m.vision(img), expected)
    assert not torch.allclose(full.vision(img), expected)


def test_pruned_heads_roundtrip_through_checkpoint(tmp_path):
    cfg = CLIPConfig.from_preset("simplified", n_labels=6, vision_overrides={"pruned_heads": ((0, 3),)})
    m = CLIP1D(cfg, seed=1)
    assert CLIPConfig.from_dict(cfg.to_dict()) == cfg
    save_model(m, tmp_path / "m.safetensors")
    back = load_model_file(tmp_path / "m.safetensors")
    assert back.cfg.vision.pruned_heads == ((0, 3),)
    assert back.vision.blocks[0].attn.head_mask.tolist() == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("bad", [((0, 4),), ((1, 0),), ((0,),), ((0, 1), (0, 1)), "x"])
def test_pruned_heads_out_of_range_or_malformed(bad):
    # malformed values fail the type hint first when the tests' beartype hook is on (TypeError), else our ValueError
    with pytest.raises((ValueError, TypeError), match="pruned_heads"):
        VisionConfig(n_heads=4, n_layers=1, pruned_heads=bad)
