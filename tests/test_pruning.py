"""Head pruning: the config mask, hooks, retraining through the Trainer, and the subset sweep (App. K)."""

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import make_model
from test_batched import _assert_same_model

from hooked_clip1d import TrainConfig, evaluate, load_model
from hooked_clip1d.analysis.hooks import zero_heads_hooks
from hooked_clip1d.model.checkpoint import load_model_file, save_model
from hooked_clip1d.training.retrain import format_sweep, head_subset_sweep, prune_and_retrain, prune_heads
from hooked_clip1d.visualization.heads import plot_pruning


def test_prune_heads_copies_and_masks(simplified_model, images, captions):
    m = simplified_model
    before = {k: v.clone() for k, v in m.state_dict().items()}
    rng = torch.get_rng_state()
    p = prune_heads(m, vision=[(0, 1)], text=[(0, 0)])
    assert torch.equal(torch.get_rng_state(), rng)  # building the copy does not move the global RNG
    assert p.cfg.vision.pruned_heads == ((0, 1),) and p.cfg.text.pruned_heads == ((0, 0),)
    assert m.cfg.vision.pruned_heads == () and not p.training
    for k, v in m.state_dict().items():  # original untouched, weights copied
        assert torch.equal(v, before[k]) and torch.equal(p.state_dict()[k], v)
    _, cache = p.vision.run_with_cache(images)
    assert torch.equal(cache["z", 0][:, :, 1], torch.zeros_like(cache["z", 0][:, :, 1]))
    assert cache["z", 0][:, :, 0].abs().max() > 0
    torch.testing.assert_close(
        p.vision(images), m.vision.run_with_hooks(images, fwd_hooks=zero_heads_hooks(m.vision, [(0, 1)]))
    )
    torch.testing.assert_close(
        p.text(captions), m.text.run_with_hooks(captions, fwd_hooks=zero_heads_hooks(m.text, [(0, 0)]))
    )
    assert (p.vision(images) - m.vision(images)).abs().max() > 1e-4


def test_pruning_accumulates_or_replaces(two_layer_model, images):
    p1 = prune_heads(two_layer_model, vision=[(1, 0)])
    p2 = prune_heads(p1, vision=[(0, 1)])
    assert p2.cfg.vision.pruned_heads == ((0, 1), (1, 0))
    assert prune_heads(p2, vision=[(0, 0)], replace=True).cfg.vision.pruned_heads == ((0, 0),)
    hooks = zero_heads_hooks(two_layer_model.vision, [(0, 1), (1, 0)])
    assert [n for n, _ in hooks] == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    torch.testing.assert_close(p2.vision(images), two_layer_model.vision.run_with_hooks(images, fwd_hooks=hooks))


def test_pruned_heads_survive_save_and_load(simplified_model, images, tmp_path):
    p = prune_heads(simplified_model, vision=[(0, 0)])
    save_model(p, tmp_path / "m.safetensors")
    q = load_model_file(tmp_path / "m.safetensors")
    assert q.cfg.vision.pruned_heads == ((0, 0),)
    torch.testing.assert_close(q.vision(images), p.vision(images))


def test_bad_heads_are_rejected(simplified_model):
    with pytest.raises(ValueError, match="out of range"):
        prune_heads(simplified_model, vision=[(0, 2)])
    with pytest.raises(ValueError, match="out of range"):
        prune_heads(simplified_model, text=[(1, 0)])
    with pytest.raises(TypeError, match="pairs"):
        prune_heads(simplified_model, vision=[(0, 1, 2)])
    with pytest.raises(TypeError, match="pairs"):
        zero_heads_hooks(simplified_model.vision, [(0, True)])
    with pytest.raises(TypeError):  # the whole CLIP1D instead of one tower
        zero_heads_hooks(simplified_model, [(0, 1)])


def test_prune_and_retrain_keeps_the_mask_during_training(data_config, tmp_path):
    """A pruned head gets no gradient, so AdamW only decays its weights: W <- W (1 - lr wd) per step."""
    m = make_model("simplified", seed=4)
    tc = TrainConfig(lr=1e-3, weight_decay=0.2, eval_every=1)
    run = prune_and_retrain(m, [(0, 1)], data_config, 2, tmp_path / "run", train_cfg=tc)
    assert run.epoch == 2 and run.step > 0 and run.model.cfg.vision.pruned_heads == ((0, 1),)
    assert m.cfg.vision.pruned_heads == ()  # the input model is not changed
    decay = (1 - tc.lr * tc.weight_decay) ** run.step
    old, new = m.vision.blocks[0].attn, run.model.vision.blocks[0].attn
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        torch.testing.assert_close(getattr(new, name)[1], getattr(old, name)[1] * decay, atol=1e-6, rtol=1e-5)
        assert not torch.allclose(getattr(new, name)[0], getattr(old, name)[0] * decay, atol=1e-4)
    saved = load_model_file(tmp_path / "run" / "model.safetensors")
    assert saved.cfg.vision.pruned_heads == ((0, 1),)
    again = prune_and_retrain(m, [(0, 1)], data_config, 2, tmp_path / "run", train_cfg=tc, resume=True)
    assert again.epoch == 2 and again.step == run.step
    with pytest.raises(FileExistsError):
        prune_and_retrain(m, [(0, 1)], data_config, 2, tmp_path / "run", train_cfg=tc)
    with pytest.raises(ValueError, match="epochs"):
        prune_and_retrain(m, [(0, 1)], data_config, 0, tmp_path / "run2")
    with pytest.raises(ValueError, match="data_config"):
        prune_and_retrain(m, [(0, 1)], None, 1, tmp_path / "run3")


def test_sweep_enumerates_subsets_before_retraining(two_layer_model, dataset):
    res = head_subset_sweep(two_layer_model, 2, dataset)
    assert len(res["runs"]) == math.comb(4, 2)
    everything = {(0, 0), (0, 1), (1, 0), (1, 1)}
    for r in res["runs"]:
        kept, pruned = {tuple(h) for h in r["kept"]}, {tuple(h) for h in r["pruned"]}
        assert len(kept) == 2 and kept | pruned == everything and not kept & pruned and r["after"] is None
    first = res["runs"][0]
    assert first["before"] == evaluate(prune_heads(two_layer_model, vision=first["pruned"]), dataset)
    assert res["baseline"] == evaluate(two_layer_model, dataset)
    json.dumps(res)
    text = head_subset_sweep(two_layer_model, [1, 3], dataset, tower="text")
    assert [len(r["kept"]) for r in text["runs"]] == [1] * 4 + [3] * 4
    table = format_sweep(res, metric="label_set")
    assert len(table.splitlines()) == 2 + 6 and "L0H0,L0H1" in table
    with pytest.raises(ValueError, match="n_kept"):
        head_subset_sweep(two_layer_model, 5, dataset)
    with pytest.raises(ValueError, match="out_dir"):
        head_subset_sweep(two_layer_model, 1, dataset, epochs=1)
    with pytest.raises(ValueError, match="tower"):
        head_subset_sweep(two_layer_model, 1, dataset, tower="both")


def test_sweep_with_retraining(dataset, tmp_path):
    m = make_model("simplified", seed=7)
    res = head_subset_sweep(m, 1, dataset, epochs=1, out_dir=tmp_path, train_cfg=TrainConfig(eval_every=1))
    assert [r["kept"] for r in res["runs"]] == [[[0, 0]], [[0, 1]]]
    for r in res["runs"]:
        assert r["after"] is not None and set(r["after"]) == set(r["before"])
        saved = load_model_file(tmp_path / f"keep-L0H{r['kept'][0][1]}" / "model.safetensors")
        assert saved.cfg.vision.pruned_heads == tuple(tuple(h) for h in r["pruned"])
    assert json.loads((tmp_path / "sweep.json").read_text()) == res
    again = head_subset_sweep(
        m, 1, dataset, epochs=1, out_dir=tmp_path, train_cfg=TrainConfig(eval_every=1), resume=True
    )
    assert again == res  # finished runs are reused, not retrained
    fig = plot_pruning(res)
    assert len(fig.axes[0].patches) == 2 * 2  # before and after bars


def test_shipped_model_pruning_before_retraining():
    model = load_model("simplified-ntot20-n2-10")
    p = prune_heads(model, vision=[(0, 0), (0, 1), (0, 2)])
    assert p.data_config == model.data_config and p.cfg.vision.pruned_heads == ((0, 0), (0, 1), (0, 2))
    img = model.vision.to_tokens("C . . 17 . . 19 . . . .")
    assert (p.vision(img) - model.vision(img)).abs().max() > 1e-3
    torch.testing.assert_close(
        p.text(model.text.to_tokens("17 is on the left of 19")),
        model.text(model.text.to_tokens("17 is on the left of 19")),
    )


def test_retraining_a_two_layer_model(two_layer_model, data_config, tmp_path):
    run = prune_and_retrain(two_layer_model, [(1, 0)], data_config, 1, tmp_path, text_heads=[(0, 1)])
    saved = load_model_file(tmp_path / "model.safetensors")
    assert saved.cfg.vision.pruned_heads == ((1, 0),) and saved.cfg.text.pruned_heads == ((0, 1),)
    _, cache = run.model.vision.run_with_cache(torch.tensor([[7, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0]]))
    assert cache["z", 1][:, :, 0].abs().max() == 0 and cache["z", 1][:, :, 1].abs().max() > 0


def test_sweep_batched_engine_matches_standard(dataset, tmp_path):
    """engine="batched" retrains every subset in one stacked group: the same models as one Trainer per subset."""
    m = make_model("simplified", seed=7)
    tc = TrainConfig(eval_every=1)
    std = head_subset_sweep(m, 1, dataset, epochs=2, out_dir=tmp_path / "std", train_cfg=tc)
    fast = head_subset_sweep(m, 1, dataset, epochs=2, out_dir=tmp_path / "fast", train_cfg=tc, engine="batched")
    for a, b in zip(std["runs"], fast["runs"], strict=True):
        assert a["kept"] == b["kept"] and a["before"] == b["before"]
        ma = load_model_file(Path(a["out_dir"]) / "model.safetensors")
        mb = load_model_file(Path(b["out_dir"]) / "model.safetensors")
        assert mb.cfg.vision.pruned_heads == tuple(tuple(h) for h in b["pruned"])
        _assert_same_model(ma, mb, dataset)
    again = head_subset_sweep(
        m, 1, dataset, epochs=2, out_dir=tmp_path / "fast", train_cfg=tc, engine="batched", resume=True
    )
    assert again == fast  # finished: loaded, not retrained
    with pytest.raises(ValueError, match="engine"):
        head_subset_sweep(m, 1, dataset, epochs=1, out_dir=tmp_path / "x", engine="ray")
