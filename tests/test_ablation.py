"""Term ablations at any layer (LN with the live scale, RoPE E/B/R terms) and the evaluation helper (Fig. 5e/16/17)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ROPE, make_model

from hooked_clip1d import evaluate
from hooked_clip1d.analysis.interventions.ablation import PAPER_ABLATIONS, evaluate_ablations, format_ablations
from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores
from hooked_clip1d.analysis.interventions.terms import POSITIONAL_TERMS, ablate_terms

VARIANTS = {
    "1L": dict(),
    "2L": dict(n_layers=2),
    "2L-LN-MLP": dict(preset="full"),
    "2L-rope": dict(n_layers=2, **ROPE),
}


@pytest.fixture(scope="module")
def models():
    built = {}
    for i, (name, kw) in enumerate(VARIANTS.items()):
        kw = dict(kw)
        built[name] = make_model(kw.pop("preset", "simplified"), seed=20 + i, **kw)
    return built


def _enc(model, tower, dataset):
    if tower == "vision":
        return model.vision, dataset.splits["val_unseen"].images[:4]
    return model.text, dataset.captions[:6]


def _ln(enc):
    return "live" if enc.cfg.normalization_type else None


@pytest.mark.parametrize("tower", ["vision", "text"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ablating_no_term_changes_nothing(models, dataset, variant, tower):
    enc, x = _enc(models[variant], tower, dataset)
    base = enc(x)
    for layer in range(enc.cfg.n_layers):
        out = enc.run_with_hooks(x, fwd_hooks=ablate_terms(enc, [], layer, ln_scale=_ln(enc)))
        torch.testing.assert_close(out, base, atol=0, rtol=0)


@pytest.mark.parametrize("tower", ["vision", "text"])
@pytest.mark.parametrize("variant", ["1L", "2L", "2L-LN-MLP"])
def test_positional_ablation_is_a_no_op_when_positions_are_zero(dataset, variant, tower):
    kw = dict(VARIANTS[variant])
    model = make_model(kw.pop("preset", "simplified"), seed=7, **kw)
    enc, x = _enc(model, tower, dataset)
    with torch.no_grad():
        enc.pos_embed.W_pos.zero_()
    base = enc(x)
    for layer in range(enc.cfg.n_layers):
        rest = ["PR", "RP"] if layer else []  # layer 0 has no R (refused there: it would remove nothing)
        hooks = ablate_terms(enc, [*POSITIONAL_TERMS, *rest], layer, ln_scale=_ln(enc))
        torch.testing.assert_close(enc.run_with_hooks(x, fwd_hooks=hooks), base, atol=1e-6, rtol=1e-6)
    # ... and on every layer at once
    hooks = [
        h for layer in range(enc.cfg.n_layers) for h in ablate_terms(enc, POSITIONAL_TERMS, layer, ln_scale=_ln(enc))
    ]
    torch.testing.assert_close(enc.run_with_hooks(x, fwd_hooks=hooks), base, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ablation_removes_exactly_the_decomposition_term(models, dataset, variant):
    enc, x = _enc(models[variant], "vision", dataset)
    _, cache = enc.run_with_cache(x)
    layer = enc.cfg.n_layers - 1
    tp = decompose_attention_scores(enc, cache, layer).token_position_terms()
    choice = [t for t in ("EP", "BP", "RE", "EE", "RR") if t in tp][:3]
    hooks = ablate_terms(enc, choice, layer, heads=[1], ln_scale=_ln(enc))
    _, abl = enc.run_with_cache(x, fwd_hooks=hooks, names_filter=lambda n: n.endswith("hook_pattern"))
    want = cache["attn_scores", layer].clone()
    want[:, 1] -= sum(tp[t] for t in choice)[:, 1]
    torch.testing.assert_close(abl["pattern", layer], want.softmax(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(abl["pattern", layer][:, 0], cache["pattern", layer][:, 0])  # head 0 untouched
    assert (abl["pattern", layer][:, 1] - cache["pattern", layer][:, 1]).abs().max() > 1e-4


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ablating_every_score_term_gives_uniform_attention(models, dataset, variant):
    enc, x = _enc(models[variant], "vision", dataset)
    layer = enc.cfg.n_layers - 1
    _, cache = enc.run_with_cache(x)
    every = list(decompose_attention_scores(enc, cache, layer).token_position_terms())
    _, abl = enc.run_with_cache(x, fwd_hooks=ablate_terms(enc, every, layer, ln_scale=_ln(enc)))
    pat = abl["pattern", layer]
    torch.testing.assert_close(pat, torch.full_like(pat, 1 / pat.shape[-1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["1L", "2L-LN-MLP"])
def test_vp_removes_the_positional_part_of_the_values(models, dataset, variant):
    enc, x = _enc(models[variant], "vision", dataset)
    layer = enc.cfg.n_layers - 1
    _, cache = enc.run_with_cache(x)
    _, abl = enc.run_with_cache(x, fwd_hooks=ablate_terms(enc, ["VP"], layer, heads=[0], ln_scale=_ln(enc)))
    P = cache["hook_pos_embed"]
    if enc.cfg.normalization_type:
        blk = enc.blocks[layer]
        P = (P - P.mean(-1, keepdim=True)) / cache[f"blocks.{layer}.ln1.hook_scale"] * blk.ln1.w
    vp = torch.einsum("bpm,md->bpd", P, enc.blocks[layer].attn.W_V[0])
    torch.testing.assert_close(abl["v", layer][:, :, 0], cache["v", layer][:, :, 0] - vp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(abl["v", layer][:, :, 1], cache["v", layer][:, :, 1])


def test_unsuitable_models_and_terms_are_rejected(models):
    full, rope, one = models["2L-LN-MLP"].vision, models["2L-rope"].vision, models["1L"].vision
    with pytest.raises(ValueError, match="LayerNorm.*ln_scale='live'"):
        ablate_terms(full, ["EP"])
    with pytest.raises(ValueError, match="ln_scale must be"):
        ablate_terms(full, ["EP"], ln_scale="recompute")
    with pytest.raises(ValueError, match="RoPE"):
        ablate_terms(rope, ["EP"])
    with pytest.raises(ValueError, match="RoPE"):
        ablate_terms(rope, ["VP"])
    with pytest.raises(ValueError, match="unknown terms"):
        ablate_terms(one, ["XY"])
    with pytest.raises(ValueError, match="out of range"):
        ablate_terms(one, ["EP"], heads=[7])
    with pytest.raises(ValueError, match="layer 0"):
        ablate_terms(one, ["EP"], layer=1)
    with pytest.raises(TypeError):
        ablate_terms(one, "EP")


@pytest.fixture(scope="module")
def clip(models):
    return models["1L"]


def test_evaluate_ablations_is_json_and_matches_evaluate(clip, dataset):
    res = evaluate_ablations(clip, dataset, splits=["val_unseen", "val_seen"])
    assert json.loads(json.dumps(res)) == res
    assert list(res["conditions"]) == list(PAPER_ABLATIONS)
    assert res["heads"] == list(range(clip.vision.cfg.n_heads)) and res["tower"] == "vision"
    base = evaluate(clip, dataset, splits=["val_unseen", "val_seen"])
    assert res["conditions"]["baseline"]["metrics"] == base
    ep = evaluate(clip, dataset, splits=["val_unseen", "val_seen"], vision_hooks=ablate_terms(clip.vision, ["EP"]))
    assert res["conditions"]["EP"]["metrics"] == ep
    assert res["conditions"]["EP+PE+PP+BP+VP"]["terms"] == ["EP", "PE", "PP", "BP", "VP"]
    table = format_ablations(res)
    assert table.splitlines()[0].split()[:3] == ["ablation", "unseen", "acc"]
    assert len(table.splitlines()) == 1 + len(PAPER_ABLATIONS)


def test_evaluate_ablations_with_zero_positions_and_other_forms(dataset):
    model = make_model("simplified", seed=8)
    with torch.no_grad():
        model.vision.pos_embed.W_pos.zero_()
    res = evaluate_ablations(model, dataset, [[], ["EP", "PE", "PP", "BP", "VP"]], splits=["val_unseen"])
    assert list(res["conditions"]) == ["baseline", "EP+PE+PP+BP+VP"]
    c = res["conditions"]
    assert c["baseline"]["metrics"] == c["EP+PE+PP+BP+VP"]["metrics"]
    text = evaluate_ablations(model, dataset, {"EE": ["EE"]}, tower="text", heads=[0], splits=["val_unseen"])
    assert text["tower"] == "text" and text["heads"] == [0]
    with pytest.raises(ValueError, match="unknown terms"):
        evaluate_ablations(model, dataset, {"ok": ["EP"], "bad": ["ZZ"]})
    with pytest.raises(ValueError, match="tower"):
        evaluate_ablations(model, dataset, {"EP": ["EP"]}, tower="audio")
    with pytest.raises(TypeError):
        evaluate_ablations(model, dataset, {"EP": "EP"})
    with pytest.raises(ValueError, match="no ablation"):
        evaluate_ablations(model, dataset, {})
    with pytest.raises(ValueError, match="twice"):
        evaluate_ablations(model, dataset, [["EP"], ["EP"]])
