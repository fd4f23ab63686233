"""App. I / Fig. 19: consistency condition (Eq. 8, 23), Π_bias, key PCA, effective rank of W_K, ρ profiles."""

import json
import math

import pytest
import torch
from conftest import ROPE, make_model

from hooked_clip1d import CLIP1D, CLIPConfig, load_model
from hooked_clip1d.analysis.mechanism.heads import to_jsonable
from hooked_clip1d.analysis.mechanism.rope import (
    bias_gradient,
    consistency_condition,
    key_effective_rank,
    key_pca,
    rho_profile,
    rope_mechanism,
)
from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.visualization.rope import plot_rope_mechanism

VISION_ROPE = dict(vision_overrides={"positional": "rope"})


def _flipped_score_diff(model, split):
    """S'_y - S'_x from a real forward pass on the images with the two labels swapped."""
    pair = split.is_pair
    imgs, pos, objs = split.images[pair].clone(), split.positions[pair] + 1, split.objects[pair]
    ar = torch.arange(len(imgs))
    imgs[ar, pos[:, 0]], imgs[ar, pos[:, 1]] = objs[:, 1], objs[:, 0]
    _, cache = model.run_with_cache(imgs)
    row = cache["attn_scores", 0][:, :, 0]
    return row[ar, :, pos[:, 0]] - row[ar, :, pos[:, 1]]


@pytest.mark.parametrize("preset,extra", [("simplified", {}), ("simplified", {"n_layers": 2}), ("full", {})])
def test_eq23_terms_reproduce_the_scores_and_the_condition(preset, extra, dataset):
    model = make_model(preset, seed=11, **ROPE, **extra).vision
    split = dataset.splits["val_unseen"]
    cc = consistency_condition(model, split)
    torch.testing.assert_close(cc["T1"] + cc["Pi_bias"], cc["score_diff"], atol=1e-4, rtol=1e-4)
    flipped = _flipped_score_diff(model, split)
    torch.testing.assert_close(cc["T2"] + cc["Pi_bias"], flipped, atol=1e-4, rtol=1e-4)
    assert torch.equal(cc["holds_full"], cc["score_diff"] * flipped > 0)
    assert torch.equal(cc["rate_full"], cc["holds_full"].float().mean(0))
    assert cc["Pi_bias"].abs().max() > 0  # random b_K: mechanism 1 contributes
    assert torch.equal(cc["prefer_left"], (cc["score_diff"] > 0).float().mean(0))


def test_without_key_bias_the_full_and_no_bias_conditions_agree(dataset):
    model = make_model("simplified", seed=12, **VISION_ROPE)
    with torch.no_grad():
        model.vision.blocks[0].attn.b_K.zero_()
    cc = consistency_condition(model.vision, dataset.splits["val_unseen"])
    assert cc["Pi_bias"].abs().max() == 0
    assert torch.equal(cc["holds_full"], cc["holds_no_bias"])
    bg = bias_gradient(model.vision)
    assert torch.nan_to_num(bg["matrix"]).abs().max() == 0


def test_rank_one_keys_make_the_pc1_approximation_exact(dataset):
    """W_K[h] = w v^T puts every token key on v (Eq. 24): PC1 = ±v, α_i = E_i·w, and with b_K = 0 the CLS logit of
    label i at position a is exactly α_i ρ_a."""
    model = make_model("simplified", seed=13, **VISION_ROPE).vision
    g = torch.Generator().manual_seed(0)
    H, dm, dh = model.cfg.n_heads, model.cfg.d_model, model.cfg.d_head
    w, v = torch.randn(H, dm, generator=g), torch.nn.functional.normalize(torch.randn(H, dh, generator=g), dim=-1)
    with torch.no_grad():
        model.blocks[0].attn.W_K.copy_(w[:, :, None] * v[:, None, :])
        model.blocks[0].attn.b_K.zero_()
    split = dataset.splits["val_unseen"]
    for center in (True, False):
        cc = consistency_condition(model, split, pca_center=center)
        assert torch.equal(cc["holds_pc1"], cc["holds_no_bias"])
        kp = key_pca(model, split, center=center)
        torch.testing.assert_close(kp["pc1"].abs(), v.abs(), atol=1e-5, rtol=0)
        assert kp["explained_variance_ratio"][:, 0].min() > 1 - 1e-5
        torch.testing.assert_close(kp["cos_singular"][:, 0], torch.ones(H), atol=1e-5, rtol=0)
    er = key_effective_rank(model)
    assert torch.equal(er["rank"], torch.ones(H, 3, dtype=er["rank"].dtype))
    rp = rho_profile(model, split, center=False)
    pair = split.is_pair
    _, cache = model.run_with_cache(split.images[pair])
    pos, objs = split.positions[pair], split.objects[pair]
    labels = rp["labels"].tolist()
    ar = torch.arange(len(pos))
    for side in (0, 1):
        actual = cache["attn_scores", 0][ar, :, 0, pos[:, side] + 1]  # [n, h]
        li = torch.tensor([labels.index(int(x)) for x in objs[:, side]])
        predicted = rp["alpha"][li] * rp["rho"].T[pos[:, side]]
        torch.testing.assert_close(actual, predicted, atol=1e-4, rtol=1e-4)


def test_bias_gradient_is_the_score_of_a_bias_only_key():
    """With a zero background embedding, a background pixel's key is b_K alone, so on an empty image the CLS
    logit difference between pixels a and b is exactly Π_bias(a, b)."""
    model = make_model("simplified", seed=14, **VISION_ROPE).vision
    with torch.no_grad():
        model.embed.W_E[0].zero_()
    bg = bias_gradient(model)
    D = model.cfg.d_image
    assert bg["matrix"].shape == (2, D, D) and bg["distance"].tolist() == list(range(1, D))
    empty = model.to_tokens("C " + " ".join(["."] * D))
    _, cache = model.run_with_cache(empty)
    s = cache["attn_scores", 0][0, :, 0, 1:]  # [h, D]
    want = s[:, :, None] - s[:, None, :]
    upper = torch.triu(torch.ones(D, D, dtype=torch.bool), 1)
    torch.testing.assert_close(bg["matrix"][:, upper], want[:, upper], atol=1e-5, rtol=1e-5)
    assert bg["matrix"][:, ~upper].isnan().all()
    for i, d in enumerate(bg["distance"].tolist()):
        vals = torch.stack([want[:, a, a + d] for a in range(D - d)], -1)
        torch.testing.assert_close(bg["mean"][:, i], vals.mean(-1), atol=1e-5, rtol=1e-5)


def test_eq8_with_learned_positions(simplified_model, dataset):
    split = dataset.splits["val_unseen"]
    cc = consistency_condition(simplified_model.vision, split)
    torch.testing.assert_close(cc["T"] + cc["Pi"], cc["score_diff"], atol=1e-4, rtol=1e-4)
    flipped = _flipped_score_diff(simplified_model.vision, split)
    torch.testing.assert_close(-cc["T"] + cc["Pi"], flipped, atol=1e-4, rtol=1e-4)
    assert torch.equal(cc["holds"], cc["Pi"].abs() > cc["T"].abs())
    assert torch.equal(cc["holds"], cc["score_diff"] * flipped > 0)


def test_key_pca_and_effective_rank(rope_model):
    v = rope_model.vision
    kp = key_pca(v, [1, 2, 3, 4])
    torch.testing.assert_close(kp["explained_variance_ratio"].sum(-1), torch.ones(2))
    # alpha by hand: each label's token key W_K E_i (no bias, no LayerNorm, not rotated) on PC1, sign: mean >= 0
    keys = torch.einsum("nm,hmd->nhd", v.W_E[1:5], v.blocks[0].attn.W_K).detach()
    torch.testing.assert_close(kp["alpha"], torch.einsum("nhd,hd->nh", keys, kp["pc1"]), atol=1e-5, rtol=1e-5)
    assert bool((kp["alpha"].mean(0) >= 0).all())
    # PC1 is the leading right singular vector of the centred keys
    for h in range(2):
        X = keys[:, h] - keys[:, h].mean(0)
        torch.testing.assert_close(kp["pc1"][h].abs(), torch.linalg.svd(X).Vh[0].abs(), atol=1e-5, rtol=1e-5)
    # a permutation of the labels permutes alpha's rows and nothing else
    kr = key_pca(v, [4, 3, 2, 1])
    torch.testing.assert_close(kr["alpha"], kp["alpha"].flip(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kr["pc1"], kp["pc1"], atol=1e-5, rtol=1e-5)
    er = key_effective_rank(rope_model.vision, thresholds=[0.5, 1.0])
    assert bool((er["rank"][:, 0] <= er["rank"][:, 1]).all()) and bool((er["rank"][:, 1] == 4).all())
    S = torch.linalg.svdvals(rope_model.vision.blocks[0].attn.W_K.detach())
    torch.testing.assert_close(er["cumulative"][:, 0], S[:, 0] ** 2 / (S**2).sum(-1))


def test_unsuitable_models_are_rejected(simplified_model, full_model, dataset):
    split = dataset.splits["val_unseen"]
    for fn in (bias_gradient, lambda m: key_pca(m, [1, 2]), lambda m: rho_profile(m, [1, 2])):
        with pytest.raises(ValueError, match="positional='rope'"):
            fn(simplified_model.vision)
    with pytest.raises(ValueError, match="positional='rope'"):
        rope_mechanism(simplified_model.vision, split)
    with pytest.raises(TypeError, match="vision tower"):
        consistency_condition(simplified_model.text, split)
    with pytest.raises(ValueError, match="LayerNorm"):
        consistency_condition(full_model.vision, split)
    none = make_model("simplified", seed=15, vision_overrides={"positional": "none"})
    with pytest.raises(ValueError, match="'none'"):
        consistency_condition(none.vision, split)
    rope = make_model("simplified", seed=16, **VISION_ROPE).vision
    with pytest.raises(ValueError, match="no two-object"):
        consistency_condition(rope, dataset.splits["val_single"])
    with pytest.raises(ValueError, match="at least 2"):
        key_pca(rope, [3])
    with pytest.raises(ValueError, match="1..6"):
        key_pca(rope, [1, 9])
    with pytest.raises(ValueError, match="thresholds"):
        key_effective_rank(rope, thresholds=[1.5])
    with pytest.raises(ValueError, match="layer"):
        key_effective_rank(rope, layer=1)


def test_rope_mechanism_and_plot(dataset):
    m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2, **VISION_ROPE), 0)
    res = rope_mechanism(m.eval().vision, dataset.splits["val_unseen"])
    assert set(res) == {"consistency", "bias_gradient", "key_pca", "effective_rank", "rho"}
    # rho by hand: the CLS query q (position 0, unrotated) against PC1 rotated to pixel a (input position a + 1),
    # each feature pair (i, i + 2) of d_head = 4 turned by (a + 1) * 10000^(-i/2) radians, / sqrt(d_head)
    v = m.vision
    q = (v.W_E[v.cfg.vocab.cls] @ v.blocks[0].attn.W_Q + v.blocks[0].attn.b_Q).detach()  # [h, 4]
    pc1 = key_pca(v, dataset.splits["val_unseen"])["pc1"]  # [h, 4]
    want = torch.zeros(2, 10)
    for a in range(10):
        for h in range(2):
            x = pc1[h]
            rot = torch.empty(4)
            for i in range(2):
                t = (a + 1) * 10000.0 ** (-i / 2)
                c, s_ = math.cos(t), math.sin(t)
                rot[i], rot[i + 2] = x[i] * c - x[i + 2] * s_, x[i + 2] * c + x[i] * s_
            want[h, a] = q[h] @ rot / 2
    torch.testing.assert_close(res["rho"]["rho"], want, atol=1e-5, rtol=1e-4)
    fig = plot_rope_mechanism(json.loads(json.dumps(to_jsonable(res))))
    assert len(fig.axes) == 6
    two = make_model("simplified", seed=17, n_layers=2, **VISION_ROPE)
    cc = rope_mechanism(two.vision, dataset.splits["val_unseen"])["consistency"]
    flipped = _flipped_score_diff(two.vision, dataset.splits["val_unseen"])  # layer 0 of a real forward pass
    torch.testing.assert_close(cc["rate_full"], (cc["score_diff"] * flipped > 0).float().mean(0))


def test_shipped_model():
    model = load_model("simplified-ntot20-n2-10-standard-loss")  # the flagship until 2026-11-28 (its numbers below)
    split = build_dataset(model.data_config).splits["val_unseen"]
    cc = consistency_condition(model.vision, split)  # learned positions: Eq. 8
    torch.testing.assert_close(cc["T"] + cc["Pi"], cc["score_diff"], atol=1e-4, rtol=1e-4)
    # the rate by a forward pass: the condition holds where the mirrored-label image keeps the head's preference
    flipped = _flipped_score_diff(model.vision, split)
    torch.testing.assert_close(cc["rate"], (cc["score_diff"] * flipped > 0).float().mean(0))
    assert cc["rate"].max() == 1.0  # the flagship's positional head keeps its side on every unseen pair
    # effective rank by hand: the fewest singular values of W_K[h] whose squares reach 90 / 95 / 99 % of the energy
    er = key_effective_rank(model.vision)
    for h, W in enumerate(model.vision.blocks[0].attn.W_K.detach()):
        energy = torch.linalg.svdvals(W) ** 2
        share = (energy.cumsum(0) / energy.sum()).tolist()
        want = [next(k + 1 for k, c in enumerate(share) if c >= t - 1e-6) for t in (0.9, 0.95, 0.99)]
        assert er["rank"][h].tolist() == want, h
    with pytest.raises(ValueError, match="positional='rope'"):
        rope_mechanism(model.vision, split)
