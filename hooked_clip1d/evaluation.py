"""Image-to-text retrieval accuracy per split, with hooks (Paper Sec. 2.3, Sec. 7, App. G, J).

For each image the candidates are *all* captions of the training and validation sets (``Dataset.captions``).

- ``acc``: a hit when the true caption is the most similar (``left`` mode); with two true captions
  (``left_right``), when both are the top 2 (Sec. 7).
- ``relaxed``: a hit when the most similar caption is any true caption (App. J).
- ``label_set`` (two-object images only): the most similar caption is a two-object caption about the same two
  labels, in either order or relation (XLY or YLX, and XRY or YRX in ``left_right`` mode) (App. G).

A tie at the top is a miss: a caption that ties with the true one(s) is as similar, so the image did not pick it
(an image whose embedding is 0, e.g. under a hook that zeroes it, ties every caption and scores 0, not the share of
images whose true caption happens to come first in the table).

Hooks passed as ``vision_hooks`` / ``text_hooks`` stay on while embedding, so ablations evaluate in one call.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> model = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8), seed=0).eval()
    >>> res = evaluate(model, ds)
    >>> sorted(res)
    ['train', 'val_seen', 'val_single', 'val_unseen']
    >>> 0.0 <= res["val_unseen"]["acc"] <= 1.0
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from jaxtyping import Float

from hooked_clip1d.data.dataset import SPLITS, Dataset
from hooked_clip1d.model.captioning import caption_scores
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.modes import check_eval

Hooks = Sequence[tuple[str | Callable, Callable]]


@torch.no_grad()
def embed_captions(model: CLIP1D, dataset: Dataset, text_hooks: Hooks = ()) -> Float[torch.Tensor, "n_captions d"]:
    """Projected text representations of the caption table (the model in eval mode: dropout would draw the global
    RNG and change them)."""
    check_eval(model, "embed_captions")
    caps = dataset.captions.to(model.W_proj.device)
    with model.text.hooks(fwd_hooks=list(text_hooks)):
        return model.encode_text(caps)


@torch.no_grad()
def embed_images(
    model: CLIP1D, dataset: Dataset, split: str, vision_hooks: Hooks = ()
) -> Float[torch.Tensor, "n_images d"]:
    """Image representations of one split, with ``vision_hooks`` on (the model in eval mode)."""
    check_eval(model, "embed_images")
    images = dataset.splits[split].images.to(model.W_proj.device)
    with model.vision.hooks(fwd_hooks=list(vision_hooks)):
        return model.encode_image(images)


@torch.no_grad()
def similarity_matrix(
    model: CLIP1D, dataset: Dataset, split: str, vision_hooks: Hooks = (), text_hooks: Hooks = ()
) -> Float[torch.Tensor, "n_images n_captions"]:
    """Cosine similarity of every image of ``split`` with every caption of the table (Fig. 3 right)."""
    text_emb = embed_captions(model, dataset, text_hooks)
    return CLIP1D.cosine(embed_images(model, dataset, split, vision_hooks), text_emb)


@torch.no_grad()
def caption_similarity(
    model: CLIP1D, dataset: Dataset, split: str, vision_hooks: Hooks = (), text_hooks: Hooks = ()
) -> Float[torch.Tensor, "n_images n_captions"]:
    """A captioning model's counterpart of ``similarity_matrix``: the log-likelihood of every caption of the table
    given every image of ``split`` (``model.captioning.caption_scores``), with the hooks on (the model in eval
    mode). A non-finite score is an error."""
    check_eval(model, "caption_similarity")
    images = dataset.splits[split].images.to(model.W_U.device)
    caps = dataset.captions.to(model.W_U.device)
    with model.vision.hooks(fwd_hooks=list(vision_hooks)), model.text.hooks(fwd_hooks=list(text_hooks)):
        sim = caption_scores(model, images, caps)
    if not torch.isfinite(sim).all():
        raise ValueError(
            f"evaluate: caption scores of split {split!r} are not finite (NaN or inf; a hook or the weights?)"
        )
    return sim


def caption_label_sets(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """For each caption: (is a two-object caption, sorted label pair [n, 2])."""
    v = dataset.vocab
    caps = dataset.captions
    is_pair = (caps[:, 1] == v.left_of) | (caps[:, 1] == v.right_of)
    a = caps[:, 0]
    b = torch.where(is_pair, caps[:, 2], torch.zeros_like(a))
    return is_pair, torch.stack([torch.minimum(a, b), torch.maximum(a, b)], -1)


def _fraction(hits: torch.Tensor) -> float:
    """The share of True in ``hits``, as an exact count over n (0.93, not float32's 0.9300000071525574)."""
    return int(hits.sum()) / hits.numel() if hits.numel() else float("nan")  # an empty split: nan, as a mean


def retrieval_metrics(
    sim: Float[torch.Tensor, "n_images n_captions"], dataset: Dataset, split: str
) -> dict[str, float | int | None]:
    """Metrics of one split from its similarity matrix ``[len(split), len(dataset.captions)]`` (see the module
    docstring; a tie at the top is a miss)."""
    if split not in dataset.splits:
        raise ValueError(f"unknown split {split!r}; known: {list(dataset.splits)}")
    s = dataset.splits[split]
    want = (len(s), len(dataset.captions))
    if sim.ndim != 2 or tuple(sim.shape) != want:  # 7 columns scored 0 without a word
        raise ValueError(
            f"retrieval_metrics: sim must be [images of {split!r}, captions of the table] = {list(want)}, got "
            f"{list(sim.shape)}"
        )
    targets = s.targets.to(sim.device)
    n_true = (targets >= 0).sum(-1)  # 1 or 2
    t0, t1 = targets[:, 0], targets[:, 1]
    rows = torch.arange(len(s), device=sim.device)
    is_true = torch.zeros(sim.shape, dtype=torch.bool, device=sim.device)
    is_true[rows, t0] = True
    is_true[rows[t1 >= 0], t1[t1 >= 0]] = True
    top = sim.max(-1, keepdim=True).values
    at_top = sim == top  # every caption as similar as the best: ties included
    relaxed = ~(at_top & ~is_true).any(-1)  # only true captions at the top
    others_best = sim.masked_fill(is_true, float("-inf")).max(-1).values
    true_worst = sim.masked_fill(~is_true, float("inf")).min(-1).values
    both = true_worst > others_best  # the true captions strictly above every other one: the top 2
    hit = torch.where(n_true == 1, relaxed, both)  # one true caption: alone at the top
    out: dict[str, float | int | None] = {
        "n": len(s),
        "acc": _fraction(hit),
        "relaxed": _fraction(relaxed),
    }
    pair = s.is_pair.to(sim.device)
    if pair.any():
        cap_pair, cap_set = caption_label_sets(dataset)
        cap_pair, cap_set = cap_pair.to(sim.device), cap_set.to(sim.device)
        objs = s.objects.to(sim.device)
        img_set = torch.stack([objs.min(-1).values, objs.max(-1).values], -1)
        good = cap_pair[None, :] & (cap_set[None, :, :] == img_set[:, None, :]).all(-1)  # [n, captions]
        ok = ~(at_top & ~good).any(-1)  # every caption at the top is about the image's two labels
        out["label_set"] = _fraction(ok[pair])
    else:
        out["label_set"] = None
    return out


@torch.no_grad()
def evaluate(
    model: CLIP1D,
    dataset: Dataset,
    splits: Sequence[str] = SPLITS,
    vision_hooks: Hooks = (),
    text_hooks: Hooks = (),
) -> dict[str, dict[str, float | int | None]]:
    """Retrieval metrics per split (``acc``, ``relaxed``, ``label_set``, ``n``), with optional hooks.

    The model should be in eval mode (dropout off); this is checked.
    """
    check_eval(model, "evaluate()")
    if isinstance(splits, str) or not list(splits):  # a string was read letter by letter; [] returned {}
        raise ValueError(
            f"evaluate: splits must be a non-empty list of split names, e.g. [{splits!r}], got {splits!r}; known: "
            f"{list(dataset.splits)}"
        )
    unknown = [s for s in splits if s not in dataset.splits]
    if unknown:
        raise ValueError(f"unknown splits {unknown}; known: {list(dataset.splits)}")
    if dataset.config.n_labels != model.cfg.n_labels:
        raise ValueError(
            f"dataset has n_labels={dataset.config.n_labels} but the model was built for {model.cfg.n_labels}"
        )
    own = getattr(model, "data_config", None)
    if own is not None and own.n_heldout != dataset.config.n_heldout:  # "unseen" would count pairs it trained on
        raise ValueError(
            f"the model was trained with labels {own.n_pair + 1}..{own.n_labels} held out of two-object training "
            f"(n_heldout={own.n_heldout}); this dataset holds out {dataset.config.n_pair + 1}.."
            f"{dataset.config.n_labels} (n_heldout={dataset.config.n_heldout}), so its 'unseen' pairs include pairs "
            "the model trained on: use build_dataset(model.data_config) (or a config with its n_heldout)"
        )
    drawn = ("seed", "n1", "n2", "n_val", "d_image")  # what decides which images are drawn for which split
    other = [f for f in drawn if own is not None and getattr(own, f) != getattr(dataset.config, f)]
    leaky = [sp for sp in splits if sp != "val_unseen"]  # unseen pairs are never trained on, whatever the draw
    if other and leaky:  # another draw: its seen / single images include the model's training images (53 of 100)
        raise ValueError(
            "this dataset was drawn with "
            + ", ".join(f"{f}={getattr(dataset.config, f)!r}" for f in other)
            + " but the model's training data with "
            + ", ".join(f"{f}={getattr(own, f)!r}" for f in other)
            + f": its splits {leaky} would include images the model trained on; use "
            "build_dataset(model.data_config) (another draw is fine for val_unseen alone)"
        )
    if model.cfg.objective == "captioning":  # each caption's log-likelihood in the similarity's place
        return {
            split: retrieval_metrics(
                caption_similarity(model, dataset, split, vision_hooks, text_hooks), dataset, split
            )
            for split in splits
        }
    text_emb = embed_captions(model, dataset, text_hooks)
    out = {}
    if not torch.isfinite(text_emb).all():
        raise ValueError("evaluate: the caption embeddings are not finite (NaN or inf; a text hook or the weights?)")
    for split in splits:
        img_emb = embed_images(model, dataset, split, vision_hooks)
        sim = CLIP1D.cosine(img_emb, text_emb)
        if not torch.isfinite(sim).all():
            raise ValueError(
                f"evaluate: similarities of split {split!r} are not finite (NaN or inf; a vision hook or the weights?)"
            )
        out[split] = retrieval_metrics(sim, dataset, split)
    return out


def format_metrics(res: dict[str, dict[str, float | int | None]]) -> str:
    """A small text table of ``evaluate`` output."""
    from hooked_clip1d.data.dataset import SPLIT_TITLES

    lines = [f"{'split':<28}{'n':>6}{'acc':>8}{'relaxed':>9}{'label-set':>11}"]
    for k, m in res.items():
        ls = m.get("label_set")
        lines.append(
            f"{SPLIT_TITLES.get(k, k):<28}{m['n']:>6}{m['acc']:>8.3f}{m['relaxed']:>9.3f}"
            f"{(f'{ls:.3f}' if ls is not None else '-'):>11}"
        )
    return "\n".join(lines)
