"""The captioning objective: the same towers trained as an autoregressive captioner (beyond the paper: its Open
Question 4, whether autoregressive VLMs learn spatial relations as CLIP-style ones do).

With ``CLIPConfig(objective="captioning")`` the text tower is a causal decoder. Position 0 reads the image: the
vision tower's CLS output (the same readout CLIP compares) mapped into the decoder's residual by
``W_prefix[d_vision, d_text]``, in place of that position's token embedding (``text.hook_embed`` sees it there). The
decoder's input is ``[image, X, rel, Y]`` and its four positions predict the caption's four tokens ``[X, rel, Y,
EOT]`` through the unembedding ``W_U[d_text, d_vocab]`` (``X is in the image`` likewise). Training minimises the
mean token cross-entropy of each image's own caption: there are no negatives, so ``TrainConfig.negatives`` (the
contrastive loss's) has nothing to act on and changes nothing. A caption's score for an image is its log-likelihood
(the sum over its four tokens), so the ``[images, captions]`` score matrix takes the place of CLIP's logits:
``evaluation.evaluate`` ranks every caption of the table by it, with the same metrics, ties and splits as for a
contrastive model. The vision tower is the paper's, unchanged; the vision-side analyses read it as they read a
contrastive model's. The text embedding (``encode_text``) does not exist for a captioning model and is refused.

Only the single-run trainer (``training.train``) trains it; the batched engine refuses it by name.

Example:
    >>> import dataclasses
    >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4)
    >>> model = CLIP1D(dataclasses.replace(cfg, objective="captioning"), seed=0).eval()
    >>> images = model.vision.to_tokens(["C . . 1 . . 2 . . . .", "C . . 2 . . 1 . . . ."])
    >>> captions = model.text.to_tokens(["1 is on the left of 2", "2 is on the left of 1"])
    >>> caption_scores(model, images, captions).shape  # log-likelihoods [images, captions]
    torch.Size([2, 2])
    >>> float(caption_loss(model, images, captions).detach()) > 0
    True
    >>> generate_captions(model, images).shape  # what it says of each image: greedy, four tokens
    torch.Size([2, 4])
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int

CLIP1D = Any  # a model.clip.CLIP1D (not imported: clip imports this module for its forward and loss)

HEAD_HOOKS = ("hook_image_embed", "hook_logits")  # the head's hook points a captioning forward reaches
SCORE_ROWS = 50_000  # image-caption pairs decoded at once by caption_scores (~100 MB of residuals for d_text 128)


def check_captioning(model: CLIP1D, what: str = "this") -> None:
    """Raise ``ValueError`` unless ``model`` was built with ``objective="captioning"``."""
    if model.cfg.objective != "captioning":
        raise ValueError(
            f"{what} needs a captioning model (CLIPConfig.objective='captioning'); this one is "
            f"{model.cfg.objective!r}: score its captions with model(images, captions) (CLIP's logits)"
        )


def check_contrastive(model: CLIP1D, what: str) -> None:
    """Raise ``ValueError`` if ``model`` is a captioning model: ``what`` needs CLIP's text embedding or temperature.

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, objective="captioning"), seed=0)
        >>> check_contrastive(m, "my_analysis")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: my_analysis: a captioning model has no text embedding, projection or temperature ...
    """
    if model.cfg.objective != "contrastive":
        raise ValueError(
            f"{what}: a {model.cfg.objective} model has no text embedding, projection or temperature (its text tower "
            "is a decoder, model.captioning); score captions with model(images, captions) or caption_scores"
        )


def decoder_inputs(captions: Int[torch.Tensor, "batch 4"]) -> Int[torch.Tensor, "batch 4"]:
    """The decoder's input for each caption: ``[X, X, rel, Y]``, whose position 0 reads the image instead of its
    token (the first token is repeated there only to keep ids valid; its embedding is replaced)."""
    return torch.cat([captions[:, :1], captions[:, :3]], 1)


def token_log_likelihoods(
    model: CLIP1D,
    prefix: Float[torch.Tensor, "batch d_text"],
    captions: Int[torch.Tensor, "batch 4"],
) -> Float[torch.Tensor, "batch 4"]:
    """``log p(token_t | image, tokens < t)`` of each caption's four tokens, given the images' ``image_prefix``."""
    resid = model.text(decoder_inputs(captions), return_type="resid", validate=False, prefix=prefix)
    logp = (resid @ model.W_U).log_softmax(-1)
    return logp.gather(-1, captions[..., None].long())[..., 0]


def image_prefix(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], validate: bool = True
) -> Float[torch.Tensor, "batch d_text"]:
    """What the decoder's position 0 reads: the vision CLS output (through ``hook_image_embed``, as in a contrastive
    model) mapped by ``W_prefix``."""
    check_captioning(model, "image_prefix")
    return model.hook_image_embed(model.vision(images, validate=validate)) @ model.W_prefix


@torch.no_grad()
def generate_captions(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], validate: bool = True
) -> Int[torch.Tensor, "batch 4"]:
    """What the captioner says of each image: its greedy decoding, four tokens, each the most likely given the image
    and the tokens before it (unconstrained: a token the caption grammar would not allow there is kept, so a
    malformed caption is seen as such; ``vocab.caption_to_text`` reads a row up to its first EOT). Not how the
    package scores a captioner (``caption_scores`` ranks every caption of the table): what a generative reading
    would compare against the true caption. The decoder is causal, so each step reads the tokens chosen so far.

    Example:
        >>> import dataclasses
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4)
        >>> model = CLIP1D(dataclasses.replace(cfg, objective="captioning"), seed=0).eval()
        >>> generate_captions(model, model.vision.to_tokens(["C . . 1 . . 2 . . . ."])).shape
        torch.Size([1, 4])
    """
    check_captioning(model, "generate_captions")
    if model.training:
        raise ValueError("generate_captions needs the model in eval mode (call model.eval()): dropout would draw")
    prefix = image_prefix(model, images, validate)
    tokens = torch.zeros(prefix.shape[0], 4, dtype=torch.long, device=prefix.device)  # filled left to right
    for t in range(4):  # position t reads the image and tokens < t (causal), so later placeholders do not matter
        resid = model.text(decoder_inputs(tokens), return_type="resid", validate=False, prefix=prefix)
        tokens[:, t] = (resid[:, t] @ model.W_U).argmax(-1)
    return tokens


def caption_loss(
    model: CLIP1D,
    images: Int[torch.Tensor, "n_images pos"],  # not one "batch" axis: a mismatch gets the message below
    captions: Int[torch.Tensor, "n_texts 4"],
    validate: bool = True,
) -> Float[torch.Tensor, ""]:
    """Mean token cross-entropy of each image's own caption (image i with caption i)."""
    check_captioning(model, "caption_loss")
    if images.shape[0] != captions.shape[0]:
        raise ValueError(
            f"caption_loss: {images.shape[0]} images but {captions.shape[0]} captions; image i is captioned by "
            "caption i, so the batches must have equal size"
        )
    if validate:
        model.text.validate_tokens(captions)
    return -token_log_likelihoods(model, image_prefix(model, images, validate), captions).mean()


def caption_scores(
    model: CLIP1D,
    images: Int[torch.Tensor, "n_images pos"],
    captions: Int[torch.Tensor, "n_texts 4"],
    validate: bool = True,
    chunk: bool = True,
) -> Float[torch.Tensor, "n_images n_texts"]:
    """Every caption's log-likelihood given every image (the sum over its four tokens): the captioning model's
    counterpart of CLIP's logits. The vision tower runs once per image; the decoder once per pair (row ``i * n_texts
    + j`` is image i with caption j), in chunks of ``SCORE_ROWS`` pairs, or in one pass with ``chunk=False`` (what
    ``model(images, captions)`` does, so that a cache holds every pair's text activations)."""
    check_captioning(model, "caption_scores")
    if validate:
        model.text.validate_tokens(captions)
    prefix = image_prefix(model, images, validate)
    n_img, n_cap = prefix.shape[0], captions.shape[0]
    step = max(1, SCORE_ROWS // max(n_cap, 1)) if chunk else max(n_img, 1)
    rows = []
    for i in range(0, n_img, step):
        p = prefix[i : i + step]
        m = p.shape[0]
        ll = token_log_likelihoods(model, p.repeat_interleave(n_cap, 0), captions.repeat(m, 1))
        rows.append(ll.sum(-1).view(m, n_cap))
    return torch.cat(rows) if rows else prefix.new_zeros(0, n_cap)
