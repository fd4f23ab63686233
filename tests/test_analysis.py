"""First analyses: score-term decomposition, term-ablation hooks, CLS->object bias."""

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset, evaluate, load_model
from hooked_clip1d.analysis import SCORE_TERMS, ablate_terms, attention_terms, cls_object_bias


@pytest.fixture(scope="module")
def setup():
    cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2, init_std=1.0)
    model = CLIP1D(cfg, seed=3).eval()  # N(0, 1) embeddings: every term is large at init
    with torch.no_grad():  # non-zero biases so that the B terms are exercised
        for p in (model.vision.blocks[0].attn.b_Q, model.vision.blocks[0].attn.b_K):
            p.normal_()
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    return model, ds


def test_terms_sum_to_scores(setup):
    model, ds = setup
    _, cache = model.vision.run_with_cache(ds.splits["val_unseen"].images)
    terms = attention_terms(model.vision, cache)
    assert set(terms) == set(SCORE_TERMS)
    torch.testing.assert_close(sum(terms.values()), cache["attn_scores", 0], atol=1e-5, rtol=1e-5)
    assert terms["EP"].abs().max() > 0


def test_ablating_nothing_changes_nothing(setup):
    model, ds = setup
    imgs = ds.splits["val_unseen"].images
    torch.testing.assert_close(
        model.vision.run_with_hooks(imgs, fwd_hooks=ablate_terms(model.vision, [])), model.vision(imgs), atol=0, rtol=0
    )


def test_ablating_every_score_term_gives_uniform_attention(setup):
    model, ds = setup
    hooks = ablate_terms(model.vision, SCORE_TERMS)
    _, cache = model.vision.run_with_cache(ds.splits["val_unseen"].images, fwd_hooks=hooks)
    torch.testing.assert_close(cache["pattern", 0], torch.full_like(cache["pattern", 0], 1 / 11), atol=1e-5, rtol=0)


def test_positional_ablation_is_a_no_op_when_positions_are_zero(setup):
    model, ds = setup
    zero = CLIP1D(model.cfg).eval()
    zero.load_state_dict(model.state_dict())
    with torch.no_grad():
        zero.vision.pos_embed.W_pos.zero_()
    imgs = ds.splits["val_unseen"].images
    out = zero.vision.run_with_hooks(imgs, fwd_hooks=ablate_terms(zero.vision, ["EP", "PE", "PP", "BP", "PB", "VP"]))
    torch.testing.assert_close(out, zero.vision(imgs), atol=1e-6, rtol=1e-6)


def test_ep_ablation_of_one_head_removes_its_ep_term_only(setup):
    model, ds = setup
    hooks = ablate_terms(model.vision, ["EP"], heads=[1])
    _, base = model.vision.run_with_cache(ds.splits["val_unseen"].images)
    _, abl = model.vision.run_with_cache(ds.splits["val_unseen"].images, fwd_hooks=hooks)
    torch.testing.assert_close(abl["pattern", 0][:, 0], base["pattern", 0][:, 0])  # head 0 untouched
    ep = attention_terms(model.vision, base)["EP"]
    assert ep[:, 1].abs().max() > 0.1  # N(0, 1) embeddings: a large term, so the check below can fail
    want = base["attn_scores", 0][:, 1] - ep[:, 1]  # head 1: its scores less exactly its EP term
    torch.testing.assert_close(abl["attn_scores", 0][:, 1], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(abl["pattern", 0][:, 1], want.softmax(-1), atol=1e-6, rtol=1e-5)


def test_ep_ablation_hooks_reach_evaluate():
    """On the recipe study's model (no b_Q), where the mechanism is known (Fig. 5e: without EP the CLS row cannot
    tell left from right, so
    every unseen pair gets the same order of its two labels), ``evaluate`` with the EP hooks gives the accuracy
    recomputed by hand from the hooked similarity matrix, and it falls from 1.0 to chance (0.5)."""
    model = load_model("simplified-ntot20-n2-10-no-qk-bias")  # its EP carries the side (no b_Q)
    ds = build_dataset(model.data_config)
    split = ds.splits["val_unseen"]
    hooks = ablate_terms(model.vision, ["EP"])
    with torch.no_grad():
        txt = torch.nn.functional.normalize(model.encode_text(ds.captions), dim=-1)
        with model.vision.hooks(fwd_hooks=hooks):
            img = torch.nn.functional.normalize(model.encode_image(split.images), dim=-1)
    assert bool((split.targets[:, 1] == -1).all())  # "left" captions: one true caption per image
    by_hand = (img @ txt.T).argmax(-1) == split.targets[:, 0]
    res = evaluate(model, ds, splits=["val_unseen"], vision_hooks=hooks)["val_unseen"]
    assert res["acc"] == by_hand.float().mean().item() == 0.5
    assert evaluate(model, ds, splits=["val_unseen"])["val_unseen"]["acc"] == 1.0
    assert res["label_set"] == 1.0  # the labels are still read: only their order is lost


def test_unsuitable_models_and_terms_are_rejected(setup):
    model, _ = setup
    full = CLIP1D(CLIPConfig.from_preset("full", n_labels=6, d_model=16, d_head=4, n_heads=2, d_mlp=8)).eval()
    with pytest.raises(ValueError, match="LayerNorm"):
        ablate_terms(full.vision, ["EP"])
    with pytest.raises(ValueError, match="unknown terms"):
        ablate_terms(model.vision, ["XY"])
    with pytest.raises(ValueError, match="out of range"):
        ablate_terms(model.vision, ["EP"], heads=[7])
    with pytest.raises(ValueError, match="layer 0"):
        ablate_terms(model.vision, ["EP"], layer=1)


def test_cls_object_bias_matches_manual_argmax(setup):
    model, ds = setup
    split = ds.splits["val_unseen"]
    bias = cls_object_bias(model.vision, split)
    _, cache = model.vision.run_with_cache(split.images)
    top = cache["pattern", 0][:, :, 0].argmax(-1)  # [b, h]
    left = (top == (split.positions[:, 0:1] + 1)).float().mean(0)
    torch.testing.assert_close(bias["left"][0], left)
    torch.testing.assert_close(bias["left"] + bias["right"] + bias["other"], torch.ones(1, 2))
    with pytest.raises(ValueError, match="no two-object"):
        cls_object_bias(model.vision, ds.splits["val_single"])
