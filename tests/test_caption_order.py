"""The shuffled-caption trained control (DataConfig.caption_order, verdicts v3): the same images and validation
captions as the paper's data, training captions that name a two-object image's objects in a random order."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import DataConfig, build_dataset


def test_shuffled_captions_keep_the_images_and_validation_and_carry_no_order():
    a, b = build_dataset(DataConfig()), build_dataset(DataConfig(caption_order="shuffled"))
    assert torch.equal(a.captions, b.captions)  # the same caption table, in the same order
    for name in a.splits:
        assert torch.equal(a.splits[name].images, b.splits[name].images)
        if name != "train":
            assert torch.equal(a.splits[name].targets, b.splits[name].targets)
    tr_a, tr_b = a.splits["train"], b.splits["train"]
    two = tr_a.objects[:, 1] > 0
    changed = (tr_a.targets != tr_b.targets).any(-1)
    assert not changed[~two].any()  # single-object captions untouched
    assert 0.4 < changed[two].float().mean() < 0.6  # about half the two-object captions swapped
    # a swapped caption names the same two objects, the other way round: the label set stays, the order goes
    for i in torch.nonzero(changed).flatten()[:20].tolist():
        x, y = tr_a.objects[i].tolist()
        cap = a.captions[tr_b.targets[i, 0]]
        assert torch.equal(cap, a.vocab.left_caption(y, x))
    assert torch.equal(build_dataset(DataConfig(caption_order="shuffled")).splits["train"].targets, tr_b.targets)


def test_caption_order_is_validated_and_saved():
    with pytest.raises((ValueError, TypeError)):
        DataConfig(caption_order="random")
    assert DataConfig.from_dict(DataConfig(caption_order="shuffled").to_dict()).caption_order == "shuffled"
    assert DataConfig.from_dict({"n_labels": 20}).caption_order == "ordered"  # saved before the field
