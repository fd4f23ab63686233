"""analysis.mechanism.report: probe set, average-rank Spearman, the CLS-row reparametrisation and the invariant "
"ablation."""

from __future__ import annotations

import pytest
import torch
from conftest import randomize_biases

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset, load_model
from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
from hooked_clip1d.analysis.interventions.terms import ablate_terms
from hooked_clip1d.analysis.mechanism.report import (
    PROBE,
    ablate_cls_key_position,
    cls_query,
    mechanism_checks,
    mechanism_report,
    move_cls_embedding,
    spearman_position,
    unseen_probe,
)

D = DataConfig(n_labels=8, n_heldout=3, n2=3)


def _model(seed: int = 0) -> CLIP1D:
    cfg = CLIPConfig.from_preset("simplified", n_labels=8, d_model=32, d_head=8, init_std=1.0)  # large terms
    m = CLIP1D(cfg, seed=seed).eval()
    randomize_biases(m)
    m.data_config = D
    return m


def test_spearman_uses_average_ranks():
    # a flat series has no order: 0, not the +1 that argsort ranks (0, 1, 2, ...) give
    assert spearman_position(torch.zeros(5)).item() == 0.0
    y = torch.tensor([0.0, 0.0, 1.0, 1.0])
    want = torch.corrcoef(torch.stack([torch.tensor([0.5, 0.5, 2.5, 2.5]), torch.arange(4.0)]))[0, 1]
    assert spearman_position(y).item() == pytest.approx(want.item())
    assert spearman_position(torch.tensor([3.0, 1.0, 2.0, 0.0])).item() == pytest.approx(-0.8)


def test_probe_has_every_unseen_pair_at_every_position_pair():
    ds = unseen_probe(build_dataset(D))
    s = ds.splits[PROBE]
    assert len(s) == 3 * 2 * 45
    assert len({(tuple(o), tuple(p)) for o, p in zip(s.objects.tolist(), s.positions.tolist(), strict=True)}) == 270
    # every image's true caption is its left caption, found in the dataset's caption table
    v = ds.vocab
    for i in (0, 100, 269):
        x, y = s.objects[i].tolist()
        assert ds.captions[s.targets[i, 0]].tolist() == v.left_caption(x, y).tolist()
    assert set(ds.splits) == {*build_dataset(D).splits, PROBE}


@pytest.mark.parametrize("into", ["token", "position"])
def test_moving_the_cls_sum_keeps_outputs_and_the_invariant_ablation_but_not_ep(into):
    model = _model()
    moved = move_cls_embedding(model, into)
    ds = build_dataset(D)
    imgs = ds.splits["val_unseen"].images
    assert torch.equal(moved.vision(imgs), model.vision(imgs))  # fraction 1: the sum is unchanged bit for bit
    torch.testing.assert_close(cls_query(moved.vision), cls_query(model.vision))
    # invariant ablation: the same scores on the moved model
    inv_a = ablate_cls_key_position(model.vision)
    inv_b = ablate_cls_key_position(moved.vision)
    torch.testing.assert_close(
        moved.vision.run_with_hooks(imgs, fwd_hooks=inv_b), model.vision.run_with_hooks(imgs, fwd_hooks=inv_a)
    )
    # the paper's EP ablation is not invariant
    ep_a = model.vision.run_with_hooks(imgs, fwd_hooks=ablate_terms(model.vision, ["EP"], 0))
    ep_b = moved.vision.run_with_hooks(imgs, fwd_hooks=ablate_terms(moved.vision, ["EP"], 0))
    assert (ep_a - ep_b).abs().max() > 1e-3
    assert moved is not model and not torch.equal(moved.vision.W_E, model.vision.W_E)


def test_invariant_ablation_equals_ep_pp_bp_on_the_cls_row_over_pixels():
    model = _model(1)
    imgs = build_dataset(D).splits["val_unseen"].images
    got = {}

    def grab(name):
        def fn(scores, hook):
            got[name] = scores.detach().clone()

        return fn

    h = "blocks.0.attn.hook_attn_scores"
    model.vision.run_with_hooks(imgs, fwd_hooks=[*ablate_cls_key_position(model.vision), (h, grab("inv"))])
    model.vision.run_with_hooks(imgs, fwd_hooks=[*ablate_terms(model.vision, ["EP", "PP", "BP"], 0), (h, grab("p"))])
    torch.testing.assert_close(got["inv"][:, :, 0, 1:], got["p"][:, :, 0, 1:], atol=1e-5, rtol=1e-5)


def test_move_refuses_bad_arguments():
    with pytest.raises(ValueError, match="into must be"):
        move_cls_embedding(_model(), "left")
    with pytest.raises(ValueError, match="fraction"):
        move_cls_embedding(_model(), "token", 1.5)
    full = CLIP1D(CLIPConfig.from_preset("full", n_labels=8, d_model=16, d_head=4, d_mlp=16), seed=0).eval()
    with pytest.raises(ValueError, match="simplified vision tower"):
        move_cls_embedding(full)


def test_flagship_report_shows_the_papers_ablations():
    """The recipe study's model (no b_Q; the flagship until 2026-11-26): EP's removal costs the side (0.5) but not
    the labels; PP costs nothing; the invariant ablation agrees with EP's; the CLS token and position-0 rows differ."""
    rep = mechanism_report(load_model("simplified-ntot20-n2-10-no-qk-bias"))
    a = rep["acc"][PROBE]
    assert rep["cls_cos"] < 0.5 and a["baseline"][0] >= 0.95
    assert 0.4 <= a["EP"][0] <= 0.6 and a["EP"][1] >= 0.95
    assert a["PP"][0] >= a["baseline"][0] - 0.02
    assert abs(a["CLS-key-position"][0] - a["EP"][0]) <= 0.05
    checks = dict(mechanism_checks(rep, qk_bias=False))
    assert checks["Fig. 5e: ablating EP gives 0.3-0.7 and lowers accuracy by >= 0.15"]
    assert "Fig. 13: XW_QKX^T share >= 0.7 in every head" not in checks  # no q/k bias: holds by construction


def test_pre_study_flagship_report_shows_the_known_failure():
    """The flagship before the recipe study (all parameters decayed): W_E[CLS] = W_pos[0], so EP and PP coincide."""
    model = load_model("simplified-ntot20-n2-10-all-decay")
    rep = mechanism_report(model)
    assert rep["cls_cos"] > 0.99
    a = rep["acc"][PROBE]
    assert a["EP"] == a["PP"]
    assert rep["row_std"]["EP"] == rep["row_std"]["PP"]
    checks = dict(mechanism_checks(rep))
    assert not checks["Fig. 5e: ablating EP gives 0.3-0.7 and lowers accuracy by >= 0.15"]
    # the label-set check is stated relative to an effect: it fails when ablating EP changes nothing
    assert a["EP"][1] >= 0.8
    assert not checks[
        "Fig. 16: the EP ablation removes the side, not the labels (accuracy -0.15 or more, label-set >= 0.8)"
    ]


def test_report_refuses_train_mode():
    with pytest.raises(ValueError, match="eval mode"):
        mechanism_report(_model().train())


def test_ablation_conditions_match_evaluate_ablations():
    model = _model()
    ds = unseen_probe(build_dataset(D))
    rep = mechanism_report(model, build_dataset(D))
    res = evaluate_ablations(model, ds, {"EP": ["EP"]}, splits=[PROBE])
    assert rep["acc"][PROBE]["EP"][0] == pytest.approx(res["conditions"]["EP"]["metrics"][PROBE]["acc"], abs=1e-4)
