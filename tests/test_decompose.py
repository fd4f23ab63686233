"""Attention-logit decompositions at any layer: sums reproduce hook_attn_scores, conventions, errors, Fig. 13 shares."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
import torch
from conftest import ROPE, make_model

from hooked_clip1d import build_dataset, load_model
from hooked_clip1d.analysis.interventions.decompose import (
    SCORE_TERMS,
    TOKEN_POSITION_TERMS,
    WEIGHT_BIAS_TERMS,
    decompose_attention_scores,
    residual_components,
    row_std_shares,
)
from hooked_clip1d.analysis.interventions.terms import attention_terms
from hooked_clip1d.visualization.decomposition import (
    plot_ablations,
    plot_row_profiles,
    plot_std_histograms,
    plot_std_shares,
    plot_term_maps,
)

VARIANTS = {
    "1L": dict(),
    "2L": dict(n_layers=2),
    "2L-LN-MLP": dict(preset="full"),
    "2L-LN": dict(normalization_type="LN", n_layers=2),
    "2L-MLP": dict(preset="full", normalization_type=None),
    "2L-rope": dict(n_layers=2, **ROPE),
}


@pytest.fixture(scope="module")
def models():
    built = {}
    for i, (name, kw) in enumerate(VARIANTS.items()):
        kw = dict(kw)
        built[name] = make_model(kw.pop("preset", "simplified"), seed=10 + i, **kw)
    return built


def _inputs(model, tower, dataset):
    if tower == "vision":
        return model.vision, dataset.splits["val_unseen"].images[:4]
    return model.text, dataset.captions[:6]


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal where finite, and non-finite in the same places."""
    fin = torch.isfinite(b)
    assert torch.equal(torch.isfinite(a), fin)
    torch.testing.assert_close(a[fin], b[fin], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("tower", ["vision", "text"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decomposition_sums_to_attention_scores(models, dataset, variant, tower):
    enc, x = _inputs(models[variant], tower, dataset)
    _, cache = enc.run_with_cache(x)
    for layer in range(enc.cfg.n_layers):
        dec = decompose_attention_scores(enc, cache, layer)
        scores = cache["attn_scores", layer]
        _close(dec.scores(), scores)
        fin = torch.isfinite(scores)
        full = dec.terms()
        assert full.shape[:2] == (len(dec.q_labels), len(dec.k_labels))
        torch.testing.assert_close(full.sum((0, 1))[fin], scores[fin], atol=2e-5, rtol=1e-5)
        for grouping in (dec.weight_bias_terms(), dec.token_position_terms()):
            torch.testing.assert_close(sum(grouping.values())[fin], scores[fin], atol=2e-5, rtol=1e-5)
        assert list(dec.weight_bias_terms()) == list(WEIGHT_BIAS_TERMS)
        # one (query component, key component) term equals the product of its parts
        a, c = dec.q_labels.index("embed"), dec.k_labels.index("embed")
        torch.testing.assert_close(full[a, c], dec.term("embed", "embed"))
        # every earlier head is its own component
        heads = [lab for lab in dec.q_labels if lab.startswith("L")]
        assert len(heads) == layer * enc.cfg.n_heads


def test_residual_components_match_resid_stream(models, dataset):
    enc, x = _inputs(models["2L-LN-MLP"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    for layer in range(enc.cfg.n_layers + 1):
        comps, labels = residual_components(enc, cache, layer)
        want = cache["resid_pre", layer] if layer < enc.cfg.n_layers else cache["resid_post", layer - 1]
        torch.testing.assert_close(comps.sum(0), want, atol=1e-5, rtol=1e-5)
        assert len(labels) == comps.shape[0] == 2 + layer * (enc.cfg.n_heads + 2)
    assert labels[-4:] == ["L1H0", "L1H1", "1_b_O", "1_mlp_out"]


@pytest.mark.parametrize("flag", ["set_use_attn_result", "set_use_split_qkv_input", "set_use_attn_in"])
def test_decomposition_with_tl_flags(dataset, flag):
    model = make_model("full", seed=5)
    getattr(model.vision, flag)(True)
    enc, x = _inputs(model, "vision", dataset)
    _, cache = enc.run_with_cache(x)
    if flag == "set_use_attn_result":
        assert "blocks.0.attn.hook_result" in cache
    dec = decompose_attention_scores(enc, cache, 1)
    _close(dec.scores(), cache["attn_scores", 1])


def test_layer0_terms_are_the_paper_terms(models, dataset):
    enc, x = _inputs(models["1L"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    tp = decompose_attention_scores(enc, cache).token_position_terms()
    assert tuple(tp) == SCORE_TERMS  # no R at layer 0 without LN
    attn = enc.blocks[0].attn
    E, P = cache["hook_embed"], cache["hook_pos_embed"]
    ep = torch.einsum("bqm,hmd,hnd,bkn->bhqk", E, attn.W_Q, attn.W_K, P) / math.sqrt(enc.cfg.d_head)
    torch.testing.assert_close(tp["EP"], ep, atol=1e-5, rtol=1e-5)
    bp = torch.einsum("hd,hnd,bkn->bhk", attn.b_Q, attn.W_K, P)[:, :, None] / math.sqrt(enc.cfg.d_head)
    torch.testing.assert_close(tp["BP"], bp.expand_as(tp["BP"]), atol=1e-5, rtol=1e-5)
    old = attention_terms(enc, cache)
    assert list(old) == list(SCORE_TERMS)
    for k in SCORE_TERMS:
        torch.testing.assert_close(old[k], tp[k])
    # the biases B_K are constant along a row: XWB and BB cannot change the softmax
    wb = decompose_attention_scores(enc, cache).weight_bias_terms()
    assert wb["XWB"].std(-1).max() < 1e-5 and wb["BB"].std(-1).max() < 1e-5


def test_layernorm_uses_the_cached_scale(models, dataset):
    enc, x = _inputs(models["2L-LN"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    dec = decompose_attention_scores(enc, cache, 0)
    assert dec.q_labels == ("embed", "pos_embed", "ln1_b", "b_Q")
    ln, attn = enc.blocks[0].ln1, enc.blocks[0].attn
    E, s = cache["hook_embed"], cache["blocks.0.ln1.hook_scale"]
    qE = torch.einsum("bpm,hmd->bhpd", (E - E.mean(-1, keepdim=True)) / s * ln.w, attn.W_Q) / math.sqrt(4)
    torch.testing.assert_close(dec.q[0], qE, atol=1e-5, rtol=1e-5)
    assert set(dec.token_position_terms()) == set(TOKEN_POSITION_TERMS)  # ln1_b is R


def test_rope_rotates_every_part(models, dataset):
    enc, x = _inputs(models["2L-rope"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    dec = decompose_attention_scores(enc, cache, 0)
    assert "pos_embed" not in dec.q_labels
    bb = dec.term("b_Q", "b_K")  # rotated biases: depends on the key position
    assert bb.std(-1).max() > 1e-3
    assert set(dec.token_position_terms()) == {"EE", "BE", "EB", "BB"}


def test_query_pos_and_unbatched_cache(models, dataset):
    enc, x = _inputs(models["2L"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    full = decompose_attention_scores(enc, cache, 1)
    row = decompose_attention_scores(enc, cache, 1, query_pos=0)
    some = decompose_attention_scores(enc, cache, 1, query_pos=[3, 1])
    torch.testing.assert_close(row.terms(), full.terms()[..., :1, :])
    torch.testing.assert_close(some.scores(), full.scores()[..., [3, 1], :])
    txt, caps = _inputs(models["2L"], "text", dataset)
    _, tcache = txt.run_with_cache(caps)
    _close(
        decompose_attention_scores(txt, tcache, 1, query_pos=slice(1, 3)).scores(),
        tcache["attn_scores", 1][..., 1:3, :],
    )
    _, one = enc.run_with_cache(x[:1], remove_batch_dim=True)
    d1 = decompose_attention_scores(enc, one, 1)
    torch.testing.assert_close(d1.scores()[0], one["attn_scores", 1], atol=2e-5, rtol=1e-5)
    assert attention_terms(enc, one, 1)["EP"].ndim == 3
    for bad in (11, [0, 20], slice(5, 5)):
        with pytest.raises(ValueError, match="query_pos"):
            decompose_attention_scores(enc, cache, 1, query_pos=bad)


def test_edited_caches_and_bad_inputs_are_rejected(models, dataset):
    model = models["2L"]
    enc, x = _inputs(model, "vision", dataset)

    def nudge(resid, hook):
        return resid + 1.0

    _, edited = enc.run_with_cache(x, fwd_hooks=[("blocks.1.hook_resid_pre", nudge)])
    with pytest.raises(ValueError, match="do not reproduce the cached"):
        decompose_attention_scores(enc, edited, 1)
    decompose_attention_scores(enc, edited, 1, check=False)  # allowed when asked
    _, cache = enc.run_with_cache(x)
    with pytest.raises(ValueError, match="does not exist"):
        decompose_attention_scores(enc, cache, 2)
    with pytest.raises(TypeError):  # our message, or the beartype import hook's (tests run under it)
        decompose_attention_scores(model, cache, 0)
    _, partial = enc.run_with_cache(x, names_filter=lambda n: n.endswith("attn_scores"))
    with pytest.raises(KeyError, match="hook_embed"):
        decompose_attention_scores(enc, partial, 0)
    enc.train()
    try:
        with pytest.raises(ValueError, match="eval mode"):
            decompose_attention_scores(enc, cache, 1)
    finally:
        enc.eval()
    dec = decompose_attention_scores(enc, cache, 1)
    with pytest.raises(ValueError, match="unknown q components"):
        dec.term("nope", "embed")
    with pytest.raises(ValueError, match="exactly once"):
        dec.grouped({"E": ["embed"]}, {"all": list(dec.k_labels)})


def test_row_std_shares_by_hand():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, 2, 3, 6, generator=g)
    b = 0.5 * torch.randn(5, 2, 3, 6, generator=g)
    c = torch.randn(5, 2, 3, 1, generator=g).expand(5, 2, 3, 6)  # constant along the row
    r = row_std_shares({"a": a, "b": b, "c": c}, query_pos=1)
    sa = a[:, :, 1].std(-1, correction=0).mean(0)
    sb = b[:, :, 1].std(-1, correction=0).mean(0)
    torch.testing.assert_close(r["share"][0], sa / (sa + sb))
    torch.testing.assert_close(r["share"][2], torch.zeros(2))
    torch.testing.assert_close(r["share"].sum(0), torch.ones(2))
    total = (a + b + c)[:, :, 1].std(-1, correction=0).mean(0)
    torch.testing.assert_close(r["ratio_to_total"][1], sb / total)
    assert r["per_image_std"].shape == (3, 5, 2) and r["terms"] == ["a", "b", "c"]
    rk = row_std_shares({"a": a, "b": b}, query_pos=1, key_positions=slice(1, None))
    torch.testing.assert_close(rk["std"][0], a[:, :, 1, 1:].std(-1, correction=0).mean(0))
    with pytest.raises(ValueError, match="non-finite"):
        row_std_shares({"a": torch.tril(a).masked_fill(torch.tril(a) == 0, -torch.inf)}, query_pos=0)
    with pytest.raises(ValueError, match="same shape"):
        row_std_shares({"a": a, "b": b[:1]})
    with pytest.raises(ValueError, match="query_pos"):
        row_std_shares({"a": a}, query_pos=7)
    with pytest.raises(ValueError, match="at least two"):
        row_std_shares({"a": a}, key_positions=[0])


@pytest.fixture(scope="module")
def shipped():
    model = load_model("simplified-ntot20-n2-10")
    return model, build_dataset(model.data_config)


def test_shipped_model_decomposition_and_fig13_shares(shipped):
    model, ds = shipped
    images = ds.splits["val_unseen"].images
    _, cache = model.vision.run_with_cache(images)
    dec = decompose_attention_scores(model.vision, cache)
    _close(dec.scores(), cache["attn_scores", 0])
    wb = dec.weight_bias_terms()
    torch.testing.assert_close(sum(wb.values()), cache["attn_scores", 0], atol=1e-4, rtol=1e-5)
    shares = row_std_shares(wb, query_pos=0)
    assert shares["share"].shape == (4, 4)
    torch.testing.assert_close(shares["share"].sum(0), torch.ones(4))
    assert shares["share"][[1, 3]].abs().max() < 1e-5  # XWB, BB: constant along the CLS row
    assert (shares["share"][0] > 0).all()


def test_plots(models, dataset, tmp_path):
    enc, x = _inputs(models["2L"], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    dec = decompose_attention_scores(enc, cache, 1)
    tp = dec.token_position_terms()
    labels = enc.cfg.vocab.image_tokens_str(x[0])
    fig = plot_term_maps(tp, ["EE", "EP", "PE", "PP"], image=1, tokens=labels, heads=[1])
    assert len([a for a in fig.axes if a.images]) == 4
    fig.savefig(tmp_path / "maps.png")
    fig = plot_term_maps(
        decompose_attention_scores(enc, cache, 1, query_pos=0).weight_bias_terms(), query_positions=[0]
    )
    assert len([a for a in fig.axes if a.images]) == 4 * enc.cfg.n_heads
    fig = plot_row_profiles(tp, ["EP", "PP"], tokens=labels)
    assert len(fig.axes) == enc.cfg.n_heads and len(fig.axes[0].lines) == 3  # two terms + zero line
    np_ep = tp["EP"][0, 0, 0].detach().numpy()
    assert (fig.axes[0].lines[0].get_ydata() == np_ep).all()
    plot_row_profiles(tp, ["EP"], image=None).savefig(tmp_path / "mean.png")
    shares = row_std_shares(dec.weight_bias_terms())
    fig = plot_std_shares(shares, ["XWX", "BWX"], reference={"XWX": [0.7, 0.8]})
    assert len(fig.axes[0].patches) == 2 * enc.cfg.n_heads
    fig = plot_std_histograms(shares, ["XWX"])
    assert len(fig.axes) == enc.cfg.n_heads
    res = {
        "splits": ["val_unseen"],
        "conditions": {
            "baseline": {"terms": [], "metrics": {"val_unseen": {"acc": 0.9, "label_set": 1.0}}},
            "EP": {"terms": ["EP"], "metrics": {"val_unseen": {"acc": 0.5, "label_set": 0.8}}},
        },
    }
    fig = plot_ablations(res)
    assert [round(p.get_height(), 3) for p in fig.axes[0].patches] == [0.9, 0.5, 1.0, 0.8]
    with pytest.raises(ValueError, match="unknown terms"):
        plot_term_maps(tp, ["XX"])
    with pytest.raises(ValueError, match="tokens has"):
        plot_term_maps(tp, tokens=labels[:3])
    with pytest.raises(ValueError, match="out of range"):
        plot_row_profiles(tp, heads=[9])
    with pytest.raises(ValueError, match="not evaluated"):
        plot_ablations(res, splits=["train"])
    with pytest.raises(ValueError, match="row_std_shares"):
        plot_std_shares({"share": 1})
    plt.close("all")


@pytest.mark.parametrize(
    "overrides",
    [
        {"ablated_terms": ("BP", "PE", "VP")},
        {"positional": "rope", "ablated_terms": ("EE",)},
        {"positional": "rope", "ablated_terms": ("BE", "EB")},
    ],
)
def test_the_terms_a_tower_removes_itself_are_left_out(overrides):
    """A tower with ``ablated_terms`` computes its layer-0 scores without them; the decomposition kept them, so its
    terms summed to other scores (6.99 off on the shipped ablate-EP model). Learned positions and RoPE."""
    from hooked_clip1d import CLIP1D, CLIPConfig

    cfg = CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0, vision_overrides=overrides)
    m = CLIP1D(cfg, seed=0).eval()
    _, cache = m.vision.run_with_cache(m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . 4 . . . . ."]))
    dec = decompose_attention_scores(m.vision, cache, 0)
    assert len(dec.removed) == len([t for t in overrides["ablated_terms"] if t != "VP"])
    assert torch.allclose(dec.scores(), cache["attn_scores", 0], atol=1e-4)
    assert torch.allclose(dec.terms().sum((0, 1)), cache["attn_scores", 0], atol=1e-4)
