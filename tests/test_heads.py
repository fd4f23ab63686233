"""Head roles: Δlabel / Δp.e. (Fig. 5c), relational vs label-specific (Fig. 5d), text EOT bias (Fig. 6), plots."""

import dataclasses
import json

import pytest
import torch
from conftest import ROPE, make_model

from hooked_clip1d import load_model
from hooked_clip1d.analysis.interventions.terms import attention_terms
from hooked_clip1d.analysis.mechanism.heads import (
    classify_head_roles,
    cls_object_bias,
    label_pe_deltas,
    pair_captions,
    text_eot_bias,
    to_jsonable,
)
from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.visualization.heads import plot_eot_bias, plot_head_roles, plot_label_pe_scatter


def _row_diff(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Right-minus-left of the CLS row of a [n, h, q, k] term at input positions pos [n, 2]."""
    ar = torch.arange(len(pos))
    row = t[:, :, 0]
    return row[ar, :, pos[:, 1]] - row[ar, :, pos[:, 0]]


@pytest.mark.parametrize("fixture", ["simplified_model", "two_layer_model"])
def test_deltas_are_the_ee_and_ep_terms(fixture, request, dataset):
    model = request.getfixturevalue(fixture)
    split = dataset.splits["val_unseen"]
    d = label_pe_deltas(model.vision, split)
    n = int(split.is_pair.sum())
    assert d["delta_label"].shape == d["delta_pe"].shape == (n, model.cfg.vision.n_heads)
    _, cache = model.vision.run_with_cache(split.images[split.is_pair])
    with torch.no_grad():
        terms = attention_terms(model.vision, cache)
    pos = split.positions[split.is_pair] + 1
    torch.testing.assert_close(d["delta_label"], _row_diff(terms["EE"], pos), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(d["delta_pe"], _row_diff(terms["EP"], pos), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(d["delta_score"], _row_diff(cache["attn_scores", 0], pos), atol=1e-5, rtol=1e-5)
    assert torch.equal(d["attends_right"], d["delta_score"] > 0)
    assert d["delta_pe"].abs().max() > 0 and d["delta_label"].abs().max() > 0
    assert torch.equal(d["positions"], split.positions[split.is_pair])
    # an invariant: exchanging the two objects' labels (same pixels) negates Δlabel and leaves Δp.e. unchanged
    pair = split.is_pair
    imgs, pos, objs = split.images[pair].clone(), split.positions[pair] + 1, split.objects[pair]
    ar = torch.arange(len(imgs))
    imgs[ar, pos[:, 0]], imgs[ar, pos[:, 1]] = objs[:, 1], objs[:, 0]
    swapped = dataclasses.replace(
        split, images=imgs, objects=objs.flip(-1), positions=split.positions[pair], targets=split.targets[pair]
    )
    ds = label_pe_deltas(model.vision, swapped)
    torch.testing.assert_close(ds["delta_label"], -d["delta_label"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ds["delta_pe"], d["delta_pe"], atol=1e-6, rtol=1e-6)


def test_zero_positions_mean_no_relational_head(dataset):
    model = make_model("simplified", seed=5)
    with torch.no_grad():
        model.vision.pos_embed.W_pos.zero_()
    roles = classify_head_roles(label_pe_deltas(model.vision, dataset.splits["val_unseen"]))
    assert torch.equal(roles["relational"], torch.zeros(2))
    assert torch.equal(roles["label_specific"], torch.ones(2))


def test_a_steep_positional_gradient_makes_heads_relational(dataset):
    """W_pos[p] = p * u (so P_CLS = 0) and no biases: the CLS score difference is exactly Δlabel + Δp.e., and every
    relational (image, head) attends to the side of the head's direction."""
    model = make_model("simplified", seed=6, random_biases=False)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        u = torch.randn(model.cfg.vision.d_model, generator=g)
        model.vision.pos_embed.W_pos.copy_(torch.arange(11.0)[:, None] * u * 3)
    d = label_pe_deltas(model.vision, dataset.splits["val_unseen"])
    torch.testing.assert_close(d["delta_score"], d["delta_label"] + d["delta_pe"], atol=1e-4, rtol=1e-4)
    roles = classify_head_roles(d)
    assert roles["relational"].min() > 0.5  # the gradient dominates on most images
    mask = roles["relational_mask"]
    want_right = (roles["direction"] > 0).expand_as(mask)
    assert torch.equal(d["attends_right"][mask], want_right[mask])
    assert torch.allclose(roles["relational"] + roles["label_specific"], torch.ones(2))


def test_classification_by_hand():
    d = {
        "delta_label": torch.tensor([[0.1, 1.0], [2.0, 0.1], [0.1, 0.1]]),
        "delta_pe": torch.tensor([[1.0, -0.5], [0.5, -1.0], [-1.0, 1.0]]),
        "attends_right": torch.tensor([[True, False], [True, False], [False, True]]),
    }
    r = classify_head_roles(d)
    assert r["direction"].tolist() == [1.0, -1.0]  # majority sign of Δp.e.
    # head 0: rows 0 (dominant, +) relational; row 1 not dominant; row 2 dominant but against the direction
    # head 1: row 0 not dominant; row 1 dominant, -; row 2 dominant, + (against)
    assert r["relational"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert r["relational_left"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert r["relational_right"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert r["prefer_gap"].tolist() == pytest.approx([1 / 3, 1 / 3])
    with pytest.raises(ValueError, match="missing"):
        classify_head_roles({"delta_label": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match=r"\[n, n_heads\]"):
        classify_head_roles({"delta_label": torch.zeros(2, 2), "delta_pe": torch.zeros(3, 2)})


def test_deltas_reject_unsuitable_models(dataset, rope_model, full_model, two_layer_model, simplified_model):
    split = dataset.splits["val_unseen"]
    with pytest.raises(ValueError, match="positional='rope'"):
        label_pe_deltas(rope_model.vision, split)
    with pytest.raises(ValueError, match="LayerNorm"):
        label_pe_deltas(full_model.vision, split)
    with pytest.raises(ValueError, match="layer 0"):
        label_pe_deltas(two_layer_model.vision, split, layer=1)
    with pytest.raises(TypeError, match="vision tower"):
        label_pe_deltas(simplified_model.text, split)
    with pytest.raises(ValueError, match="no two-object"):
        label_pe_deltas(simplified_model.vision, dataset.splits["val_single"])


def test_pair_captions(dataset, dataset_lr):
    n_pair = dataset.config.n_pair
    caps = pair_captions(dataset)
    assert len(caps) == 2 * 1  # ordered pairs of the 2 held-out labels
    assert bool((caps[:, [0, 2]] > n_pair).all()) and bool((caps[:, 1] == dataset.vocab.left_of).all())
    seen = pair_captions(dataset, "seen")
    assert len(seen) == n_pair * (n_pair - 1) and bool((seen[:, [0, 2]] <= n_pair).all())
    right = pair_captions(dataset_lr, relation="right")
    assert bool((right[:, 1] == dataset.vocab.right_of).all())
    with pytest.raises(ValueError, match="no unseen-pair 'right'"):
        pair_captions(dataset, relation="right")
    with pytest.raises(ValueError, match="which"):
        pair_captions(dataset, "both")


@pytest.mark.parametrize("fixture", ["simplified_model", "two_layer_model", "full_model"])
def test_text_eot_bias_matches_the_pattern(fixture, request, dataset):
    model = request.getfixturevalue(fixture)
    caps = torch.cat([pair_captions(dataset), pair_captions(dataset, "seen")])
    r = text_eot_bias(model.text, caps)
    L, H = model.cfg.text.n_layers, model.cfg.text.n_heads
    assert r["mean"].shape == r["std"].shape == (L, H, 4)
    _, cache = model.text.run_with_cache(caps)
    for layer in range(L):
        rows = cache["pattern", layer][:, :, 3]  # EOT is the last token of every caption
        torch.testing.assert_close(r["mean"][layer], rows.mean(0))
        first = (rows[:, :, 0] > rows[:, :, 2]).float().mean(0)
        torch.testing.assert_close(r["first"][layer], first)
    torch.testing.assert_close(r["mean"].sum(-1), torch.ones(L, H))
    json.dumps(to_jsonable(r))


def test_text_eot_bias_reads_hooked_attention(simplified_model, dataset):
    def all_on_subject(pattern, hook):
        pattern = torch.zeros_like(pattern)
        pattern[:, :, :, 0] = 1.0
        return pattern

    caps = pair_captions(dataset)
    r = text_eot_bias(simplified_model.text, caps, fwd_hooks=[("blocks.0.attn.hook_pattern", all_on_subject)])
    assert torch.equal(r["first"], torch.ones(1, 2)) and torch.equal(r["second"], torch.zeros(1, 2))
    assert torch.equal(r["std"], torch.zeros(1, 2, 4))


def test_text_eot_bias_rejects_bad_input(simplified_model, dataset):
    single = dataset.captions[dataset.captions[:, 1] == dataset.vocab.is_][:2]
    with pytest.raises(ValueError, match="two-object captions"):
        text_eot_bias(simplified_model.text, single)
    with pytest.raises(TypeError, match="text tower"):
        text_eot_bias(simplified_model.vision, pair_captions(dataset))


def test_to_jsonable():
    assert to_jsonable({"a": torch.tensor([[1, 2]]), "b": [torch.tensor(0.5), None]}) == {
        "a": [[1, 2]],
        "b": [0.5, None],
    }
    with pytest.raises(TypeError, match="cannot convert"):
        to_jsonable(object())


def test_plots(simplified_model, dataset):
    d = label_pe_deltas(simplified_model.vision, dataset.splits["val_unseen"])
    fig = plot_label_pe_scatter(d)
    assert len([a for a in fig.axes if a.axison]) == 2
    assert len(plot_head_roles(classify_head_roles(d)).axes) == 1
    r = text_eot_bias(simplified_model.text, pair_captions(dataset))
    fig = plot_eot_bias(to_jsonable(r))  # from JSON too
    assert len(fig.axes[0].patches) == 2 * 4  # heads x tokens
    with pytest.raises(ValueError, match=r"\[n, n_heads\]"):
        plot_label_pe_scatter({"delta_label": torch.zeros(3), "delta_pe": torch.zeros(3)})


def test_shipped_model():
    """On the flagship, the relational share of each head tracks its left/right preference gap (Sec. 5: they should
    roughly agree), the roles' preference equals ``cls_object_bias`` computed separately, and the text EOT row is a
    distribution over the caption whose clearly biased heads read X (head 3) and Y (head 1). On the flagship until
    2026-11-28 (the numbers below are its; today's flagship has two side-biased heads, 0.94 / 0.95 apart)."""
    model = load_model("simplified-ntot20-n2-10-standard-loss")
    ds = build_dataset(model.data_config)
    split = ds.splits["val_unseen"]
    roles = classify_head_roles(label_pe_deltas(model.vision, split))
    bias = cls_object_bias(model.vision, split)
    torch.testing.assert_close(roles["prefer_right"], bias["right"][0])
    assert (roles["relational"] - roles["prefer_gap"]).abs().max() <= 0.1
    assert roles["relational"].argmax() == (bias["right"][0] - bias["left"][0]).abs().argmax()
    assert roles["relational"].max() == 1.0  # one head reads the relation on every image (head 2, right-biased)
    r = text_eot_bias(model.text, pair_captions(ds))
    torch.testing.assert_close(r["mean"].sum(-1), torch.ones(1, 4))
    assert r["mean"][0, 1].argmax() == 2 and r["mean"][0, 1, 2] > 0.8  # head 1: Y
    assert r["mean"][0, 3].argmax() == 0 and r["mean"][0, 3, 0] > 0.7  # head 3: X (the subject)


def test_rope_two_layer_text_tower_runs(dataset):
    model = make_model("simplified", seed=9, n_layers=2, **ROPE)
    caps = pair_captions(dataset)
    r = text_eot_bias(model.text, caps)
    assert r["mean"].shape == (2, 2, 4)  # [layer, head, caption token]: the contract
    _, cache = model.text.run_with_cache(caps)
    for layer in range(2):  # each layer's EOT row (the last token), averaged over the captions
        torch.testing.assert_close(r["mean"][layer], cache["pattern", layer][:, :, 3].mean(0))
    # a permutation of the captions permutes nothing in a mean over them
    torch.testing.assert_close(text_eot_bias(model.text, caps.flip(0))["mean"], r["mean"])
