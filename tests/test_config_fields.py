"""init_std, pruned_heads and ablated_terms: config fields that change the weights' init and the forward pass."""

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, VisionConfig
from hooked_clip1d.model.checkpoint import load_model_file, save_model


def test_init_std_scales_both_embeddings():
    big = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=20, init_std=1.0), seed=0)
    small = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=20, init_std=0.02), seed=0)
    for name in ("W_E", "W_pos"):
        ratio = (getattr(small.vision, name).std() / getattr(big.vision, name).std()).item()
        assert ratio == pytest.approx(0.02, rel=1e-4)
    # the other weights are drawn identically
    assert torch.equal(small.vision.W_Q, big.vision.W_Q)


def test_defaults_are_the_reproducing_recipe_and_old_configs_keep_theirs():
    """The default recipe (x8-recipe's choice) is what TrainConfig / EncoderConfig default to; a config saved
    before init_std / no_decay / frozen existed reads back as what it was trained with (N(0, 1), all decayed)."""
    from hooked_clip1d.settings import DEFAULT_RECIPE, RECIPES, TrainConfig
    from hooked_clip1d.training.run_config import comparable_train_config

    rec, tc = RECIPES[DEFAULT_RECIPE], TrainConfig()
    fields = rec.fields()
    # the defaults are the default recipe, field by field (a field added to Recipe is checked here too)
    assert {f: getattr(tc, f) for f in fields["train"]} == fields["train"]
    for tower in (VisionConfig(), CLIPConfig.from_preset("simplified", n_labels=6).text):
        assert {f: getattr(tower, f) for f in fields["model"]} == fields["model"]
    cfg = CLIPConfig.from_preset("simplified", n_labels=6).to_dict()
    for tower in ("vision", "text"):
        del cfg[tower]["init_std"]
    old = CLIPConfig.from_dict(cfg)
    assert old.vision.init_std == old.text.init_std == 1.0
    saved = TrainConfig().to_dict()
    del saved["no_decay"], saved["frozen"]
    assert (TrainConfig.from_dict(saved).no_decay, TrainConfig.from_dict(saved).frozen) == ((), ())
    assert comparable_train_config(saved) == comparable_train_config(TrainConfig(no_decay=(), frozen=()).to_dict())


def test_recipes_are_typed_and_expanded_once_for_the_cli_and_sweeps():
    """A recipe is a Recipe (every field owned by TrainConfig or EncoderConfig); the train command and a sweep
    expand it the same way, for every named recipe (the CLI and sweeps once disagreed on which fields applied)."""
    import argparse
    import dataclasses

    from hooked_clip1d.cli.train import add_train_parser, train_configs
    from hooked_clip1d.settings import RECIPES, Recipe, TrainConfig
    from hooked_clip1d.sweeps.spec import load_spec

    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model_fields = {f.name for f in dataclasses.fields(VisionConfig)}
    assert set(Recipe.TRAIN_FIELDS) <= train_fields and set(Recipe.MODEL_FIELDS) <= model_fields
    parser = add_train_parser(argparse.ArgumentParser().add_subparsers())
    for name in RECIPES:
        cli = train_configs(
            parser.parse_args(
                ["--out", "r", "--recipe", name, "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "600"]
            )
        )
        run = load_spec(
            text=f'[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n[train]\nepochs = 600\n[grid]\nrecipe = ["{name}"]'
        ).runs[0]
        assert cli[2] == run.train_cfg, name
        assert cli[0].vision == run.model_cfg.vision and cli[0].text == run.model_cfg.text, name
    # explicit flags and spec keys override the recipe, the same way
    cli = train_configs(
        parser.parse_args(
            [
                "--out",
                "r",
                "--recipe",
                "all-decay",
                "--frozen",
                "qk_bias",
                "--init-std",
                "0.5",
                "--n-labels",
                "6",
                "--n-heldout",
                "2",
                "--n2",
                "2",
            ]
        )
    )
    run = load_spec(
        text='[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n[train]\nfrozen = ["qk_bias"]\n'
        '[model]\ninit_std = 0.5\n[grid]\nrecipe = ["all-decay"]'
    ).runs[0]
    assert cli[2] == run.train_cfg and cli[0].vision.init_std == run.model_cfg.vision.init_std == 0.5


def test_shipped_pre_recipe_models_load_with_their_recipe():
    from hooked_clip1d.pretrained import load_model

    m = load_model("simplified-ntot20-n2-10-all-decay")
    assert m.cfg.vision.init_std == 1.0


def test_shipped_qkdecay_model_keeps_small_query_biases():
    """simplified-ntot20-n2-10-qkdecay10 (b_Q, b_K decayed at 10x): its manifest carries the recipe, and its CLS query
    bias stays small (norm < 1 per head), where the same recipe at 1x (simplified-ntot20-n2-10-init002) grew it."""
    from hooked_clip1d.pretrained import load_model, manifest

    tc = manifest("simplified-ntot20-n2-10-qkdecay10")["train_config"]
    assert (tc["qk_bias_decay_scale"], tc["no_decay"], tc["frozen"]) == (10.0, ["cls"], [])
    small = load_model("simplified-ntot20-n2-10-qkdecay10").vision.blocks[0].attn.b_Q.norm(dim=-1)
    grown = load_model("simplified-ntot20-n2-10-init002").vision.blocks[0].attn.b_Q.norm(dim=-1)
    assert small.max() < 1.0 < grown.max()


@pytest.mark.parametrize("bad", [0.0, -1.0, True, "0.02"])
def test_init_std_must_be_positive_number(bad):
    with pytest.raises((ValueError, TypeError), match="init_std|init_std"):
        VisionConfig(init_std=bad)


def test_pruned_heads_zero_those_heads_outputs():
    cfg = CLIPConfig.from_preset(
        "simplified", n_labels=6, n_layers=2, vision_overrides={"pruned_heads": ((1, 2), (0, 0))}
    )
    m = CLIP1D(cfg, seed=0).eval()
    assert m.cfg.vision.pruned_heads == ((0, 0), (1, 2))  # canonical order
    full = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, n_layers=2), seed=0).eval()
    img = m.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . . 4 . . ."])
    _, cache = m.vision.run_with_cache(img)
    assert cache["z", 0][:, :, 0].abs().max() == 0 and cache["z", 1][:, :, 2].abs().max() == 0
    assert cache["z", 0][:, :, 1].abs().max() > 0

    def zero(layer_head):
        def fn(z, hook):
            z[:, :, layer_head] = 0
            return z

        return fn

    expected = full.vision.run_with_hooks(
        img, fwd_hooks=[("blocks.0.attn.hook_z", zero(0)), ("blocks.1.attn.hook_z", zero(2))]
    )
    torch.testing.assert_close(m.vision(img), expected)
    assert not torch.allclose(full.vision(img), expected)


def test_pruned_heads_roundtrip_through_checkpoint(tmp_path):
    cfg = CLIPConfig.from_preset("simplified", n_labels=6, vision_overrides={"pruned_heads": ((0, 3),)})
    m = CLIP1D(cfg, seed=1)
    assert CLIPConfig.from_dict(cfg.to_dict()) == cfg
    save_model(m, tmp_path / "m.safetensors")
    back = load_model_file(tmp_path / "m.safetensors")
    assert back.cfg.vision.pruned_heads == ((0, 3),)
    assert back.vision.blocks[0].attn.head_mask.tolist() == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("bad", [((0, 4),), ((1, 0),), ((0,),), ((0, 1), (0, 1)), "x"])
def test_pruned_heads_out_of_range_or_malformed(bad):
    # malformed values fail the type hint first when the tests' beartype hook is on (TypeError), else our ValueError
    with pytest.raises((ValueError, TypeError), match="pruned_heads"):
        VisionConfig(n_heads=4, n_layers=1, pruned_heads=bad)


def _ablated_pair(terms=("EP",), n_labels=8):
    """A model with ``terms`` in its config and the same weights without (seed-equal init)."""
    # N(0, 1) embeddings, so that every term is large at init
    cfg = CLIPConfig.from_preset(
        "simplified", n_labels=n_labels, init_std=1.0, vision_overrides={"ablated_terms": terms}
    )
    ref = CLIPConfig.from_preset("simplified", n_labels=n_labels, init_std=1.0)
    return CLIP1D(cfg, seed=0).eval(), CLIP1D(ref, seed=0).eval()


IMGS = ["C 1 . . 2 . . . . . .", "C . 3 4 . . . . . . .", "C . . . . . . . 5 . 6"]


def test_ablated_terms_remove_the_term_from_every_forward_pass():
    from hooked_clip1d.analysis.interventions.terms import ablate_terms, attention_terms

    m, ref = _ablated_pair()
    img = m.vision.to_tokens(IMGS)
    torch.testing.assert_close(
        m.vision(img), ref.vision.run_with_hooks(img, fwd_hooks=ablate_terms(ref.vision, ["EP"]))
    )
    assert (m.vision(img) - ref.vision(img)).abs().max() > 1e-2  # the term mattered
    # the cache sees the scores the model used: every term but EP
    _, cache = m.vision.run_with_cache(img)
    terms = attention_terms(ref.vision, ref.vision.run_with_cache(img)[1])
    torch.testing.assert_close(cache["attn_scores", 0], sum(v for k, v in terms.items() if k != "EP"))
    m.vision.reset_hooks()  # permanent: survives a reset, like the model's own computation
    torch.testing.assert_close(m.vision(img), cache["blocks.0.hook_resid_post"][:, 0])


def test_ablated_terms_follow_a_patched_embedding():
    """A user hook on hook_embed runs before the ablation reads E: the removed EP is that of the patched E."""
    from hooked_clip1d.analysis.interventions.terms import ablate_terms

    m, ref = _ablated_pair()
    img = m.vision.to_tokens(IMGS)

    def double(e, hook):
        return 2 * e

    got = m.vision.run_with_hooks(img, fwd_hooks=[("hook_embed", double)])
    want = ref.vision.run_with_hooks(img, fwd_hooks=[("hook_embed", double), *ablate_terms(ref.vision, ["EP"])])
    torch.testing.assert_close(got, want)


def test_ablated_terms_train_save_and_load(tmp_path):
    from hooked_clip1d import DataConfig, TrainConfig
    from hooked_clip1d.training.trainer import Trainer

    m, _ = _ablated_pair(("VP", "EP", "EP"))
    assert m.cfg.vision.ablated_terms == ("EP", "VP")  # canonical: sorted, distinct
    assert CLIPConfig.from_dict(m.cfg.to_dict()) == m.cfg
    run = Trainer(m.cfg, DataConfig(n_labels=8, n_heldout=3, n2=2), TrainConfig(epochs=1), tmp_path).run(False)
    back = load_model_file(tmp_path / "model.safetensors")
    assert back.cfg.vision.ablated_terms == ("EP", "VP")
    img = back.vision.to_tokens(IMGS)
    torch.testing.assert_close(back.vision(img), run.model.vision(img))
    from hooked_clip1d.training.stacked_support import check_supported

    with pytest.raises(ValueError, match="ablated_terms"):  # the stacked engine does not implement it
        check_supported(m.cfg)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"ablated_terms": ("XY",)}, "unknown"),
        ({"ablated_terms": ("ER",)}, "unknown"),  # later-layer terms are not trainable ablations
        ({"ablated_terms": ("EP",), "normalization_type": "LN"}, "normalization_type"),
        ({"ablated_terms": ("EP",), "positional": "rope"}, "positional"),
        ({"ablated_terms": "EP"}, "ablated_terms"),
    ],
)
def test_ablated_terms_refused(overrides, match):
    with pytest.raises((ValueError, TypeError), match=match):
        VisionConfig(**overrides)
