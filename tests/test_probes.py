"""Linear probes: fitting, held-out scores, the shuffled-label control at chance, targets and bad inputs."""

from __future__ import annotations

import json

import pytest
import torch

from hooked_clip1d import build_dataset, load_model
from hooked_clip1d.analysis.interventions.probes import (
    VISION_TARGETS,
    fit_probe,
    probe_sweep,
    probe_targets,
    residual_activations,
)
from hooked_clip1d.analysis.metrics import pair_grid, pair_inputs
from hooked_clip1d.visualization.patching import plot_probe_accuracy


@pytest.fixture(scope="module")
def grid(simplified_model):
    """Every two-object image of the tiny vocabulary (6 labels: 30 ordered pairs x 45 position pairs)."""
    imgs, objs, _ = pair_grid(simplified_model.vision.cfg.vocab)
    vocab = simplified_model.text.cfg.vocab
    caps = torch.stack(
        [objs[:, 0], torch.full_like(objs[:, 0], vocab.left_of), objs[:, 1], torch.full_like(objs[:, 0], vocab.eot)],
        -1,
    )
    return imgs, caps


@pytest.mark.parametrize("method", ["logistic", "ridge"])
def test_fit_probe_separable_vs_shuffled(method):
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(600, 8, generator=gen)
    y = (X[:, :3].argmax(-1)).long()  # 3 linearly separable classes
    good = fit_probe(X, y, method=method)
    assert good.test_acc > 0.9 and good.n_test == 180 and good.n_train == 420
    overall = (good.train_acc * 420 + good.test_acc * 180) / 600
    assert abs(float((good.predict(X) == y).double().mean()) - overall) < 1e-9
    shuffled = fit_probe(X, y[torch.randperm(600, generator=gen)], method=method)
    assert shuffled.test_acc <= shuffled.chance + 0.08


def test_probes_on_shuffled_labels_score_at_chance(two_layer_model, grid):
    imgs, _ = grid
    for target in ("left_pos", "left_label", "relation"):
        y = probe_targets(two_layer_model.vision, imgs, target)
        s = probe_sweep(two_layer_model.vision, imgs, y, position="left_object")
        assert s.control_acc is not None and s.control_chance is not None
        # 405 held-out examples: 0.08 is > 3 standard errors above chance for every class count used here
        assert (s.control_acc <= s.control_chance + 0.08).all(), (target, s.control_acc, s.control_chance)
        assert s.test_acc.shape == (3,) and s.labels == ["embed", "after L0", "after L1"]


def test_position_is_decodable_from_learned_embeddings_but_not_from_rope_embeddings(any_model, rope_model, grid):
    imgs, _ = grid
    y = probe_targets(any_model.vision, imgs, "left_pos")
    s = probe_sweep(any_model.vision, imgs, y, position="left_object", control=False)
    if any_model is rope_model:  # RoPE: the residual before layer 0 is the token embedding only
        assert s.test_acc[0] <= s.chance + 0.08
    else:
        assert s.test_acc[0] == 1.0
    # CLS before layer 0 is the same vector for every image: nothing to decode
    r = probe_sweep(any_model.vision, imgs, y, position="readout", control=False)
    assert r.test_acc[0] <= r.chance + 1e-9


def test_text_probes_and_ridge(simplified_model, grid):
    _, caps = grid
    text = simplified_model.text
    s = probe_sweep(text, caps, probe_targets(text, caps, "subject"), position="subject", method="ridge")
    assert s.test_acc[0] == 1.0  # the subject label is in the subject slot's token embedding
    o = probe_sweep(text, caps, probe_targets(text, caps, "object"), position="subject", control=False)
    assert o.test_acc[0] <= o.chance + 0.08  # the object label is not in the subject slot before layer 0
    json.dumps(s.to_dict())


def test_probe_targets_from_tokens(simplified_model):
    v, t = simplified_model.vision, simplified_model.text
    imgs = v.to_tokens(["C 5 . . 2 . . . . . .", "C . 1 . . . . . . 3 ."])
    got = {name: probe_targets(v, imgs, name).tolist() for name in VISION_TARGETS}
    assert got == {
        "left_pos": [0, 1],
        "right_pos": [3, 8],
        "left_label": [5, 1],
        "right_label": [2, 3],
        "relation": [0, 1],
        "distance": [3, 7],
    }
    caps = t.to_tokens(["5 is on the left of 2", "1 is on the right of 3"])
    assert probe_targets(t, caps, "subject").tolist() == [5, 1]
    assert probe_targets(t, caps, "relation").tolist() == [0, 1]
    acts = residual_activations(v, imgs, "right_object")
    torch.testing.assert_close(acts[0], v.W_E[torch.tensor([2, 3])] + v.W_pos[torch.tensor([4, 9])])


def test_probe_on_the_shipped_model_controls_at_chance():
    model = load_model("simplified-ntot20-n2-10")
    ds = build_dataset(model.data_config)
    imgs, _ = pair_inputs(ds.splits["train"], ds.vocab, n=600, seed=0)
    s = probe_sweep(model.vision, imgs, probe_targets(model.vision, imgs, "left_label"))
    assert s.control_acc is not None and s.control_chance is not None
    assert (s.control_acc <= s.control_chance + 0.08).all()
    assert s.test_acc[0] <= s.chance + 1e-9  # CLS embedding is constant
    assert s.test_acc[1] > s.control_acc[1] + 0.2  # the readout binds the left label


def test_bad_probe_inputs(simplified_model, grid, tmp_path):
    imgs, caps = grid
    v = simplified_model.vision
    X = torch.randn(50, 4)
    with pytest.raises(ValueError, match="single class"):
        fit_probe(X, torch.zeros(50, dtype=torch.long))
    with pytest.raises((ValueError, TypeError), match="rows|n"):
        fit_probe(X, torch.zeros(49, dtype=torch.long))
    with pytest.raises(TypeError, match="integer|y"):
        fit_probe(X, torch.zeros(50))
    with pytest.raises(ValueError, match="test_fraction"):
        fit_probe(X, (X[:, 0] > 0).long(), test_fraction=1.0)
    with pytest.raises(ValueError, match="too few"):
        fit_probe(X[:3], torch.tensor([0, 1, 0]), test_fraction=0.5)
    with pytest.raises(ValueError, match="unknown vision probe target"):
        probe_targets(v, imgs, "subject")
    with pytest.raises(ValueError, match="unknown text probe target"):
        probe_targets(simplified_model.text, caps, "left_pos")
    with pytest.raises(ValueError, match="unknown position"):
        residual_activations(v, imgs, "subject")
    with pytest.raises(ValueError, match="two-object"):
        probe_targets(v, v.to_tokens(["C 1 . . . . . . . . ."]), "left_pos")
    with pytest.raises(ValueError, match="outside"):
        residual_activations(v, imgs, 11)
    y = probe_targets(v, imgs, "left_pos")
    fig = plot_probe_accuracy({"left_pos @ left object": probe_sweep(v, imgs, y, position="left_object")})
    fig.savefig(tmp_path / "probes.png")
    assert (tmp_path / "probes.png").stat().st_size > 1000
