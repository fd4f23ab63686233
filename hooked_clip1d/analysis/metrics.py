"""Metrics as functions of the CLIP similarity, and the paired inputs that the causal analyses compare.

The relational *belief* of the model about a two-object scene is a logit difference between a caption and its
left/right swap (``"X is on the left of Y"`` vs ``"Y is on the left of X"``); both captions name the same two
labels, so the difference isolates the spatial relation. It is measured from either side:

- **image belief** (vision tower varies, captions fixed): for image ``i`` and its caption ``c_i``,
  ``s * (cos(img_i, c_i) - cos(img_i, swap(c_i)))``;
- **caption belief** (text tower varies, images fixed): for caption ``c_i`` and an image ``img_i`` it describes,
  ``s * (cos(c_i, img_i) - cos(c_i, mirror(img_i)))``,

with ``s = exp(logit_scale)`` (the CLIP logit scale; ``scale=False`` gives the plain cosine difference). Both are
positive when the model ranks the true relation first. A captioning model (model.captioning) has an image belief
only: ``log p(c_i | img_i) - log p(swap(c_i) | img_i)``, its caption scores' difference (no temperature, no
normalised embedding); its decoder reads the image, so a caption belief of its text tower alone does not exist.
``image_belief_metric`` / ``caption_belief_metric`` return batched metrics of a tower's pooled output, ready for
patching (``fn(pooled) -> [batch]``).

**Which metric for attribution patching** (``norm=``). AtP, EAP and EAP-IG estimate a patch's effect to first
order. The cosine above divides the varying embedding ``x`` by its own norm, so even where ``x`` moves linearly
with a node the metric does not, and the first-order estimate misses by the norm's curvature (on the shipped
models AtP reads heads ~15 % small with it). Three forms of the same belief:

- ``norm="live"`` (the default): ``s * (x / |x|) . (t_true - t_swap)``, CLIP's own logits;
- ``norm="frozen"``: ``s * (x / |x_clean|) . (t_true - t_swap)``, the norm held at its clean value per row (as a
  frozen LayerNorm scale): the same clean value as ``"live"``, and linear in ``x``;
- ``norm="none"``: ``s * x . (t_true - t_swap)``, the pre-normalisation logit difference (linear, another scale).

With ``"frozen"`` or ``"none"`` AtP is exact for every node whose path to the pooled output is linear (heads'
outputs and values in the attention-only towers without LayerNorm, edges into values and the readout), and the QK
fix makes queries, keys and score terms of a one-layer tower exact too; with ``"live"`` none of them is. The
package's measurement of the three on the shipped models is ``reproduce x-circuits`` (docs/analyses.md). The whole
CLIP's logits take the same choice through ``graph.Task(norm=...)`` / ``graph.mirror_task(norm=...)``.

The pairs: ``mirror_images`` reverses the pixels (CLS stays at position 0), which moves every object and flips
the relation (IDs §2.1, Alg. 1); ``swap_objects`` exchanges the two labels in place (positions kept);
``swap_captions`` exchanges the caption's two labels. A mirrored or object-swapped image is described by the
swapped caption.

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . . 2 . . . . . .")
    >>> cap = m.text.to_tokens("1 is on the left of 2")
    >>> m.vision.cfg.vocab.image_to_text(mirror_images(img)[0])
    'C . . . . . . 2 . . 1'
    >>> m.text.cfg.vocab.caption_to_text(swap_captions(cap, m.text.cfg.vocab)[0])
    '2 is on the left of 1'
    >>> image_belief(m, img, cap).shape  # one logit difference per (image, caption) row
    torch.Size([1])
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int

from hooked_clip1d.data.dataset import Split
from hooked_clip1d.data.vocab import Vocabulary
from hooked_clip1d.model.clip import CLIP1D

BeliefMetric = Callable[[torch.Tensor], torch.Tensor]
#: how a belief treats the varying embedding's norm (module docstring): the cosine, the clean norm, no norm
NORMS = ("live", "frozen", "none")


# ---- input checks ---------------------------------------------------------------------------------------------------
def _check_ids(x: object, what: str, length: int | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor of token ids, got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{what} must hold integer token ids, got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{what} must be shaped [batch, pos] with batch >= 1, got shape {tuple(x.shape)}")
    if length is not None and x.shape[1] != length:
        raise ValueError(f"{what} must have {length} tokens per row, got {x.shape[1]}")
    return x


def check_pair_images(images: Int[torch.Tensor, "batch pos"]) -> None:
    """Raise ``ValueError`` unless every image holds exactly two objects (a two-object scene).

    >>> check_pair_images(torch.tensor([[7, 1, 0, 2]]))
    >>> check_pair_images(torch.tensor([[7, 1, 0, 0]]))
    Traceback (most recent call last):
    ...
    ValueError: image 0 has 1 object(s); this analysis needs two-object images (a left and a right object)
    """
    _check_ids(images, "images")
    n_obj = (images[:, 1:] > 0).sum(-1)
    bad = (n_obj != 2).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        raise ValueError(
            f"image {i} has {int(n_obj[i])} object(s); "
            "this analysis needs two-object images (a left and a right object)"
        )


def check_pair_captions(captions: Int[torch.Tensor, "batch 4"], vocab: Vocabulary) -> None:
    """Raise ``ValueError`` unless every caption is a relation caption ``X <left of|right of> Y <eot>``.

    >>> v = Vocabulary(5)
    >>> check_pair_captions(v.left_caption(1, 2)[None], v)
    >>> check_pair_captions(v.single_caption(1)[None], v)
    Traceback (most recent call last):
    ...
    ValueError: caption 0 ('1 is in the image') is not a two-object relation caption 'X is on the left/right of Y'
    """
    _check_ids(captions, "captions", 4)
    rel = captions[:, 1]
    ok = ((rel == vocab.left_of) | (rel == vocab.right_of)) & (captions[:, 3] == vocab.eot)
    ok &= (captions[:, 0] >= 1) & (captions[:, 0] <= vocab.n_labels) & (captions[:, 2] >= 1)
    ok &= captions[:, 2] <= vocab.n_labels
    bad = (~ok).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        try:
            text = vocab.caption_to_text(captions[i])
        except ValueError:
            text = str(captions[i].tolist())
        raise ValueError(f"caption {i} ({text!r}) is not a two-object relation caption 'X is on the left/right of Y'")


# ---- paired inputs --------------------------------------------------------------------------------------------------
def mirror_images(images: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, "batch pos"]:
    """Reverse the pixels of each image, keeping CLS at position 0: pixel ``p`` moves to ``d_image - 1 - p``.

    Every left/right relation flips (IDs §2.1 mirror swapping).

    >>> mirror_images(torch.tensor([[7, 1, 0, 2, 0]])).tolist()
    [[7, 0, 2, 0, 1]]
    """
    _check_ids(images, "images")
    return torch.cat([images[:, :1], images[:, 1:].flip(1)], dim=1)


def swap_objects(images: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, "batch pos"]:
    """Exchange the two objects of each two-object image in place (positions kept, relation flipped).

    >>> swap_objects(torch.tensor([[7, 1, 0, 2, 0]])).tolist()
    [[7, 2, 0, 1, 0]]
    """
    check_pair_images(images)
    out = images.clone()
    idx = (images[:, 1:] > 0).nonzero()[:, 1].view(-1, 2) + 1  # [batch, 2] token positions, sorted
    rows = torch.arange(images.shape[0], device=images.device)
    out[rows, idx[:, 0]] = images[rows, idx[:, 1]]
    out[rows, idx[:, 1]] = images[rows, idx[:, 0]]
    return out


def object_token_positions(images: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, "batch 2"]:
    """Token positions (CLS = 0) of the left and the right object of each two-object image.

    >>> object_token_positions(torch.tensor([[7, 0, 1, 0, 2]])).tolist()
    [[2, 4]]
    """
    check_pair_images(images)
    return (images[:, 1:] > 0).nonzero()[:, 1].view(-1, 2) + 1


def swap_captions(captions: Int[torch.Tensor, "batch 4"], vocab: Vocabulary) -> Int[torch.Tensor, "batch 4"]:
    """Exchange the two labels of relation captions: ``X rel Y`` -> ``Y rel X`` (the relation flips).

    >>> v = Vocabulary(5)
    >>> v.caption_to_text(swap_captions(v.left_caption(1, 2)[None], v)[0])
    '2 is on the left of 1'
    """
    check_pair_captions(captions, vocab)
    return captions[:, [2, 1, 0, 3]]


def pair_inputs(
    split: Split, vocab: Vocabulary, n: int | None = None, seed: int = 0
) -> tuple[Int[torch.Tensor, "n pos"], Int[torch.Tensor, "n 4"]]:
    """The two-object images of a split with their ``X is on the left of Y`` captions (``n`` random rows if given).

    >>> from hooked_clip1d import DataConfig, build_dataset
    >>> ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    >>> imgs, caps = pair_inputs(ds.splits["val_unseen"], ds.vocab, n=3)
    >>> imgs.shape, caps.shape
    (torch.Size([3, 11]), torch.Size([3, 4]))
    """
    if not isinstance(split, Split):
        raise TypeError(f"pair_inputs needs a Split (dataset.splits[name]), got {type(split).__name__}")
    pair = split.is_pair
    if not bool(pair.any()):
        raise ValueError(f"split {split.name!r} has no two-object images")
    images, objects = split.images[pair], split.objects[pair]
    if n is not None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        gen = torch.Generator().manual_seed(seed)
        idx = torch.randperm(images.shape[0], generator=gen)[: min(n, images.shape[0])]
        images, objects = images[idx], objects[idx]
    left = torch.full_like(objects[:, 0], vocab.left_of)
    eot = torch.full_like(objects[:, 0], vocab.eot)
    captions = torch.stack([objects[:, 0], left, objects[:, 1], eot], dim=-1)
    return images, captions


def pair_grid(
    vocab: Vocabulary, d_image: int = 10, labels: Sequence[int] | None = None
) -> tuple[Int[torch.Tensor, "n pos"], Int[torch.Tensor, "n 2"], Int[torch.Tensor, "n 2"]]:
    """Every ordered pair of ``labels`` (default all) at every pixel pair p1 < p2: (images, objects, positions).

    ``objects`` is (left label, right label), ``positions`` their pixel indices, as in a ``Split``.

    >>> imgs, objs, pos = pair_grid(Vocabulary(3), d_image=4)
    >>> imgs.shape, objs[0].tolist(), pos[0].tolist()
    (torch.Size([36, 5]), [1, 2], [0, 1])
    """
    labels = list(range(1, vocab.n_labels + 1)) if labels is None else [int(x) for x in labels]
    for x in labels:
        if not 1 <= x <= vocab.n_labels:
            raise ValueError(f"label {x} is outside 1..{vocab.n_labels}")
    if len(set(labels)) < 2:
        raise ValueError("pair_grid needs at least two distinct labels")
    if d_image < 2:
        raise ValueError(f"d_image must be >= 2, got {d_image}")
    pairs = list(itertools.permutations(sorted(set(labels)), 2))
    pos_pairs = list(itertools.combinations(range(d_image), 2))
    objs = torch.tensor([xy for xy in pairs for _ in pos_pairs], dtype=torch.long)
    pos = torch.tensor([pp for _ in pairs for pp in pos_pairs], dtype=torch.long)
    images = torch.zeros(len(objs), d_image + 1, dtype=torch.long)
    images[:, 0] = vocab.cls
    rows = torch.arange(len(objs))
    images[rows, pos[:, 0] + 1] = objs[:, 0]
    images[rows, pos[:, 1] + 1] = objs[:, 1]
    return images, objs, pos


# ---- beliefs --------------------------------------------------------------------------------------------------------
def _scale(model: CLIP1D, scale: bool) -> torch.Tensor:
    if scale:
        return model.temperature_scale().detach()
    return torch.ones((), dtype=model.W_proj.dtype, device=model.W_proj.device)


def _check_norm(norm: object, clean: torch.Tensor | None, what: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if norm == "frozen" and clean is None:
        raise ValueError(f"norm='frozen' holds each row's norm at its clean value: pass the clean {what} ({what}=...)")


_HELD = threading.local()  # held_norms' switch, per thread


@contextlib.contextmanager
def held_norms(on: bool = True) -> Iterator[None]:
    """While on, ``normalize`` divides by a norm held out of the backward pass: the value is the cosine's, the
    gradient that of ``x / c`` with ``c = |x|`` a constant (how attribution patching linearises CLIP's logits, as it
    holds LayerNorm's scale; ``graph.Task.linearise``).

    Example:
        >>> x = torch.tensor([[3.0, 4.0]], requires_grad=True)
        >>> with held_norms():
        ...     y = normalize(x)
        >>> y.detach().tolist(), torch.autograd.grad(y[0, 0], x)[0].tolist()  # d(x0 / 5)/dx: the norm held
        ([[0.6000000238418579, 0.800000011920929]], [[0.20000000298023224, 0.0]])
    """
    before = getattr(_HELD, "on", False)
    _HELD.on = bool(on)
    try:
        yield
    finally:
        _HELD.on = before


def normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / |x|`` over the last dim (``F.normalize``'s value); inside ``held_norms`` the norm is held out of the
    backward pass."""
    if getattr(_HELD, "on", False):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12).detach()
    return F.normalize(x, dim=-1)


def _normalised(x: torch.Tensor, norm: str, clean_norm: torch.Tensor | None) -> torch.Tensor:
    if norm == "live":
        return normalize(x)
    if norm == "frozen":
        assert clean_norm is not None
        return x / clean_norm[:, None]
    return x


def check_model(model: object) -> CLIP1D:
    """``model`` if it is a ``CLIP1D``, else a ``TypeError`` saying what was passed."""
    if not isinstance(model, CLIP1D):
        raise TypeError(f"expected a CLIP1D model (load_model(...) or CLIP1D(cfg)), got {type(model).__name__}")
    return model


@torch.no_grad()
def image_belief_metric(
    model: CLIP1D,
    captions: Int[torch.Tensor, "batch 4"],
    scale: bool = True,
    *,
    norm: str = "live",
    images: Int[torch.Tensor, "batch pos"] | None = None,
) -> BeliefMetric:
    """A batched metric of vision-tower outputs: row ``i`` -> logit(c_i) - logit(swap(c_i)) for image row ``i``.

    The returned ``fn(pooled [batch, d_model]) -> [batch]`` scores the image representations (CLS outputs) of a
    vision run; use it with ``model.vision.run_with_hooks`` or as a patching metric. ``norm`` (module docstring):
    ``"live"`` (the cosine), ``"frozen"`` (each row divided by the norm of the clean ``images``' output, which it
    then needs) or ``"none"`` (the pre-normalisation logit difference). On a captioning model: the log-likelihood
    difference, read through the decoder's image prefix (``norm="live"`` and ``scale=True`` only: no embedding to
    normalise, no temperature to leave out).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img, cap = m.vision.to_tokens("C 1 2 . . . . . . . ."), m.text.to_tokens(["1 is on the left of 2"])
    >>> fn = image_belief_metric(m, cap)
    >>> fn(m.encode_image(img)).shape
    torch.Size([1])
    >>> frozen = image_belief_metric(m, cap, norm="frozen", images=img)  # same clean value, linear in the output
    >>> torch.allclose(frozen(m.encode_image(img)), fn(m.encode_image(img)))
    True
    """
    model = check_model(model)
    vocab = model.text.cfg.vocab
    check_pair_captions(captions, vocab)
    if model.cfg.objective == "captioning":
        return _captioner_image_belief(model, captions, scale, norm)
    _check_norm(norm, images if norm == "frozen" else captions, "images")
    captions = captions.to(model.W_proj.device)
    t_true = F.normalize(model.encode_text(captions), dim=-1)
    t_swap = F.normalize(model.encode_text(swap_captions(captions, vocab)), dim=-1)
    s = _scale(model, scale)
    n = captions.shape[0]
    clean_norm = None
    if norm == "frozen":
        assert images is not None
        check_paired(images, captions)
        clean_norm = model.encode_image(images.to(model.W_proj.device)).norm(dim=-1).clamp_min(1e-12)

    def metric(pooled: Float[torch.Tensor, "batch d_model"]) -> Float[torch.Tensor, " batch"]:
        if pooled.ndim != 2 or pooled.shape[0] != n:
            raise ValueError(f"the metric expects pooled image outputs [{n}, d_model], got {tuple(pooled.shape)}")
        v = _normalised(pooled, norm, clean_norm)
        return s * ((v * t_true).sum(-1) - (v * t_swap).sum(-1))

    metric.linear_in_output = norm != "live"  # type: ignore[attr-defined]  # first_order: readout is exact
    return metric


def _captioner_image_belief(
    model: CLIP1D, captions: Int[torch.Tensor, "batch 4"], scale: bool, norm: str
) -> BeliefMetric:
    """``image_belief_metric`` of a captioning model (model.captioning): row ``i`` -> log p(c_i | img_i) - log
    p(swap(c_i) | img_i), the decoder reading each pooled CLS output through the prefix (``hook_image_embed`` and
    ``W_prefix``, as the model's forward does). Log-likelihoods are the captioner's logits: there is no temperature
    to leave out (``scale=False`` is refused) and no normalised embedding (``norm`` must be ``"live"``)."""
    from hooked_clip1d.model.captioning import token_log_likelihoods

    if not scale:
        raise ValueError(
            "scale=False: a captioning model's belief is a log-likelihood difference, with no temperature to leave "
            "out (the cosine difference it would give does not exist); use scale=True"
        )
    if norm != "live":
        raise ValueError(
            f"norm={norm!r}: a captioning model's belief is a log-likelihood difference, with no normalised "
            "embedding to freeze or drop; use norm='live'"
        )
    captions = captions.to(model.W_U.device)
    swapped = swap_captions(captions, model.text.cfg.vocab)
    n = captions.shape[0]

    def metric(pooled: Float[torch.Tensor, "batch d_model"]) -> Float[torch.Tensor, " batch"]:
        if pooled.ndim != 2 or pooled.shape[0] != n:
            raise ValueError(f"the metric expects pooled image outputs [{n}, d_model], got {tuple(pooled.shape)}")
        prefix = model.hook_image_embed(pooled) @ model.W_prefix
        true = token_log_likelihoods(model, prefix, captions).sum(-1)
        return true - token_log_likelihoods(model, prefix, swapped).sum(-1)

    metric.linear_in_output = False  # type: ignore[attr-defined]  # the decoder is not linear in the CLS output
    return metric


@torch.no_grad()
def caption_belief_metric(
    model: CLIP1D,
    images: Int[torch.Tensor, "batch pos"],
    scale: bool = True,
    *,
    norm: str = "live",
    captions: Int[torch.Tensor, "batch 4"] | None = None,
) -> BeliefMetric:
    """A batched metric of text-tower outputs: row ``i`` -> logit(img_i) - logit(mirror(img_i)) of caption row ``i``.

    The returned ``fn(pooled [batch, d_text]) -> [batch]`` projects the EOT outputs of a text run with ``W_proj``
    and compares each with the image it describes and that image's mirror. ``norm`` as in ``image_belief_metric``
    (``"frozen"`` needs the clean ``captions``).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> fn = caption_belief_metric(m, m.vision.to_tokens("C 1 2 . . . . . . . ."))
    >>> fn(m.text(m.text.to_tokens("1 is on the left of 2"))).shape
    torch.Size([1])
    """
    model = check_model(model)
    check_pair_images(images)
    _check_norm(norm, captions if norm == "frozen" else images, "captions")
    images = images.to(model.W_proj.device)
    v_true = F.normalize(model.encode_image(images), dim=-1)
    v_mirror = F.normalize(model.encode_image(mirror_images(images)), dim=-1)
    s = _scale(model, scale)
    n = images.shape[0]
    clean_norm = None
    if norm == "frozen":
        assert captions is not None
        check_pair_captions(captions, model.text.cfg.vocab)
        check_paired(images, captions)
        clean_norm = model.encode_text(captions.to(model.W_proj.device)).norm(dim=-1).clamp_min(1e-12)

    def metric(pooled: Float[torch.Tensor, "batch d_text"]) -> Float[torch.Tensor, " batch"]:
        if pooled.ndim != 2 or pooled.shape[0] != n:
            raise ValueError(f"the metric expects pooled caption outputs [{n}, d_text], got {tuple(pooled.shape)}")
        t = _normalised(model.project_text(pooled), norm, clean_norm)
        return s * ((t * v_true).sum(-1) - (t * v_mirror).sum(-1))

    metric.linear_in_output = norm != "live"  # type: ignore[attr-defined]  # first_order: readout is exact
    return metric


def check_paired(images: torch.Tensor, captions: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``images`` and ``captions`` have one row each per pair.

    >>> check_paired(torch.zeros(2, 11), torch.zeros(3, 4))
    Traceback (most recent call last):
    ...
    ValueError: images (2) and captions (3) must pair row by row
    """
    if images.shape[0] != captions.shape[0]:
        raise ValueError(f"images ({images.shape[0]}) and captions ({captions.shape[0]}) must pair row by row")


def check_captions_describe(images: torch.Tensor, captions: torch.Tensor) -> None:
    """Raise ``ValueError`` unless each two-object image's caption names its two objects (in either order: a
    mirrored image or a swapped caption keeps the pair): a belief between a caption and its swap is meaningless for
    an image that holds neither caption's labels. Rows whose image does not hold two objects are left to the
    analysis's own checks.

    >>> check_captions_describe(torch.tensor([[7, 1, 0, 2]]), torch.tensor([[2, 8, 1, 9]]))
    >>> check_captions_describe(torch.tensor([[7, 1, 0, 2]]), torch.tensor([[3, 8, 1, 9]]))
    Traceback (most recent call last):
    ...
    ValueError: row 0: the caption names labels [1, 3], the image holds [1, 2]: pass each image's own caption
    """
    check_paired(images, captions)
    images, captions = images.cpu(), captions.cpu()  # the callers move them to the model's device after
    objects = images[:, 1:]
    two = (objects > 0).sum(-1) == 2
    if not bool(two.any()):
        return
    held = objects[two].sort(dim=-1).values[:, -2:]  # the two labels, ascending (empty pixels are 0)
    named = captions[two][:, [0, 2]].sort(dim=-1).values
    bad = (held != named).any(-1).nonzero()
    if len(bad):
        i = int(two.nonzero()[int(bad[0, 0]), 0])
        j = int(bad[0, 0])
        raise ValueError(
            f"row {i}: the caption names labels {named[j].tolist()}, the image holds {held[j].tolist()}: pass each "
            "image's own caption"
        )


@torch.no_grad()
def image_belief(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"], scale: bool = True
) -> Float[torch.Tensor, " batch"]:
    """Logit difference ``caption - swapped caption`` for each (image, caption) row (see the module docstring).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> image_belief(m, m.vision.to_tokens("C 1 2 . . . . . . . ."), m.text.to_tokens("1 is on the left of 2")).shape
    torch.Size([1])
    """
    model = check_model(model)
    check_pair_images(images)  # a one-object, empty or three-object image was scored without a word
    check_pair_captions(captions, model.text.cfg.vocab)
    check_captions_describe(images, captions)
    return image_belief_metric(model, captions, scale)(model.encode_image(images.to(model.vision.W_E.device)))


@torch.no_grad()
def caption_belief(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"], scale: bool = True
) -> Float[torch.Tensor, " batch"]:
    """Logit difference ``image - mirrored image`` for each (caption, image) row (see the module docstring).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> caption_belief(m, m.vision.to_tokens("C 1 2 . . . . . . . ."), m.text.to_tokens("1 is on the left of 2")).shape
    torch.Size([1])
    """
    model = check_model(model)
    check_pair_captions(captions, model.text.cfg.vocab)
    check_captions_describe(images, captions)
    return caption_belief_metric(model, images, scale)(model.text(captions.to(model.W_proj.device)))


def shift_is_defined(base: Float[torch.Tensor, " batch"], source: Float[torch.Tensor, " batch"]) -> bool:
    """Whether the source inputs shift the mean belief away from the base's (beyond rounding), so that
    ``shift_fraction`` is defined: an untrained model's mirror swap, say, moves it by ~0.

    >>> shift_is_defined(torch.tensor([1.0, -1.0]), torch.tensor([-1.0, 1.0]))  # the swap cancels in the mean
    False
    >>> shift_is_defined(torch.tensor([1.0, 1.0]), torch.tensor([-1.0, -1.0]))
    True
    """
    denom = source.mean() - base.mean()
    return bool(denom.abs() > 1e-8 * (1 + base.abs().mean()))


def shift_fraction(
    patched: Float[torch.Tensor, "*shape batch"],
    base: Float[torch.Tensor, " batch"],
    source: Float[torch.Tensor, " batch"],
) -> Float[torch.Tensor, "*shape"]:
    """Fraction of the belief shift ``base -> source`` that an intervention reproduces (IDs Eq. 1).

    ``(mean(patched) - mean(base)) / (mean(source) - mean(base))`` over the batch (a ratio of means, so single
    rows with a tiny shift cannot blow it up): 0 = the intervention changes nothing, 1 = it moves the belief all
    the way to the source's. Raises if the source does not shift the mean belief.

    >>> patched = torch.tensor([[0.0, 1.0], [2.0, 2.0]])  # two interventions x two examples
    >>> shift_fraction(patched, base=torch.tensor([2.0, 2.0]), source=torch.tensor([0.0, 0.0])).tolist()
    [0.75, 0.0]
    """
    denom = source.mean() - base.mean()
    if not shift_is_defined(base, source):
        raise ValueError(
            "the source inputs do not shift the mean belief (source - base is ~0), so a recovered fraction is "
            "undefined; use inputs on which the model's belief differs (e.g. two-object images it classifies)"
        )
    return (patched.mean(-1) - base.mean()) / denom + 0.0  # + 0.0: no negative zeros


__all__ = [
    "NORMS",
    "shift_is_defined",
    "BeliefMetric",
    "caption_belief",
    "caption_belief_metric",
    "check_pair_captions",
    "check_pair_images",
    "image_belief",
    "image_belief_metric",
    "mirror_images",
    "object_token_positions",
    "pair_grid",
    "pair_inputs",
    "shift_fraction",
    "swap_captions",
    "swap_objects",
]
