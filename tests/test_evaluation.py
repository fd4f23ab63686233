"""Retrieval metrics on hand-built similarity matrices, and evaluate() end to end."""

from __future__ import annotations

import pytest
import torch
from conftest import make_model, no_hooks_left

from hooked_clip1d import DataConfig, build_dataset
from hooked_clip1d.data.dataset import SPLITS
from hooked_clip1d.evaluation import (
    caption_label_sets,
    evaluate,
    format_metrics,
    retrieval_metrics,
    similarity_matrix,
)


def _index(dataset) -> dict[tuple[int, ...], int]:
    return {tuple(c): i for i, c in enumerate(dataset.captions.tolist())}


def _base_sim(n_images: int, n_captions: int) -> torch.Tensor:
    """Low, tie-free background similarities, so only the entries a test sets can reach the top 2."""
    gen = torch.Generator().manual_seed(0)
    return -1.0 + 0.01 * torch.rand(n_images, n_captions, generator=gen)


def _mean(hits: list[bool]) -> float:
    return sum(hits) / len(hits)  # an exact count over n, as evaluate reports it


def test_caption_label_sets(dataset):
    v = dataset.vocab
    is_pair, label_set = caption_label_sets(dataset)
    for cap, p, s in zip(dataset.captions.tolist(), is_pair.tolist(), label_set.tolist(), strict=True):
        if cap[1] in (v.left_of, v.right_of):
            assert p and s == sorted([cap[0], cap[2]])
        else:
            assert not p and s == [0, cap[0]]


def test_retrieval_metrics_left_mode_pairs(dataset):
    v, idx = dataset.vocab, _index(dataset)
    split = dataset.splits["val_unseen"]
    n = len(split)
    assert n == 10
    sim = _base_sim(n, len(dataset.captions))
    kinds = ["hit"] * 4 + ["swapped"] * 2 + ["single"] * 2 + ["other_pair"] * 2
    for i, ((x, y), kind) in enumerate(zip(split.objects.tolist(), kinds, strict=True)):
        cap = {
            "hit": v.left_caption(x, y),
            "swapped": v.left_caption(y, x),  # right labels, wrong order
            "single": v.single_caption(x),
            "other_pair": v.left_caption(1, 2),
        }[kind]
        sim[i, idx[tuple(cap.tolist())]] = 1.0
        if kind == "hit":
            assert idx[tuple(cap.tolist())] == split.targets[i, 0]
    m = retrieval_metrics(sim, dataset, "val_unseen")
    assert m["n"] == 10
    assert m["acc"] == _mean([k == "hit" for k in kinds])
    assert m["relaxed"] == m["acc"]  # one true caption per image: relaxed == strict
    assert m["label_set"] == _mean([k in ("hit", "swapped") for k in kinds])


def test_retrieval_metrics_mixed_split(dataset):
    v, idx = dataset.vocab, _index(dataset)
    split = dataset.splits["train"]
    sim = _base_sim(len(split), len(dataset.captions))
    hits, pair_label_ok = [], []
    n_pair_seen = 0
    for i, (x, y) in enumerate(split.objects.tolist()):
        if y == 0:  # single-object image: alternate right / wrong label
            ok = i % 2 == 0
            cap = v.single_caption(x) if ok else v.single_caption(x % 6 + 1)
        else:
            kind = n_pair_seen % 4  # hit, swapped, single of x, other pair
            n_pair_seen += 1
            other = (3, 4) if {x, y} != {3, 4} else (1, 2)
            cap = [v.left_caption(x, y), v.left_caption(y, x), v.single_caption(x), v.left_caption(*other)][kind]
            ok = kind == 0
            pair_label_ok.append(kind in (0, 1))
        hits.append(ok)
        sim[i, idx[tuple(cap.tolist())]] = 1.0
    m = retrieval_metrics(sim, dataset, "train")
    assert m["n"] == len(split) == 54
    assert m["acc"] == m["relaxed"] == _mean(hits)
    assert m["label_set"] == _mean(pair_label_ok)  # over two-object images only
    assert len(pair_label_ok) == int(split.is_pair.sum()) == 24


def test_retrieval_metrics_single_object_split(dataset):
    split = dataset.splits["val_single"]
    sim = _base_sim(len(split), len(dataset.captions))
    sim[torch.arange(len(split)), split.targets[:, 0]] = 1.0
    sim[:3, 0] = 2.0  # rows 0..2 now retrieve caption 0 ("1 is in the image")
    m = retrieval_metrics(sim, dataset, "val_single")
    expected = _mean([i >= 3 or int(split.targets[i, 0]) == 0 for i in range(len(split))])
    assert m["acc"] == m["relaxed"] == expected
    assert m["label_set"] is None


def test_retrieval_metrics_left_right_mode(dataset_lr):
    ds = dataset_lr
    v, idx = ds.vocab, _index(ds)
    split = ds.splits["val_unseen"]
    n = len(split)
    assert n == 10 and (split.targets >= 0).all()  # two true captions per image
    sim = _base_sim(n, len(ds.captions))

    def c(cap: torch.Tensor) -> int:
        return idx[tuple(cap.tolist())]

    # (top-1, top-2) captions per row, and the expected (hit, relaxed, label_set)
    expected = []
    for i, (x, y) in enumerate(split.objects.tolist()):
        left, right = c(v.left_caption(x, y)), c(v.right_caption(x, y))
        assert split.targets[i].tolist() == [left, right]
        wrong = c(v.single_caption(1))
        swapped_left, swapped_right = c(v.left_caption(y, x)), c(v.right_caption(y, x))
        top1, top2, outcome = [
            (left, right, (True, True, True)),  # both true captions on top
            (left, right, (True, True, True)),
            (right, left, (True, True, True)),  # order within the top 2 does not matter
            (right, left, (True, True, True)),
            (left, wrong, (False, True, True)),  # one true caption on top, a wrong second: relaxed only
            (right, wrong, (False, True, True)),
            (wrong, left, (False, False, False)),  # a true caption only in second place counts for nothing
            (swapped_left, left, (False, False, True)),  # right labels, wrong relation
            (swapped_right, right, (False, False, True)),
            (wrong, swapped_left, (False, False, False)),
        ][i]
        sim[i, top1] = 1.0
        sim[i, top2] = 0.9
        expected.append(outcome)
    m = retrieval_metrics(sim, ds, "val_unseen")
    assert m["n"] == n
    assert m["acc"] == _mean([e[0] for e in expected]) == pytest.approx(0.4)
    assert m["relaxed"] == _mean([e[1] for e in expected]) == pytest.approx(0.6)
    assert m["label_set"] == _mean([e[2] for e in expected]) == pytest.approx(0.8)


def test_retrieval_metrics_left_right_single_images_need_top1_only(dataset_lr):
    ds = dataset_lr
    split = ds.splits["val_single"]
    sim = _base_sim(len(split), len(ds.captions))
    sim[torch.arange(len(split)), split.targets[:, 0]] = 1.0  # second place is arbitrary background
    m = retrieval_metrics(sim, ds, "val_single")
    assert m["acc"] == m["relaxed"] == 1.0


def test_evaluate_matches_similarity_matrix(simplified_model, dataset):
    res = evaluate(simplified_model, dataset)
    assert list(res) == list(SPLITS)
    for split in SPLITS:
        sim = similarity_matrix(simplified_model, dataset, split)
        assert sim.shape == (len(dataset.splits[split]), len(dataset.captions))
        torch.testing.assert_close(
            sim, simplified_model.similarity(dataset.splits[split].images, dataset.captions), atol=1e-6, rtol=0
        )
        assert res[split] == retrieval_metrics(sim, dataset, split)
        assert res[split]["n"] == len(dataset.splits[split])
        assert 0.0 <= res[split]["acc"] <= res[split]["relaxed"] <= 1.0
    assert evaluate(simplified_model, dataset, splits=["val_unseen"]).keys() == {"val_unseen"}
    table = format_metrics(res)
    assert len(table.splitlines()) == 1 + len(SPLITS)
    assert "unseen pair" in table


def test_evaluate_with_hooks(simplified_model, dataset):
    base = evaluate(simplified_model, dataset, splits=["train"])

    def kill(act, hook):
        return act * 0

    # zeroing the token embeddings makes every caption embedding identical (only positions remain)
    res = evaluate(simplified_model, dataset, splits=["train"], text_hooks=[("hook_embed", kill)])
    assert res != base
    res_v = evaluate(simplified_model, dataset, splits=["train"], vision_hooks=[("blocks.0.hook_attn_out", kill)])
    sim = similarity_matrix(simplified_model, dataset, "train", vision_hooks=[("blocks.0.hook_attn_out", kill)])
    assert res_v["train"] == retrieval_metrics(sim, dataset, "train")
    assert no_hooks_left(simplified_model.vision) and no_hooks_left(simplified_model.text)
    assert evaluate(simplified_model, dataset, splits=["train"]) == base


def test_evaluate_bad_inputs(dataset):
    model = make_model("simplified", seed=50)
    with pytest.raises(ValueError, match="unknown splits"):
        evaluate(model, dataset, splits=["val_nope"])
    other = build_dataset(DataConfig(n_labels=7, n_heldout=2, n2=2))
    with pytest.raises(ValueError, match="n_labels"):
        evaluate(model, other)
    wrong_d = build_dataset(DataConfig(n_labels=6, n_heldout=2, n1=3, n_val=3, n2=2, d_image=8))
    with pytest.raises(ValueError, match="length"):
        evaluate(model, wrong_d)


def test_evaluate_raises_in_train_mode(dataset):
    model = make_model("simplified", seed=51).train()
    with pytest.raises(ValueError, match="eval mode"):
        evaluate(model, dataset)
    model.eval()
    assert set(evaluate(model, dataset)) == set(SPLITS)


def test_evaluate_rejects_a_tower_in_train_mode(dataset):
    model = make_model("simplified", seed=52)
    model.vision.train()  # dropout is on in the vision tower although the wrapper says eval
    assert not model.training
    with pytest.raises(ValueError, match="eval"):
        evaluate(model, dataset)


def test_evaluate_in_eval_mode_applies_no_dropout(dataset):
    """A model with dropout 0.9 evaluates exactly as the same weights with dropout 0 (dropout would change the
    similarities, and so the accuracies, between calls)."""
    noisy = make_model("full", seed=53, dropout=0.9)
    clean = make_model("full", seed=53, dropout=0.0)
    clean.load_state_dict(noisy.state_dict())
    sims = [similarity_matrix(m, dataset, "val_unseen") for m in (noisy, noisy, clean)]
    torch.testing.assert_close(sims[0], sims[2], rtol=0, atol=0)
    torch.testing.assert_close(sims[1], sims[2], rtol=0, atol=0)
    assert evaluate(noisy, dataset) == evaluate(clean, dataset)


def test_accuracies_are_exact_counts_over_n():
    """0.93, not float32's 0.9300000071525574: a share is the count of hits over n, in Python floats."""
    from hooked_clip1d.evaluation import _fraction

    hits = torch.tensor([True] * 93 + [False] * 7)
    assert _fraction(hits) == 0.93 and repr(_fraction(hits)) == "0.93"
    assert _fraction(torch.zeros(0, dtype=torch.bool)) != _fraction(torch.zeros(0, dtype=torch.bool))  # nan
