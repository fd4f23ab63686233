"""TransformerLens conveniences on the towers: string input, token strings, W_E_pos, per-layer QK/OV, composition."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig


@pytest.fixture
def model() -> CLIP1D:
    return CLIP1D(CLIPConfig.from_preset("full", n_labels=5, d_model=16, d_head=4, d_mlp=16, n_layers=2), seed=0).eval()


def test_string_input_and_token_strings(model):
    s = "C 1 . 2 . . . . . . ."
    torch.testing.assert_close(model.vision(s), model.vision(model.vision.to_tokens(s)))
    assert model.vision.to_str_tokens(s)[:3] == model.vision.token_strs(model.vision.to_tokens(s)[0])[:3]
    assert len(model.text.to_str_tokens(["1 is on the left of 2", "2 is in the image"])) == 2
    assert model.text.to_string(model.text.to_tokens("1 is on the left of 2")[0]) == "1 is on the left of 2"
    assert model.vision.to_string(model.vision.to_tokens([s, s])) == [s, s]


def test_weights_and_factored_matrices(model):
    enc = model.vision
    assert enc.W_E_pos.shape == (enc.cfg.d_vocab + enc.cfg.n_ctx, 16)
    qk = enc.blocks[1].attn.QK
    torch.testing.assert_close(qk.AB, enc.QK.AB[1])
    torch.testing.assert_close(enc.blocks[0].attn.OV.AB, enc.W_V[0] @ enc.W_O[0])
    assert enc.n_params == sum(p.numel() for p in enc.parameters()) and enc.cfg.model_name == "hooked-clip1d-vision"
    scores = enc.all_composition_scores("Q")
    assert scores.shape == (2, 4, 2, 4) and scores[1].abs().sum() == 0 and scores[0, :, 1].min() > 0
    with pytest.raises(ValueError, match="mode"):
        enc.all_composition_scores("X")
