"""Caption attributions and the CLS logit lens."""

from __future__ import annotations

import torch

from hooked_clip1d import load_model
from hooked_clip1d.analysis.interventions.captions import caption_attributions, caption_directions, cls_logit_lens

IMGS = ["C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . .", "C 3 . . . . . . . . ."]
CAPS = ["17 is on the left of 19", "19 is on the left of 17", "3 is in the image"]


def test_head_attributions_sum_to_the_logits_without_layernorm():
    m = load_model("simplified-ntot20-n2-10")
    img, cap = m.vision.to_tokens(IMGS), m.text.to_tokens(CAPS)
    _, cache = m.vision.run_with_cache(img)
    heads = cache.stack_head_results(layer=1, pos_slice=0)  # [head, n_images, d]
    rest = cache["hook_pooled"] - heads.sum(0)  # embeddings + b_O
    comps = torch.cat([heads, rest[None]])
    attr = caption_attributions(m, comps, cache["hook_pooled"], caption_directions(m, cap))
    torch.testing.assert_close(attr.sum(0), m(img, cap), atol=1e-4, rtol=1e-4)
    assert attr.shape == (5, 3, 3)


def test_logit_lens_last_layer_is_the_models_logits():
    for name in ("simplified-ntot20-n2-10", "full-ntot20-n2-10"):
        m = load_model(name)
        img, cap = m.vision.to_tokens(IMGS), m.text.to_tokens(CAPS)
        lens = cls_logit_lens(m, img, cap)
        assert lens.shape == (m.cfg.vision.n_layers + 1, 3, 3)
        torch.testing.assert_close(lens[-1], m(img, cap), atol=1e-4, rtol=1e-4)
