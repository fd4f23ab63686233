"""The sixth to ninth walks through the public API (session 33: the data, the model and its caches, SAEs, the
interventions and the figures; the mechanism analyses, evaluation and the command line; patching, circuits, probes and
the train command; then the settings, retraining and the records): each case below
computed something other than what was asked without a word, left the caller's state changed, or failed with a bare
error; now it is computed as documented, refused by name, or left alone."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest
import torch
from conftest import REFUSAL_SNIPPET

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, load_model
from hooked_clip1d.model.config import TextConfig, VisionConfig

TINY = dict(n_labels=6, d_model=16, d_head=4, n_heads=2)
IMAGE = "C . . 1 . . 3 . . . ."
DATA6 = DataConfig(n_labels=6, n_heldout=2, n2=2)


def tiny(preset: str = "simplified", **kw: object) -> CLIP1D:
    return CLIP1D(CLIPConfig.from_preset(preset, **{**TINY, **kw}), seed=0).eval()


# ---- configs ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(attention_dir="causal"), r"VisionConfig.attention_dir must be 'bidirectional'"),  # CLS saw only itself
        (dict(init_logit_scale=math.nan), r"init_logit_scale must be a finite number"),  # NaN logits
        (dict(n_ctx=6), r"n_ctx must be d_image \+ 1"),
    ],
)
def test_configs_refuse_what_the_model_would_not_run_as_recorded(kw, match):
    with pytest.raises(ValueError, match=match):
        CLIPConfig.from_preset("simplified", n_labels=6, **kw)


def test_from_preset_routes_the_heads_fields_and_sizes_the_image():
    """``init_logit_scale`` gave a bare TypeError from VisionConfig; ``d_image=5`` alone failed on n_ctx, and the
    advice (``n_ctx=6``) then also set the text tower's, which a 4-token caption could not fill."""
    cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_image=5, init_logit_scale=1.0)
    assert (cfg.vision.n_ctx, cfg.text.n_ctx, cfg.init_logit_scale) == (6, 4, 1.0)
    with pytest.raises(ValueError, match=r"TextConfig.n_ctx must be 4 .*vision_overrides"):
        TextConfig(n_labels=6, n_ctx=6)
    assert VisionConfig(n_labels=6, d_image=5, n_ctx=6).n_ctx == 6


def test_the_clips_config_follows_a_towers_flags():
    """``m.vision.set_use_attn_result(True)`` changed the tower's config; ``m.cfg.vision`` kept the old one."""
    m = tiny()
    m.vision.set_use_attn_result(True)
    assert m.cfg.vision.use_attn_result and m.cfg.vision is m.vision.cfg
    assert m.cfg.text is m.text.cfg and m.cfg == dataclasses.replace(tiny().cfg, vision=m.vision.cfg)


# ---- model files -----------------------------------------------------------------------------------------------------
def test_save_model_refuses_an_integer_dtype_and_loading_keeps_the_callers_rng(tmp_path):
    """``dtype=torch.int8`` saved every weight as 0 (only finiteness was checked); ``load_model_file`` drew the
    throw-away init weights from the caller's global RNG."""
    from hooked_clip1d.model.checkpoint import load_model_file, save_model

    m = CLIP1D(CLIPConfig.from_preset("simplified", **TINY))  # no seed: its init reads the global RNG
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype"):
        save_model(m, tmp_path / "m.safetensors", dtype=torch.int8)
    save_model(m, tmp_path / "m.safetensors")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    loaded = load_model_file(tmp_path / "m.safetensors")
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(loaded.vision.W_E, m.vision.W_E)


# ---- caches ----------------------------------------------------------------------------------------------------------
def test_a_post_ln_towers_decompositions_are_refused_by_name():
    """On a post-LN tower ``decompose_resid``'s components summed 1.18 away from the output without a word, and
    ``apply_ln=True`` / ``cls_logit_lens`` failed with a bare IndexError (no ln_final)."""
    from hooked_clip1d.analysis.interventions.captions import cls_logit_lens

    m = tiny("full", d_mlp=16, n_layers=2, ln_position="post")
    img = m.vision.to_tokens([IMAGE])
    _, cache = m.vision.run_with_cache(img)
    for call in (
        lambda: cache.decompose_resid(pos_slice=0),
        lambda: cache.accumulated_resid(apply_ln=True),
        lambda: cache.stack_head_results(apply_ln=True),
        lambda: cache.get_full_resid_decomposition(),
    ):
        with pytest.raises(ValueError, match="post-LN"):
            call()
    assert cache.accumulated_resid().shape[0] == 3 and cache.stack_head_results().shape[0] == 4  # the activations
    _, both = m.run_with_cache(img, m.text.to_tokens(["1 is on the left of 3"]))
    with pytest.raises(ValueError, match="post-LN"):
        both.vision.decompose_resid(pos_slice=0)
    with pytest.raises(ValueError, match="post-LN"):
        cls_logit_lens(m, img, m.text.to_tokens(["1 is on the left of 3"]))
    # a pre-LN tower's decomposition still adds up
    pre = tiny("full", d_mlp=16, n_layers=2)
    out, c = pre.vision.run_with_cache(img)
    assert torch.allclose(pre.vision.ln_final(c.decompose_resid(pos_slice=0).sum(0)), out, atol=1e-4)


def test_accumulated_bias_refuses_a_layer_outside_the_tower():
    m = tiny("full", d_mlp=16, n_layers=2)
    assert m.vision.accumulated_bias(2).shape == (16,)  # all layers
    for layer in (3, -1):  # a bare IndexError; zeros
        with pytest.raises(ValueError, match=r"layer must be an int in 0..2"):
            m.vision.accumulated_bias(layer)


# ---- interventions ---------------------------------------------------------------------------------------------------
def test_interventions_refuse_captions_of_another_image_and_a_model_in_training_mode():
    """``knockout_sweep`` / ``text_interchange`` scored captions naming labels the image does not hold;
    ``cls_logit_lens`` / ``caption_directions`` ran with dropout on (two calls, two answers)."""
    from hooked_clip1d.analysis.interventions.captions import caption_directions, cls_logit_lens
    from hooked_clip1d.analysis.interventions.interchange import text_interchange
    from hooked_clip1d.analysis.interventions.knockout import knockout_sweep

    m = load_model("simplified-ntot20-n2-10")
    img = m.vision.to_tokens(["C . . 17 . . 19 . . . ."])
    wrong = m.text.to_tokens(["3 is on the left of 5"])
    for fn in (knockout_sweep, text_interchange):
        with pytest.raises(ValueError, match=r"the caption names labels \[3, 5\], the image holds \[17, 19\]"):
            fn(m, img, wrong)
    train_mode = tiny().train()
    caps = train_mode.text.to_tokens(["1 is on the left of 3", "3 is on the left of 1"])
    for call in (
        lambda: cls_logit_lens(train_mode, train_mode.vision.to_tokens([IMAGE]), caps),
        lambda: caption_directions(train_mode, caps),
    ):
        with pytest.raises(ValueError, match="training mode"):
            call()


def test_an_empty_head_or_layer_list_is_refused_not_read_as_nothing_to_ablate():
    """``heads=[]`` (or ``layers=[]``) ablated nothing: ``knockout_sweep`` reported every edge set "retained 1.0"."""
    from hooked_clip1d.analysis.hooks import knockout_hooks, mean_ablation_hooks, resample_ablation_hooks
    from hooked_clip1d.analysis.interventions.knockout import knockout_sweep
    from hooked_clip1d.analysis.interventions.terms import ablate_terms

    m = tiny()
    img, cap = m.vision.to_tokens([IMAGE]), m.text.to_tokens(["1 is on the left of 3"])
    for call in (
        lambda: knockout_sweep(m, img, cap, heads=[]),
        lambda: knockout_sweep(m, img, cap, layers=[]),
        lambda: knockout_hooks(m.vision, [(0, 1)], heads=[]),
        lambda: ablate_terms(m.vision, ["EP"], heads=[]),
        lambda: mean_ablation_hooks(m.vision, ["blocks.0.attn.hook_z"], img, heads=[]),
        lambda: resample_ablation_hooks(m.vision, ["blocks.0.attn.hook_z"], img, n=1, heads=[]),
    ):
        with pytest.raises(ValueError, match="is empty: nothing would change; pass None for all"):
            call()


def test_a_one_head_sae_splices_its_own_head_only():
    """A head-2 SAE on ``hook_z`` replaced all four heads (its ``hook_head_index`` ignored)."""
    from hooked_clip1d.analysis.interventions.sae import collect_activations, train_sae

    m = load_model("simplified-ntot20-n2-10")
    img = m.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 3 . . . . . . . 1 ."])
    sae, _ = train_sae(collect_activations(m.vision, "blocks.0.attn.hook_z", img, head=2), d_sae=8, k=2, steps=5)
    name = "blocks.0.attn.hook_z"
    _, clean = m.vision.run_with_cache(img, names_filter=name)
    with pytest.raises(ValueError, match=r"a one-head SAE \(d_in=32\) .*give head=h"), sae.spliced(m.vision, name):
        m.vision(img)

    def changed(**kw: object) -> list[int]:
        with sae.spliced(m.vision, name, **kw):
            _, c = m.vision.run_with_cache(img, names_filter=name)
        return [h for h in range(4) if not torch.allclose(clean[name][:, :, h], c[name][:, :, h])]

    assert changed(head=2) == [2]
    sae.metadata.update(hook_name=name, hook_head_index=2)
    assert changed() == [2]
    assert changed(error_term=True) == []  # the error term restores the unedited head
    with pytest.raises(ValueError, match=r"spliced: head must be in 0..3, got 4"):
        changed(head=4)


# ---- data ------------------------------------------------------------------------------------------------------------
def test_the_vocabulary_reads_numpy_and_tensor_labels_and_refuses_floats():
    """``single_caption(np.int64(3))`` was refused as "outside 1..20"; ``text_token_str(2.7)`` gave '2'; an
    out-of-range image id was shown as a label."""
    from hooked_clip1d.data.vocab import Vocabulary

    v = Vocabulary(20)
    with pytest.raises(ValueError, match=r"image token ids \[99\] are outside"):
        v.image_tokens_str(torch.tensor([0, 99]))
    # the type-level cases (numpy and tensor labels, floats): test_what_the_type_checkers_refuse_...


def test_epoch_permutations_refuse_bad_sizes_and_name_a_dropped_epoch():
    from hooked_clip1d.data import EpochPermutations

    with pytest.raises(ValueError, match="bs must be an int >= 1, got 0"):  # ZeroDivisionError
        EpochPermutations(10, 0, 0)
    with pytest.raises(ValueError, match="bs must be an int >= 1, got -5"):  # spe = -2, silently
        EpochPermutations(10, -5, 0)
    order = EpochPermutations(10, 4, 0)
    order.perm(3)
    order.forget_before(2)
    with pytest.raises(KeyError, match="epoch 0's permutation is no longer kept"):
        order.perm(0)
    with pytest.raises(KeyError, match="epoch must be an int >= 0, got -1"):
        order.perm(-1)
    with pytest.raises(KeyError, match="not drawn yet"):
        order.state_before(7)
    assert sorted(order.perm(5).tolist()) == list(range(10))


# ---- figures ---------------------------------------------------------------------------------------------------------
def test_attention_view_gives_every_submodules_mode_back():
    """Only the tower's own mode was restored: a block the caller had in train mode came back in eval mode."""
    from hooked_clip1d.visualization.attention import attention_view

    m = tiny()
    m.vision.blocks[0].train()
    before = [x.training for x in m.modules()]
    attention_view(m, IMAGE)
    assert [x.training for x in m.modules()] == before


def test_plot_emergence_refuses_rows_without_its_columns():
    """Rows without ``checks`` gave a bare KeyError; rows without the panels' columns drew empty panels."""
    from hooked_clip1d.pretrained import trajectory_emergence
    from hooked_clip1d.visualization.dynamics import plot_emergence

    rows = [dict(r) for r in trajectory_emergence("simplified-ntot20-n2-10").rows[:3]]
    del rows[1]["p_left"]
    with pytest.raises(ValueError, match=r"row 1 lacks \['p_left'\]"):
        plot_emergence(rows)


# ---- the seventh walk: mechanism analyses, evaluation, the command line ----------------------------------------------
ABLATE_EP = "ablate-ep-ntot20-n2-10-init002"  # trained with EP removed from every forward pass


def test_the_mechanism_reads_leave_out_the_terms_a_model_removes_itself():
    """On a model whose forward removes EP, the CLS key-position reads kept EP: the invariant ablation scored 1.0
    (the model's real key-position part removed: 0.52), Δlabel + Δp.e. and T + Π missed the scores by 9.96."""
    from hooked_clip1d import build_dataset, evaluate
    from hooked_clip1d.analysis.mechanism.heads import label_pe_deltas
    from hooked_clip1d.analysis.mechanism.report import ablate_cls_key_position, cls_label_pe_deltas
    from hooked_clip1d.analysis.mechanism.rope import consistency_condition

    m = load_model(ABLATE_EP)
    ds = build_dataset(m.data_config)
    split = ds.splits["val_unseen"]
    acc = evaluate(m, ds, ["val_unseen"], vision_hooks=ablate_cls_key_position(m.vision))["val_unseen"]["acc"]
    assert acc < 0.6  # 0.52: the key-position part it computes carries the side
    d = cls_label_pe_deltas(m.vision, split)
    assert torch.allclose(d["delta_label"] + d["delta_pe"], d["delta_score"], atol=1e-4)
    cc = consistency_condition(m.vision, split)
    assert torch.allclose(cc["T"] + cc["Pi"], cc["score_diff"], atol=1e-4)
    assert float(label_pe_deltas(m.vision, split)["delta_pe"].abs().max()) == 0.0  # EP removed: it adds nothing


def test_invariance_audit_measures_only_moves_that_preserve_the_outputs():
    """On the EP-ablated model four moves change the logits (by up to 0.14 of the largest); they were measured and
    their accuracy (0.96) read as a non-invariance."""
    from hooked_clip1d.analysis.mechanism.reparametrize import REPARAMETRISATIONS, invariance_audit

    audit = invariance_audit(load_model(ABLATE_EP), lambda x: 0)
    assert set(audit["not output-preserving"]) == {"cls into W_E", "cls into W_pos", "b_Q folded into W_Q",
                                                   "embedding shift"}  # fmt: skip
    assert set(audit) == {"as trained", "W_Q x 3, W_K / 3", "not output-preserving"}
    tiny_audit = invariance_audit(tiny(), lambda x: 0)
    assert set(tiny_audit) == {"as trained", *REPARAMETRISATIONS}


def test_fixed_batch_loss_scores_the_objective_asked_for():
    """The emergence rows' loss is the standard CLIP loss (all negatives) whatever the run trained with; it was
    plotted as "training loss" for a run trained with distinct negatives (its own objective: ~0)."""
    from hooked_clip1d import build_dataset
    from hooked_clip1d.analysis.mechanism.dynamics import fixed_batch_loss

    m = load_model("simplified-ntot20-n2-10")
    assert m.manifest["train_config"]["negatives"] == "distinct"
    ds = build_dataset(m.data_config)
    assert fixed_batch_loss(m, ds) > 0.1 > fixed_batch_loss(m, ds, negatives="distinct")


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_analyze_attention_shows_the_images_own_caption(tmp_path):
    """The default caption was the table's last ('20 is on the left of 19') beside the image 'C 16 . . 17 ...'."""
    from hooked_clip1d.cli.analyze import run_analysis

    r = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tmp_path)
    labels = [t for t in r["data"]["vision_L0"]["tokens"] if t.isdigit()]
    assert r["data"]["text_L0"]["tokens"] == [labels[0], "is on the left of", labels[1], "<eot>"]
    r = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tmp_path / "b", image="C . 3 . . . . . 5 . .")
    assert r["data"]["text_L0"]["tokens"] == ["3", "is on the left of", "5", "<eot>"]


def test_cli_options_refuse_a_fractional_layer(tmp_path, capsys):
    """``-o layer=0.9`` analysed layer 0 and recorded the option as 0.9."""
    from hooked_clip1d.cli import main

    assert main(["analyze", "decompose", "-o", "layer=0.9", "--out", str(tmp_path)]) != 0
    assert "option layer must be an int >= 0, got 0.9" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --json --markdown printed markdown
        main(["list", "--json", "--markdown"])


def test_analyses_keep_every_submodules_mode_and_refuse_training_mode():
    """``caption_split`` gave one mode back to every submodule; ``embed_images`` / ``similarity_matrix`` and RoPE's
    ``bias_gradient`` ran with dropout on (the global RNG drawn; two calls, two answers)."""
    from hooked_clip1d import DataConfig, build_dataset
    from hooked_clip1d.analysis.mechanism.dissolution import caption_split
    from hooked_clip1d.analysis.mechanism.rope import bias_gradient, rho_profile
    from hooked_clip1d.evaluation import embed_captions, embed_images, similarity_matrix

    m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, d_model=16, d_head=4), seed=0).eval()
    ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    m.vision.train()
    before = [x.training for x in m.modules()]
    caption_split(m, ds, seed=0, epoch=0, batch_size=16)
    assert [x.training for x in m.modules()] == before
    for call in (
        lambda: embed_images(m, ds, "val_unseen"),
        lambda: similarity_matrix(m, ds, "val_unseen"),
    ):
        with pytest.raises(ValueError, match="needs the model in eval mode"):
            call()
    m.eval()
    embed_captions(m, ds)
    rope = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2,
                                         vision_overrides={"positional": "rope"}), seed=0)  # fmt: skip
    for call in (lambda: bias_gradient(rope.vision), lambda: rho_profile(rope.vision, [1, 2, 3])):
        with pytest.raises(ValueError, match="training mode"):
            call()


def test_retrieval_refuses_a_matrix_of_another_shape_and_counts_a_tie_at_the_top_as_a_miss():
    """A 7-column matrix scored 0 without a word; zeroing the image embedding tied every caption and the table's
    first caption "won" (val_single accuracy 0.05)."""
    from hooked_clip1d import build_dataset, evaluate
    from hooked_clip1d.evaluation import retrieval_metrics

    m = load_model("simplified-ntot20-n2-10")
    ds = build_dataset(m.data_config)
    for sim in (torch.rand(100, 7), torch.rand(30, len(ds.captions))):
        with pytest.raises(ValueError, match=r"sim must be \[images of 'val_unseen', captions of the table\]"):
            retrieval_metrics(sim, ds, "val_unseen")
    zero = [("hook_pooled", lambda act, hook: act * 0)]
    res = evaluate(m, ds, ["val_single", "val_unseen"], vision_hooks=zero)
    assert res["val_single"]["acc"] == 0.0 and res["val_unseen"]["acc"] == 0.0
    assert res["val_unseen"]["label_set"] == 0.0 and res["val_unseen"]["relaxed"] == 0.0
    assert evaluate(m, ds, ["val_unseen"])["val_unseen"] == m.manifest["metrics"]["val_unseen"] | {"n": 100}
    for splits in ("val_unseen", []):  # a string read letter by letter; [] returned {}
        with pytest.raises(ValueError, match="splits must be a non-empty list of split names"):
            evaluate(m, ds, splits)


def test_beliefs_and_steering_refuse_images_and_captions_that_do_not_go_together():
    """``image_belief`` scored one-object, empty and three-object images; ``steer_vision`` / ``steer_text`` scored
    captions naming labels the images do not hold."""
    from hooked_clip1d.analysis.mechanism.spatial_ids import (
        steer_text,
        steer_vision,
        text_role_ids,
        vision_spatial_ids,
    )
    from hooked_clip1d.analysis.metrics import image_belief

    m = load_model("simplified-ntot20-n2-10")
    with pytest.raises(ValueError):
        image_belief(m, m.vision.to_tokens(["C . 17 . . . . . . . ."]), m.text.to_tokens(["17 is on the left of 19"]))
    imgs = m.vision.to_tokens(["C . 17 . . 19 . . . . .", "C 16 . . . . . 18 . . ."])
    wrong = m.text.to_tokens(["3 is on the left of 5", "7 is on the left of 2"])
    with pytest.raises(ValueError, match="the caption names labels"):
        steer_vision(m, imgs, wrong, vision_spatial_ids(m.vision), 0, [1.0])
    with pytest.raises(ValueError, match="the caption names labels"):
        steer_text(m, imgs, wrong, text_role_ids(m.text), 0, [1.0])
    with pytest.raises(ValueError, match="repeated labels"):  # dropped without a word
        vision_spatial_ids(m.vision, labels=[1, 1, 2, 3])


def test_a_pruned_heads_roles_are_nan_not_read_from_near_zero_weights():
    """Pruned head 0 was called 85 % relational and 'other' 1.0 from weights of norm ~1e-3."""
    from hooked_clip1d import build_dataset
    from hooked_clip1d.analysis.mechanism.heads import classify_head_roles, cls_object_bias, label_pe_deltas

    m = load_model("pruned-keep-h2h3-ntot20-n2-10")
    split = build_dataset(m.data_config).splits["val_unseen"]
    roles = classify_head_roles(label_pe_deltas(m.vision, split))["relational"]
    assert torch.isnan(roles[:2]).all() and not torch.isnan(roles[2:]).any()
    bias = cls_object_bias(m.vision, split)
    assert torch.isnan(bias["other"][0, :2]).all() and not torch.isnan(bias["left"][0, 2:]).any()


def test_plot_alignment_names_its_fit_and_lists_test_labels_that_are_not_a_range():
    from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment
    from hooked_clip1d.visualization.alignment import plot_alignment

    m = load_model("simplified-ntot20-n2-10")
    fig = plot_alignment(embedding_alignment(m, fit_labels=range(1, 16), test_labels=[16, 20], rotation="span"))
    titles = [ax.get_title() for ax in fig.axes]
    assert "test labels 16, 20 (fit on 15)" in titles  # "16..20" for two labels
    assert "cosine, rotated (span part of Procrustes)" in titles


# ---- the eighth walk: patching, circuits, probes, the train command ------------------------------------------------
def test_patching_refuses_captions_of_other_labels_and_position_sets_that_select_nothing():
    from hooked_clip1d.analysis.interventions.patching import caption_swap_patching, mirror_swap_patching, patch_sweep
    from hooked_clip1d.analysis.metrics import image_belief_metric, mirror_images

    m = load_model("simplified-ntot20-n2-10")
    img = m.vision.to_tokens(["C . . 17 . . 19 . . . ."])
    wrong = m.text.to_tokens(["3 is on the left of 5"])
    for fn in (mirror_swap_patching, caption_swap_patching):
        with pytest.raises(ValueError, match="the caption names labels"):
            fn(m, img, wrong)
    cap = m.text.to_tokens(["17 is on the left of 19"])
    sets = {"label 20": img == 20, "cls": torch.arange(11)[None] == 0}
    with pytest.raises(ValueError, match=r"position sets \['label 20'\] select no position"):
        patch_sweep(m.vision, img, mirror_images(img), image_belief_metric(m, cap), sets=sets)


def test_term_ablations_refuse_rest_terms_at_layer_0():
    """``ablate_terms(..., ["RR", "ER"])`` at layer 0 removed nothing (R, what earlier layers wrote, is 0 there)."""
    from hooked_clip1d.analysis.interventions.terms import ablate_terms

    with pytest.raises(ValueError, match=r"terms \['RR', 'ER'\] do not exist at layer 0"):
        ablate_terms(tiny().vision, ["RR", "ER"])


def test_circuit_scores_and_score_method_refuse_what_is_not_in_the_graph():
    from hooked_clip1d.analysis.circuits.attribution import Attribution
    from hooked_clip1d.analysis.circuits.scores import Circuit, circuit_scores, score_method

    m = load_model("simplified-ntot20-n2-10")
    imgs = m.vision.to_tokens(["C . . 17 . . 19 . . . ."])
    caps = m.text.to_tokens(["17 is on the left of 19"])
    c = Circuit(model="x", nodes=["vision.L0.H2", "vision.L0.H7"], edges=["vision.L0.H2->vision.readout"])
    with pytest.raises(ValueError, match=r"nodes \['vision.L0.H7'\] are not nodes of this model's graph"):
        circuit_scores(m, imgs, caps, c)
    with pytest.raises(ValueError, match="threshold must be in"):  # every edge was "minimal"
        circuit_scores(m, imgs, caps, Circuit(model="x", nodes=["vision.L0.H2"], edges=[]), threshold=-3.0)
    heads = ["vision.L0.H0", "vision.L0.H1", "vision.L0.H2", "vision.L0.H3"]
    a = Attribution("AtP", heads, torch.tensor([0.1, 0.2, 0.9, 0.3]))
    with pytest.raises(ValueError, match="no ground-truth member is in the universe"):  # AUC NaN, k 0, no word
        score_method(a, ["vision.L0.H9"], heads)
    with pytest.raises(ValueError, match="must score the whole universe"):  # a bare KeyError
        score_method(a, ["vision.L0.H2"], heads, exact=Attribution("exact", heads[:2], torch.tensor([0.1, 0.2])))


def test_probes_refuse_nan_features_and_settings_that_train_nothing():
    """One NaN cell took the probe to chance ("not decodable"); ``l2=nan`` gave NaN weights and an accuracy."""
    from hooked_clip1d.analysis.interventions.probes import fit_probe, probe_sweep

    X = torch.randn(100, 4, generator=torch.Generator().manual_seed(0))
    y = (X[:, 0] > 0).long()
    bad = X.clone()
    bad[3, 0] = float("nan")
    for call, match in (
        (lambda: fit_probe(bad, y), "X holds NaN or inf"),
        (lambda: fit_probe(X, y, l2=float("nan")), "l2 must be a finite number"),
        (lambda: fit_probe(X, y, max_iter=0), "max_iter must be an int >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            call()
    m = tiny()
    caps = m.text.to_tokens(["1 is on the left of 3", "3 is on the left of 1"])
    with pytest.raises(ValueError, match="hook_names is empty"):
        probe_sweep(m.text, caps, torch.tensor([0, 1]), hook_names=[], control=False)


def test_the_train_command_refuses_zero_layers_and_compile_on_the_standard_engine(tmp_path, capsys):
    """``--vision-layers 0`` trained the preset's layer; ``--compile`` without ``--engine batched`` was ignored."""
    from hooked_clip1d.cli import main

    base = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "1", "--batch-size", "16"]
    assert main([*base, "--vision-layers", "0", "--out", str(tmp_path / "a"), "--no-progress"]) != 0
    assert "n_layers: must be a positive int, got 0" in capsys.readouterr().err
    assert main([*base, "--compile", "--out", str(tmp_path / "b"), "--no-progress"]) != 0
    assert "--compile compiles the batched engine's step: it needs --engine batched" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_decomposition_figures_label_the_rows_they_show():
    """A decomposition kept at query position 3 was labelled as the CLS row (row 0); a key listed twice weighed twice
    in Fig. 13's std."""
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
    from hooked_clip1d.visualization.decomposition import plot_row_profiles, plot_term_maps

    m = load_model("simplified-ntot20-n2-10")
    img = m.vision.to_tokens(["C . . 17 . . 19 . . . ."])
    _, cache = m.vision.run_with_cache(img)
    dec = decompose_attention_scores(m.vision, cache, query_pos=3)
    tp, toks = dec.token_position_terms(), m.vision.token_strs(img[0])
    for call in (lambda: plot_term_maps(tp, terms=["EP"], tokens=toks), lambda: plot_row_profiles(tp, ["EP"])):
        with pytest.raises(ValueError, match="the terms keep 1 of 11 query rows: give query_positions"):
            call()
    fig = plot_row_profiles(tp, ["EP"], tokens=toks, query_positions=dec.query_positions)
    assert fig._suptitle.get_text() == "query position 3: terms along the keys"
    full = decompose_attention_scores(m.vision, cache).token_position_terms()
    with pytest.raises(ValueError, match="lists a position twice"):
        row_std_shares(full, key_positions=[0, 0, 0, 3])
    with pytest.raises(ValueError, match="query_pos must be an int"):
        row_std_shares(full, query_pos=True)


def test_a_pruned_head_is_labelled_pruned_not_left():
    from hooked_clip1d import build_dataset
    from hooked_clip1d.analysis.mechanism.heads import classify_head_roles, label_pe_deltas
    from hooked_clip1d.visualization.heads import plot_head_roles

    m = tiny(vision_overrides={"pruned_heads": ((0, 1),)})
    roles = classify_head_roles(label_pe_deltas(m.vision, build_dataset(DATA6).splits["val_seen"]))
    ticks = [t.get_text() for t in plot_head_roles(roles).axes[0].get_xticklabels()]
    assert ticks[1] == "head 1\n(pruned)" and ticks[0] in ("head 0\n(L)", "head 0\n(R)")


def test_plot_circuit_benchmark_names_a_row_without_its_keys():
    from hooked_clip1d.visualization.circuits import plot_circuit_benchmark

    with pytest.raises(KeyError, match=r"plot_circuit_benchmark \(row 0\) takes .*no \['edge_auc'\]"):
        plot_circuit_benchmark([{"model": "m", "method": "AtP", "node_auc": 0.9, "seconds": 1.0}])


# ---- the ninth walk: settings, retraining, records -----------------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_a_batched_retraining_is_not_reused_for_another_base_model(tmp_path):
    """``head_subset_sweep(engine="batched", resume=True)`` handed back the finished runs of another base model (and
    recorded the new settings); the standard engine refused the same call."""
    from hooked_clip1d.model.checkpoint import CheckpointError
    from hooked_clip1d.training.retrain import head_subset_sweep

    head_subset_sweep(tiny(), 1, DATA6, epochs=1, out_dir=tmp_path, engine="batched")
    other = CLIP1D(CLIPConfig.from_preset("simplified", **TINY), seed=7).eval()
    with pytest.raises(CheckpointError, match=r"cannot reuse the finished run .*init_seed"):
        head_subset_sweep(other, 1, DATA6, epochs=1, out_dir=tmp_path, engine="batched", resume=True)


def test_head_subset_sweep_refuses_settings_it_would_ignore_and_prune_heads_keeps_the_dtype():
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.training.retrain import head_subset_sweep, prune_heads

    m = tiny()
    with pytest.raises(ValueError, match="train_cfg retrains the pruned copies: give epochs > 0"):
        head_subset_sweep(m, 1, DATA6, train_cfg=TrainConfig(epochs=1))  # nothing was retrained
    with pytest.raises(ValueError, match="n_kept must be distinct ints"):
        head_subset_sweep(m, [1, 1], DATA6)  # every subset twice
    double = tiny().double()
    assert prune_heads(double, vision=[(0, 0)]).vision.W_E.dtype == torch.float64  # was rounded to float32


def test_schedules_refuse_what_they_would_silently_bend():
    from hooked_clip1d.settings import TrainConfig, dense_schedule

    for kw in (dict(epochs=-5), dict(epochs=1000, early_every=0), dict(epochs=10_000, late_every=-500)):
        with pytest.raises(ValueError, match="dense_schedule"):
            dense_schedule(**kw)
    cfg = TrainConfig(lr=1.0, epochs=4, lr_schedule="warmup_cosine", warmup_epochs=1)
    for step in (-3, 20):  # -lr; the cosine climbing back past the end
        with pytest.raises(ValueError, match="is not a step of a 8-step run"):
            cfg.lr_at(step, 8, 2)


def test_a_recipe_is_checked_when_it_is_made_not_when_a_run_expands_it():
    """``Recipe(negatives="bogus")``, a negative weight decay or a warmup without a cosine schedule were accepted and
    refused only when a run expanded the recipe."""
    from hooked_clip1d.settings.recipes import RECIPES, Recipe

    for kw, match in (
        (dict(negatives="bogus"), "negatives"),  # (the tests' type checker names it first)
        (dict(weight_decay=-1.0), "weight_decay must be a finite number >= 0"),
        (dict(warmup_epochs=5), "warmup_epochs needs lr_schedule='warmup_cosine'"),
        (dict(init_std=0.0), "init_std: must be a positive number"),
        (dict(attn_dropout=1.0), r"attn_dropout: must be a number in \[0, 1\)"),
    ):
        with pytest.raises(ValueError, match="(?s)Recipe: .*" + match):
            Recipe(**kw)
    assert len(RECIPES) >= 20  # every named recipe passes
    with pytest.raises(ValueError, match="d_image=1000000: at most 4,096 pixels"):  # 5e11 position pairs listed
        DataConfig(n_labels=6, n_heldout=2, n2=2, d_image=10**6)


def _record(name: str = "fig11") -> dict:
    import json

    return json.loads((ROOT / "docs" / "records" / f"{name}.json").read_text())


def test_records_refuse_fields_of_the_wrong_type():
    """``beyond_paper: "false"`` moved a figure out of the table; ``plots`` as a string was read letter by letter
    (and files were deleted); a figure name with a path wrote outside the records folder."""
    from hooked_clip1d.reproduce.records import Record

    for key, value, match in (
        ("beyond_paper", "false", "beyond_paper is 'false', not true / false"),
        ("models", "flagship", "models is 'flagship', not a list of names"),
        ("plots", "fig11_fig11.png", "plots is 'fig11_fig11.png', not a list of names"),
        ("figure", "../../escaped", "is not a figure name"),
        ("figure", 11, "figure is 11, not a string"),
    ):
        d = _record()
        d[key] = value
        with pytest.raises(ValueError, match=match):
            Record.from_dict(d)
    for field, value, match in (
        ("counted", "no", "counted is 'no', not true / false"),
        ("null_passes", float("nan"), "null_passes is nan, not an integer count"),
        ("seeds", {"0": "yes"}, "seeds must map names to true / false"),
    ):
        d = _record()
        d["checks"][0][field] = value
        with pytest.raises(ValueError, match=match):
            Record.from_dict(d)
    d = _record("fig19")
    row = next(c for c in d["checks"] if c.get("null_extreme") is not None)
    del row["value"]
    with pytest.raises(ValueError, match="untrained extreme but no value"):
        Record.from_dict(d)


def test_the_results_page_refuses_an_edited_verdict_and_a_record_it_cannot_read(tmp_path):
    """A kept record whose verdict was edited was counted as that verdict; a fresh record with a trailing comma, or
    lying outside its figure's folder, was skipped and the page rebuilt from the old one, rc 0."""
    import json
    import shutil

    from hooked_clip1d.reproduce.records import load_record
    from hooked_clip1d.reproduce.results_page import build_results_page, load_kept_records

    kept = tmp_path / "docs" / "records"
    kept.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "records" / "fig13.json", kept)
    d = _record("fig13")
    assert d["verdict"] != "reproduced"
    d["verdict"] = "reproduced"
    (kept / "fig13.json").write_text(json.dumps(d))
    for call in (lambda: load_kept_records(kept), lambda: load_record(kept / "fig13.json")):
        with pytest.raises(ValueError, match="its verdict 'reproduced' is not what its checks give"):
            call()
    res = tmp_path / "res"
    (res / "fig11").mkdir(parents=True)
    (res / "fig11" / "fig11.json").write_text(json.dumps(_record()) + ",")
    with pytest.raises(ValueError, match="is not valid JSON"):
        build_results_page(res, tmp_path / "docs" / "results.md")
    (res / "fig11" / "fig11.json").unlink()
    (res / "fig11.json").write_text(json.dumps(_record()))
    with pytest.raises(ValueError, match="directly under the results folder"):
        build_results_page(res, tmp_path / "docs" / "results.md")
    assert not (tmp_path / "docs" / "results.md").exists()


PLAIN = (
    """
import numpy as np
import torch
from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
from hooked_clip1d.analysis.hooks import knockout_hooks
from hooked_clip1d.data.vocab import Vocabulary
"""
    + REFUSAL_SNIPPET
    + """
v = Vocabulary(20)
print(refusal(lambda: v.caption_to_text(torch.tensor([[3, 21, 22, 25]]))))
print(refusal(lambda: v.image_to_text(torch.tensor([[7, 0, 3]]))))
print(v.caption_to_text(torch.tensor([3, 21, 22, 25])))
want = v.single_caption(3)
print(torch.equal(v.single_caption(np.int64(3)), want), torch.equal(v.single_caption(torch.tensor(3)), want))
print(refusal(lambda: v.single_caption(3.0)))
print(refusal(lambda: v.single_caption(True)))
print(refusal(lambda: v.text_token_str(2.7)))
for kw in (dict(act_fn="relu"), dict(max_logit_scale="4.6"), dict(dtype="float32"), dict(init_seed=1.5),
           dict(d_image=10.0), dict(positional="rope", rotary_dim=4.0), dict(use_attn_result="no")):
    print(refusal(lambda: CLIPConfig.from_preset("simplified", n_labels=6, **kw)))
m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2), seed=0).eval()
print(refusal(lambda: knockout_hooks(m.vision, [(0, 1)], layers=[0.5])))
from hooked_clip1d.analysis.mechanism.spatial_ids import vision_spatial_ids
print(refusal(lambda: vision_spatial_ids(m.vision, labels=[1.9, 2.5, True])))
from hooked_clip1d import build_dataset
from hooked_clip1d.analysis.hooks import mean_ablation_hooks
from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
from hooked_clip1d.analysis.interventions.terms import ablate_terms
img = m.vision.to_tokens(["C . . 1 . . 3 . . . ."])
print(refusal(lambda: ablate_terms(m.vision, ["EP"], heads=(h for h in range(2)))))
print(refusal(lambda: knockout_hooks(m.vision, [(0, 1)], heads=(h for h in range(2)))))
print(refusal(lambda: mean_ablation_hooks(m.vision, ["blocks.0.attn.hook_z"], img, heads=(h for h in range(2)))))
ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
print(refusal(lambda: evaluate_ablations(m, ds, {"EP": ["EP"]}, heads=(h for h in range(2)))))
print(len(ablate_terms(m.vision, ["EP"], heads=range(2))) > 0)
"""
)


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_what_the_type_checkers_refuse_is_refused_without_them_too():
    """Run in a plain interpreter (the tests' jaxtyping + beartype refuse these calls before the package's own
    checks): a batch of captions gave a bare ``TypeError: int() argument ... 'list'``; numpy / tensor labels were
    refused as out of range and floats truncated; config fields of the wrong type were accepted; a generator of heads
    was used up by its check, so nothing was ablated and ``heads: []`` recorded."""
    out = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "ValueError: caption_to_text takes one row of ids [pos], got shape [1, 4] (loop over a batch)"
    assert out[1].startswith("ValueError: image_to_text takes one row of ids [pos], got shape [1, 3]")
    assert out[2] == "3 is in the image"
    assert out[3] == "True True"  # numpy / tensor labels were refused as "outside 1..20"
    assert out[4] == "ValueError: a label must be an int in 1..20, got 3.0"
    assert out[5] == "ValueError: a label must be an int in 1..20, got True"
    assert out[6] == "ValueError: a caption token id must be an int, got 2.7"  # gave '2'
    for line, match in zip(
        out[7:14],
        (
            "act_fn: must be 'gelu'",  # the towers ran GeLU and recorded relu
            "max_logit_scale must be a finite number",
            "dtype: must be a floating torch.dtype",  # failed deep in torch.randn
            "init_seed: must be an int or None",  # a bare RuntimeError from manual_seed
            "d_image: must be an int >= 2",
            "rotary_dim: must be an int or None",
            "use_attn_result: must be True or False",  # "no" counted as on
        ),
        strict=True,
    ):
        assert line.startswith("ValueError: ") and match in line, line
    assert out[14].startswith("TypeError: layers must be ints")  # int() read 0.5 as layer 0
    assert out[15].startswith("TypeError: labels must be ints")  # vision_spatial_ids read 1.9 as label 1
    for line in out[16:20]:  # the check used the generator up: nothing ablated, heads [] recorded
        assert line == "TypeError: heads must be a list (or tuple, range) of indices, not a one-pass generator", line
    assert out[20] == "True"
