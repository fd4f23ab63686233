"""A new user's walk through the public API (session 30): each case below gave a wrong answer, a bare traceback or
a result under the wrong name without a word; now it is refused by name (or, for the graph flags, works)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import REFUSAL_SNIPPET, make_model

from hooked_clip1d import DataConfig, build_dataset
from hooked_clip1d.analysis.circuits.attribution import Attribution
from hooked_clip1d.analysis.circuits.edge_attribution import eap
from hooked_clip1d.analysis.circuits.graph import graph_flags
from hooked_clip1d.analysis.circuits.methods import METHODS
from hooked_clip1d.analysis.circuits.node_attribution import atp, exact_patching
from hooked_clip1d.analysis.circuits.task import mirror_task
from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment
from hooked_clip1d.analysis.metrics import pair_inputs


@pytest.fixture
def model_and_batch():
    model = make_model("simplified", seed=3)
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    images, captions = pair_inputs(ds.splits["val_seen"], ds.vocab, n=4)  # two-object images, their true captions
    return model, images, captions


PLAIN = (
    """
import warnings
import torch
from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=16, d_head=4), seed=0).eval()
img = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
cap = m.text.to_tokens(["1 is on the left of 2"])
"""
    + REFUSAL_SNIPPET
)


#: the calls the tests' type checker would refuse before the package's own checks run: run once, in a plain
#: interpreter, each snippet's printed lines kept under its key (one interpreter start, ~5 s, for all of them)
PLAIN_SNIPPETS = {
    "return_type": """
for bad in ("logits", "loss", "Pooled"):
    print(refusal(lambda: m.vision(img, return_type=bad)))
    print(refusal(lambda: m.vision.run_with_hooks(img, return_type=bad)))
print(m.vision(img, return_type=None) is None, tuple(m.vision(img).shape))
""",
    "hook_pair": """
def hook(x, hook):
    return None
print(refusal(lambda: m.run_with_cache(img, cap, fwd_hooks=("vision.hook_embed", hook))))
print(refusal(lambda: m.vision.run_with_cache(img, fwd_hooks=("hook_embed", hook))))
print(refusal(lambda: m.vision.run_with_cache(img, fwd_hooks={"hook_embed": hook})))
""",
    "bare": """
from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores
from hooked_clip1d.training.retrain import head_subset_sweep
_, cache = m.run_with_cache(img, cap)
print(refusal(lambda: decompose_attention_scores(m.vision, cache, 0)))
print(refusal(lambda: head_subset_sweep(m, DataConfig(n_labels=5, n_heldout=2, n2=2))))
""",
    "to_tokens": """
print(refusal(lambda: m.vision.to_tokens(3)))
print(refusal(lambda: m.vision.to_tokens([img[0], img[0]])))
print(refusal(lambda: m.vision.to_tokens(img[None].expand(2, 1, 11))))
""",
}


@pytest.fixture(scope="module")
def plain_runs() -> dict[str, list[str]]:
    """Each of PLAIN_SNIPPETS run (after PLAIN) in one fresh interpreter, outside the tests' type checker
    (tests/typecheck.py): the lines each printed, by key."""
    code = PLAIN + "".join(f"print('@@{k}')\n{v}" for k, v in PLAIN_SNIPPETS.items())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out: dict[str, list[str]] = {}
    key = None
    for line in r.stdout.strip().splitlines():
        if line.startswith("@@"):
            key = line[2:]
            out[key] = []
        elif key is not None:
            out[key].append(line)
    return out


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_a_tower_refuses_a_return_type_it_does_not_know(plain_runs):
    """``v(imgs, return_type="logits")`` returned None, as if caching only."""
    out = plain_runs["return_type"]
    assert all(line.startswith("ValueError: HookedVisionEncoder: unknown return_type") for line in out[:6]), out
    assert out[6] == "True (1, 16)"


def test_circuit_methods_refuse_a_model_switched_to_train_mode_after_the_task_was_built(model_and_batch):
    """Dropout on: the scores were noisy and the global RNG was drawn, without a word."""
    model, images, captions = model_and_batch
    task = mirror_task(model, images, captions)
    model.train()
    state = torch.get_rng_state()
    for method in (lambda: exact_patching(task), lambda: atp(task), lambda: eap(task)):
        with pytest.raises(ValueError, match="training mode"):
            method()
    assert torch.equal(torch.get_rng_state(), state)
    model.eval()
    assert exact_patching(task).names


def test_clip_run_with_cache_refuses_a_named_hook_point_that_cannot_fire(model_and_batch):
    """It returned an empty cache; the tower's run_with_cache and run_with_hooks already refused the name."""
    model, images, captions = model_and_batch
    with pytest.raises(ValueError, match="does not fire unless use_attn_result"):
        model.run_with_cache(images, captions, names_filter=["vision.blocks.0.attn.hook_result"])
    with pytest.raises(ValueError, match="does not fire"):
        model.run_with_cache(images, captions, names_filter="text.blocks.0.hook_q_input")
    with pytest.raises(ValueError, match="matches no hook point that fires"):
        model.run_with_cache(images, captions, names_filter=lambda n: n.endswith("hook_result"))
    _, cache = model.run_with_cache(images, captions, names_filter=lambda n: "attn" in n)  # the rest: cached
    assert "vision.blocks.0.attn.hook_pattern" in cache.store


def test_split_qkv_inputs_and_attn_in_exclude_each_other(model_and_batch):
    """Both on was accepted, and the split inputs then stopped firing with a message blaming the flag that was on."""
    model, _, _ = model_and_batch
    tower = model.vision
    tower.set_use_split_qkv_input(True)
    with pytest.raises(ValueError, match="turn it off first"):
        tower.set_use_attn_in(True)
    tower.set_use_split_qkv_input(False)
    tower.set_use_attn_in(True)
    with pytest.raises(ValueError, match="turn it off first"):
        tower.set_use_split_qkv_input(True)
    with pytest.raises(ValueError, match="exclude each other"):
        tower.cfg.replace(use_split_qkv_input=True)
    # the graph's own flags (split inputs on) work from a user's attn_in and restore it
    with graph_flags(tower):
        assert tower.cfg.use_split_qkv_input and not tower.cfg.use_attn_in
    assert tower.cfg.use_attn_in and not tower.cfg.use_split_qkv_input
    tower.set_use_attn_in(False)


def test_a_registry_entry_refuses_overrides_that_make_it_another_method(model_and_batch):
    """``METHODS["AtP"](task, qk_fix=True)`` was AtP+QK's result under the name AtP."""
    model, images, captions = model_and_batch
    task = mirror_task(model, images, captions)
    with pytest.raises(ValueError, match="makes it another method"):
        METHODS["AtP"](task, qk_fix=True)
    with pytest.raises(ValueError, match="makes it another method"):
        METHODS["EAP+QK"](task, qk_fix=False)
    with pytest.raises(ValueError, match="makes it another method"):
        METHODS["AtP*"](task, grad_drop=False)
    for name in ("EAP", "EAP+QK"):  # grad_drop is pinned too (their result was EAP+GD under their name)
        with pytest.raises(ValueError, match="makes it another method"):
            METHODS[name](task, grad_drop=True)
    assert METHODS["AtP"](task, qk_fix=False, check=0).method == "AtP"  # the entry's own value is fine
    assert METHODS["EAP-IG"](task, steps=2, check=0).method == "EAP-IG"  # a setting that is not identity


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_run_with_cache_names_a_single_hook_pair_too(plain_runs):
    """run_with_cache flattened its fwd_hooks before checking them: "each entry must be a pair, got 'hook_embed'"."""
    out = plain_runs["hook_pair"]
    assert all("got one pair: wrap it in a list" in line for line in out[:2]) and "got a dict" in out[2], out


def test_ranked_refuses_a_negative_count():
    res = Attribution("AtP", ["a", "b", "c"], torch.tensor([1.0, -3.0, 2.0]))
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        res.ranked(-1)  # it returned every item but the last
    assert res.ranked(0) == [] and [n for n, _ in res.ranked()] == ["b", "c", "a"]


@pytest.mark.parametrize("where", ["clip", "tower"])
def test_hooks_given_as_one_pair_or_a_dict_are_refused_by_name(model_and_batch, where):
    """TransformerLens unpacked them: "too many values to unpack"."""
    model, images, captions = model_and_batch
    name = "vision.hook_embed" if where == "clip" else "hook_embed"

    def run(hooks):  # noqa: ANN001, ANN202
        if where == "clip":
            return model.run_with_hooks(images, captions, fwd_hooks=hooks)
        return model.vision.run_with_hooks(images, fwd_hooks=hooks)

    def hook(x, hook):  # noqa: ANN001, ANN202
        return None

    with pytest.raises(TypeError, match="got one pair: wrap it in a list"):
        run((name, hook))
    with pytest.raises(TypeError, match=r"got a dict: pass list\(hooks.items\(\)\)"):
        run({name: hook})
    with pytest.raises(TypeError, match="each entry must be a \\(name, hook\\) pair"):
        run([name])

    assert run([(name, hook)]) is not None


def test_embedding_alignment_refuses_test_labels_inside_the_fit():
    model = make_model("simplified", seed=0)
    with pytest.raises(ValueError, match=r"overlap on \[5, 6\]"):
        embedding_alignment(model, fit_labels=range(1, 7), test_labels=[5, 6], n_shuffles=0)


def test_a_belief_refuses_captions_that_do_not_name_the_images_objects(model_and_batch):
    """``image_belief`` and ``mirror_task`` scored any caption against any image; a caption of other labels gave
    a number with no meaning. The image's own pair, in either order (mirror, swap), is accepted."""
    from hooked_clip1d.analysis.metrics import image_belief, mirror_images, swap_captions

    model, images, captions = model_and_batch
    wrong = captions.roll(1, dims=0)
    held = [sorted(int(x) for x in row[1:] if x > 0) for row in images]
    assert any(sorted([int(c[0]), int(c[2])]) != h for c, h in zip(wrong, held, strict=True))
    with pytest.raises(ValueError, match="pass each image's own caption"):
        image_belief(model, images, wrong)
    with pytest.raises(ValueError, match="pass each image's own caption"):
        mirror_task(model, images, wrong)
    vocab = model.text.cfg.vocab
    assert image_belief(model, mirror_images(images), swap_captions(captions, vocab)).shape == (4,)


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_bare_tracebacks_of_the_walk_now_name_the_problem(model_and_batch, plain_runs):
    """swap_slots_hook past the caption's positions (IndexError), a whole CLIP's cache given to a tower's
    decomposition (a hint to drop names_filter), head_subset_sweep given the dataset as n_kept ("'Dataset' object is
    not iterable")."""
    from hooked_clip1d.analysis.hooks import swap_slots_hook

    model, images, captions = model_and_batch
    with pytest.raises(ValueError, match="must index its position axis"):
        model.text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook("hook_embed", 0, 5)])
    with pytest.raises(ValueError, match="must index its position axis"):
        model.text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook("hook_embed", -5, 2)])
    last = model.text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook("hook_embed", -1, 0)])  # negatives index
    assert torch.equal(last, model.text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook("hook_embed", 3, 0)]))
    out = plain_runs["bare"]
    assert out[0].startswith("TypeError: this is the whole CLIP's cache"), out
    assert out[1].startswith("TypeError: head_subset_sweep(model, n_kept, dataset, ...): n_kept"), out


def test_collect_activations_of_attn_in_turns_the_split_inputs_off_for_the_run(model_and_batch):
    """The flags are exclusive now: collecting hook_attn_in from a tower whose split inputs are on must turn them off
    for the run (it refused, once they became exclusive) and give them back."""
    from hooked_clip1d.analysis.interventions.sae import collect_activations

    model, images, _ = model_and_batch
    tower = model.vision
    tower.set_use_split_qkv_input(True)
    acts = collect_activations(tower, "blocks.0.hook_attn_in", images)
    assert acts.shape[0] > 0
    assert tower.cfg.use_split_qkv_input and not tower.cfg.use_attn_in
    tower.set_use_split_qkv_input(False)
    with pytest.raises(ValueError, match="use_attn_in replaces it: turn that off first"):
        tower.set_use_attn_in(True) or tower.add_hook("blocks.0.hook_q_input", lambda x, hook: None)
    tower.set_use_attn_in(False)


def test_a_tower_setting_read_on_the_whole_clips_config_says_where_it_lives(model_and_batch):
    """transformer_lens.patching on the whole CLIP failed with "'CLIPConfig' object has no attribute 'n_heads'"."""
    import copy
    import pickle

    model, _, _ = model_and_batch
    with pytest.raises(AttributeError, match=r"setting of each tower \(cfg.vision.n_heads"):
        _ = model.cfg.n_heads
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        _ = model.cfg.nonsense
    assert not hasattr(model.cfg, "d_head") and model.cfg.n_labels == 6
    assert copy.deepcopy(model.cfg) == model.cfg == pickle.loads(pickle.dumps(model.cfg))


def test_a_run_resumed_with_more_epochs_warns_that_its_model_file_is_the_old_end(tmp_path):
    """eval / load_model of a run being extended read model.safetensors (the old end) without a word."""
    from hooked_clip1d.model.checkpoint import save_model
    from hooked_clip1d.pretrained import resolve_model

    model = make_model("simplified", seed=0)
    data = DataConfig(n_labels=6, n_heldout=2, n2=2)
    save_model(model, tmp_path / "model.safetensors", data, extra={"train_config": {"epochs": 3}})
    save_model(model, tmp_path / "checkpoint.safetensors", data, extra={"train_config": {"epochs": 3}})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_model(tmp_path)  # a finished run: no warning
    save_model(model, tmp_path / "checkpoint.safetensors", data, extra={"train_config": {"epochs": 2000}})
    with pytest.warns(UserWarning, match="ends a run of 3 epochs, its checkpoint.safetensors belongs to a run of 2000"):
        resolve_model(tmp_path)


def test_sae_helpers_refuse_what_they_did_wrong_silently(model_and_batch):
    """spliced at a hook that does not fire (nothing happened), widths that do not match (a bare broadcasting
    error), splice_hook on a per-head hook (edited the head axis as positions), collect_activations in train mode
    (dropout, the global RNG drawn), train_sae with settings that train nothing or nonsense."""
    from hooked_clip1d.analysis.hooks import splice_hook
    from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder, collect_activations, train_sae

    model, images, _ = model_and_batch
    tower = model.vision
    d = tower.cfg.d_model
    with pytest.raises(ValueError, match="does not fire unless use_attn_result"):
        with SparseAutoencoder(d_in=d, d_sae=8, k=2).spliced(tower, "blocks.0.attn.hook_result"):
            pass
    with pytest.raises(ValueError, match="gives rows of width 16, the SAE takes d_in=7"):
        with SparseAutoencoder(d_in=7, d_sae=8, k=2).spliced(tower, "hook_pooled"):
            tower(images)
    with pytest.raises(ValueError, match="has a head axis"):
        tower.run_with_hooks(images, fwd_hooks=[("blocks.0.attn.hook_z", splice_hook(SparseAutoencoder(4, 8, k=2)))])
    with pytest.raises(ValueError, match="the SAE's d_in 7"):
        tower.run_with_hooks(images, fwd_hooks=[("hook_pooled", splice_hook(SparseAutoencoder(7, 8, k=2)))])
    tower.train()
    with pytest.raises(ValueError, match="training mode"):
        collect_activations(tower, "hook_pooled", images)
    tower.eval()
    acts = collect_activations(tower, "hook_pooled", images)
    for kw, match in (
        ({"steps": -5}, "steps must be an int >= 1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"l1": -1.0}, "l1 must be a finite number >= 0"),
        ({"k": 9}, "exceeds d_sae=8"),
    ):
        with pytest.raises(ValueError, match=match):
            train_sae(acts, 8, **kw)
    with pytest.raises((TypeError, ValueError), match="floating-point|acts"):
        train_sae(acts.long(), 8, steps=1)
    sae, report = train_sae(acts.double(), 8, k=2, steps=2)  # float64 activations train (as float32)
    assert sae.W_enc.dtype == torch.float32 and report["fvu"] == report["fvu"]


def test_option_and_config_messages_name_the_setting(model_and_batch, tmp_path):
    """TrainConfig(epochs=0) blamed warmup_epochs; analyze's bad n and kinds gave a bare error or were ignored."""
    from hooked_clip1d.cli.analyze import run_analysis
    from hooked_clip1d.settings import TrainConfig

    for bad in (0, -3):
        with pytest.raises(ValueError, match="TrainConfig.epochs must be an int >= 1"):
            TrainConfig(epochs=bad)
    model, _, _ = model_and_batch
    model.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    with pytest.raises(ValueError, match="option n .* must be an int >= 1"):
        run_analysis("probes", model, out_dir=tmp_path, n=-5)
    with pytest.raises(ValueError, match="option kinds is for node methods"):
        run_analysis("attribution", model, out_dir=tmp_path, method="EAP", kinds="bogus")
    with pytest.raises(ValueError, match="option kinds must be a list of node kinds"):
        run_analysis("attribution", model, out_dir=tmp_path, kinds=5)


def test_data_layer_messages_name_the_problem():
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    with pytest.raises(KeyError, match="no split 'val'; the splits are"):
        ds.describe("val", 0)
    with pytest.raises(ValueError, match="pixel 2 is '³', not '.' or a label"):
        ds.vocab.text_to_image("C . . ³ . . . . . . .")


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_to_tokens_names_what_it_takes(model_and_batch, plain_runs):
    """to_tokens(3): "'int' object is not iterable"; a list of tensors: "'Tensor' object has no attribute 'strip'";
    a [2, 2, 4] tensor was reported as shape (1, 2, 2, 4)."""
    model, images, _ = model_and_batch
    out = plain_runs["to_tokens"]
    assert out[0].startswith("TypeError: HookedVisionEncoder.to_tokens takes a token tensor"), out
    assert out[1].endswith("got list with non-string items"), out
    assert out[2].startswith("ValueError: HookedVisionEncoder.to_tokens takes ids [pos] or [batch, pos]"), out
    assert torch.equal(model.vision.to_tokens(images[0]), images[:1])


# ---- a third walk (session 31: mechanism, interventions, visualization) ---------------------------------------------
@pytest.fixture(scope="module")
def ablate_ep():
    from hooked_clip1d import load_model

    m = load_model("ablate-ep-ntot20-n2-10-init002")  # removes EP from layer 0's vision scores in every forward
    return m, build_dataset(m.data_config).splits["val_unseen"].images[:8]


def test_a_model_that_removes_a_term_itself_is_decomposed_as_it_computes(ablate_ep):
    """The decomposition of a model with ``ablated_terms=("EP",)`` summed to scores that were 6.99 off (it kept EP),
    so EP read as a live term (CLS-row std 0.82) in attention_terms, gradient_sources and the mechanism report; and
    ablate_terms(["EP"]) subtracted it a second time. Now EP is 0, the terms sum to the scores, and a second
    ablation is refused."""
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores
    from hooked_clip1d.analysis.interventions.term_ablation import mean_ablate_terms
    from hooked_clip1d.analysis.interventions.terms import ablate_terms, attention_terms

    m, img = ablate_ep
    _, cache = m.vision.run_with_cache(img)
    dec = decompose_attention_scores(m.vision, cache, 0)
    assert dec.removed == (("embed", "pos_embed"),)
    assert torch.allclose(dec.scores(), cache["attn_scores", 0], atol=1e-4)
    assert torch.allclose(dec.terms().sum((0, 1)), cache["attn_scores", 0], atol=1e-4)
    terms = attention_terms(m.vision, cache)
    assert float(terms["EP"].abs().max()) == 0.0
    assert torch.allclose(sum(terms.values()), cache["attn_scores", 0], atol=1e-4)
    for make in (lambda: ablate_terms(m.vision, ["EP"]), lambda: mean_ablate_terms(m.vision, ["EP"], img)):
        with pytest.raises(ValueError, match=r"already removes \['EP'\] from layer 0"):
            make()
    ablate_terms(m.vision, ["PE"])  # another term is still ablatable


def test_term_and_head_lists_refuse_repeats_masks_and_floats(model_and_batch):
    """mean_ablate_terms(["EP", "EP"]) removed EP once and added its mean twice; heads=[False, False, False, True]
    ablated head 3 and was recorded as [0, 0, 0, 1]; heads=[1.5] ablated head 1."""
    from hooked_clip1d.analysis.interventions.term_ablation import mean_ablate_terms
    from hooked_clip1d.analysis.interventions.terms import ablate_terms

    model, images, _ = model_and_batch
    with pytest.raises(ValueError, match=r"terms listed twice: \['EP'\]"):
        mean_ablate_terms(model.vision, ["EP", "EP"], images)
    with pytest.raises(ValueError, match="terms listed twice"):
        ablate_terms(model.vision, ["EP", "PP", "EP"])
    with pytest.raises(TypeError, match=r"heads must be ints .*got \[False, True\]"):  # floats: the same check
        ablate_terms(model.vision, ["EP"], heads=[False, True])  # (in tests the type checkers refuse them first)
    with pytest.raises(ValueError, match=r"heads listed twice: \[1\]"):
        ablate_terms(model.vision, ["EP"], heads=[1, 1])


def test_mechanism_readers_refuse_or_order_what_they_were_given(model_and_batch):
    """gradient_sources(top=-1) dropped the last term; check_windows read "held at the end" from the last row given,
    not the last epoch; logit_change put a submodule the caller had in train mode back in eval mode."""
    from hooked_clip1d.analysis.mechanism.dynamics import check_windows
    from hooked_clip1d.analysis.mechanism.reparametrize import logit_change, scale_query_key
    from hooked_clip1d.analysis.mechanism.report import gradient_sources

    model, images, _ = model_and_batch
    with pytest.raises(ValueError, match=r"top \(terms per head\) must be an int >= 1"):
        gradient_sources(model, images, 0, top=-1)
    rows = [{"epoch": e, "checks": {"generalizes": ok}} for e, ok in ((9, False), (0, False), (5, True))]
    assert check_windows(rows)["generalizes"]["held_at_end"] is False
    with pytest.raises(ValueError, match="repeat an epoch"):
        check_windows(rows + rows[:1])
    model.vision.train()
    try:
        logit_change(model, scale_query_key(model))
        assert model.vision.training and not model.training and not model.text.training
    finally:
        model.eval()


def test_mechanism_readers_refuse_what_they_cannot_read(model_and_batch):
    """The text tower gave a "CLS row" (the subject word's) to cls_position_rows / ablate_cls_key_position;
    fixed_batch_loss(batch_size=1) returned 0.0 and ran under dropout in train mode; caption_split(batch_size=-4)
    returned a loss of 0.0 and batch_size=0 fell back to the default; key_pca counted a repeated label twice and
    read a bool mask as labels 0/1; key_effective_rank and qk_rank took NaN (rank 1) and energy 2.0 (rank 129)."""
    from hooked_clip1d.analysis.mechanism.dissolution import caption_split
    from hooked_clip1d.analysis.mechanism.dynamics import fixed_batch_loss, qk_rank
    from hooked_clip1d.analysis.mechanism.report import ablate_cls_key_position, cls_position_rows
    from hooked_clip1d.analysis.mechanism.rope import key_effective_rank, key_pca

    model, _, _ = model_and_batch
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    for f in (cls_position_rows, ablate_cls_key_position):  # under the tests' type checkers the annotation refuses
        for x in (model.text, model):  # first; without them, the function's own check
            with pytest.raises(TypeError, match=r"expected the vision tower \(model.vision\)|parameter 'vision'"):
                f(x)
    for bs in (1, 0, -5):
        with pytest.raises(ValueError, match="fixed_batch_loss: batch_size must be an int >= 2"):
            fixed_batch_loss(model, ds, batch_size=bs)
    for kw, what in (({"batch_size": -4}, "batch_size"), ({"batch_size": 0}, "batch_size"), ({"epoch": -1}, "epoch")):
        with pytest.raises(ValueError, match=f"caption_split: {what}"):
            caption_split(model, ds, **{"seed": 0, "epoch": 0, **kw})
    with pytest.raises(TypeError, match="expected a CLIP1D|parameter 'model'"):  # (or the type checkers, first)
        caption_split(model.vision, ds, 0, 0)
    rope = make_model("simplified", seed=0, vision_overrides={"positional": "rope"}).vision
    with pytest.raises(ValueError, match=r"labels: repeated labels in \[1, 1, 2, 3\] \(\[1\] twice\)"):
        key_pca(rope, [1, 1, 2, 3])
    with pytest.raises(TypeError, match="labels must be ints"):
        key_pca(rope, torch.tensor([True, True, False]))
    with pytest.raises(ValueError, match=r"thresholds must be in \(0, 1\]"):
        key_effective_rank(rope, thresholds=[float("nan")])
    for energy in (2.0, float("nan"), 0.0):
        with pytest.raises(ValueError, match=r"qk_rank: energy must be in \(0, 1\]"):
            qk_rank(model, energy=energy)
    model.train()
    try:
        state = torch.random.get_rng_state()
        with pytest.raises(ValueError, match="training mode"):
            fixed_batch_loss(model, ds)
        assert torch.equal(state, torch.random.get_rng_state())
    finally:
        model.eval()


def test_readers_of_scores_and_patterns_refuse_train_mode(model_and_batch):
    """Six readers ran the forward under dropout in train mode and drew the global RNG (their numbers were read
    before dropout, so unchanged); like mechanism_report and mirror_swap_patching they now refuse it."""
    from hooked_clip1d.analysis.mechanism.heads import cls_object_bias, label_pe_deltas, text_eot_bias
    from hooked_clip1d.analysis.mechanism.report import cls_label_pe_deltas

    model, _, captions = model_and_batch
    split = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2)).splits["val_unseen"]
    model.vision.train()
    model.text.train()
    try:
        for call in (
            lambda: cls_object_bias(model.vision, split),
            lambda: label_pe_deltas(model.vision, split),
            lambda: cls_label_pe_deltas(model.vision, split),
            lambda: text_eot_bias(model.text, captions),
        ):
            with pytest.raises(ValueError, match="training mode"):
                call()
    finally:
        model.eval()


def test_plots_refuse_what_they_would_draw_wrong():
    """plot_ablations(metrics="acc") drew three series a, c, c, all n/a; plot_similarity of CLIP's logits (+-100)
    was one solid colour (clipped to [-1, 1]); plot_head_bias(layer=-1) drew the last layer titled "layer -1"."""
    import matplotlib

    matplotlib.use("Agg")
    from hooked_clip1d.visualization.decomposition import plot_ablations
    from hooked_clip1d.visualization.plots import plot_ablation_accuracy, plot_head_bias, plot_similarity

    res = {"splits": ["val_unseen"], "conditions": {"baseline": {"terms": [], "metrics": {"val_unseen": {"acc": 1.0}}}}}
    with pytest.raises(TypeError, match="metrics must be a non-empty list of names"):
        plot_ablations(res, metrics="acc")
    with pytest.raises(ValueError, match=r"no condition has metric\(s\) \['relaxed'\]"):
        plot_ablation_accuracy({"baseline": {"val_unseen": {"acc": 1.0}}}, metrics=("relaxed",))
    with pytest.raises(TypeError, match="plot_ablations|parameter 'results'"):  # (or the type checkers, first)
        plot_ablation_accuracy(res)
    with pytest.raises(ValueError, match="cosine similarities in"):
        plot_similarity(torch.tensor([[95.0, -20.0], [3.0, 88.0]]))
    bias = {"left": torch.rand(1, 4), "right": torch.rand(1, 4)}
    for layer in (-1, 1):
        with pytest.raises(ValueError, match=r"layer must be in 0..0"):
            plot_head_bias(bias, layer=layer)
    plot_head_bias({k: v.tolist() for k, v in bias.items()})  # to_jsonable's lists too


def test_mechanism_entry_points_name_a_bad_argument(model_and_batch, tmp_path):
    """Bare tracebacks before: a tower in gradient_sources / logit_change (AttributeError), logit_change between
    models of other vocabularies (IndexError) or n=0 (torch max()), run_mechanism_history(every=0)
    (ZeroDivisionError), label_pe_deltas(layer=False) (KeyError 'blocks.False...')."""
    from hooked_clip1d.analysis.mechanism.heads import label_pe_deltas
    from hooked_clip1d.analysis.mechanism.reparametrize import logit_change, scale_query_key
    from hooked_clip1d.analysis.mechanism.report import run_mechanism_history

    model, _, _ = model_and_batch
    with pytest.raises(ValueError, match="vocabularies differ"):
        logit_change(model, make_model("simplified", seed=0, n_labels=9))
    with pytest.raises(ValueError, match=r"logit_change: n \(probe images\) must be an int >= 1"):
        logit_change(model, scale_query_key(model), n=0)
    with pytest.raises(ValueError, match=r"every \(epochs\) must be an int >= 1"):
        run_mechanism_history(tmp_path, every=0)
    split = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2)).splits["val_unseen"]
    with pytest.raises(ValueError, match="got layer=False"):
        label_pe_deltas(model.vision, split, layer=False)


def test_evaluate_refuses_a_dataset_whose_unseen_pairs_the_model_trained_on():
    """evaluate (and so mechanism_report) on a dataset holding out more labels than the model's own: its "unseen"
    accuracy (0.979) counted pairs the model trained on, without a word."""
    from hooked_clip1d import evaluate, load_model

    m = load_model("simplified-ntot20-n2-10")
    with pytest.raises(ValueError, match=r"trained with labels 16..20 held out .* holds out 13..20"):
        evaluate(m, build_dataset(m.data_config.replace(n_heldout=8)), splits=["val_unseen"])
    evaluate(m, build_dataset(m.data_config.replace(n2=3)), splits=["val_unseen"])  # other layouts: fine


def test_plots_name_a_bad_argument(model_and_batch):
    """Bare tracebacks before: plot_term_maps with terms=[] (StopIteration), heads=[] (a gridspec error) or
    query_positions of another length (a FixedLocator error); plot_std_shares(terms=[]) (ZeroDivisionError);
    plot_std_histograms(bins=-3); plot_label_pe_scatter(max_cols=0); plot_head_roles given label_pe_deltas' output;
    plot_eot_bias(layer=1) on a one-layer tower (IndexError)."""
    import matplotlib

    matplotlib.use("Agg")
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
    from hooked_clip1d.visualization.decomposition import plot_std_histograms, plot_std_shares, plot_term_maps
    from hooked_clip1d.visualization.heads import plot_eot_bias, plot_head_roles, plot_label_pe_scatter

    model, images, _ = model_and_batch
    _, cache = model.vision.run_with_cache(images)
    terms = decompose_attention_scores(model.vision, cache, 0).token_position_terms()
    for kw, match in (
        ({"terms": []}, "terms is empty"),
        ({"heads": []}, "heads must be a non-empty list"),
        ({"query_positions": [0, 1]}, "query_positions has 2 positions"),
    ):
        with pytest.raises(ValueError, match=match):
            plot_term_maps(terms, **kw)
    shares = row_std_shares(terms)
    with pytest.raises(ValueError, match="terms is empty"):
        plot_std_shares(shares, terms=[])
    with pytest.raises(ValueError, match="bins must be an int >= 1"):
        plot_std_histograms(shares, bins=-3)
    deltas = {"delta_label": torch.zeros(3, 4), "delta_pe": torch.zeros(3, 4)}
    with pytest.raises(ValueError, match="max_cols must be an int >= 1"):
        plot_label_pe_scatter(deltas, max_cols=0)
    with pytest.raises(KeyError, match="classify_head_roles' output"):
        plot_head_roles(deltas)
    with pytest.raises(ValueError, match=r"layer must be in 0..0"):
        plot_eot_bias({"mean": torch.rand(1, 4, 4), "std": torch.rand(1, 4, 4)}, layer=1)


def test_spatial_ids_and_patching_name_a_bad_argument(model_and_batch):
    """ids_are_zero(ids, 99) (bare IndexError); vision_spatial_ids(hook_names="hook_embed") read the string's
    characters as hook names; pair_captions(split) (AttributeError 'vocab'); mirror_swap_patching(sets=[]) returned
    an empty sweep."""
    from hooked_clip1d.analysis.interventions.patching import mirror_swap_patching
    from hooked_clip1d.analysis.mechanism.heads import pair_captions
    from hooked_clip1d.analysis.mechanism.spatial_ids import ids_are_zero, vision_spatial_ids

    model, images, captions = model_and_batch
    ids = vision_spatial_ids(model.vision, site="cls")
    with pytest.raises(ValueError, match="depth must be in 0..1"):
        ids_are_zero(ids, 99)
    with pytest.raises(TypeError, match="hook_names must be a list of hook names"):
        vision_spatial_ids(model.vision, site="cls", hook_names="hook_embed")
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    with pytest.raises(TypeError, match="pair_captions takes the whole Dataset|parameter 'dataset'"):
        pair_captions(ds.splits["val_unseen"])
    with pytest.raises(ValueError, match="sets is empty"):
        mirror_swap_patching(model, images, captions, sets=[])


def test_head_role_readers_take_their_own_outputs_and_name_a_foreign_split():
    """classify_head_roles(to_jsonable(deltas)) failed ('list' has no 'shape'); cls_label_pe_deltas on a split of
    25 labels with a 20-label tower gave a bare IndexError."""
    from hooked_clip1d import load_model
    from hooked_clip1d.analysis.mechanism.heads import classify_head_roles, label_pe_deltas, to_jsonable
    from hooked_clip1d.analysis.mechanism.report import cls_label_pe_deltas

    m = load_model("simplified-ntot20-n2-10")
    d = label_pe_deltas(m.vision, build_dataset(m.data_config).splits["val_unseen"])
    a, b = classify_head_roles(d), classify_head_roles(to_jsonable(d))
    assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
    foreign = build_dataset(DataConfig(n_labels=25, n_heldout=5, n2=2)).splits["val_unseen"]
    with pytest.raises(ValueError, match="token id 2[1-9] is out of range"):
        cls_label_pe_deltas(m.vision, foreign)


def test_alignment_labels_and_sweep_rows_are_checked():
    """embedding_alignment truncated a float label (2.7 -> 2); single_head_mechanism on a row without its weight
    decay gave a bare KeyError."""
    from hooked_clip1d.analysis.mechanism.alignment import _label_list
    from hooked_clip1d.analysis.mechanism.report import single_head_mechanism

    with pytest.raises(TypeError, match=r"labels must be ints, got \[2.7\]|Type-check error"):  # (or the type
        _label_list([2.7], 20, "fit_labels")  # checkers of the test run, which sample one item of a list, first)
    with pytest.raises(KeyError, match="weight-decay sweep's results row"):
        single_head_mechanism({"path": "/no/such/run"})


def test_probe_plot_names_depths_from_every_sweep():
    """plot_probe_accuracy labelled the x axis from the first sweep only: a deeper second sweep's points sat under
    no label, and sweeps naming other depths were drawn against the first one's names."""
    import matplotlib

    matplotlib.use("Agg")
    from hooked_clip1d.analysis.interventions.probes import ProbeSweep
    from hooked_clip1d.visualization.patching import plot_probe_accuracy

    def sweep(labels):
        acc = torch.full((len(labels),), 0.5)
        return ProbeSweep("vision", "readout", labels, acc, acc, 0.1, acc, 0.1, 10, 30)

    fig = plot_probe_accuracy({"a": sweep(["embed", "after L0"]), "b": sweep(["embed", "after L0", "after L1"])})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["embed", "after L0", "after L1"]
    with pytest.raises(ValueError, match="name their depths differently"):
        plot_probe_accuracy({"a": sweep(["embed", "after L0"]), "b": sweep(["resid_pre 0", "resid_post 0"])})
