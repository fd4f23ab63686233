"""The training options of the dynamics study: Adam with coupled L2 decay, a warmup + cosine learning-rate schedule,
embedding dropout and a snapshot schedule, on both engines (the batched engine follows the single-model Trainer)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import randomize_biases, tiny_config

from hooked_clip1d import CLIP1D, DataConfig
from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file
from hooked_clip1d.settings import TrainConfig, dense_schedule
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_ops import keep_mask
from hooked_clip1d.training.trainer import Trainer, make_optimizer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)  # 54 training pairs: 4 steps of 16 an epoch, the last short


def _tc(**kw) -> TrainConfig:
    base = dict(batch_size=16, eval_every=4, checkpoint_every=6, epochs=12)
    base.update(kw)
    return TrainConfig(**base)


def _close(a: CLIP1D, b: CLIP1D, atol: float = 2e-5) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    for k in sa:
        if not k.endswith("attn.b_K"):  # b_K: rounding noise only (test_batched explains)
            torch.testing.assert_close(sb[k], sa[k], atol=atol, rtol=1e-4, msg=k)


@pytest.mark.parametrize(
    "kw",
    [
        dict(optimizer="adam", frozen=(), weight_decay=0.2),  # coupled L2 with a decay mask (the CLS row exempt)
        dict(optimizer="adam", frozen=(), no_decay=(), weight_decay=0.2),  # torch.optim.Adam itself
        dict(lr_schedule="warmup_cosine", warmup_epochs=5, lr=1e-3, frozen=()),  # AdamW, decay follows the lr
        dict(lr_schedule="warmup_cosine", warmup_epochs=3, optimizer="adam", lr=1e-3, no_decay=(), frozen=()),
    ],
)
def test_batched_engine_follows_trainer(tmp_path, kw):
    """Both engines take the same trajectory (matched dropout) with each option; the option changes the result."""
    cfg, tc = tiny_config(), _tc(**kw)
    single = Trainer(cfg, D6, tc, tmp_path / "single").run(progress=False)
    runs = BatchedTrainer(
        [Member(cfg, D6, tc), Member(cfg, D6, _tc(**{**kw, "seed": 1}))], tmp_path / "group", dropout_rng="matched"
    ).run(progress=False)
    _close(single.model, runs[0].model)
    plain = Trainer(cfg, D6, _tc(frozen=kw.get("frozen", ("qk_bias",))), tmp_path / "plain").run(progress=False)
    diff = max(
        (a - b).abs().max().item() for a, b in zip(plain.model.parameters(), single.model.parameters(), strict=True)
    )
    assert diff > 1e-3  # the option did something


def test_coupled_decay_is_in_the_gradient():
    """optimizer='adam' without masks is torch.optim.Adam(weight_decay=w): a parameter with zero loss gradient
    still moves, by Adam's normalised step of w * p (about lr), not AdamW's lr * w * p."""
    model = CLIP1D(tiny_config(), seed=0)
    opt = make_optimizer(model, TrainConfig(optimizer="adam", no_decay=(), frozen=(), lr=0.01, weight_decay=0.2))
    assert type(opt) is torch.optim.Adam and opt.defaults["weight_decay"] == 0.2
    w = model.vision.W_pos
    before = w.detach().clone()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    step = (before - w.detach())[before.abs() > 1e-6] / before.sign()[before.abs() > 1e-6]
    torch.testing.assert_close(step, torch.full_like(step, 0.01), atol=1e-4, rtol=0)  # sign(w) * lr: Adam's step


def test_lr_schedule_values_and_validation():
    cfg = TrainConfig(lr=2.0, epochs=10, lr_schedule="warmup_cosine", warmup_epochs=2)
    lrs = [cfg.lr_at(s, 40, 4) for s in range(40)]
    assert lrs[0] == pytest.approx(2.0 / 8) and lrs[7] == pytest.approx(2.0)  # linear warmup over 8 steps
    assert lrs[8] == pytest.approx(2.0) and lrs[24] == pytest.approx(1.0)  # cosine: half way down at its middle
    assert lrs[-1] == pytest.approx(2.0 * (1 + math.cos(math.pi * 31 / 32)) / 2)
    assert all(a >= b for a, b in zip(lrs[8:], lrs[9:], strict=False))  # decreasing after the warmup
    assert TrainConfig(lr=0.5).lr_at(123, 1000, 10) == 0.5
    with pytest.raises(ValueError, match="warmup_epochs needs lr_schedule='warmup_cosine'"):
        TrainConfig(warmup_epochs=3)
    with pytest.raises(ValueError, match="must be less than epochs"):
        TrainConfig(epochs=5, lr_schedule="warmup_cosine", warmup_epochs=5)
    # a Literal field: jaxtyping's TypeCheckError (a TypeError) under the tests' checking, our ValueError without
    with pytest.raises((TypeError, ValueError), match="optimizer"):
        TrainConfig(optimizer="sgd")
    with pytest.raises((TypeError, ValueError), match="lr_schedule"):
        TrainConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match="snapshot_epochs must be epochs >= 0"):
        TrainConfig(snapshot_epochs=(-1, 5))
    with pytest.raises((TypeError, ValueError), match="snapshot_epochs"):
        TrainConfig(snapshot_epochs="dense")
    assert TrainConfig(snapshot_epochs=(5, 0, 5)).snapshot_epochs == (0, 5)
    assert TrainConfig.from_dict(TrainConfig(snapshot_epochs=(0, 2)).to_dict()).snapshot_epochs == (0, 2)


def test_scheduled_runs_group_only_with_the_same_schedule():
    cfg = tiny_config()
    sched = _tc(lr_schedule="warmup_cosine", warmup_epochs=2)
    assert group_key(cfg, D6, sched) == group_key(cfg, D6, _tc(lr_schedule="warmup_cosine", warmup_epochs=2, seed=4))
    assert group_key(cfg, D6, sched) != group_key(cfg, D6, _tc(lr_schedule="warmup_cosine", warmup_epochs=3))
    assert group_key(cfg, D6, sched) != group_key(cfg, D6.replace(n2=3), sched)  # other steps per epoch
    assert group_key(cfg, D6, sched) != group_key(cfg, D6, _tc())
    assert group_key(cfg, D6, _tc(optimizer="adam")) != group_key(cfg, D6, _tc())
    assert group_key(cfg, D6, _tc(lr=1e-3)) == group_key(cfg, D6, _tc())  # constant lr: per member
    with pytest.raises(ValueError, match="optimizer or learning-rate schedule differ"):
        BatchedTrainer([Member(cfg, D6, _tc()), Member(cfg, D6, _tc(optimizer="adam"))], None)


def test_a_scheduled_run_cannot_be_extended(tmp_path):
    """More epochs would change a cosine schedule already half followed: refused (a constant lr may grow)."""
    cfg = tiny_config()
    tc = _tc(epochs=10, lr_schedule="warmup_cosine", warmup_epochs=2)
    Trainer(cfg, D6, tc, tmp_path / "r").run(progress=False)
    with pytest.raises(CheckpointError, match="train_config.epochs: saved 10, now 20"):
        Trainer(cfg, D6, _tc(epochs=20, lr_schedule="warmup_cosine", warmup_epochs=2), tmp_path / "r", resume=True)
    Trainer(cfg, D6, _tc(epochs=10), tmp_path / "c").run(progress=False)
    assert Trainer(cfg, D6, _tc(epochs=20), tmp_path / "c", resume=True).run(progress=False).epoch == 20


@pytest.mark.parametrize("shared_query", [True, False])
def test_embedding_dropout_drops_the_embeddings_like_the_single_model(shared_query):
    """The stacked forward drops E + P (``embed_dropout``) as the single model does: the single model in eval mode
    with the same mask applied at ``blocks.0.hook_resid_pre`` gives the stacked train-mode output."""
    cfg = tiny_config(embed_dropout=0.4, dropout=0.0)
    model = CLIP1D(cfg, seed=0)
    randomize_biases(model)
    st = StackedCLIP([model], "fast").train()
    B, P, D = 6, cfg.vision.n_ctx, cfg.vision.d_model
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vision.n_labels + 1, (1, B, P), generator=gen)
    tokens[:, :, 0] = cfg.vision.n_labels + 1  # CLS
    readout = 0 if shared_query else torch.zeros(1, B, dtype=torch.long)
    torch.manual_seed(7)
    got = st.tower("vision", tokens, readout)[0]
    torch.manual_seed(7)
    mask = keep_mask((1, B, P, D), 0.6, torch.float32)[0]
    model.eval()
    want = model.vision.run_with_hooks(tokens[0], fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x * mask)])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, st.eval().tower("vision", tokens, readout)[0], atol=1e-3)  # it did drop
    # the single model drops its embeddings in train mode only
    model.train()
    torch.manual_seed(0)
    a = model.vision(tokens[0])
    torch.manual_seed(1)
    assert not torch.allclose(a, model.vision(tokens[0]))
    with pytest.raises(ValueError, match="embed_dropout need dropout_rng='fast'"):
        StackedCLIP([model], "matched")
    with pytest.raises(ValueError, match="not with embed_dropout"):
        tiny_config(embed_dropout=0.1, ablated_terms=("EP",))


def test_snapshot_schedule_on_both_engines(tmp_path):
    """snapshot_epochs keeps the weights at those epochs (0: the initial weights) on both engines, as model files;
    the last one is the final model."""
    cfg = tiny_config()
    tc = _tc(epochs=12, snapshot_epochs=(0, 1, 5, 12), frozen=())
    single = Trainer(cfg, D6, tc, tmp_path / "single").run(progress=False)
    BatchedTrainer([Member(cfg, D6, tc, name="m")], tmp_path / "group", dropout_rng="matched").run(progress=False)
    for d in (tmp_path / "single", tmp_path / "group" / "m"):
        names = sorted(p.name for p in (d / "snapshots").iterdir())
        assert names == [
            "epoch_00000.safetensors",
            "epoch_00001.safetensors",
            "epoch_00005.safetensors",
            "epoch_00012.safetensors",
        ]
    init = CLIP1D(cfg, seed=0)
    for d in (tmp_path / "single", tmp_path / "group" / "m"):
        _close(init, load_model_file(d / "snapshots" / "epoch_00000.safetensors"), atol=0)
        _close(single.model, load_model_file(d / "snapshots" / "epoch_00012.safetensors"))
    _close(
        load_model_file(tmp_path / "single" / "snapshots" / "epoch_00005.safetensors"),
        load_model_file(tmp_path / "group" / "m" / "snapshots" / "epoch_00005.safetensors"),
    )
    meta = json.loads((tmp_path / "single" / "config.json").read_text())["train_config"]
    assert meta["snapshot_epochs"] == [0, 1, 5, 12]
    assert dense_schedule(300) == (0, 1, 2, 5, 10, 20, 50, 100, 200, 300)
