"""Recipe fields (TrainConfig.no_decay / frozen): masks, both engines alike, saved and resumed with the run."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_config
from test_batched import _assert_same_model

from hooked_clip1d import DataConfig, build_dataset
from hooked_clip1d.model.checkpoint import load_model_file
from hooked_clip1d.settings import RECIPES
from hooked_clip1d.sweeps.runner import load_spec
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.param_groups import decay_mask
from hooked_clip1d.training.trainer import TrainConfig, Trainer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)


def _tc(**kw) -> TrainConfig:
    """Every parameter decayed, q/k biases trained (the all-decay recipe) unless ``kw`` says otherwise."""
    base = dict(batch_size=16, eval_every=5, checkpoint_every=10, epochs=30, no_decay=(), frozen=())
    return TrainConfig(**{**base, **kw})


RECIPE_CASES = {
    "cls": dict(no_decay=("cls",)),
    "cls+frozen_qk": dict(no_decay=("cls",), frozen=("qk_bias",)),
    "open_clip": dict(no_decay=("cls", "biases", "norms", "logit_scale")),
    "mingpt": dict(no_decay=("embeddings", "biases", "norms")),
    "cls+qk_decay10": dict(no_decay=("cls",), qk_bias_decay_scale=10.0),
}


WD = dict(weight_decay=2.0, lr=1e-3)  # large, so a wrongly decayed or undecayed tensor is far off
DEFAULT_MEMBER = Member(tiny_config(), D6, _tc(seed=1, **WD))  # the all-decay member of every mixed group


@pytest.fixture(scope="module")
def default_single(tmp_path_factory):
    """``Trainer``'s run of ``DEFAULT_MEMBER`` (the same in every case, so trained once)."""
    m = DEFAULT_MEMBER
    return Trainer(m.model_cfg, m.data_cfg, m.train_cfg, tmp_path_factory.mktemp("default")).run(progress=False)


@pytest.mark.parametrize("case", sorted(RECIPE_CASES))
def test_batched_members_follow_the_trainer_under_each_recipe(tmp_path, case, default_single):
    """A group mixing the recipe with the default (all decayed) ends where two Trainer runs end."""
    member = Member(tiny_config(), D6, _tc(seed=0, **WD, **RECIPE_CASES[case]))
    runs = BatchedTrainer([member, DEFAULT_MEMBER], tmp_path / "g", dropout_rng="matched").run(progress=False)
    single = Trainer(member.model_cfg, member.data_cfg, member.train_cfg, tmp_path / "s0").run(progress=False)
    ds = build_dataset(D6)
    _assert_same_model(single.model, runs[0].model, ds)
    _assert_same_model(default_single.model, runs[1].model, ds)


def test_cls_row_is_exempt_and_others_decay(tmp_path):
    """With no gradient signal (lr tiny vs decay), the exempt CLS row keeps its init; other rows shrink."""
    cfg = tiny_config(init_std=1.0)  # an init large against the updates, so decay dominates
    tc = _tc(epochs=10, lr=1e-2, weight_decay=5.0, no_decay=("cls",))
    tr = Trainer(cfg, D6, tc, tmp_path / "r")
    W0 = tr.model.vision.W_E.detach().clone()
    run = tr.run(progress=False)
    W1 = run.model.vision.W_E.detach()
    cls = cfg.vision.vocab.cls
    other = 1  # label 1
    shrink_cls = W1[cls].norm() / W0[cls].norm()
    shrink_other = W1[other].norm() / W0[other].norm()
    assert shrink_other < 0.5 < shrink_cls  # decay factor (1 - 0.05)^40 steps = 0.13 on decayed rows


def test_frozen_qk_bias_stays_zero_in_both_engines(tmp_path):
    tc = _tc(epochs=5, frozen=("qk_bias",))
    single = Trainer(tiny_config(), D6, tc, tmp_path / "s").run(progress=False).model
    batched = BatchedTrainer([Member(tiny_config(), D6, tc)], tmp_path / "g").run(progress=False)[0].model
    for m in (single, batched):
        for tower in (m.vision, m.text):
            for blk in tower.blocks:
                assert blk.attn.b_Q.abs().max() == 0 and blk.attn.b_K.abs().max() == 0
                assert blk.attn.b_V.abs().max() > 0  # the other biases train


def test_recipe_fields_are_validated_and_round_trip():
    with pytest.raises(ValueError, match="unknown groups \\['clss'\\]"):
        TrainConfig(no_decay=("clss",))
    tc = TrainConfig(no_decay=("logit_scale", "cls", "cls"), frozen=("qk_bias",))
    assert tc.no_decay == ("cls", "logit_scale")  # canonical: sorted tuple
    assert TrainConfig.from_dict(json.loads(json.dumps(tc.to_dict()))) == tc


def test_qk_bias_decay_scale_is_validated_and_round_trips():
    tc = TrainConfig(no_decay=("cls",), frozen=(), qk_bias_decay_scale=10.0)
    assert tc.qk_bias_decay_scale == 10.0 and isinstance(tc.qk_bias_decay_scale, float)
    assert TrainConfig.from_dict(json.loads(json.dumps(tc.to_dict()))) == tc
    old = tc.to_dict()
    del old["qk_bias_decay_scale"]  # saved before the field existed: decayed like every other weight
    assert TrainConfig.from_dict(old).qk_bias_decay_scale == 1.0
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="qk_bias_decay_scale must be a finite number >= 0"):
            TrainConfig(frozen=(), qk_bias_decay_scale=bad)
    with pytest.raises(ValueError, match="frozen=\\('qk_bias',\\) holds them at 0"):
        TrainConfig(frozen=("qk_bias",), qk_bias_decay_scale=10.0)  # no q/k biases to decay
    with pytest.raises(ValueError, match="no_decay 'biases' exempts them"):
        TrainConfig(no_decay=("biases",), frozen=(), qk_bias_decay_scale=10.0)
    assert TrainConfig(qk_bias_decay_scale=10.0).qk_bias_decay_scale == 10.0  # the default trains and decays them


def _same_after_three_steps(a, oa, b, ob) -> None:
    """Train models ``a`` (optimizer ``oa``) and ``b`` (``ob``) three steps on the same batch; same weights after."""
    im, cap = build_dataset(D6).training_pairs()
    for _ in range(3):
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad()
            m.loss(im[:16], cap[:16]).backward()
            o.step()
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        if k.endswith("b_K"):  # zero gradient up to rounding noise, which Adam scales up (see test_batched)
            continue
        torch.testing.assert_close(vb, va, atol=1e-6, rtol=1e-5, msg=k)


def test_qk_bias_decay_scale_equals_torch_adamw_with_a_qk_bias_group():
    """``qk_bias_decay_scale=s`` is torch's AdamW with b_Q and b_K in a parameter group of weight decay w * s."""
    from hooked_clip1d.model.clip import CLIP1D
    from hooked_clip1d.training.trainer import MaskedAdamW

    cfg = tiny_config()
    a, b = CLIP1D(cfg, seed=0).eval(), CLIP1D(cfg, seed=0).eval()  # no dropout: the same function
    qk = [p for n, p in a.named_parameters() if n.endswith(("b_Q", "b_K"))]
    rest = [p for n, p in a.named_parameters() if not n.endswith(("b_Q", "b_K"))]
    oa = torch.optim.AdamW([{"params": rest}, {"params": qk, "weight_decay": 0.5 * 30}], lr=1e-2, weight_decay=0.5)
    ob = MaskedAdamW(b, TrainConfig(lr=1e-2, weight_decay=0.5, no_decay=(), frozen=(), qk_bias_decay_scale=30.0))
    with torch.no_grad():  # b_Q and b_K start at 0, where decay does nothing: give them a value to decay
        for m in (a, b):
            for n, p in m.named_parameters():
                if n.endswith(("b_Q", "b_K")):
                    p.copy_(torch.linspace(-1, 1, p.numel()).view_as(p))
    _same_after_three_steps(a, oa, b, ob)


def test_decay_mask_groups():
    cfg = tiny_config()
    assert decay_mask("vision.blocks.0.attn.b_Q", cfg, ("cls",), qk_bias_scale=30.0) == 30.0
    assert decay_mask("vision.blocks.0.attn.b_V", cfg, ("cls",), qk_bias_scale=30.0) is None
    assert decay_mask("text.blocks.0.attn.b_K", cfg, ("biases",), qk_bias_scale=30.0) == 0.0  # exempt wins
    assert decay_mask("vision.embed.W_E", cfg, ()) is None
    assert decay_mask("text.embed.W_E", cfg, ("cls",)) is None  # CLS is a vision token
    assert decay_mask("vision.pos_embed.W_pos", cfg, ("embeddings",)) == 0.0
    assert decay_mask("vision.blocks.0.attn.W_O", cfg, ("biases", "norms", "logit_scale", "cls")) is None
    assert decay_mask("logit_scale", cfg, ("logit_scale",)) == 0.0


def test_resume_keeps_recipe_and_refuses_another(tmp_path):
    tc = _tc(epochs=10, no_decay=("cls",), keep_snapshots=True)
    Trainer(tiny_config(), D6, tc, tmp_path / "r").run(progress=False)
    snaps = sorted(p.name for p in (tmp_path / "r" / "snapshots").iterdir())
    assert snaps == ["epoch_00010.safetensors"]
    assert load_model_file(tmp_path / "r" / "snapshots" / snaps[0]).cfg == tiny_config().__class__.from_dict(
        load_model_file(tmp_path / "r" / "model.safetensors").cfg.to_dict()
    )
    Trainer(tiny_config(), D6, _tc(epochs=20, no_decay=("cls",)), tmp_path / "r", resume=True).run(progress=False)
    with pytest.raises(Exception, match=r"train_config.no_decay: saved \[.cls.\], now \[\]"):
        Trainer(tiny_config(), D6, _tc(epochs=30), tmp_path / "r", resume=True)


def test_old_train_config_without_recipe_fields_resumes_as_all_decay():
    from hooked_clip1d.training.run_config import comparable_train_config

    old = TrainConfig().to_dict()
    for k in ("no_decay", "frozen", "keep_snapshots"):
        old.pop(k)
    assert comparable_train_config(old) == comparable_train_config(TrainConfig(no_decay=(), frozen=()).to_dict())


def test_sweep_recipe_key_expands_named_recipes():
    spec = load_spec(text='[grid]\nrecipe = ["all-decay", "cls-exempt-no-qk-bias-init002"]\nseed = [0]')
    a, b = spec.runs
    assert a.train_cfg.no_decay == () and a.model_cfg.vision.init_std == 1.0
    assert b.train_cfg.no_decay == ("cls",) and b.train_cfg.frozen == ("qk_bias",)
    assert b.model_cfg.vision.init_std == 0.02 and b.model_cfg.text.init_std == 0.02
    assert b.name == "recipe-cls-exempt-no-qk-bias-init002_seed-0"
    with pytest.raises(ValueError, match="unknown recipe 'nope'"):
        load_spec(text='[grid]\nrecipe = ["nope"]')
    assert set(RECIPES) >= {"all-decay", "cls-exempt"}


def test_masked_step_equals_torch_adamw_when_nothing_is_exempt():
    """MaskedAdamW with an exemption that touches no parameter of the model equals torch's AdamW."""
    torch.manual_seed(0)
    from hooked_clip1d.model.clip import CLIP1D
    from hooked_clip1d.training.trainer import MaskedAdamW

    cfg = tiny_config()  # attention-only: no LayerNorm, so "norms" exempts nothing
    a, b = CLIP1D(cfg, seed=0).eval(), CLIP1D(cfg, seed=0).eval()  # no dropout: the same function
    oa = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.5)
    ob = MaskedAdamW(b, TrainConfig(lr=1e-2, weight_decay=0.5, no_decay=("norms",), frozen=()))
    _same_after_three_steps(a, oa, b, ob)


def test_frozen_cls_pos_is_zero_and_held_in_both_engines(tmp_path):
    """``frozen=("cls_pos",)``: the vision W_pos[0] is set to 0 and stays there; the other rows train; the batched
    engine (in a group with an all-decay member) ends where Trainer ends."""
    tc = _tc(seed=0, frozen=("cls_pos",), **WD)
    member = Member(tiny_config(), D6, tc)
    start = Trainer(member.model_cfg, D6, tc, tmp_path / "init").model.vision.W_pos.detach().clone()
    assert start[0].abs().max() == 0 and start[1:].abs().min() > 0  # zeroed when the optimizer is built
    single = Trainer(member.model_cfg, D6, tc, tmp_path / "s").run(progress=False).model
    runs = BatchedTrainer([member, DEFAULT_MEMBER], tmp_path / "g", dropout_rng="matched").run(progress=False)
    for m in (single, runs[0].model):
        assert m.vision.W_pos[0].abs().max() == 0
        assert (m.vision.W_pos[1:] - start[1:]).abs().max() > 1e-3
        assert m.text.W_pos[0].abs().max() > 0  # text position 0 is a caption word, not CLS
    _assert_same_model(single, runs[0].model, build_dataset(D6))


def test_frozen_cls_pos_needs_learned_positions():
    from hooked_clip1d.model.clip import CLIP1D
    from hooked_clip1d.training.trainer import MaskedAdamW

    model = CLIP1D(tiny_config(vision_overrides={"positional": "rope"}), seed=0)
    with pytest.raises(ValueError, match="'cls_pos'.*positional='rope'"):
        MaskedAdamW(model, TrainConfig(frozen=("cls_pos",)))
