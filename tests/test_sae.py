"""SAEs on hook points: train, report, splice back in; features that carry left/right."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import build_dataset, evaluate, load_model
from hooked_clip1d.analysis.hooks import splice_hook
from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder, collect_activations, train_sae
from hooked_clip1d.analysis.metrics import mirror_images


@pytest.fixture(scope="module")
def flagship():
    m = load_model("simplified-ntot20-n2-10")
    return m, build_dataset(m.data_config)


def test_topk_sae_reconstructs_the_cls_readout_and_keeps_accuracy(flagship):
    m, ds = flagship
    acts = collect_activations(m.vision, "hook_pooled", ds.splits["train"].images)
    sae, rep = train_sae(acts, d_sae=128, k=16, steps=800, seed=0)
    assert rep["l0"] <= 16 and rep["fvu"] < 0.1, rep
    base = evaluate(m, ds, splits=["val_seen"])["val_seen"]["acc"]
    spliced = evaluate(m, ds, splits=["val_seen"], vision_hooks=[("hook_pooled", splice_hook(sae))])["val_seen"]["acc"]
    assert spliced >= base - 0.1
    # a hook point of the SAE itself, as on any HookedRootModule
    _, cache = sae.run_with_cache(acts[:4])
    assert cache["hook_sae_acts_post"].shape == (4, 128)


def test_some_features_differ_between_an_image_and_its_mirror(flagship):
    """Which SAE features carry left/right: those whose activation changes when the image is mirrored."""
    m, ds = flagship
    imgs = ds.splits["train"].images[ds.splits["train"].is_pair]
    acts = collect_activations(m.vision, "hook_pooled", imgs)
    sae, _ = train_sae(acts, d_sae=64, k=8, steps=500, seed=0)
    with torch.no_grad():
        z = sae.encode(acts)
        zm = sae.encode(collect_activations(m.vision, "hook_pooled", mirror_images(imgs)))
    assert (z - zm).abs().mean(0).max() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="k <= d_sae"):
        SparseAutoencoder(4, 8, k=9)
    with pytest.raises(ValueError, match="not finite"):
        train_sae(torch.full((4, 3), float("nan")), 4)
