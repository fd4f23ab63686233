"""The contrastive loss's false negatives (``TrainConfig.negatives``, the false-negatives study in
docs/fidelity.md): standard CLIP ("all"), identical captions masked out of both directions ("distinct"), or
multi-positive ("shared"); on both engines."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_config

from hooked_clip1d import CLIP1D, DataConfig
from hooked_clip1d.model.clip import clip_loss
from hooked_clip1d.model.functional import same_caption, symmetric_ce
from hooked_clip1d.settings import RECIPES, TrainConfig
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.trainer import Trainer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)  # each two-object caption drawn by 2 images: batches repeat captions
MODES = ("all", "distinct", "shared")


def _tc(**kw) -> TrainConfig:
    base = dict(batch_size=16, eval_every=5, checkpoint_every=10, epochs=4, lr=1e-2)
    base.update(kw)
    return TrainConfig(**base)


def _batch(model: CLIP1D, n: int = 16, seed: int = 0, repeats: bool = True):
    """A training batch of D6 (with repeated captions) or one whose captions are all distinct."""
    from hooked_clip1d import build_dataset

    images, captions = build_dataset(D6).training_pairs()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(images), generator=g)
    if not repeats:  # the first item of each distinct caption
        seen, keep = set(), []
        for i in idx.tolist():
            key = tuple(captions[i].tolist())
            if key not in seen:
                seen.add(key)
                keep.append(i)
        idx = torch.tensor(keep)
    idx = idx[:n]
    return images[idx], captions[idx]


def test_the_three_agree_without_repeated_captions():
    """A batch whose captions are all distinct: the three losses and their gradients are the standard one."""
    model = CLIP1D(tiny_config(n_labels=6), seed=0).eval()  # no dropout: the same forward for each mode
    images, captions = _batch(model, repeats=False)
    assert not (same_caption(captions) & ~torch.eye(len(captions), dtype=torch.bool)).any()
    losses, grads = [], []
    for mode in MODES:
        model.zero_grad()
        loss = model.loss(images, captions, negatives=mode)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    for i in (1, 2):
        torch.testing.assert_close(losses[i], losses[0], atol=1e-6, rtol=1e-6)
        for a, b in zip(grads[i], grads[0], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_distinct_has_no_floor_and_all_does():
    """A model that has learned the data (each image's embedding is its caption's, at temperature 100): the standard
    loss keeps a floor set by the batch's repeated captions (log of their multiplicity), "distinct" goes to 0, and
    "shared" sits at its targets' entropy (a constant) with no gradient."""
    captions = torch.tensor([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4], [7, 8]])
    codes = {c: i for i, c in enumerate(sorted({tuple(r) for r in captions.tolist()}))}
    emb = torch.eye(len(codes))[[codes[tuple(r)] for r in captions.tolist()]]
    cos = emb @ emb.T  # 1 for identical captions, else 0
    logits = (100.0 * cos).requires_grad_()
    floor = (4 / 6) * math.log(2)  # 4 of 6 rows share their caption with one other: log 2, in both directions
    loss_all = clip_loss(logits, captions, "all")
    assert float(loss_all.detach()) == pytest.approx(floor, rel=1e-4)
    assert float(clip_loss(logits, captions, "distinct").detach()) < 1e-30
    shared = clip_loss(logits, captions, "shared")
    assert float(shared.detach()) == pytest.approx(floor, rel=1e-4)  # the targets' entropy
    (g,) = torch.autograd.grad(shared, logits)
    assert float(g.abs().max()) < 1e-30
    (g_all,) = torch.autograd.grad(clip_loss(logits, captions, "all"), logits)
    assert float(g_all.abs().max()) > 0.01  # the standard loss still pushes identical captions apart


def test_padding_and_modes_per_leading_index():
    """The stacked form: each leading index (member) has its own mode; a padded row weighs 0 and no valid row sees
    a padded one; equals each member computed alone on its valid rows."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 6, generator=g) * 5
    caps = torch.randint(1, 3, (3, 6, 2), generator=g)
    valid = torch.ones(3, 6, dtype=torch.bool)
    valid[1, 4:] = False
    same = same_caption(caps)
    shared = torch.tensor([False, True, False])
    same[2] = torch.eye(6, dtype=torch.bool)  # member 2 standard
    got = symmetric_ce(logits, valid, same=same, shared=shared)
    for k, mode in enumerate(("distinct", "shared", "all")):
        n = int(valid[k].sum())
        want = clip_loss(logits[k, :n, :n], caps[k, :n], mode)
        torch.testing.assert_close(got[k], want, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("mode", ["distinct", "shared"])
def test_both_engines_give_the_same_loss_and_gradients(mode):
    """The stacked engine's loss and gradients for a member with a mode equal the hooked model's on the same batch,
    in a group whose other member is standard CLIP."""
    cfg = tiny_config(n_labels=6)
    models = [CLIP1D(cfg, seed=0), CLIP1D(cfg, seed=1)]
    st = StackedCLIP(models, "fast")
    st.set_negatives([mode, "all"])
    st.eval()
    images, captions = _batch(models[0])
    assert (same_caption(captions) & ~torch.eye(len(captions), dtype=torch.bool)).any()
    losses = st.loss(torch.stack([images, images]), torch.stack([captions, captions]), 3)
    losses.sum().backward()
    for k, m in enumerate((mode, "all")):
        models[k].eval()
        models[k].zero_grad()
        ref = models[k].loss(images, captions, negatives=m)
        ref.backward()
        torch.testing.assert_close(losses[k], ref, atol=1e-5, rtol=1e-5)
        for name, p in models[k].named_parameters():
            if name.endswith("attn.b_K"):
                continue  # its true gradient is 0: rounding noise (test_batched explains)
            g = st.to_member(k, name, st.params[name].grad)
            torch.testing.assert_close(g, p.grad, atol=2e-5, rtol=1e-4, msg=f"{m}: {name}")


def test_trainers_agree_and_a_group_mixes_modes(tmp_path):
    """Trainer and BatchedTrainer train a "distinct" run to the same weights, and a group mixing the three modes
    trains each member as it would train alone (the modes are per member: one group key)."""
    cfg = tiny_config(n_labels=6)
    tcs = [_tc(negatives=m, seed=i) for i, m in enumerate(MODES)]
    assert len({group_key(cfg, D6, t) for t in tcs}) == 1
    runs = BatchedTrainer([Member(cfg, D6, t) for t in tcs], tmp_path / "group").run(progress=False)
    for i in (1, 2):
        single = Trainer(cfg, D6, tcs[i], tmp_path / f"single{i}").run(progress=False)
        for k, v in single.model.state_dict().items():
            if not k.endswith("attn.b_K"):
                torch.testing.assert_close(runs[i].model.state_dict()[k], v, atol=2e-4, rtol=1e-3, msg=k)
    assert not torch.equal(
        runs[0].model.state_dict()["vision.embed.W_E"], runs[1].model.state_dict()["vision.embed.W_E"]
    )


def test_validation_and_recipes():
    with pytest.raises((ValueError, TypeError)):  # TypeError: the tests' beartype reads the Literal first
        TrainConfig(negatives="none")
    with pytest.raises(ValueError, match="negatives must be one of"):
        clip_loss(torch.eye(2), torch.tensor([[1], [2]]), "both")
    with pytest.raises(ValueError, match="needs the batch's captions"):
        clip_loss(torch.eye(2), None, "distinct")
    assert TrainConfig.from_dict({"lr": 1e-4}).negatives == "all"  # saved before the field: standard CLIP
    assert TrainConfig.from_dict(TrainConfig(negatives="shared").to_dict()).negatives == "shared"
    arms = {
        r: RECIPES[r].fields()["train"]
        for r in (
            "cls-exempt-init002-distinct",
            "cls-exempt-init002-temp-nodecay-distinct",
            "cls-exempt-init002-temp100-distinct",
            "cls-exempt-init002-temp100-shared",
        )
    }
    assert [a["negatives"] for a in arms.values()] == ["distinct", "distinct", "distinct", "shared"]
    assert RECIPES["cls-exempt-init002"].fields()["train"]["negatives"] == "all"
