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


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
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


# ---- SAE in the loop, SAELens's format refused by name (issue 49 item 2) -----------------------------------------
def _m():
    from hooked_clip1d import CLIP1D, CLIPConfig

    return CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()


def test_spliced_replaces_the_activation_and_puts_everything_back():
    m = _m()
    img = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . 4 . . . . ."])
    sae = SparseAutoencoder(d_in=128, d_sae=16, k=4, seed=1)
    names, before = set(m.vision.hook_dict), m.vision(img)
    with sae.spliced(m.vision, "hook_pooled"):
        out, cache = m.vision.run_with_cache(img)
        assert {f"hook_pooled.hook_sae_{k}" for k in ("input", "acts_pre", "acts_post", "recons", "output")} <= set(
            cache.keys()
        )
        zero = m.vision.run_with_hooks(img, fwd_hooks=[("hook_pooled.hook_sae_acts_post", lambda a, hook: a * 0)])
    assert torch.allclose(out, m.vision.run_with_hooks(img, fwd_hooks=[("hook_pooled", splice_hook(sae))]))
    assert torch.allclose(zero, sae.b_dec.expand_as(zero))  # every feature off: the decoder bias alone
    assert set(m.vision.hook_dict) == names and torch.equal(m.vision(img), before)
    assert not any(p._forward_hooks for p in m.vision.hook_dict.values())
    assert sae.hook_sae_acts_post.name == "hook_sae_acts_post"


def test_spliced_with_the_error_term_changes_outputs_only_through_edited_features():
    m = _m()
    img = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . 4 . . . . ."])
    sae = SparseAutoencoder(d_in=128, d_sae=16, k=4, seed=1)
    with sae.spliced(m, "vision.hook_pooled", error_term=True):
        same = m.vision(img)
        feats = m.vision.run_with_cache(img)[1]["hook_pooled.hook_sae_acts_post"]
        edit = lambda a, hook: a + torch.eye(16)[3] * 2.0  # noqa: E731
        edited = m.vision.run_with_hooks(img, fwd_hooks=[("hook_pooled.hook_sae_acts_post", edit)])
    assert torch.allclose(same, m.vision(img), atol=1e-5)
    assert torch.allclose(edited - same, 2.0 * sae.W_dec[3].detach().expand_as(same), atol=1e-5)
    assert feats.shape == (2, 16)
    with pytest.raises(ValueError, match="'vision.' or 'text.'"):
        with sae.spliced(m, "hook_pooled"):
            pass
    with pytest.raises(ValueError, match="not a hook point"):
        with sae.spliced(m.vision, "hook_nowhere"):
            pass


def test_decoder_norm_rescaling_is_sae_lens_formula():
    sae = SparseAutoencoder(d_in=6, d_sae=10, k=3, seed=0, rescale_acts_by_decoder_norm=True)
    with torch.no_grad():
        sae.W_dec.mul_(torch.linspace(0.5, 2.0, 10)[:, None])
    x = torch.randn(5, 6)
    norm = sae.W_dec.norm(dim=-1)
    pre = ((x - sae.b_dec) @ sae.W_enc + sae.b_enc) * norm
    top = pre.topk(3, dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
    assert torch.allclose(sae.encode(x), acts) and torch.allclose(sae(x), (acts / norm) @ sae.W_dec + sae.b_dec)
    with pytest.raises(ValueError, match="needs k"):
        SparseAutoencoder(4, 8, rescale_acts_by_decoder_norm=True)


@pytest.mark.parametrize(
    ("change", "msg"),
    [
        ({"k": 2.7}, "k must be a positive int, got 2.7"),
        ({"k": True}, "k must be a positive int"),
        ({"k": None}, "k must be a positive int"),
        ({"k": 99}, "k=99 is more than d_sae=8"),
        ({"d_sae": "8"}, "d_sae must be a positive int"),
        ({"rescale_acts_by_decoder_norm": "yes"}, "must be true or false"),
    ],
)
def test_bad_sae_lens_configs_are_refused_by_name(tmp_path, change, msg):
    import json

    folder = SparseAutoencoder(4, 8, k=2).save_sae_lens(tmp_path / "sae")
    cfg = json.loads((folder / "cfg.json").read_text())
    (folder / "cfg.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(ValueError, match=msg):
        SparseAutoencoder.load_sae_lens(folder)


def test_bad_sae_lens_files_are_refused_by_name(tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    sae = SparseAutoencoder(4, 8, k=2)
    folder = sae.save_sae_lens(tmp_path / "sae")
    cfg = json.loads((folder / "cfg.json").read_text())
    (folder / "cfg.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "k"}))
    with pytest.raises(ValueError, match="has no 'k'"):
        SparseAutoencoder.load_sae_lens(folder)
    (folder / "cfg.json").write_text(json.dumps([cfg]))
    with pytest.raises(ValueError, match="a SAELens cfg is a JSON object, got a list"):
        SparseAutoencoder.load_sae_lens(folder)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    state = load_file(folder / "sae_weights.safetensors")
    state["W_dec"][0, 0] = float("nan")
    save_file(state, folder / "sae_weights.safetensors")
    with pytest.raises(ValueError, match="W_dec holds NaN or infinite values"):
        SparseAutoencoder.load_sae_lens(folder)


def test_a_save_that_fails_between_the_two_files_leaves_nothing_that_loads(tmp_path, monkeypatch):
    """A full disk after the weights: the old cfg is gone, so the folder is refused by name, never an old cfg
    beside new weights (another SAE)."""
    import hooked_clip1d.files as files

    old, new = SparseAutoencoder(4, 8, k=2, seed=0), SparseAutoencoder(4, 8, k=3, seed=1)
    folder = old.save_sae_lens(tmp_path / "sae")
    real = files.atomic_write_text

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "atomic_write_text", full)
    with pytest.raises(OSError):
        new.save_sae_lens(folder)
    monkeypatch.setattr(files, "atomic_write_text", real)
    with pytest.raises(FileNotFoundError, match="cfg.json' is missing"):
        SparseAutoencoder.load_sae_lens(folder)
