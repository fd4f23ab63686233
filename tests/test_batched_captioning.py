"""The batched engine trains captioning models (model.captioning): the stacked captioning loss equals each member's
``CLIP1D`` loss and gradients on every decoder the package builds, and a group of captioners follows the single-run
trainer with matched dropout."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import randomize_biases, tiny_config

from hooked_clip1d import CLIP1D, DataConfig, build_dataset
from hooked_clip1d.model.captioning import caption_scores
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.trainer import TrainConfig, Trainer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)

DECODERS = {
    "simplified": ("simplified", {}),
    "simplified_2_layers": ("simplified", dict(n_layers=2)),
    "rope": ("simplified", dict(positional="rope")),
    "pruned": ("simplified", dict(text_overrides={"pruned_heads": ((0, 1),)})),
    "full": ("full", {}),
    "full_post_ln": ("full", dict(ln_position="post")),
    "full_tied": ("full", dict(n_layers=4, tied_repeats=2)),
}


def _captioner(preset: str, seed: int, **kw) -> CLIP1D:
    cfg = tiny_config(preset, n_labels=6, **kw)
    cfg = dataclasses.replace(cfg, objective="captioning", text=cfg.text.replace(attention_dir="causal"))
    m = CLIP1D(cfg, seed=seed)
    randomize_biases(m, seed + 10)
    return m.eval()


@pytest.mark.parametrize("variant", sorted(DECODERS))
def test_stacked_caption_loss_and_gradients_equal_clip1d(variant):
    preset, kw = DECODERS[variant]
    models = [_captioner(preset, seed, **kw) for seed in (0, 1)]
    st = StackedCLIP(models).eval()
    im, cap = build_dataset(D6).training_pairs()
    gen = torch.Generator().manual_seed(0)
    idx = [torch.randperm(len(im), generator=gen)[:12] for _ in models]
    images, captions = torch.stack([im[i] for i in idx]), torch.stack([cap[i] for i in idx])
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, 9:] = False  # a short batch: member 1's last three rows are padding
    for v in (None, valid):
        st.zero_grad()
        losses = st.loss(images, captions, 3, v)
        losses.sum().backward()
        for k, model in enumerate(models):
            n = 12 if v is None else int(v[k].sum())
            model.zero_grad()
            want = model.loss(images[k, :n], captions[k, :n])
            want.backward()
            torch.testing.assert_close(losses[k], want.detach(), atol=1e-5, rtol=1e-5)
            grads = {name: st.params[name].grad for name in st.names}
            for name, p in model.named_parameters():
                if p.grad is None:  # the contrastive head a captioner never reads: no gradient in either
                    assert grads[name] is None, name
                    continue
                got = st.to_member(k, name, grads[name])
                torch.testing.assert_close(got, p.grad, atol=2e-5, rtol=1e-4, msg=f"{variant}: {name}")


def test_a_group_mixes_no_objectives_and_captioners_share_their_vocabulary():
    contrastive = tiny_config(n_labels=6)
    captioner = dataclasses.replace(contrastive, objective="captioning")
    with pytest.raises(ValueError, match="one objective"):
        StackedCLIP([CLIP1D(contrastive, seed=0), CLIP1D(captioner, seed=0)])
    with pytest.raises(ValueError, match="one n_labels"):
        StackedCLIP([CLIP1D(captioner, seed=0), CLIP1D(tiny_config(n_labels=7, objective="captioning"), seed=0)])
    tc = TrainConfig()
    assert group_key(contrastive, D6, tc) != group_key(captioner, D6, tc)
    seven = dataclasses.replace(tiny_config(n_labels=7), objective="captioning")
    assert group_key(captioner, D6, tc) != group_key(seven, D6.replace(n_labels=7), tc)
    # contrastive keys are those of before: any n_labels in one group
    assert group_key(contrastive, D6, tc) == group_key(tiny_config(n_labels=7), D6.replace(n_labels=7), tc)


@pytest.mark.parametrize("preset", ["simplified", "full"])
def test_captioners_in_a_group_follow_the_single_run_trainer(tmp_path, preset):
    """Two captioners (other seeds, data orders, lr; one ends a short batch every epoch) trained as one group with
    matched dropout end where the single-run trainer ends: weights and every caption score."""
    kw = {} if preset == "simplified" else dict(d_mlp=32, n_layers=2)
    cfg = dataclasses.replace(tiny_config(preset, n_labels=6, **kw), objective="captioning")
    tcs = [
        TrainConfig(batch_size=16, epochs=12, eval_every=6, checkpoint_every=6, seed=0),
        TrainConfig(batch_size=16, epochs=8, eval_every=4, checkpoint_every=4, seed=1, lr=3e-4),
    ]
    members = [Member(cfg, D6.replace(seed=s), tc) for s, tc in zip((0, 5), tcs, strict=True)]
    runs = BatchedTrainer(members, tmp_path / "group", dropout_rng="matched").run(progress=False)
    for i, m in enumerate(members):
        single = Trainer(m.run, tmp_path / f"single{i}").run(progress=False)
        assert runs[i].step == single.step
        a, b = single.model.state_dict(), runs[i].model.state_dict()
        for k in a:
            if k.endswith("attn.b_K"):  # its gradient is rounding noise (tests/test_batched.py)
                continue
            torch.testing.assert_close(b[k], a[k], atol=2e-5, rtol=1e-4, msg=k)
        ds = build_dataset(m.data_cfg)
        imgs = ds.splits["val_unseen"].images
        with torch.no_grad():
            torch.testing.assert_close(
                caption_scores(runs[i].model.eval(), imgs, ds.captions),
                caption_scores(single.model.eval(), imgs, ds.captions),
                atol=2e-4,
                rtol=0,
            )
