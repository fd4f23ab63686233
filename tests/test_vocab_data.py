"""Vocabulary conversions and the seeded synthetic dataset (splits, counts, disjointness, validation)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from hooked_clip1d import DataConfig, Vocabulary, build_dataset
from hooked_clip1d.data.dataset import SPLITS

# ---------------------------------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------------------------------


def test_vocab_ids_layout():
    v = Vocabulary(20)
    assert (v.background, v.cls, v.image_vocab_size) == (0, 21, 22)
    assert (v.pad, v.is_, v.in_the_image, v.left_of, v.right_of, v.eot, v.text_vocab_size) == (
        0,
        21,
        22,
        23,
        24,
        25,
        26,
    )


def test_caption_round_trips():
    v = Vocabulary(20)
    left = v.left_caption(17, 19)
    assert left.tolist() == [17, v.left_of, 19, v.eot]
    assert v.caption_to_text(left) == "17 is on the left of 19"
    right = v.right_caption(17, 19)
    assert right.tolist() == [19, v.right_of, 17, v.eot]
    assert v.caption_to_text(right) == "19 is on the right of 17"
    single = v.single_caption(3)
    assert single.tolist() == [3, v.is_, v.in_the_image, v.eot]
    assert v.caption_to_text(single) == "3 is in the image"
    for cap in (left, right, single):
        assert torch.equal(v.text_to_caption(v.caption_to_text(cap)), cap)
    assert torch.equal(v.text_to_caption("17 is on the left of 19"), left)
    assert torch.equal(v.text_to_caption("19 is on the right of 17"), right)
    # whitespace and a trailing full stop are tolerated
    assert torch.equal(v.text_to_caption("  17  is on the   left of 19. "), left)


def test_every_caption_of_a_dataset_round_trips(dataset):
    v = dataset.vocab
    for cap in dataset.captions:
        assert torch.equal(v.text_to_caption(v.caption_to_text(cap)), cap)


def test_caption_to_text_stops_at_first_eot():
    v = Vocabulary(5)
    assert v.caption_to_text(torch.tensor([3, v.eot, 1, 2])) == "3"
    assert v.caption_tokens_str(torch.tensor([3, v.is_, v.in_the_image, v.eot])) == [
        "3",
        "is",
        "in the image",
        "<eot>",
    ]


def test_image_round_trips():
    v = Vocabulary(20)
    img = v.image({2: 17, 5: 19}, d_image=10)
    assert img.tolist() == [21, 0, 0, 17, 0, 0, 19, 0, 0, 0, 0]
    assert v.image_to_text(img) == "C . . 17 . . 19 . . . ."
    assert torch.equal(v.text_to_image("C . . 17 . . 19 . . . ."), img)
    assert torch.equal(v.text_to_image(v.image_to_text(img)), img)
    assert v.image_tokens_str(img)[:4] == ["[CLS]", "·", "·", "17"]


def test_every_image_of_a_dataset_round_trips(dataset):
    v = dataset.vocab
    for split in dataset.splits.values():
        for img in split.images[:20]:
            assert torch.equal(v.text_to_image(v.image_to_text(img)), img)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "17 is left of 19",
        "17 is on the left of",
        "17 is on the top of 19",
        "x is in the image",
        "1.5 is in the image",
        "0 is in the image",
        "21 is in the image",
        "-1 is in the image",
        "17 is on the left of 25",
        "19 is on the right of 0",
        "17 is in the image and more",
    ],
)
def test_text_to_caption_parse_errors(text):
    with pytest.raises(ValueError, match="cannot parse caption"):
        Vocabulary(20).text_to_caption(text)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "must start with 'C'"),
        (". C . 3", "must start with 'C'"),
        ("C . Z .", "pixel 1"),
        ("C . -1 .", "pixel 1"),
        ("C . 21 .", "outside 1..20"),
        ("C . 0 .", "outside 1..20"),
        ("C", "no pixels"),
        ("  C  ", "no pixels"),
    ],
)
def test_text_to_image_parse_errors(text, match):
    with pytest.raises(ValueError, match=match):
        Vocabulary(20).text_to_image(text)


@pytest.mark.parametrize("d_image", [0, -3, True])
def test_image_refuses_a_bad_pixel_count(d_image):
    # d_image=0 gave a CLS-only image that the tower refused later for its length, not for this
    with pytest.raises(ValueError, match=r"d_image \(the number of pixels\) must be an int >= 1"):
        Vocabulary(20).image({}, d_image=d_image)


def test_vocab_bad_ids_raise():
    v = Vocabulary(5)
    with pytest.raises(ValueError, match="outside"):
        v.caption_to_text(torch.tensor([99, v.eot]))
    with pytest.raises(ValueError, match="outside"):
        v.image_to_text(torch.tensor([v.cls, 9]))
    with pytest.raises(ValueError, match="outside"):
        v.image({10: 1}, d_image=10)
    with pytest.raises(ValueError, match="outside 1..5"):
        v.left_caption(1, 6)
    with pytest.raises(ValueError, match="outside 1..5"):
        v.single_caption(0)
    with pytest.raises(ValueError, match="n_labels"):
        Vocabulary(0)


# ---------------------------------------------------------------------------------------------------------------------
# Dataset: counts
# ---------------------------------------------------------------------------------------------------------------------

SETTINGS = [
    dict(n_labels=6, n_heldout=2, n2=2),
    dict(n_labels=6, n_heldout=2, n2=2, caption_mode="left_right"),
    dict(n_labels=7, n_heldout=3, n1=3, n2=4, n_val=2, d_image=8, seed=5),
    dict(n_labels=5, n_heldout=2, n1=1, n2=2, n_val=1, d_image=3, caption_mode="left_right"),
    dict(n_labels=8, n_heldout=4, n1=2, n2=6, n_val=3, d_image=6, seed=11),
]


def _ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.fixture(scope="module", params=SETTINGS, ids=_ids)
def built(request):
    cfg = DataConfig(**request.param)
    return cfg, build_dataset(cfg)


def test_split_counts(built):
    cfg, ds = built
    n_pair = cfg.n_labels - cfg.n_heldout
    assert cfg.n_pair == n_pair
    counts = {k: len(s) for k, s in ds.splits.items()}
    assert list(counts) == list(SPLITS)
    assert counts == {
        "train": cfg.n_labels * cfg.n1 + n_pair * (n_pair - 1) * cfg.n2,
        "val_single": cfg.n_labels * cfg.n_val,
        "val_seen": n_pair * (n_pair - 1) * cfg.n_val,
        "val_unseen": cfg.n_heldout * (cfg.n_heldout - 1) * cfg.n_val,
    }
    for s in ds.splits.values():
        assert s.images.shape == (len(s), cfg.d_image + 1)
        assert s.targets.shape == s.objects.shape == s.positions.shape == (len(s), 2)
        assert s.images.dtype == s.targets.dtype == torch.long


def test_training_pairs_counts(built):
    cfg, ds = built
    tr = ds.splits["train"]
    imgs, caps = ds.training_pairs()
    n_two = int(tr.is_pair.sum())
    assert n_two == cfg.n_pair * (cfg.n_pair - 1) * cfg.n2
    extra = n_two if cfg.caption_mode == "left_right" else 0
    assert imgs.shape == (len(tr) + extra, cfg.d_image + 1)
    assert caps.shape == (len(tr) + extra, 4)
    # every training pair is an (image, true caption) pair
    v = ds.vocab
    for img, cap in zip(imgs, caps, strict=True):
        labels = [int(t) for t in img[1:] if t > 0]
        if len(labels) == 1:
            assert torch.equal(cap, v.single_caption(labels[0]))
        else:
            x, y = labels  # left to right
            assert torch.equal(cap, v.left_caption(x, y)) or (
                cfg.caption_mode == "left_right" and torch.equal(cap, v.right_caption(x, y))
            )


def test_caption_table_is_distinct_and_complete(built):
    cfg, ds = built
    rows = [tuple(c) for c in ds.captions.tolist()]
    assert len(rows) == len(set(rows))
    n_pairs = cfg.n_pair * (cfg.n_pair - 1) + cfg.n_heldout * (cfg.n_heldout - 1)
    per_pair = 2 if cfg.caption_mode == "left_right" else 1
    assert len(rows) == cfg.n_labels + per_pair * n_pairs
    used = set()
    for s in ds.splits.values():
        used |= set(s.targets[s.targets >= 0].tolist())
    assert used == set(range(len(rows)))  # every caption is the true caption of some image


# ---------------------------------------------------------------------------------------------------------------------
# Dataset: content and disjointness
# ---------------------------------------------------------------------------------------------------------------------


def test_images_match_metadata(built):
    cfg, ds = built
    v = ds.vocab
    for s in ds.splits.values():
        assert (s.images[:, 0] == v.cls).all()
        assert ((s.images[:, 1:] >= 0) & (s.images[:, 1:] <= cfg.n_labels)).all()
        for img, objs, pos in zip(s.images, s.objects, s.positions, strict=True):
            x, y = objs.tolist()
            p1, p2 = pos.tolist()
            expected = torch.zeros(cfg.d_image + 1, dtype=torch.long)
            expected[0] = v.cls
            expected[p1 + 1] = x
            if y > 0:
                assert 0 <= p1 < p2 < cfg.d_image
                expected[p2 + 1] = y
                assert x != y
            else:
                assert p2 == -1 and 0 <= p1 < cfg.d_image
            assert torch.equal(img, expected)


def test_targets_are_the_right_captions(built):
    cfg, ds = built
    v = ds.vocab
    n_cap = len(ds.captions)
    for s in ds.splits.values():
        t = s.targets
        assert ((t >= 0) & (t < n_cap) | (t == -1)).all()
        assert (t[:, 0] >= 0).all()
        for (x, y), (t0, t1) in zip(s.objects.tolist(), t.tolist(), strict=True):
            if y == 0:
                assert torch.equal(ds.captions[t0], v.single_caption(x))
                assert t1 == -1
            else:
                # left caption names the left object first
                assert torch.equal(ds.captions[t0], v.left_caption(x, y))
                if cfg.caption_mode == "left_right":
                    assert torch.equal(ds.captions[t1], v.right_caption(x, y))
                else:
                    assert t1 == -1


def test_split_kinds_and_labels(built):
    cfg, ds = built
    s = ds.splits
    n_tr_single = int((~s["train"].is_pair).sum())
    assert n_tr_single == cfg.n_labels * cfg.n1
    assert not s["val_single"].is_pair.any()
    assert s["val_seen"].is_pair.all() and s["val_unseen"].is_pair.all()
    # two-object training and seen-pair images use only labels 1..n_pair
    for name in ("train", "val_seen"):
        pairs = s[name].objects[s[name].is_pair]
        assert ((pairs >= 1) & (pairs <= cfg.n_pair)).all()
    # unseen pairs use only the held-out labels
    unseen = s["val_unseen"].objects
    assert ((unseen > cfg.n_pair) & (unseen <= cfg.n_labels)).all()
    # every ordered pair appears the configured number of times
    for name, pool, n in (
        ("train", range(1, cfg.n_pair + 1), cfg.n2),
        ("val_seen", range(1, cfg.n_pair + 1), cfg.n_val),
        ("val_unseen", range(cfg.n_pair + 1, cfg.n_labels + 1), cfg.n_val),
    ):
        pairs = [tuple(p) for p in s[name].objects[s[name].is_pair].tolist()]
        assert sorted(pairs) == sorted(p for p in itertools.permutations(pool, 2) for _ in range(n))
    # every label appears n1 times alone in train and n_val times in val_single
    for name, n in (("train", cfg.n1), ("val_single", cfg.n_val)):
        labels = s[name].objects[~s[name].is_pair][:, 0].tolist()
        assert sorted(labels) == sorted(x for x in range(1, cfg.n_labels + 1) for _ in range(n))


def test_train_and_validation_are_disjoint(built):
    cfg, ds = built
    s = ds.splits
    tr = s["train"]

    def singles(split):
        objs, pos = split.objects.tolist(), split.positions.tolist()
        return {(x, p1) for (x, y), (p1, _p2) in zip(objs, pos, strict=True) if y == 0}

    train_single = singles(tr)
    val_single = singles(s["val_single"])
    assert len(train_single) == cfg.n_labels * cfg.n1  # distinct positions per label
    assert len(val_single) == cfg.n_labels * cfg.n_val
    assert not train_single & val_single

    def scenes(split):
        return [tuple(o + p) for o, p in zip(split.objects.tolist(), split.positions.tolist(), strict=True)]

    train_pairs = {sc for sc in scenes(tr) if sc[1] > 0}
    seen = scenes(s["val_seen"])
    unseen = scenes(s["val_unseen"])
    assert len(train_pairs) == cfg.n_pair * (cfg.n_pair - 1) * cfg.n2
    assert len(set(seen)) == len(seen) and len(set(unseen)) == len(unseen)
    assert not train_pairs & set(seen)
    # no image is shared between any two splits
    as_rows = {name: {tuple(r) for r in sp.images.tolist()} for name, sp in s.items()}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not as_rows[a] & as_rows[b], (a, b)


def test_describe(dataset):
    line = dataset.describe("val_unseen", 0)
    img, cap = line.split("  ->  ")
    assert img.startswith("C ")
    assert " is on the left of " in cap
    assert dataset.describe(dataset.splits["train"], 0).endswith("is in the image")


# ---------------------------------------------------------------------------------------------------------------------
# Dataset: determinism
# ---------------------------------------------------------------------------------------------------------------------


def _tensors(ds):
    out = {"captions": ds.captions}
    for name, s in ds.splits.items():
        for f in ("images", "targets", "objects", "positions"):
            out[f"{name}.{f}"] = getattr(s, f)
    return out


def test_same_seed_same_dataset():
    cfg = DataConfig(n_labels=6, n_heldout=2, n2=2, seed=3)
    a, b = _tensors(build_dataset(cfg)), _tensors(build_dataset(DataConfig(**cfg.to_dict())))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_different_seed_different_dataset():
    a = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2, seed=0))
    b = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2, seed=1))
    for name in SPLITS:
        assert not torch.equal(a.splits[name].images, b.splits[name].images), name
    assert torch.equal(a.captions, b.captions)  # the caption table does not depend on the seed


def test_data_config_dict_round_trip():
    cfg = DataConfig(n_labels=7, n_heldout=3, caption_mode="left_right", seed=4)
    assert DataConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown DataConfig fields"):
        DataConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    assert DataConfig().batch_size == 50 and cfg.batch_size == 100


# ---------------------------------------------------------------------------------------------------------------------
# Dataset: impossible settings fail in the constructor, naming the field
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(n1=6, n_val=5, d_image=10), "n1"),  # n1 + n_val > d_image
        (dict(n1=1, n_val=1, d_image=4, n2=6), "n2"),  # n2 + n_val > C(4, 2) = 6
        (dict(n_val=5, n1=5, d_image=10, n2=41), "n2"),  # C(10, 2) = 45
        (dict(n_labels=3, n_heldout=2), "n_labels"),  # n_pair = 1 < 2
        (dict(n_labels=2, n_heldout=5), "n_labels"),  # n_pair < 0
        (dict(n_heldout=1), "n_heldout"),
        (dict(n_heldout=0), "n_heldout"),
        (dict(caption_mode="both"), "caption_mode"),
        (dict(n1=0), "n1"),
        (dict(n2=0), "n2"),
        (dict(n_val=0), "n_val"),
        (dict(d_image=1), "d_image"),
        (dict(seed=-1), "seed"),
        (dict(n1=2.0), "n1"),
        (dict(n2="3"), "n2"),
        (dict(n_labels=6.5), "n_labels"),
        (dict(seed=None), "seed"),
        (dict(n2=True), "n2"),
    ],
)
def test_impossible_data_config_raises_before_any_work(kw, field, monkeypatch):
    import hooked_clip1d.data.dataset as data_mod

    def boom(*a, **k):  # the generator must not even be created
        raise AssertionError("DataConfig validation ran after work started")

    monkeypatch.setattr(data_mod.np.random, "default_rng", boom)
    # Our own validation raises ValueError; with the jaxtyping/beartype import hook of the pytest config,
    # annotated types (int, Literal) are checked first and raise jaxtyping.TypeCheckError (a TypeError).
    with pytest.raises((ValueError, TypeError), match=rf"\b{field}\b"):
        DataConfig(**kw)


def test_limits_are_reachable():
    # the tightest legal settings build
    d = 4
    ds = build_dataset(DataConfig(n_labels=4, n_heldout=2, n1=2, n_val=2, n2=math.comb(d, 2) - 2, d_image=d))
    assert len(ds.splits["train"]) == 4 * 2 + 2 * 1 * 4


def test_build_dataset_keeps_its_work_but_hands_out_tensors_of_their_own():
    """The last configs' datasets are kept (figures and their null draws build the same one many times): a caller
    that writes into its dataset changes no other call's, and a non-config is refused by name."""
    import pytest

    cfg = DataConfig(n_labels=6, n_heldout=2, n2=2, seed=3)
    a = build_dataset(cfg)
    before = build_dataset(cfg)
    a.splits["train"].images.zero_()
    a.captions.zero_()
    b = build_dataset(cfg)
    assert a.splits["train"].images is not b.splits["train"].images
    for name, sp in b.splits.items():
        for f in ("images", "targets", "objects", "positions"):
            assert torch.equal(getattr(sp, f), getattr(before.splits[name], f)), (name, f)
    assert torch.equal(b.captions, before.captions) and b.captions.abs().sum() > 0
    with pytest.raises(TypeError, match="DataConfig"):
        build_dataset({"n_labels": 6})


def test_check_int_is_the_one_count_check():
    """Counts were checked by ~30 hand-rolled copies with three wordings; now ``settings.checks.check_int``: bools,
    floats (even 2.0) and strings refused, NumPy ints returned as ints, the bound in the message."""
    import numpy as np

    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.settings.checks import check_int

    assert check_int(np.int64(4), "n") == 4 and type(check_int(np.int64(4), "n")) is int
    assert check_int(None, "k", none_ok=True) is None
    for bad in (True, 2.0, "3", 0, None):
        with pytest.raises(ValueError, match=r"n must be an int >= 1"):
            check_int(bad, "n")
    with pytest.raises(ValueError, match=r"TrainConfig.batch_size \(a contrastive loss\) must be an int >= 2"):
        TrainConfig(batch_size=1)
    with pytest.raises(ValueError, match="TrainConfig.threads must be an int >= 1 or None"):
        TrainConfig(threads=0)


def test_check_real_refuses_what_is_not_a_finite_real() -> None:
    """The one real-number check (TrainConfig's lr / weight_decay / eps / qk_bias_decay_scale, train_sae's l1 and lr,
    scale_query_key's c): bools, strings, NaN, infinities and values below the bound are refused by name."""
    import numpy as np

    from hooked_clip1d.settings.checks import check_real, is_real

    assert check_real(0, "x") == 0.0 and check_real(np.float64(0.5), "x", strict=True) == 0.5
    for bad in (True, "1", float("nan"), float("inf"), np.float32(1.0), None):
        assert not is_real(bad)
        with pytest.raises(ValueError, match=r"^x must be a finite number >= 0, got "):
            check_real(bad, "x")
    with pytest.raises(ValueError, match=r"x must be a finite number > 0, got 0"):
        check_real(0, "x", strict=True)
    with pytest.raises(ValueError, match=r"x must be a finite number >= 1, got 0.5"):
        check_real(0.5, "x", minimum=1)
