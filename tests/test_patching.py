"""Causal interventions: belief metrics, activation / mirror-swap patching, TL patching, text interchange, knockout."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_model

from hooked_clip1d import load_model
from hooked_clip1d.analysis.interventions.patching import (
    TL_KINDS,
    caption_swap_patching,
    cls_object_edges,
    eot_edges,
    knockout_hooks,
    knockout_sweep,
    mirror_swap_patching,
    patch_hook,
    patch_sweep,
    position_sets,
    text_interchange,
    tl_patching,
)
from hooked_clip1d.analysis.metrics import (
    caption_belief,
    image_belief,
    image_belief_metric,
    mirror_images,
    pair_grid,
    pair_inputs,
    shift_fraction,
    swap_captions,
    swap_objects,
)
from hooked_clip1d.visualization.patching import (
    plot_fraction_map,
    plot_interchange,
    plot_knockout,
    plot_patching_map,
    plot_recovery_bars,
)

ATOL = 1e-5


@pytest.fixture(scope="module")
def pairs(dataset):
    """Two-object images of the tiny dataset (seen and unseen pairs) with their left captions."""
    a = pair_inputs(dataset.splits["val_seen"], dataset.vocab, n=10, seed=1)
    b = pair_inputs(dataset.splits["val_unseen"], dataset.vocab)
    return torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])


@pytest.fixture(scope="module")
def shipped():
    model = load_model("simplified-ntot20-n2-10")
    from hooked_clip1d import build_dataset

    ds = build_dataset(model.data_config)
    imgs, caps = pair_inputs(ds.splits["val_unseen"], ds.vocab, n=24, seed=0)
    return model, imgs, caps


# ---------------------------------------------------------------------------------------------------------------------
# metrics and paired inputs
# ---------------------------------------------------------------------------------------------------------------------


def test_pairs_flip_relation_and_beliefs_are_batched(simplified_model, pairs):
    m = simplified_model
    imgs, caps = pairs
    vocab = m.text.cfg.vocab
    mir = mirror_images(imgs)
    assert torch.equal(mirror_images(mir), imgs)
    assert torch.equal(swap_objects(swap_objects(imgs)), imgs)
    # the mirror of an image with X left of Y has Y left of X; its true caption is the swapped caption
    for img, m_img, cap in zip(imgs, mir, caps, strict=True):
        objs = [int(t) for t in m_img[1:] if t > 0]
        assert objs == [int(cap[2]), int(cap[0])]
        assert (img[1:] > 0).sum() == 2
    b = image_belief(m, imgs, caps)
    assert b.shape == (len(imgs),)
    # row-wise: belief of each row equals that row scored alone (batched metric, no cross-talk)
    torch.testing.assert_close(b[3:4], image_belief(m, imgs[3:4], caps[3:4]))
    # the same scene scored against the swapped caption has the opposite belief
    torch.testing.assert_close(image_belief(m, imgs, swap_captions(caps, vocab)), -b)
    # the caption belief flips sign when the image is replaced by its mirror
    torch.testing.assert_close(caption_belief(m, mir, caps), -caption_belief(m, imgs, caps), atol=ATOL, rtol=0)
    # unscaled = cosine difference; scaled = logit difference
    scale = m.temperature_scale().detach()
    torch.testing.assert_close(image_belief(m, imgs, caps, scale=False) * scale, b)


def test_pair_grid_covers_every_ordered_pair_and_position_pair(simplified_model):
    vocab = simplified_model.vision.cfg.vocab
    imgs, objs, pos = pair_grid(vocab, d_image=10, labels=[1, 2, 3])
    assert imgs.shape == (6 * 45, 11)
    assert len({(tuple(o), tuple(p)) for o, p in zip(objs.tolist(), pos.tolist(), strict=True)}) == 6 * 45
    rows = torch.arange(len(imgs))
    assert torch.equal(imgs[rows, pos[:, 0] + 1], objs[:, 0]) and torch.equal(imgs[rows, pos[:, 1] + 1], objs[:, 1])
    simplified_model.vision.validate_tokens(imgs)


def test_shift_fraction_is_a_ratio_of_means_and_rejects_no_shift():
    base, source = torch.tensor([2.0, 4.0]), torch.tensor([-2.0, -4.0])
    assert shift_fraction(torch.stack([base, source, (base + source) / 2]), base, source).tolist() == [0.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="do not shift"):
        shift_fraction(base[None], base, base)


# ---------------------------------------------------------------------------------------------------------------------
# activation patching
# ---------------------------------------------------------------------------------------------------------------------


def test_mirror_swap_patching_layer0_recovers_full_shift(any_model, pairs):
    imgs, caps = pairs
    res = mirror_swap_patching(any_model, imgs, caps)
    L = any_model.vision.cfg.n_layers
    frac = res.fraction()
    assert res.set_names == ["all", "pixels", "objects", "cls"]
    assert frac.shape == (L + 1, 4)
    # depth 0 (embeddings): every position -> the mirrored input exactly; objects alone too (the other positions
    # hold background in both images); CLS alone changes nothing
    torch.testing.assert_close(frac[0], torch.tensor([1.0, 1.0, 1.0, 0.0]), atol=ATOL, rtol=0)
    # after the last layer only the CLS readout matters
    torch.testing.assert_close(frac[L], torch.tensor([1.0, 0.0, 0.0, 1.0]), atol=ATOL, rtol=0)
    # the patched belief of "all" at depth 0 equals the mirror's belief row by row, not just on average
    torch.testing.assert_close(res.patched[0, 0], res.source, atol=ATOL, rtol=0)
    assert json.loads(json.dumps(res.to_dict()))["labels"][0] == "embed"


def test_mirror_swap_patching_on_the_shipped_model(shipped):
    model, imgs, caps = shipped
    res = mirror_swap_patching(model, imgs, caps)
    torch.testing.assert_close(res.fraction()[0], torch.tensor([1.0, 1.0, 1.0, 0.0]), atol=ATOL, rtol=0)
    heads = mirror_swap_patching(model, imgs, caps, heads=True, sets=["cls", "objects"])
    assert heads.fraction().shape == (1, 2, 4)
    # in a 1-layer tower the z of non-CLS positions never reaches the readout
    torch.testing.assert_close(heads.fraction()[0, 1], torch.zeros(4), atol=ATOL, rtol=0)
    assert res.base.mean() > 0 > res.source.mean()  # the model believes the true relation on average


def test_patching_all_heads_z_at_cls_equals_patching_attn_out(simplified_model, pairs):
    imgs, caps = pairs
    metric = image_belief_metric(simplified_model, caps)
    enc = simplified_model.vision
    z = patch_sweep(enc, imgs, mirror_images(imgs), metric, ["blocks.0.attn.hook_z"], ["cls"])
    out = patch_sweep(enc, imgs, mirror_images(imgs), metric, ["blocks.0.hook_attn_out"], ["cls"])
    torch.testing.assert_close(z.patched, out.patched, atol=ATOL, rtol=0)
    torch.testing.assert_close(z.fraction(), torch.ones(1, 1), atol=ATOL, rtol=0)  # 1 layer: CLS = readout


def test_patch_hook_touches_only_the_masked_positions_and_head(two_layer_model, pairs):
    enc = two_layer_model.vision
    imgs = pairs[0][:4]
    src = mirror_images(imgs)
    name = "blocks.1.attn.hook_z"
    _, base_cache = enc.run_with_cache(imgs, names_filter=name)
    _, src_cache = enc.run_with_cache(src, names_filter=name)
    mask = position_sets(enc, imgs, src, ["objects"])["objects"]
    _, patched = enc.run_with_cache(
        imgs, names_filter=name, fwd_hooks=[patch_hook(name, src_cache[name], mask, head=1)]
    )
    sel = torch.zeros_like(base_cache[name], dtype=torch.bool)
    sel[:, :, 1] = mask[:, :, None]
    torch.testing.assert_close(patched[name][sel], src_cache[name][sel])
    torch.testing.assert_close(patched[name][~sel], base_cache[name][~sel])
    assert not torch.equal(patched[name], base_cache[name])


def test_pattern_patching_selects_query_rows(simplified_model, pairs):
    enc = simplified_model.vision
    imgs = pairs[0][:3]
    src = mirror_images(imgs)
    name = "blocks.0.attn.hook_pattern"
    _, sc = enc.run_with_cache(src, names_filter=name)
    _, bc = enc.run_with_cache(imgs, names_filter=name)
    cls = position_sets(enc, imgs, src, ["cls"])["cls"]
    _, pc = enc.run_with_cache(imgs, names_filter=name, fwd_hooks=[patch_hook(name, sc[name], cls)])
    torch.testing.assert_close(pc[name][:, :, 0], sc[name][:, :, 0])
    torch.testing.assert_close(pc[name][:, :, 1:], bc[name][:, :, 1:])


def test_caption_swap_patching_text_tower(any_model, pairs):
    imgs, caps = pairs
    res = caption_swap_patching(any_model, imgs, caps)
    L = any_model.text.cfg.n_layers
    frac = res.fraction()
    sets = res.set_names
    assert sets == ["all", "subject", "relation", "object", "eot", "labels"]
    torch.testing.assert_close(frac[0, sets.index("labels")], torch.tensor(1.0), atol=ATOL, rtol=0)
    torch.testing.assert_close(frac[0, sets.index("relation")], torch.tensor(0.0), atol=ATOL, rtol=0)
    torch.testing.assert_close(frac[L, sets.index("eot")], torch.tensor(1.0), atol=ATOL, rtol=0)
    torch.testing.assert_close(frac[L, sets.index("labels")], torch.tensor(0.0), atol=ATOL, rtol=0)


def test_tl_patching_agrees_with_our_hooks(two_layer_model, pairs):
    imgs, caps = pairs
    enc = two_layer_model.vision
    src = mirror_images(imgs)
    metric = image_belief_metric(two_layer_model, caps)
    tl = tl_patching(enc, imgs, src, metric, "head_out_by_pos")  # [layers, pos, heads]
    ours = patch_sweep(enc, imgs, src, metric, sets=["cls"], heads=True)  # hook_z per layer: [layers, 1, heads]
    torch.testing.assert_close(tl[:, 0], ours.fraction()[:, 0], atol=1e-4, rtol=0)
    resid = tl_patching(enc, imgs, src, metric, "resid_pre")  # single positions
    one = torch.zeros_like(imgs, dtype=torch.bool)
    one[:, 3] = True
    ours = patch_sweep(enc, imgs, src, metric, ["blocks.1.hook_resid_pre"], {"pos3": one})
    torch.testing.assert_close(resid[1, 3], ours.fraction()[0, 0], atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", sorted(TL_KINDS))
def test_every_tl_kind_runs_or_says_why(simplified_model, full_model, pairs, kind):
    imgs, caps = pairs[0][:4], pairs[1][:4]
    for model in (simplified_model, full_model):
        enc = model.vision
        metric = image_belief_metric(model, caps)
        if TL_KINDS[kind][1] and enc.cfg.attn_only:
            with pytest.raises(ValueError, match="attention-only"):
                tl_patching(enc, imgs, mirror_images(imgs), metric, kind)
        else:
            out = tl_patching(enc, imgs, mirror_images(imgs), metric, kind)
            assert out.ndim >= 2 and torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------------------------------
# interchange interventions
# ---------------------------------------------------------------------------------------------------------------------


def test_text_interchange_forced_results_in_one_layer(simplified_model, pairs):
    r = text_interchange(simplified_model, *pairs)
    fr = r.fractions()
    # 1 layer: EOT sums over its keys, so exchanging slot vectors changes nothing; exchanging positional
    # embeddings is exactly the swapped caption
    assert abs(fr["slot_swap"][0]) < 1e-4
    assert abs(fr["position_id_swap"] - 1) < 1e-4
    assert r.eot_pattern_heads.shape == (1, 2, len(pairs[0]))
    json.dumps(fr)


def test_text_interchange_deeper_and_rope(two_layer_model, rope_model, pairs):
    r = text_interchange(two_layer_model, *pairs)
    assert r.slot_swap.shape == (2, len(pairs[0]))
    fr = r.fractions()["slot_swap"]
    assert abs(fr[0]) > 1e-3  # layer 0's causal mask makes the slot matter before L0
    assert abs(fr[1]) < 1e-4  # before the last layer EOT sums over its keys: order-blind
    rr = text_interchange(rope_model, *pairs)
    assert rr.position_id_swap is None and rr.fractions()["position_id_swap"] is None


def test_eot_pattern_interchange_is_zero_when_attention_ignores_content(pairs):
    model = make_model("simplified", seed=7)
    with torch.no_grad():  # queries 0 -> every score 0 -> uniform attention whatever the labels
        model.text.blocks[0].attn.W_Q.zero_()
        model.text.blocks[0].attn.b_Q.zero_()
    fr = text_interchange(model, *pairs).fractions()
    assert abs(fr["eot_pattern"][0]) < 1e-5
    # with content-dependent attention it is not zero
    assert abs(text_interchange(make_model("simplified", seed=7), *pairs).fractions()["eot_pattern"][0]) > 1e-3


# ---------------------------------------------------------------------------------------------------------------------
# attention knockout
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tower", ["vision", "text"])
def test_knockout_methods_agree_and_remove_the_edges(any_model, pairs, tower):
    enc = getattr(any_model, tower)
    tokens = pairs[0] if tower == "vision" else pairs[1]
    edges = cls_object_edges(tokens, "left") if tower == "vision" else eot_edges("subject")
    h_scores = knockout_hooks(enc, edges, method="scores")
    h_pattern = knockout_hooks(enc, edges, method="pattern")
    out_s, cache = enc.run_with_cache(tokens, fwd_hooks=h_scores, names_filter=lambda n: n.endswith("pattern"))
    out_p = enc.run_with_hooks(tokens, fwd_hooks=h_pattern)
    torch.testing.assert_close(out_s, out_p, atol=ATOL, rtol=0)
    assert not torch.allclose(out_s, enc(tokens))
    e = edges if edges.ndim == 3 else edges[None].expand(len(tokens), -1, -1)
    for layer in range(enc.cfg.n_layers):
        pat = cache["pattern", layer]
        assert pat.permute(1, 0, 2, 3)[:, e].abs().max() == 0
        torch.testing.assert_close(pat.sum(-1), torch.ones_like(pat.sum(-1)), atol=ATOL, rtol=0)
    assert torch.equal(enc.run_with_hooks(tokens, fwd_hooks=knockout_hooks(enc, [])), enc(tokens))


def test_knockout_heads_layers_and_no_renormalisation(two_layer_model, pairs):
    enc = two_layer_model.vision
    imgs = pairs[0]
    edges = cls_object_edges(imgs, "objects")
    hooks = knockout_hooks(enc, edges, layers=[1], heads=[0], method="pattern", renormalize=False)
    _, cache = enc.run_with_cache(imgs, fwd_hooks=hooks, names_filter=lambda n: n.endswith("pattern"))
    _, clean = enc.run_with_cache(imgs, names_filter=lambda n: n.endswith("pattern"))
    torch.testing.assert_close(cache["pattern", 0], clean["pattern", 0])  # layer 0 untouched
    torch.testing.assert_close(cache["pattern", 1][:, 1], clean["pattern", 1][:, 1])  # head 1 untouched
    assert (cache["pattern", 1][:, 0, 0].sum(-1) < 1 - 1e-4).all()  # mass removed, not renormalised


def test_knockout_of_a_whole_causal_row_is_finite(full_model, pairs):
    enc = full_model.text
    everything = torch.zeros(4, 4, dtype=torch.bool)
    everything[3] = True
    assert torch.isfinite(enc.run_with_hooks(pairs[1], fwd_hooks=knockout_hooks(enc, everything))).all()


def test_knockout_sweep_both_towers(shipped):
    model, imgs, caps = shipped
    for tower in ("vision", "text"):
        r = knockout_sweep(model, imgs, caps, tower=tower)
        assert r.knocked.shape == (4, len(imgs))
        d = json.loads(json.dumps(r.to_dict()))
        assert len(d["retained"]) == 4
    # the sweep equals running the knockout hooks by hand
    edges = cls_object_edges(imgs, "objects")
    r = knockout_sweep(model, imgs, caps, edge_sets={"objects": edges}, method="pattern")
    by_hand = model.vision.run_with_hooks(imgs, fwd_hooks=knockout_hooks(model.vision, edges))
    torch.testing.assert_close(r.knocked[0], image_belief_metric(model, caps)(by_hand), atol=1e-4, rtol=0)
    assert not torch.allclose(r.knocked[0], r.base)


# ---------------------------------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------------------------------


def test_unsuitable_inputs_raise_clear_errors(simplified_model, dataset, pairs):
    m = simplified_model
    imgs, caps = pairs
    single = dataset.splits["val_single"].images[:3]
    with pytest.raises(ValueError, match="two-object"):
        mirror_swap_patching(m, single, caps[:3])
    with pytest.raises(ValueError, match="relation caption"):
        mirror_swap_patching(m, imgs[:1], m.text.to_tokens(["1 is in the image"]))
    with pytest.raises((ValueError, TypeError), match="pair row by row|batch"):  # jaxtyping checks first in tests
        mirror_swap_patching(m, imgs, caps[:2])
    with pytest.raises(TypeError, match="tower"):  # ours: "one tower"; under the test hooks: jaxtyping
        patch_sweep(m, imgs, mirror_images(imgs), image_belief_metric(m, caps))
    metric = image_belief_metric(m, caps)
    with pytest.raises(ValueError, match="unknown vision position sets"):
        patch_sweep(m.vision, imgs, mirror_images(imgs), metric, sets=["subject"])
    with pytest.raises(ValueError, match="head axis"):
        patch_sweep(m.vision, imgs, mirror_images(imgs), metric, ["blocks.0.hook_resid_pre"], heads=True)
    with pytest.raises(ValueError, match="does not fire"):
        patch_sweep(m.vision, imgs, mirror_images(imgs), metric, ["blocks.0.attn.hook_result"])
    with pytest.raises(KeyError, match="no hook point"):
        patch_sweep(m.vision, imgs, mirror_images(imgs), metric, ["blocks.3.hook_resid_pre"])
    with pytest.raises(ValueError, match="no position axis"):
        patch_sweep(m.vision, imgs, mirror_images(imgs), metric, ["hook_pooled"])
    with pytest.raises((ValueError, TypeError), match="same shape|batch"):
        patch_sweep(m.vision, imgs, mirror_images(imgs)[:2], metric)
    with pytest.raises(ValueError, match="unknown kind"):
        tl_patching(m.vision, imgs, mirror_images(imgs), metric, "nope")
    with pytest.raises(ValueError, match="do not shift"):
        patch_sweep(m.vision, imgs, imgs, metric).fraction()
    with pytest.raises(ValueError, match="edge"):
        knockout_hooks(m.vision, [(0, 11)])
    with pytest.raises(ValueError, match="out of range"):
        knockout_hooks(m.vision, [(0, 1)], layers=[1])
    with pytest.raises((ValueError, TypeError), match="method"):
        knockout_hooks(m.vision, [(0, 1)], method="zero")  # type: ignore[arg-type]
    train = make_model("simplified", seed=0).train()
    with pytest.raises(ValueError, match="training mode"):
        mirror_swap_patching(train, imgs, caps)
    with pytest.raises(ValueError, match="CLS"):
        patch_sweep(m.vision, imgs[:, [1, 0, *range(2, 11)]], imgs, metric)


# ---------------------------------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------------------------------


def test_plots_write_files(tmp_path, two_layer_model, pairs):
    m = two_layer_model
    imgs, caps = pairs
    res = mirror_swap_patching(m, imgs, caps)
    heads = mirror_swap_patching(m, imgs, caps, heads=True)
    figs = {
        "map": plot_patching_map(res),
        "heads": plot_patching_map(heads),
        "bars": plot_recovery_bars(res),
        "tl": plot_fraction_map(
            tl_patching(m.vision, imgs, mirror_images(imgs), image_belief_metric(m, caps)),
            ["L0", "L1"],
            [str(p) for p in range(11)],
        ),
        "interchange": plot_interchange(text_interchange(m, imgs, caps)),
        "knockout": plot_knockout(knockout_sweep(m, imgs, caps, tower="text")),
    }
    for name, fig in figs.items():
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="per-head"):
        plot_recovery_bars(heads)
    with pytest.raises(ValueError, match="do not match"):
        plot_fraction_map(torch.zeros(2, 3), ["a"], ["b"])


def test_hook_factories_have_one_home_and_their_old_import_paths_still_work():
    from hooked_clip1d import analysis
    from hooked_clip1d.analysis import hooks
    from hooked_clip1d.analysis.interventions import interchange, knockout, patching, tl_adapter

    moved = {
        hooks: ["patch_hook", "knockout_hooks", "residual_hook_names", "depth_labels"],
        knockout: ["knockout_sweep", "KnockoutResult", "cls_object_edges", "eot_edges"],
        interchange: ["text_interchange", "InterchangeResult"],
        tl_adapter: ["tl_patching", "TL_KINDS"],
    }
    for home, names in moved.items():
        for name in names:
            assert getattr(patching, name) is getattr(home, name) and name in patching.__all__, name
    assert analysis.zero_heads_hooks is hooks.zero_heads_hooks and analysis.splice_hook is hooks.splice_hook
    assert analysis.knockout_hooks is hooks.knockout_hooks
