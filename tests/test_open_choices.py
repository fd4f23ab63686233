"""The paper's two open architecture readings as config fields (docs/configs.md, "Open choices"): weight-tied repeats
(``tied_repeats``: "Mrep repetitions of MB blocks") and post-LN blocks (``ln_position``). Defaults are today's models;
the hooked model and the stacked engine implement both (the stacked equality: tests/test_batched.py, VARIANTS)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import randomize_biases, tiny_config

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, TextConfig, VisionConfig, build_dataset, load_model
from hooked_clip1d.analysis import attention_terms
from hooked_clip1d.model.checkpoint import load_model_file, save_model
from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.functional import layer_norm
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.trainer import TrainConfig, Trainer


def test_defaults_are_todays_models():
    cfg = VisionConfig()
    assert (cfg.tied_repeats, cfg.ln_position, cfg.n_blocks) == (1, "pre", 1)
    full = CLIPConfig.from_preset("full", n_labels=20)
    assert full.vision.n_blocks == 4 and full.vision.final_ln
    old = full.vision.to_dict()
    del old["tied_repeats"], old["ln_position"]  # a config saved before the fields existed
    assert EncoderConfig.from_dict(old) == full.vision
    shipped = load_model("full-ntot20-n2-10")  # the zoo's full model: 4 independent pre-LN blocks, ln_final
    assert shipped.cfg.vision.n_blocks == 4 and shipped.cfg.vision.ln_position == "pre"
    fresh = CLIP1D(shipped.cfg, seed=0).state_dict()
    assert {k: v.shape for k, v in fresh.items()} == {k: v.shape for k, v in shipped.state_dict().items()}


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (dict(ln_position="post"), "needs normalization_type='LN'"),
        (dict(n_layers=3, tied_repeats=2), "dividing n_layers=3"),
        (dict(tied_repeats=0), "tied_repeats: must be a positive int"),
    ],
)
def test_bad_values_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        VisionConfig(**kw)


def _tied_pair(**kw) -> tuple[CLIP1D, CLIP1D]:
    """A tied model (2 blocks applied twice) and an untied one (4 blocks) holding the same weights: its blocks 2, 3
    copies of blocks 0, 1."""
    tied = CLIP1D(tiny_config("full", n_layers=4, tied_repeats=2, **kw), seed=0).eval()
    randomize_biases(tied, 1)
    free = CLIP1D(tiny_config("full", n_layers=4, **kw), seed=0).eval()
    sd = tied.state_dict()
    for k in free.state_dict():
        src = k.replace("blocks.2.", "blocks.0.").replace("blocks.3.", "blocks.1.")
        with torch.no_grad():
            free.get_parameter(k).copy_(sd[src])
    return tied, free


def test_tied_blocks_share_weights_and_equal_the_untied_model_with_copies():
    rng = torch.get_rng_state()
    tied, free = _tied_pair()
    assert torch.equal(rng, torch.get_rng_state())  # the caller's RNG is untouched
    v = tied.vision
    assert v.blocks[2].attn.W_Q is v.blocks[0].attn.W_Q and v.blocks[3].mlp.W_in is v.blocks[1].mlp.W_in
    assert v.blocks[2].ln1.w is v.blocks[0].ln1.w
    assert not any(".blocks.2." in k or ".blocks.3." in k for k in tied.state_dict())
    assert v.W_Q.shape[0] == 4 and torch.equal(v.W_Q[2], v.W_Q[0])  # TL's per-layer stacks list every layer
    # an untied model seeded alike draws its first two blocks exactly as the tied one draws its two
    fresh = CLIP1D(tiny_config("full", n_layers=4, tied_repeats=2), seed=0).state_dict()
    untied = CLIP1D(tiny_config("full", n_layers=4), seed=0).state_dict()
    assert all(torch.equal(t, untied[k]) for k, t in fresh.items())
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    im, cap = (t[:12] for t in ds.training_pairs())
    lt, lf = tied.loss(im, cap), free.loss(im, cap)
    torch.testing.assert_close(lt, lf, rtol=0, atol=1e-6)
    lt.backward()
    lf.backward()
    g = dict(free.named_parameters())
    for name, p in tied.named_parameters():  # each shared weight gets the sum of both applications' gradients
        want = g[name].grad
        if ".blocks.0." in name or ".blocks.1." in name:
            want = want + g[name.replace("blocks.0.", "blocks.2.").replace("blocks.1.", "blocks.3.")].grad
        torch.testing.assert_close(p.grad, want, rtol=1e-4, atol=1e-6, msg=name)


def test_every_layer_of_a_tied_tower_has_its_own_hooks():
    tied, free = _tied_pair()
    img = tied.vision.to_tokens("C 1 . . 2 . . . . . .")
    _, ct = tied.vision.run_with_cache(img)
    _, cf = free.vision.run_with_cache(img)
    assert sorted(ct.keys()) == sorted(cf.keys())
    for k in ct.keys():
        torch.testing.assert_close(ct[k], cf[k], rtol=0, atol=1e-5, msg=k)

    def zero_layer_2(z, hook):
        z[:] = 0.0
        return z

    out = tied.vision.run_with_hooks(img, fwd_hooks=[("blocks.2.attn.hook_z", zero_layer_2)])
    want = free.vision.run_with_hooks(img, fwd_hooks=[("blocks.2.attn.hook_z", zero_layer_2)])
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)  # layer 2 alone, not block 0's first application
    assert not torch.allclose(out, tied.vision(img))


def test_tied_weights_survive_copies_loads_and_functional_call(tmp_path):
    tied, _ = _tied_pair()
    img = tied.vision.to_tokens("C 1 . . 2 . . . . . .")
    c = copy.deepcopy(tied)
    assert c.vision.blocks[2].attn.W_Q is c.vision.blocks[0].attn.W_Q
    save_model(tied, tmp_path / "m.safetensors", DataConfig(n_labels=6, n_heldout=2, n2=2))
    back = load_model_file(tmp_path / "m.safetensors")
    assert torch.equal(back.vision(img), tied.vision(img))
    zeros = {k: torch.zeros_like(v) for k, v in tied.vision.named_parameters()}
    out = torch.func.functional_call(tied.vision, zeros, (img,))
    assert float(out.abs().max()) == 0.0  # the repeats read the substituted weights too


def test_post_ln_blocks_normalise_after_each_residual_add():
    cfg = tiny_config("full", ln_position="post")
    m = CLIP1D(cfg, seed=0).eval()
    randomize_biases(m, 2)
    v = m.vision
    assert not hasattr(v, "ln_final") and not cfg.vision.final_ln
    img = v.to_tokens("C 1 . . 2 . . . . . .")
    out, cache = v.run_with_cache(img)
    for layer in range(cfg.vision.n_layers):
        b = v.blocks[layer]
        mid = layer_norm(cache["resid_pre", layer] + cache["attn_out", layer], b.ln1.w, b.ln1.b, lambda s: s)
        torch.testing.assert_close(cache["resid_mid", layer], mid, rtol=0, atol=1e-5)
        post = layer_norm(cache["resid_mid", layer] + cache["mlp_out", layer], b.ln2.w, b.ln2.b, lambda s: s)
        torch.testing.assert_close(cache["resid_post", layer], post, rtol=0, atol=1e-5)
    torch.testing.assert_close(out, cache["resid_post", cfg.vision.n_layers - 1][:, 0], rtol=0, atol=0)
    # the attention reads the residual itself (no LN before it): layer 0's queries come from E + P
    q = (cache["hook_embed"] + cache["hook_pos_embed"]) @ v.blocks[0].attn.W_Q.permute(1, 0, 2).reshape(16, -1)
    torch.testing.assert_close(cache["q", 0].flatten(-2), q + v.blocks[0].attn.b_Q.flatten(), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="post-LN"):
        attention_terms(v, cache)


def test_post_ln_attention_only_tower():
    cfg = TextConfig(n_labels=6, normalization_type="LN", ln_position="post", n_layers=2, d_model=16, d_head=4)
    enc = CLIP1D(CLIPConfig(vision=VisionConfig(n_labels=6, d_model=16, d_head=4), text=cfg), seed=0).text.eval()
    _, cache = enc.run_with_cache(enc.to_tokens("1 is on the left of 2"))
    b = enc.blocks[1]
    want = layer_norm(cache["resid_pre", 1] + cache["attn_out", 1], b.ln1.w, b.ln1.b, lambda s: s)
    torch.testing.assert_close(cache["resid_post", 1], want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(n_layers=2, tied_repeats=2, ln_position="post"), dict(n_layers=2, tied_repeats=2)])
def test_batched_members_follow_the_trainer_with_the_open_choices(tmp_path, kw):
    """Both choices train on either engine, to the same weights (matched dropout 0.1, 8 epochs of 4 steps)."""
    data = DataConfig(n_labels=6, n_heldout=2, n2=2)
    tc = TrainConfig(batch_size=16, eval_every=4, checkpoint_every=8, epochs=8, seed=3)
    cfg = tiny_config("full", **kw)
    (run,) = BatchedTrainer([Member(cfg, data, tc)], tmp_path / "g", dropout_rng="matched").run(progress=False)
    single = Trainer(cfg, data, tc, tmp_path / "s").run(progress=False)
    a, b = single.model.state_dict(), run.model.state_dict()
    assert a.keys() == b.keys() and not any("blocks.1." in k for k in a)
    for k in a:
        if not k.endswith("attn.b_K"):  # b_K: zero gradient up to rounding (tests/test_batched.py says why)
            torch.testing.assert_close(b[k], a[k], atol=2e-5, rtol=1e-4, msg=k)
