"""Hooked encoders: hook names/order/shapes, editability, hook lifecycle, weights, TL ActivationCache and patching,
parity with a plain reference forward, input and config validation."""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import jaxtyping
import pytest
import torch
import torch.nn.functional as F
from conftest import MODEL_FIXTURES, ROPE, TINY, make_model, no_hooks_left, tiny_config
from transformer_lens import ActivationCache, FactoredMatrix, HookedRootModule, patching

from hooked_clip1d import (
    CLIP1D,
    CLIPConfig,
    HookedTextEncoder,
    HookedVisionEncoder,
    TextConfig,
    VisionConfig,
)
from hooked_clip1d.model.config import preset

TOWERS = ("vision", "text")


def tower_input(model: CLIP1D, tower: str, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
    return images if tower == "vision" else captions


# ---------------------------------------------------------------------------------------------------------------------
# Hook names, in execution order
# ---------------------------------------------------------------------------------------------------------------------

SIMPLIFIED_NAMES = [
    "hook_embed",
    "hook_pos_embed",
    "blocks.0.hook_resid_pre",
    "blocks.0.attn.hook_q",
    "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v",
    "blocks.0.attn.hook_attn_scores",
    "blocks.0.attn.hook_pattern",
    "blocks.0.attn.hook_z",
    "blocks.0.hook_attn_out",
    "blocks.0.hook_resid_post",
    "hook_pooled",
]


def _full_block(layer: int) -> list[str]:
    b = f"blocks.{layer}."
    return [
        b + "hook_resid_pre",
        b + "ln1.hook_scale",
        b + "ln1.hook_normalized",
        b + "attn.hook_q",
        b + "attn.hook_k",
        b + "attn.hook_v",
        b + "attn.hook_attn_scores",
        b + "attn.hook_pattern",
        b + "attn.hook_z",
        b + "hook_attn_out",
        b + "hook_resid_mid",
        b + "ln2.hook_scale",
        b + "ln2.hook_normalized",
        b + "mlp.hook_pre",
        b + "mlp.hook_post",
        b + "hook_mlp_out",
        b + "hook_resid_post",
    ]


FULL_NAMES = [
    "hook_embed",
    "hook_pos_embed",
    *_full_block(0),
    *_full_block(1),
    "ln_final.hook_scale",
    "ln_final.hook_normalized",
    "hook_pooled",
]

ROPE_NAMES = [
    "hook_embed",
    "blocks.0.hook_resid_pre",
    "blocks.0.attn.hook_q",
    "blocks.0.attn.hook_k",
    "blocks.0.attn.hook_v",
    "blocks.0.attn.hook_rot_q",
    "blocks.0.attn.hook_rot_k",
    "blocks.0.attn.hook_attn_scores",
    "blocks.0.attn.hook_pattern",
    "blocks.0.attn.hook_z",
    "blocks.0.hook_attn_out",
    "blocks.0.hook_resid_post",
    "hook_pooled",
]

TWO_LAYER_NAMES = [
    "hook_embed",
    "hook_pos_embed",
    *[name.replace("blocks.0.", f"blocks.{layer}.") for layer in (0, 1) for name in SIMPLIFIED_NAMES[2:-1]],
    "hook_pooled",
]

EXPECTED_NAMES = {
    "simplified_model": SIMPLIFIED_NAMES,
    "full_model": FULL_NAMES,
    "rope_model": ROPE_NAMES,
    "two_layer_model": TWO_LAYER_NAMES,
}


@pytest.mark.parametrize("tower", TOWERS)
def test_every_block_caches_the_same_hooks(two_layer_model, tower, images, captions):
    """Block 1 of a two-layer tower fires exactly block 0's hooks, in the same order (a block that skipped a hook
    or fired one twice would break TransformerLens's per-layer cache indexing)."""
    enc = getattr(two_layer_model, tower)
    _, cache = enc.run_with_cache(tower_input(two_layer_model, tower, images, captions))
    block = {b: [k.split(".", 2)[2] for k in cache if k.startswith(f"blocks.{b}.")] for b in (0, 1)}
    assert block[0] and block[0] == block[1]
    assert len(block[0]) == len(set(block[0]))


@pytest.mark.parametrize("fixture", MODEL_FIXTURES)
@pytest.mark.parametrize("tower", TOWERS)
def test_cache_names_in_execution_order(request, fixture, tower, images, captions):
    model = request.getfixturevalue(fixture)
    enc = getattr(model, tower)
    _, cache = enc.run_with_cache(tower_input(model, tower, images, captions))
    assert list(cache.keys()) == EXPECTED_NAMES[fixture]


def test_hook_names_lists_every_hook_point(full_model, rope_model):
    names = set(full_model.vision.hook_names())
    assert set(FULL_NAMES) <= names
    inactive = {n for n in names if n.endswith(("hook_result", "q_input", "k_input", "v_input", "attn_in", "mlp_in"))}
    assert names == set(FULL_NAMES) | inactive
    assert full_model.vision.inactive_hook_names() == inactive
    assert "blocks.0.attn.hook_rot_q" in rope_model.text.hook_names()
    assert "hook_pos_embed" not in rope_model.text.hook_names()


# ---------------------------------------------------------------------------------------------------------------------
# Shapes of cached activations (TL conventions)
# ---------------------------------------------------------------------------------------------------------------------


def expected_shape(name: str, cfg: Any, b: int) -> tuple[int, ...]:
    p, dm, h, dh = cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.d_head
    last = name.rsplit(".", 1)[-1]
    if name == "hook_pooled":
        return (b, dm)
    if last in ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k"):
        return (b, p, h, dh)
    if last in ("hook_attn_scores", "hook_pattern"):
        return (b, h, p, p)
    if last == "hook_result" or last.endswith(("_input", "attn_in")):
        return (b, p, h, dm)
    if last == "hook_scale":
        return (b, p, 1)
    if last in ("hook_pre", "hook_post"):
        return (b, p, cfg.d_mlp)
    assert last in (
        "hook_embed",
        "hook_pos_embed",
        "hook_resid_pre",
        "hook_resid_mid",
        "hook_resid_post",
        "hook_attn_out",
        "hook_mlp_out",
        "hook_normalized",
        "hook_mlp_in",
    ), name
    return (b, p, dm)


@pytest.mark.parametrize("tower", TOWERS)
def test_cached_shapes(any_model, tower, images, captions):
    enc = getattr(any_model, tower)
    x = tower_input(any_model, tower, images, captions)
    out, cache = enc.run_with_cache(x)
    b = x.shape[0]
    assert out.shape == (b, enc.cfg.d_model)
    for name, act in cache.items():
        assert tuple(act.shape) == expected_shape(name, enc.cfg, b), name
        assert act.dtype == torch.float32, name
    if "hook_pos_embed" in cache:  # ActivationCache.decompose_resid stacks the two
        assert cache["hook_embed"].shape == cache["hook_pos_embed"].shape


def test_cached_shapes_with_every_flag_on(images):
    model = make_model("full", seed=5)
    enc = model.vision
    enc.set_use_attn_result(True)
    enc.set_use_split_qkv_input(True)
    enc.set_use_hook_mlp_in(True)
    _, cache = enc.run_with_cache(images)
    for name, act in cache.items():
        if name.endswith(("ln1.hook_scale", "ln1.hook_normalized")):  # per-head inputs go through ln1
            continue
        assert tuple(act.shape) == expected_shape(name, enc.cfg, images.shape[0]), name
    for layer in (0, 1):
        for n in ("hook_q_input", "hook_k_input", "hook_v_input", "hook_mlp_in", "attn.hook_result"):
            assert f"blocks.{layer}.{n}" in cache
    assert cache["blocks.0.ln1.hook_scale"].shape == (images.shape[0], 11, 2, 1)


# ---------------------------------------------------------------------------------------------------------------------
# Every hook point that fires can edit its activation
# ---------------------------------------------------------------------------------------------------------------------


def _zero(name: str):
    def hook(act, hook):
        # a zero LayerNorm scale would divide by zero; doubling it is the "no-op-proof" edit there
        return act * 2.0 if name.endswith("hook_scale") else act * 0.0

    return hook


def _noise(name: str):
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def hook(act, hook):
        return act + torch.randn(act.shape, generator=gen)

    return hook


def _inplace(name: str):
    def hook(act, hook):  # returns None: the edit must be made in place
        # a non-uniform scaling: a uniform one (or a shift) could be undone by LayerNorm or by softmax
        act.mul_(torch.linspace(0.2, 1.8, act.shape[-1]))

    return hook


@pytest.mark.parametrize("edit", [_zero, _noise, _inplace], ids=["zero", "noise", "inplace"])
@pytest.mark.parametrize("tower", TOWERS)
def test_every_hook_can_edit_its_activation(tower, edit, images, captions):
    unedited_failures = []
    for fixture in MODEL_FIXTURES:
        model = make_model(**_fixture_kwargs(fixture))  # fresh: an in-place edit could leak into shared weights
        enc = getattr(model, tower)
        x = tower_input(model, tower, images, captions)
        with torch.no_grad():
            out, cache = enc.run_with_cache(x)
            for name in cache:
                try:
                    edited = enc.run_with_hooks(x, fwd_hooks=[(name, edit(name))])
                except Exception as e:  # report every failing hook at once
                    unedited_failures.append(f"{fixture}:{name}: {type(e).__name__}: {e}"[:200])
                    continue
                if torch.allclose(edited, out, atol=1e-6):
                    unedited_failures.append(f"{fixture}:{name}: output unchanged")
            assert no_hooks_left(enc)
            # nothing persistent was changed by the edits
            assert torch.equal(enc(x), out)
    assert not unedited_failures, "\n".join(unedited_failures)


def _fixture_kwargs(fixture: str) -> dict[str, Any]:
    return {
        "simplified_model": dict(preset="simplified", seed=0),
        "full_model": dict(preset="full", seed=1),
        "rope_model": dict(preset="simplified", seed=2, **ROPE),
        "two_layer_model": dict(preset="simplified", seed=3, n_layers=2),
    }[fixture]


def test_inplace_edit_of_pos_embed_does_not_touch_weights():
    model = make_model("simplified", seed=7)
    enc = model.vision
    x = enc.to_tokens("C . 1 . . 2 . . . . .")  # batch of one
    w_pos = enc.W_pos.detach().clone()

    def zero_pos_1(act, hook):
        act[:, 1] = 0.0

    with torch.no_grad():
        enc.run_with_hooks(x, fwd_hooks=[("hook_pos_embed", zero_pos_1)])
    assert torch.equal(enc.W_pos, w_pos), "an in-place edit at hook_pos_embed overwrote the W_pos parameter"


def test_hook_on_one_tower_changes_clip_similarity(simplified_model, images, captions):
    base = simplified_model.similarity(images, captions)
    with simplified_model.vision.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda a, hook: a * 0)]):
        hooked = simplified_model.similarity(images, captions)
    assert not torch.allclose(base, hooked)
    assert torch.allclose(simplified_model.similarity(images, captions), base)
    assert no_hooks_left(simplified_model.vision)


# ---------------------------------------------------------------------------------------------------------------------
# Flags (set_use_*)
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset_name", ["simplified", "full"])
@pytest.mark.parametrize("tower", TOWERS)
def test_use_attn_result(preset_name, tower, images, captions):
    model = make_model(preset_name, seed=11)
    enc = getattr(model, tower)
    x = tower_input(model, tower, images, captions)
    out_before, cache_before = enc.run_with_cache(x)
    assert "blocks.0.attn.hook_result" not in cache_before
    enc.set_use_attn_result(True)
    assert enc.cfg.use_attn_result and enc.blocks[0].attn.cfg.use_attn_result
    out, cache = enc.run_with_cache(x)
    torch.testing.assert_close(out, out_before, atol=1e-5, rtol=1e-5)
    for layer in range(enc.cfg.n_layers):
        result = cache[f"blocks.{layer}.attn.hook_result"]
        assert result.shape == (x.shape[0], enc.cfg.n_ctx, enc.cfg.n_heads, enc.cfg.d_model)
        attn = enc.blocks[layer].attn
        torch.testing.assert_close(result.sum(-2) + attn.b_O, cache[f"blocks.{layer}.hook_attn_out"], atol=1e-5, rtol=0)
        z = cache[f"blocks.{layer}.attn.hook_z"]
        per_head = torch.einsum("bphd,hdm->bphm", z, attn.W_O)
        torch.testing.assert_close(result, per_head, atol=1e-5, rtol=0)
    # the cache computes the same head results with or without hook_result
    torch.testing.assert_close(
        cache.stack_head_results(layer=enc.cfg.n_layers),
        cache_before.stack_head_results(layer=enc.cfg.n_layers),
        atol=1e-5,
        rtol=0,
    )

    # editing one head's result changes the output
    def kill_head0(r, hook):
        r[:, :, 0] = 0
        return r

    assert not torch.allclose(enc.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_result", kill_head0)]), out)
    enc.set_use_attn_result(False)
    _, cache_off = enc.run_with_cache(x)
    assert "blocks.0.attn.hook_result" not in cache_off
    with pytest.raises(ValueError, match="use_attn_result"):
        enc.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_result", kill_head0)])
    assert no_hooks_left(enc)


def test_split_qkv_and_attn_in_and_mlp_in_flags(images):
    model = make_model("full", seed=12)
    enc = model.vision
    out = enc(images)
    for flag, name in (
        ("set_use_split_qkv_input", "blocks.0.hook_k_input"),
        ("set_use_attn_in", "blocks.0.hook_attn_in"),
        ("set_use_hook_mlp_in", "blocks.0.hook_mlp_in"),
    ):
        with pytest.raises(ValueError, match=re.escape(name)):
            enc.run_with_hooks(images, fwd_hooks=[(name, lambda a, hook: a * 0)])
        getattr(enc, flag)(True)
        o2, cache = enc.run_with_cache(images)
        torch.testing.assert_close(o2, out, atol=1e-5, rtol=1e-5)
        assert name in cache
        edited = enc.run_with_hooks(images, fwd_hooks=[(name, lambda a, hook: a * 0)])
        assert not torch.allclose(edited, out)
        getattr(enc, flag)(False)
        assert name not in enc.run_with_cache(images)[1]
    assert no_hooks_left(enc)
    with pytest.raises(ValueError, match="attention-only"):
        make_model("simplified").vision.set_use_hook_mlp_in(True)


# ---------------------------------------------------------------------------------------------------------------------
# Hook errors and hook lifecycle
# ---------------------------------------------------------------------------------------------------------------------


def _identity(act, hook):
    return act


@pytest.mark.parametrize("name", ["blocks.0.attn.hook_qq", "blocks.7.hook_resid_pre", "hook_nothing", "blocks.0.attn"])
@pytest.mark.parametrize("how", ["run_with_hooks", "hooks", "add_hook", "run_with_cache"])
def test_unknown_hook_name_raises_key_error(simplified_model, images, name, how):
    enc = simplified_model.vision
    with pytest.raises(KeyError, match=re.escape(name)):
        if how == "run_with_hooks":
            enc.run_with_hooks(images, fwd_hooks=[(name, _identity)])
        elif how == "hooks":
            with enc.hooks(fwd_hooks=[(name, _identity)]):
                pass
        elif how == "add_hook":
            enc.add_hook(name, _identity)
        else:
            enc.run_with_cache(images, fwd_hooks=[(name, _identity)])
    assert no_hooks_left(enc)


@pytest.mark.parametrize("how", ["run_with_hooks", "hooks", "add_hook"])
def test_hook_result_without_flag_raises_value_error(simplified_model, captions, how):
    enc = simplified_model.text
    name = "blocks.0.attn.hook_result"
    with pytest.raises(ValueError, match=r"use_attn_result"):
        if how == "run_with_hooks":
            enc.run_with_hooks(captions, fwd_hooks=[(name, _identity)])
        elif how == "hooks":
            with enc.hooks(fwd_hooks=[(name, _identity)]):
                pass
        else:
            enc.add_hook(name, _identity)
    assert no_hooks_left(enc)


def test_hooks_removed_after_run_with_hooks_and_run_with_cache(two_layer_model, images):
    enc = two_layer_model.vision
    calls = []

    def spy(act, hook):
        calls.append(hook.name)

    enc.run_with_hooks(images, fwd_hooks=[("blocks.1.attn.hook_z", spy), (lambda n: n.endswith("resid_pre"), spy)])
    assert calls == ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.1.attn.hook_z"]
    assert no_hooks_left(enc)
    enc.run_with_cache(images, fwd_hooks=[("hook_embed", spy)])
    assert no_hooks_left(enc)
    enc(images)
    assert len(calls) == 4


def test_hooks_removed_after_exception_in_hook(full_model, captions):
    enc = full_model.text

    def boom(act, hook):
        raise RuntimeError("boom inside a hook")

    with pytest.raises(RuntimeError, match="boom inside a hook"):
        enc.run_with_hooks(captions, fwd_hooks=[("hook_embed", _identity), ("blocks.1.mlp.hook_post", boom)])
    assert no_hooks_left(enc)
    with pytest.raises(RuntimeError, match="boom"):
        enc.run_with_cache(captions, fwd_hooks=[("blocks.0.hook_resid_mid", boom)])
    assert no_hooks_left(enc)
    with pytest.raises(RuntimeError, match="boom"), enc.hooks(fwd_hooks=[("ln_final.hook_scale", boom)]):
        enc(captions)
    assert no_hooks_left(enc)


def test_hooks_removed_when_a_later_hook_in_the_list_is_invalid(simplified_model, images):
    enc = simplified_model.vision
    with pytest.raises(KeyError):
        enc.run_with_hooks(images, fwd_hooks=[("hook_embed", _identity), ("no_such_hook", _identity)])
    assert no_hooks_left(enc)
    with pytest.raises(ValueError):
        enc.run_with_hooks(images, fwd_hooks=[("hook_embed", _identity), ("blocks.0.attn.hook_result", _identity)])
    assert no_hooks_left(enc)


def test_nested_hook_contexts(simplified_model, images):
    enc = simplified_model.vision
    base = enc(images)
    outer = ("blocks.0.attn.hook_v", lambda a, hook: a * 0.5)
    inner = ("blocks.0.hook_attn_out", lambda a, hook: a * 0.0)
    with enc.hooks(fwd_hooks=[outer]):
        out_outer = enc(images)
        assert not torch.allclose(out_outer, base)
        with enc.hooks(fwd_hooks=[inner]):
            out_both = enc(images)
            assert set(enc.list_hooks()) == {"blocks.0.attn.hook_v", "blocks.0.hook_attn_out"}
        assert set(enc.list_hooks()) == {"blocks.0.attn.hook_v"}
        torch.testing.assert_close(enc(images), out_outer, atol=0, rtol=0)
        # run_with_cache / run_with_hooks inside a context keep the outer hook and remove their own
        _, cache = enc.run_with_cache(images)
        assert set(enc.list_hooks()) == {"blocks.0.attn.hook_v"}
        torch.testing.assert_close(cache["hook_pooled"], out_outer, atol=0, rtol=0)
        enc.run_with_hooks(images, fwd_hooks=[inner])
        assert set(enc.list_hooks()) == {"blocks.0.attn.hook_v"}
    assert no_hooks_left(enc)
    assert not torch.allclose(out_both, out_outer)
    torch.testing.assert_close(enc(images), base, atol=0, rtol=0)


def test_permanent_hooks(images):
    enc = make_model("simplified", seed=21).vision
    base = enc(images)
    enc.add_perma_hook("blocks.0.hook_attn_out", lambda a, hook: a * 0)
    ablated = enc(images)
    assert not torch.allclose(ablated, base)
    enc.run_with_hooks(images, fwd_hooks=[("hook_embed", _identity)])
    enc.reset_hooks()
    torch.testing.assert_close(enc(images), ablated, atol=0, rtol=0)
    enc.reset_hooks(including_permanent=True)
    assert no_hooks_left(enc)
    torch.testing.assert_close(enc(images), base, atol=0, rtol=0)


def test_backward_hooks(images):
    enc = make_model("simplified", seed=22).vision
    grads = {}

    def save(g, hook):
        grads[hook.name] = g.detach().clone()

    enc.add_hook("blocks.0.hook_resid_pre", save, dir="bwd")
    enc(images).sum().backward()
    enc.reset_hooks()
    assert grads["blocks.0.hook_resid_pre"].shape == (images.shape[0], 11, 16)
    assert no_hooks_left(enc)


# ---------------------------------------------------------------------------------------------------------------------
# run_with_cache and the nested-root pitfall
# ---------------------------------------------------------------------------------------------------------------------


def test_run_with_cache_returns_activation_cache(simplified_model, images):
    enc = simplified_model.vision
    out, cache = enc.run_with_cache(images)
    assert isinstance(cache, ActivationCache)
    torch.testing.assert_close(out, enc(images), atol=0, rtol=0)
    torch.testing.assert_close(cache["hook_pooled"], out, atol=0, rtol=0)
    assert cache["pattern", 0].shape == (images.shape[0], 2, 11, 11)
    assert torch.equal(cache["pattern", 0], cache["blocks.0.attn.hook_pattern"])
    assert torch.equal(cache["resid_post", -1], cache["blocks.0.hook_resid_post"])
    _, d = enc.run_with_cache(images, return_cache_object=False)
    assert type(d) is dict and list(d) == SIMPLIFIED_NAMES
    for filt in ("blocks.0.attn.hook_z", ["blocks.0.attn.hook_z"], lambda n: n.endswith("hook_z")):
        _, c = enc.run_with_cache(images, names_filter=filt)
        assert list(c.keys()) == ["blocks.0.attn.hook_z"]
    _, c1 = enc.run_with_cache(images[:1], remove_batch_dim=True)
    assert c1["pattern", 0].shape == (2, 11, 11)
    # fwd_hooks are applied during the cached run
    _, c2 = enc.run_with_cache(images, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda a, hook: a * 0)])
    assert (c2["blocks.0.attn.hook_pattern"] == 0).all()
    assert torch.equal(c2["blocks.0.hook_attn_out"], enc.blocks[0].attn.b_O.expand_as(c2["blocks.0.hook_attn_out"]))
    assert no_hooks_left(enc)


@pytest.mark.parametrize("tower", TOWERS)
def test_no_wrapper_prefix_in_cache_keys(full_model, tower, images, captions):
    assert isinstance(full_model, CLIP1D) and not isinstance(full_model, HookedRootModule)
    enc = getattr(full_model, tower)
    assert isinstance(enc, HookedRootModule)
    _, cache = enc.run_with_cache(tower_input(full_model, tower, images, captions))
    for key in cache.keys():
        assert not key.startswith(("vision.", "text.")), key
        assert key in enc.hook_dict
    for name, hp in enc.hook_dict.items():
        assert hp.name == name


# ---------------------------------------------------------------------------------------------------------------------
# Attention direction
# ---------------------------------------------------------------------------------------------------------------------


def test_text_attention_is_causal(full_model, captions):
    _, cache = full_model.text.run_with_cache(captions)
    above = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    for layer in range(2):
        scores = cache["attn_scores", layer]
        pattern = cache["pattern", layer]
        assert torch.isneginf(scores[..., above]).all()
        assert torch.isfinite(scores[..., ~above]).all()
        assert (pattern[..., above] == 0).all()
        assert (pattern[..., ~above] > 0).all()
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
        # the first caption token can only attend to itself
        assert (pattern[..., 0, 0] == 1).all()


def test_vision_attention_is_bidirectional(full_model, images):
    _, cache = full_model.vision.run_with_cache(images)
    for layer in range(2):
        assert torch.isfinite(cache["attn_scores", layer]).all()
        pattern = cache["pattern", layer]
        assert (pattern > 0).all()
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))


def test_text_output_ignores_tokens_after_first_eot(simplified_model):
    v = simplified_model.text.cfg.vocab
    a = torch.tensor([[1, v.eot, 2, 3], [4, v.is_, v.eot, 0]])
    b = torch.tensor([[1, v.eot, 5, v.eot], [4, v.is_, v.eot, v.eot]])
    # causal attention: what follows the first EOT cannot change the readout (validation would refuse these
    # captions, which the vocabulary cannot produce; the maths is checked with it off)
    text = simplified_model.text
    torch.testing.assert_close(text(a, validate=False), text(b, validate=False), atol=1e-6, rtol=0)
    assert simplified_model.text.readout_positions(a).tolist() == [1, 2]
    with pytest.raises(ValueError, match="not one the vocabulary produces"):
        text(a)


# ---------------------------------------------------------------------------------------------------------------------
# Weights: names, shapes, stacked properties, FactoredMatrix
# ---------------------------------------------------------------------------------------------------------------------


def test_weight_names_and_shapes(full_model, simplified_model, rope_model):
    L, h, dm, dh, dmlp = 2, 2, 16, 4, 32
    for tower, d_vocab, n_ctx in (("vision", 8, 11), ("text", 12, 4)):
        enc = getattr(full_model, tower)
        sd = enc.state_dict()
        expected = {"embed.W_E": (d_vocab, dm), "pos_embed.W_pos": (n_ctx, dm)}
        for layer in range(L):
            b = f"blocks.{layer}."
            expected.update(
                {
                    b + "ln1.w": (dm,),
                    b + "ln1.b": (dm,),
                    b + "attn.W_Q": (h, dm, dh),
                    b + "attn.W_K": (h, dm, dh),
                    b + "attn.W_V": (h, dm, dh),
                    b + "attn.W_O": (h, dh, dm),
                    b + "attn.b_Q": (h, dh),
                    b + "attn.b_K": (h, dh),
                    b + "attn.b_V": (h, dh),
                    b + "attn.b_O": (dm,),
                    b + "ln2.w": (dm,),
                    b + "ln2.b": (dm,),
                    b + "mlp.W_in": (dm, dmlp),
                    b + "mlp.b_in": (dmlp,),
                    b + "mlp.W_out": (dmlp, dm),
                    b + "mlp.b_out": (dm,),
                }
            )
        expected.update({"ln_final.w": (dm,), "ln_final.b": (dm,)})
        assert {k: tuple(v.shape) for k, v in sd.items()} == expected
        assert enc.W_E.shape == (d_vocab, dm) and enc.cfg.d_vocab == d_vocab
        assert enc.W_pos.shape == (n_ctx, dm)
        for name, shape in (
            ("W_Q", (L, h, dm, dh)),
            ("W_K", (L, h, dm, dh)),
            ("W_V", (L, h, dm, dh)),
            ("W_O", (L, h, dh, dm)),
            ("b_Q", (L, h, dh)),
            ("b_K", (L, h, dh)),
            ("b_V", (L, h, dh)),
            ("b_O", (L, dm)),
            ("W_in", (L, dm, dmlp)),
            ("b_in", (L, dmlp)),
            ("W_out", (L, dmlp, dm)),
            ("b_out", (L, dm)),
        ):
            stacked = getattr(enc, name)
            assert stacked.shape == shape, name
            for layer in range(L):
                leaf = {"W_in": "mlp", "b_in": "mlp", "W_out": "mlp", "b_out": "mlp"}.get(name, "attn")
                assert torch.equal(stacked[layer], getattr(getattr(enc.blocks[layer], leaf), name))
        qk, ov = enc.QK, enc.OV
        assert isinstance(qk, FactoredMatrix) and isinstance(ov, FactoredMatrix)
        assert qk.shape == (L, h, dm, dm) and qk.mdim == dh
        torch.testing.assert_close(qk[0].AB, enc.W_Q[0] @ enc.W_K[0].transpose(-2, -1))
        torch.testing.assert_close(qk[1, 0].AB, enc.blocks[1].attn.W_Q[0] @ enc.blocks[1].attn.W_K[0].T)
        torch.testing.assert_close(ov[0].AB, enc.W_V[0] @ enc.W_O[0])
    # attention-only: no MLP weights; rotary: no W_pos
    assert set(simplified_model.vision.state_dict()) == {
        "embed.W_E",
        "pos_embed.W_pos",
        *(f"blocks.0.attn.{n}" for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")),
    }
    with pytest.raises(AttributeError, match="W_in"):
        _ = simplified_model.vision.W_in
    with pytest.raises(AttributeError, match="W_pos"):
        _ = rope_model.vision.W_pos
    assert not any("pos_embed" in k for k in rope_model.text.state_dict())
    # the CLIP wrapper
    keys = set(full_model.state_dict())
    assert {"W_proj", "logit_scale"} <= keys
    assert all(k.startswith(("vision.", "text.")) for k in keys - {"W_proj", "logit_scale"})
    assert full_model.W_proj.shape == (16, 16)


def test_accumulated_bias(full_model):
    enc = full_model.vision
    b_O, b_out = enc.b_O, enc.b_out
    torch.testing.assert_close(enc.accumulated_bias(0), torch.zeros(16))
    torch.testing.assert_close(enc.accumulated_bias(2), b_O.sum(0) + b_out.sum(0))
    torch.testing.assert_close(enc.accumulated_bias(2, include_mlp_biases=False), b_O.sum(0))
    torch.testing.assert_close(enc.accumulated_bias(1, mlp_input=True), b_O[0] + b_out[0] + b_O[1])


def test_seeded_init_is_reproducible():
    a = CLIP1D(tiny_config("full"), seed=4)
    b = CLIP1D(tiny_config("full"), seed=4)
    c = CLIP1D(tiny_config("full"), seed=5)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    assert not torch.equal(a.vision.W_E, c.vision.W_E)
    assert not torch.equal(a.vision.W_E, a.text.W_E[:8])  # the towers are seeded differently


# ---------------------------------------------------------------------------------------------------------------------
# Parity with a plain reference forward
# ---------------------------------------------------------------------------------------------------------------------


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = x - x.mean(-1, keepdim=True)
    return x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * w + b


def _rope(x: torch.Tensor, base: float, rd: int) -> torch.Tensor:
    """NeoX-style RoPE on [b, p, h, d]: rotate the pair (i, i + rd/2) of the first rd dims by pos * base^(-2i/rd)."""
    p = x.shape[1]
    inv_freq = 1.0 / base ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = torch.arange(p, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [p, rd/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2, rest = x[..., : rd // 2], x[..., rd // 2 : rd], x[..., rd:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def reference_forward(enc: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(final residual [b, p, dm], pooled [b, dm]) computed in float64 from the weights alone."""
    cfg = enc.cfg
    W = {k: v.detach().double() for k, v in enc.state_dict().items()}
    b, p = tokens.shape
    ln = cfg.normalization_type == "LN"
    x = W["embed.W_E"][tokens]
    if cfg.positional == "learned":
        x = x + W["pos_embed.W_pos"][:p][None]
    for layer in range(cfg.n_layers):
        pre = f"blocks.{layer}."
        a = _ln(x, W[pre + "ln1.w"], W[pre + "ln1.b"]) if ln else x
        heads = []
        for hd in range(cfg.n_heads):
            q = a @ W[pre + "attn.W_Q"][hd] + W[pre + "attn.b_Q"][hd]  # [b, p, dh]
            k = a @ W[pre + "attn.W_K"][hd] + W[pre + "attn.b_K"][hd]
            v = a @ W[pre + "attn.W_V"][hd] + W[pre + "attn.b_V"][hd]
            if cfg.positional == "rope":
                rd = cfg.rotary_dim or cfg.d_head
                q = _rope(q[:, :, None], cfg.rotary_base, rd)[:, :, 0]
                k = _rope(k[:, :, None], cfg.rotary_base, rd)[:, :, 0]
            scores = q @ k.transpose(-1, -2) / math.sqrt(cfg.d_head)  # [b, q, k]
            if cfg.attention_dir == "causal":
                scores = scores.masked_fill(torch.triu(torch.ones(p, p, dtype=torch.bool), 1), float("-inf"))
            z = scores.softmax(-1) @ v
            heads.append(z @ W[pre + "attn.W_O"][hd])
        x = x + sum(heads) + W[pre + "attn.b_O"]
        if not cfg.attn_only:
            m = _ln(x, W[pre + "ln2.w"], W[pre + "ln2.b"]) if ln else x
            hidden = F.gelu(m @ W[pre + "mlp.W_in"] + W[pre + "mlp.b_in"])
            x = x + hidden @ W[pre + "mlp.W_out"] + W[pre + "mlp.b_out"]
    if ln:
        x = _ln(x, W["ln_final.w"], W["ln_final.b"])
    if isinstance(enc, HookedVisionEncoder):
        pos = torch.zeros(b, dtype=torch.long)
    else:
        is_eot = tokens == cfg.vocab.eot
        pos = torch.tensor([int(row.nonzero()[0, 0]) for row in is_eot])
    return x, x[torch.arange(b), pos]


PARITY_MODELS = {
    "simplified": dict(preset="simplified", seed=30),
    "full": dict(preset="full", seed=31),
    "rope": dict(preset="simplified", seed=32, **ROPE),
    "full_rope": dict(preset="full", seed=33, **ROPE),
    "rope_partial": dict(preset="simplified", seed=34, rotary_dim=2, **ROPE),
    "rope_base_100": dict(preset="simplified", seed=35, rotary_base=100, **ROPE),
    "two_layer": dict(preset="simplified", seed=36, n_layers=2),
    "no_pos": dict(preset="full", seed=37, positional="none"),
}


@pytest.mark.parametrize("variant", list(PARITY_MODELS))
@pytest.mark.parametrize("tower", TOWERS)
def test_parity_with_reference_forward(variant, tower, images):
    model = make_model(**PARITY_MODELS[variant])
    enc = getattr(model, tower)
    if tower == "vision":
        x = images
    else:
        v = enc.cfg.vocab
        # includes captions whose first EOT is not the last token: the vocabulary cannot produce them, so validation
        # refuses them (tests/test_hook_checks.py); the maths is compared with validation off
        x = torch.tensor(
            [
                v.left_caption(1, 2).tolist(),
                v.right_caption(3, 4).tolist(),
                v.single_caption(6).tolist(),
                [5, v.eot, 0, 0],
                [v.eot, v.eot, v.eot, v.eot],
                [2, v.is_, v.eot, 3],
            ]
        )
    ref_resid, ref_pooled = reference_forward(enc, x)
    with torch.no_grad():
        pooled = enc(x, validate=False)
        resid = enc(x, return_type="resid", validate=False)
    torch.testing.assert_close(pooled.double(), ref_pooled, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(resid.double(), ref_resid, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tower", TOWERS)
def test_return_type_none_for_caching_only(simplified_model, tower, images, captions):
    # forward documents return_type=None -> nothing (for caching only)
    enc = getattr(simplified_model, tower)
    x = tower_input(simplified_model, tower, images, captions)
    assert enc(x, return_type=None) is None
    out, cache = enc.run_with_cache(x, return_type=None)
    assert out is None
    assert "hook_pooled" in cache


def test_stop_at_layer(two_layer_model, full_model, images):
    for model in (two_layer_model, full_model):
        enc = model.vision
        _, cache = enc.run_with_cache(images)
        torch.testing.assert_close(enc(images, stop_at_layer=0), cache["hook_embed"] + cache["hook_pos_embed"])
        torch.testing.assert_close(enc(images, stop_at_layer=1), cache["blocks.1.hook_resid_pre"], atol=0, rtol=0)


def test_clip_forward_matches_parts(simplified_model, images, captions):
    m = simplified_model
    img = m.vision(images)
    txt = m.text(captions) @ m.W_proj
    cos = F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).T
    torch.testing.assert_close(m.encode_image(images), img)
    torch.testing.assert_close(m.encode_text(captions), txt)
    torch.testing.assert_close(m.similarity(images, captions), cos)
    logits = m(images, captions)
    torch.testing.assert_close(logits, m.logit_scale.exp() * cos)
    model = make_model("simplified", seed=40)
    with torch.no_grad():
        model.logit_scale.fill_(10.0)
    assert model.temperature_scale().item() == pytest.approx(100.0)


# ---------------------------------------------------------------------------------------------------------------------
# ActivationCache tools
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tower", TOWERS)
def test_activation_cache_decompositions(any_model, tower, images, captions):
    enc = getattr(any_model, tower)
    cfg = enc.cfg
    L = cfg.n_layers
    x = tower_input(any_model, tower, images, captions)
    _, cache = enc.run_with_cache(x)
    final = cache[f"blocks.{L - 1}.hook_resid_post"]

    stack, labels = cache.decompose_resid(return_labels=True)
    expected_labels = ["embed"] + (["pos_embed"] if cfg.positional == "learned" else [])
    for layer in range(L):
        expected_labels += [f"{layer}_attn_out"] + ([] if cfg.attn_only else [f"{layer}_mlp_out"])
    assert labels == expected_labels
    torch.testing.assert_close(stack.sum(0), final, atol=1e-4, rtol=0)
    torch.testing.assert_close(cache.decompose_resid(layer=-1).sum(0), final, atol=1e-4, rtol=0)

    heads, head_labels = cache.stack_head_results(layer=L, return_labels=True)
    assert head_labels == [f"L{layer}H{h}" for layer in range(L) for h in range(cfg.n_heads)]
    recon = heads.sum(0) + enc.accumulated_bias(L, include_mlp_biases=False) + cache["hook_embed"]
    if cfg.positional == "learned":
        recon = recon + cache["hook_pos_embed"]
    if not cfg.attn_only:
        recon = recon + cache.stack_activation("mlp_out").sum(0)
    torch.testing.assert_close(recon, final, atol=1e-4, rtol=0)

    acc, acc_labels = cache.accumulated_resid(return_labels=True)
    assert acc.shape == (L + 1, *final.shape)
    assert acc_labels[-1] == "final_post"
    torch.testing.assert_close(acc[-1], final, atol=0, rtol=0)
    torch.testing.assert_close(acc[0], cache["blocks.0.hook_resid_pre"], atol=0, rtol=0)

    full_stack = cache.get_full_resid_decomposition(expand_neurons=False)
    torch.testing.assert_close(full_stack.sum(0), final, atol=1e-4, rtol=0)

    assert cache.stack_activation("pattern").shape == (L, x.shape[0], cfg.n_heads, cfg.n_ctx, cfg.n_ctx)
    if cfg.normalization_type == "LN":
        # LN applied to the stack: its sum, scaled by ln_final.w and shifted by ln_final.b, is ln_final's output
        normed = cache.apply_ln_to_stack(stack, layer=None)
        assert normed.shape == stack.shape
        torch.testing.assert_close(
            normed.sum(0) * enc.ln_final.w + enc.ln_final.b, cache["ln_final.hook_normalized"], atol=1e-4, rtol=0
        )
        cache.apply_ln_to_stack(heads, layer=L - 1)
        cache.accumulated_resid(apply_ln=True)
        cache.stack_head_results(layer=L, apply_ln=True)
        neurons = cache.stack_neuron_results(layer=L)
        assert neurons.shape[0] == L * cfg.d_mlp


# ---------------------------------------------------------------------------------------------------------------------
# transformer_lens.patching
# ---------------------------------------------------------------------------------------------------------------------


def _swap_objects(imgs: torch.Tensor) -> torch.Tensor:
    """Corrupt two-object images by swapping the two labels (positions stay)."""
    out = imgs.clone()
    for row in out:
        idx = (row[1:] > 0).nonzero()[:, 0] + 1
        row[idx] = row[idx.flip(0)]
    return out


@pytest.mark.parametrize("tower", TOWERS)
def test_patching_helpers_run(any_model, tower, dataset):
    enc = getattr(any_model, tower)
    cfg = enc.cfg
    L, H, P = cfg.n_layers, cfg.n_heads, cfg.n_ctx
    if tower == "vision":
        clean = dataset.splits["val_seen"].images[:4]
        corrupted = _swap_objects(clean)
    else:
        clean = dataset.captions[6:10]  # pair captions "X is on the left of Y"
        corrupted = clean[:, [2, 1, 0, 3]]  # "Y is on the left of X"
    assert not torch.equal(clean, corrupted)
    clean_out, clean_cache = enc.run_with_cache(clean)
    corrupted_out = enc(corrupted)

    def metric(out: torch.Tensor) -> torch.Tensor:
        return (out - clean_out).pow(2).sum()

    baseline = metric(corrupted_out)
    assert baseline > 0
    res = patching.get_act_patch_resid_pre(enc, corrupted, clean_cache, metric)
    assert res.shape == (L, P)
    # at layer 0 the residual of a position is its own embedding: patching a position whose token is the same in
    # the clean and corrupted inputs changes nothing; patching a differing one does
    same = (clean == corrupted).all(0)
    torch.testing.assert_close(res[0, same], baseline.expand(int(same.sum())), atol=1e-5, rtol=1e-5)
    differs = (clean != corrupted).any(0)
    assert (res[0, differs] != baseline).all()

    assert patching.get_act_patch_attn_head_out_all_pos(enc, corrupted, clean_cache, metric).shape == (L, H)
    assert patching.get_act_patch_attn_out(enc, corrupted, clean_cache, metric).shape == (L, P)
    assert patching.get_act_patch_attn_head_all_pos_every(enc, corrupted, clean_cache, metric).shape == (5, L, H)
    assert patching.get_act_patch_attn_head_pattern_by_pos(enc, corrupted, clean_cache, metric).shape == (L, H, P)
    if not cfg.attn_only:
        assert patching.get_act_patch_block_every(enc, corrupted, clean_cache, metric).shape == (3, L, P)
    # patching the last residual (every position) restores the clean output
    hooks = [(f"blocks.{L - 1}.hook_resid_post", lambda a, hook: clean_cache[hook.name])]
    torch.testing.assert_close(enc.run_with_hooks(corrupted, fwd_hooks=hooks), clean_out, atol=1e-5, rtol=0)
    assert no_hooks_left(enc)


# ---------------------------------------------------------------------------------------------------------------------
# Bad inputs to every public entry point
# ---------------------------------------------------------------------------------------------------------------------


def _good_images(model: CLIP1D) -> torch.Tensor:
    return model.vision.to_tokens(["C . 1 . . 2 . . . . .", "C 3 . . . . . . . . ."])


def _good_captions(model: CLIP1D) -> torch.Tensor:
    return model.text.to_tokens(["1 is on the left of 2", "3 is in the image"])


def _bad_images(model: CLIP1D) -> dict[str, tuple[torch.Tensor, str]]:
    g = _good_images(model)
    cls = model.cfg.vision.vocab.cls
    too_big = g.clone()
    too_big[0, 3] = 99
    negative = g.clone()
    negative[1, 4] = -1
    cls_inside = g.clone()
    cls_inside[1, 5] = cls
    return {
        "too_big": (too_big, r"token id 99 is out of range"),
        "negative": (negative, r"token id -1 is out of range"),
        "one_past_vocab": (torch.where(g == cls, g, g * 0 + cls + 1), r"out of range"),
        "too_long": (torch.cat([g, g[:, 1:2]], 1), r"length|n_ctx|shape"),
        "too_short": (g[:, :-1], r"length|n_ctx|shape"),
        "float": (g.float(), r"dtype|f32|float|Int\["),
        "bool": (g.bool(), r"dtype|bool|Int\["),
        "one_d": (g[0], r"shape|batch"),
        "three_d": (g[None], r"shape|batch"),
        "empty": (g[:0], r"empty"),
        "no_cls": (torch.cat([g[:, 1:], g[:, :1]], 1), r"CLS"),
        "cls_inside": (cls_inside, r"CLS"),
    }


def _bad_captions(model: CLIP1D) -> dict[str, tuple[torch.Tensor, str]]:
    g = _good_captions(model)
    eot = model.cfg.text.vocab.eot
    return {
        "too_big": (torch.where(g == eot, g, g * 0 + eot + 1), r"token id 12 is out of range"),
        "negative": (torch.where(g == eot, g, g * 0 - 3), r"token id -3 is out of range"),
        "too_long": (torch.cat([g, g[:, :1]], 1), r"length|n_ctx|shape|batch 4"),
        "too_short": (g[:, 1:], r"length|n_ctx|shape|batch 4"),
        "float": (g.float(), r"dtype|f32|float|Int\["),
        "bool": (g.bool(), r"dtype|bool|Int\["),
        "one_d": (g[0], r"shape|batch"),
        "empty": (g[:0], r"empty"),
        "no_eot": (torch.where(g == eot, g * 0 + 1, g), r"EOT"),
    }


IMAGE_CASES = [
    "too_big",
    "negative",
    "one_past_vocab",
    "too_long",
    "too_short",
    "float",
    "bool",
    "one_d",
    "three_d",
    "empty",
    "no_cls",
    "cls_inside",
]
CAPTION_CASES = ["too_big", "negative", "too_long", "too_short", "float", "bool", "one_d", "empty", "no_eot"]


def _check_bad(fn, pattern: str) -> None:
    # Our validation raises ValueError/TypeError; jaxtyping's runtime check (pytest config) raises
    # jaxtyping.TypeCheckError (a TypeError) naming the parameter for annotated dtype/rank/length violations.
    with pytest.raises((TypeError, ValueError)) as info:
        fn()
    msg = str(info.value)
    if isinstance(info.value, jaxtyping.TypeCheckError):  # names the offending parameter and its expected type
        assert re.search(r"typechecking parameter '(images|captions|tokens)'", msg), msg
    else:
        assert re.search(pattern, msg), f"{type(info.value).__name__}: {msg}"


@pytest.mark.parametrize("case", IMAGE_CASES)
@pytest.mark.parametrize("entry", ["encode_image", "similarity", "forward", "vision", "vision.to_tokens", "cache"])
def test_bad_images_raise(simplified_model, case, entry):
    m = simplified_model
    bad, pattern = _bad_images(m)[case]
    caps = _good_captions(m)
    if entry == "vision.to_tokens" and case == "one_d":
        assert m.vision.to_tokens(bad[:11]).shape == (1, 11)  # a single image is accepted and batched
        return
    fn = {
        "encode_image": lambda: m.encode_image(bad),
        "similarity": lambda: m.similarity(bad, caps[: max(len(bad), 1)] if bad.ndim == 2 else caps),
        "forward": lambda: m(bad, caps[: len(bad)] if bad.ndim == 2 else caps),
        "vision": lambda: m.vision(bad),
        "vision.to_tokens": lambda: m.vision.to_tokens(bad),
        "cache": lambda: m.vision.run_with_cache(bad),
    }[entry]
    _check_bad(fn, pattern)
    assert no_hooks_left(m.vision)


@pytest.mark.parametrize("case", CAPTION_CASES)
@pytest.mark.parametrize("entry", ["encode_text", "similarity", "text", "text.to_tokens"])
def test_bad_captions_raise(simplified_model, case, entry):
    m = simplified_model
    bad, pattern = _bad_captions(m)[case]
    imgs = _good_images(m)
    if entry == "text.to_tokens" and case == "one_d":
        assert m.text.to_tokens(bad).shape == (1, 4)
        return
    fn = {
        "encode_text": lambda: m.encode_text(bad),
        "similarity": lambda: m.similarity(imgs, bad),
        "text": lambda: m.text(bad),
        "text.to_tokens": lambda: m.text.to_tokens(bad),
    }[entry]
    _check_bad(fn, pattern)


def test_non_tensor_inputs_raise_type_error(simplified_model):
    m = simplified_model
    for fn in (
        lambda: m.encode_image([[7] + [0] * 10]),
        lambda: m.encode_text("1 is in the image"),
        lambda: m.vision.validate_tokens([[7] + [0] * 10]),
        lambda: m.text.validate_tokens(None),
    ):
        with pytest.raises(TypeError):
            fn()


@pytest.mark.parametrize(
    ("tower", "arg", "pattern"),
    [
        pytest.param("vision", "C . 1", r"length", id="vision-short-string"),
        pytest.param("vision", ". 1 . . 2 . . . . . .", r"'C'", id="vision-no-cls"),
        pytest.param("vision", "C . 9 . . . . . . . .", r"outside 1\.\.6", id="vision-bad-label"),
        pytest.param("vision", [], r"empty|no images|at least one", id="vision-empty-list"),
        pytest.param("vision", ["C . 1 . . 2 . . . . .", "C . 1"], r"length", id="vision-mixed-lengths"),
        pytest.param("text", "17 is on the left of 19", r"cannot parse caption", id="text-bad-label"),
        pytest.param("text", "1 is left of 2", r"cannot parse caption", id="text-bad-phrase"),
        pytest.param("text", [], r"empty|no captions|at least one", id="text-empty-list"),
        pytest.param("text", torch.zeros(2, 3, 4, dtype=torch.long), r"shape|batch", id="text-3d-tensor"),
    ],
)
def test_to_tokens_bad_inputs(simplified_model, tower, arg, pattern):
    _check_bad(lambda: getattr(simplified_model, tower).to_tokens(arg), pattern)


def test_to_tokens_good_inputs(simplified_model):
    v, t = simplified_model.vision, simplified_model.text
    imgs = v.to_tokens(["C . 1 . . 2 . . . . .", "C 3 . . . . . . . . ."])
    assert imgs.shape == (2, 11) and imgs.dtype == torch.long
    assert torch.equal(v.to_tokens("C . 1 . . 2 . . . . ."), imgs[:1])
    assert torch.equal(v.to_tokens(imgs), imgs)
    caps = t.to_tokens(["1 is on the left of 2", "2 is on the right of 1", "5 is in the image"])
    vocab = t.cfg.vocab
    assert caps.tolist() == [
        vocab.left_caption(1, 2).tolist(),
        vocab.right_caption(1, 2).tolist(),
        vocab.single_caption(5).tolist(),
    ]
    assert v.token_strs(imgs[0])[:3] == ["[CLS]", "·", "1"]
    assert t.token_strs(caps[0]) == ["1", "is on the left of", "2", "<eot>"]


# ---------------------------------------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [VisionConfig, TextConfig])
@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(n_labels=0), "n_labels"),
        (dict(n_layers=0), "n_layers"),
        (dict(n_heads=-1), "n_heads"),
        (dict(d_head=0), "d_head"),
        (dict(d_model=True), "d_model"),
        (dict(d_model=16.0), "d_model"),
        (dict(positional="absolute"), "positional"),
        (dict(normalization_type="RMS"), "normalization_type"),
        (dict(attention_dir="sideways"), "attention_dir"),
        (dict(d_mlp=32), "d_mlp"),  # attn_only=True by default
        (dict(attn_only=False), "d_mlp"),
        (dict(attn_only=False, d_mlp=0), "d_mlp"),
        (dict(use_hook_mlp_in=True), "use_hook_mlp_in"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(positional="rope", rotary_dim=3), "rotary_dim"),
        (dict(positional="rope", d_head=4, rotary_dim=8), "rotary_dim"),
        (dict(positional="rope", rotary_dim=0), "rotary_dim"),
        (dict(positional="rope", rotary_base=0), "rotary_base"),
        (dict(positional="rope", rotary_base=-10), "rotary_base"),
        (dict(d_image=1, n_ctx=2), "d_image"),
        (dict(n_ctx=0), "n_ctx"),
    ],
)
def test_encoder_config_rejects_bad_fields(cls, kw, field):
    with pytest.raises((ValueError, TypeError), match=rf"\b{field}\b"):
        cls(**kw)


def test_vision_n_ctx_must_match_d_image():
    with pytest.raises(ValueError, match="n_ctx"):
        VisionConfig(n_ctx=5)
    assert VisionConfig(d_image=6, n_ctx=7).n_ctx == 7
    assert TextConfig(d_image=6).n_ctx == 4  # text ignores d_image


def test_encoder_config_derived_fields_and_round_trip():
    v = preset("full", VisionConfig, n_labels=6)
    t = preset("simplified", TextConfig, n_labels=6, positional="rope")
    assert (v.d_vocab, v.n_ctx, v.attention_dir, v.tower) == (8, 11, "bidirectional", "vision")
    assert (t.d_vocab, t.n_ctx, t.attention_dir, t.tower) == (12, 4, "causal", "text")
    assert t.positional_embedding_type == "rotary" and v.positional_embedding_type == "standard"
    assert t.rotary_dim_ == t.d_head and v.attn_scale == math.sqrt(32)
    for cfg in (v, t, t.replace(dtype=torch.float64)):
        d = cfg.to_dict()
        assert isinstance(d["dtype"], str)
        assert type(cfg).from_dict(d) == cfg
    with pytest.raises(ValueError, match="unknown VisionConfig fields"):
        VisionConfig.from_dict({**v.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="tower"):
        VisionConfig.from_dict({**v.to_dict(), "tower": "audio"})
    with pytest.raises(ValueError, match="dtype"):
        VisionConfig.from_dict({**v.to_dict(), "dtype": "Tensor"})
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge", VisionConfig)


def test_clip_config_validation():
    cfg = tiny_config("full")
    assert CLIPConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.n_labels == 6 and cfg.vision.n_layers == 2 and cfg.text.d_mlp == 32
    with pytest.raises(ValueError, match="n_labels"):
        CLIPConfig(vision=VisionConfig(n_labels=6), text=TextConfig(n_labels=7))
    with pytest.raises(TypeError):
        CLIPConfig(vision=TextConfig(), text=TextConfig())
    with pytest.raises(ValueError, match="missing"):
        CLIPConfig.from_dict({"text": cfg.text.to_dict()})
    with pytest.raises(ValueError, match="unknown CLIPConfig fields"):
        CLIPConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    rope = CLIPConfig.from_preset("simplified", **TINY, vision_overrides={"positional": "rope"})
    assert rope.vision.positional == "rope" and rope.text.positional == "learned"
    with pytest.raises(TypeError, match="VisionConfig"):
        HookedVisionEncoder(TextConfig())
    with pytest.raises(TypeError, match="TextConfig"):
        HookedTextEncoder(VisionConfig())


def test_missing_weights_explain_why():
    from hooked_clip1d import HookedVisionEncoder, VisionConfig

    rope = HookedVisionEncoder(VisionConfig(n_labels=5, d_model=8, d_head=2, n_heads=2, positional="rope"))
    with pytest.raises(AttributeError, match="positional='learned'"):
        _ = rope.W_pos
    with pytest.raises(AttributeError, match="attention-only"):
        _ = rope.W_in
    assert not hasattr(rope, "W_pos")  # hasattr still works


@pytest.mark.parametrize(
    ("flags", "fires", "silent"),
    [
        ({}, [], ["hook_attn_in", "hook_q_input", "attn.hook_result"]),
        ({"use_split_qkv_input": True}, ["hook_q_input", "hook_k_input", "hook_v_input"], ["hook_attn_in"]),
        ({"use_attn_in": True}, ["hook_attn_in"], ["hook_q_input"]),
        ({"use_attn_result": True}, ["attn.hook_result"], ["hook_attn_in"]),
    ],
)
def test_flags_decide_which_hooks_fire(flags, fires, silent):
    from hooked_clip1d import HookedVisionEncoder, VisionConfig

    enc = HookedVisionEncoder(VisionConfig(n_labels=5, d_model=8, d_head=2, n_heads=2, **flags)).eval()
    img = enc.to_tokens("C 1 . . 2 . . . . . .")
    _, cache = enc.run_with_cache(img)
    inactive = enc.inactive_hook_names()
    for suffix in fires:
        assert f"blocks.0.{suffix}" in cache and f"blocks.0.{suffix}" not in inactive
    for suffix in silent:
        assert f"blocks.0.{suffix}" not in cache and f"blocks.0.{suffix}" in inactive
        with pytest.raises(ValueError, match="does not fire"):
            enc.add_hook(f"blocks.0.{suffix}", lambda x, hook: x)
    enc.add_hook(lambda n: True, lambda x, hook: x)  # a predicate may match silent points; no error
    enc.reset_hooks()


def test_attn_in_and_split_inputs_cannot_both_be_on():
    """Both on was accepted (attn_in won, silently); TransformerLens refuses it, and so does the config now."""
    from hooked_clip1d import VisionConfig

    with pytest.raises(ValueError, match="exclude each other"):
        VisionConfig(n_labels=5, d_model=8, d_head=2, n_heads=2, use_attn_in=True, use_split_qkv_input=True)
