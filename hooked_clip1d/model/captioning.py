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

Both engines train it: the single-run trainer (``training.train``) and the batched engine (``BatchedTrainer``,
which sweeps use: ``StackedForward.caption_loss``, eager fp32; a group's captioners share one vocabulary).

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

from hooked_clip1d.model.functional import rotate

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
    share_stems: bool = True,
) -> Float[torch.Tensor, "n_images n_texts"]:
    """Every caption's log-likelihood given every image (the sum over its four tokens): the captioning model's
    counterpart of CLIP's logits. The vision tower runs once per image; the decoder once per pair (row ``i * n_texts
    + j`` is image i with caption j), in chunks of ``SCORE_ROWS`` pairs, or in one pass with ``chunk=False`` (what
    ``model(images, captions)`` does, so that a cache holds every pair's text activations).

    Chunked, with ``share_stems`` and where ``shared_stems_apply`` (eval mode, no hook on the text tower), the
    decoder's positions 0-2 run once per image and caption stem ``(X, rel)`` and only position 3 once per pair,
    reading the stem's keys and values (a KV cache): the same scores up to float rounding, ~3.7x faster at the
    flagship's size (benchmarks/bench_caption_scores.py). ``share_stems=False`` decodes every pair whole.

    Example:
        >>> import dataclasses
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4)
        >>> model = CLIP1D(dataclasses.replace(cfg, objective="captioning"), seed=0).eval()
        >>> images = model.vision.to_tokens(["C . . 1 . . 2 . . . .", "C 3 . . . . . . . . ."])
        >>> captions = model.text.to_tokens(["1 is on the left of 2", "3 is in the image"])
        >>> fast = caption_scores(model, images, captions)  # stems shared
        >>> torch.allclose(fast, caption_scores(model, images, captions, chunk=False), atol=1e-5)
        True
    """
    check_captioning(model, "caption_scores")
    if validate:
        model.text.validate_tokens(captions)
    prefix = image_prefix(model, images, validate)
    n_img, n_cap = prefix.shape[0], captions.shape[0]
    if chunk and share_stems and n_img and n_cap and shared_stems_apply(model):
        return _scores_by_stem(model, prefix, captions)
    step = max(1, SCORE_ROWS // max(n_cap, 1)) if chunk else max(n_img, 1)
    rows = []
    for i in range(0, n_img, step):
        p = prefix[i : i + step]
        m = p.shape[0]
        ll = token_log_likelihoods(model, p.repeat_interleave(n_cap, 0), captions.repeat(m, 1))
        rows.append(ll.sum(-1).view(m, n_cap))
    return torch.cat(rows) if rows else prefix.new_zeros(0, n_cap)


def shared_stems_apply(model: CLIP1D) -> bool:
    """Whether ``caption_scores`` may share the caption stems' keys and values (its chunked path): the text tower in
    eval mode (no dropout draws), no forward or backward hook on any of its modules or registered globally (a hook
    must see every pair's activations, as ``model(images, captions)`` gives them), and a text tower whose attention
    reads one shared input per layer without the model's own score-term removal (``ablated_terms``).

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> model = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, objective="captioning"), seed=0)
        >>> shared_stems_apply(model.eval()), shared_stems_apply(model.train())  # train mode: dropout draws
        (True, False)
    """
    text = model.text
    cfg = text.cfg
    if cfg.ablated_terms or cfg.use_attn_in or cfg.use_split_qkv_input:
        return False
    from torch.nn.modules import module as nn_module

    if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks or nn_module._global_backward_hooks:
        return False
    return not any(
        m.training or m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
        for m in text.modules()
    )


def _scores_by_stem(
    model: CLIP1D, prefix: Float[torch.Tensor, "n_images d_text"], captions: Int[torch.Tensor, "n_texts 4"]
) -> Float[torch.Tensor, "n_images n_texts"]:
    """``caption_scores`` with each caption stem's positions shared: the decoder (causal) reads ``[image, X, rel,
    Y]``, so positions 0-2 depend on the image and the stem ``(X, rel)`` alone. They run once per (image, stem) with
    the tower's own forward (their three log-probabilities, and each layer's residual, whose keys and values
    position 3 reads); position 3 (input Y, predicting the caption's last token) runs per pair through each block's
    own weights and sublayers, attending to the stem's cached keys and values and its own."""
    text = model.text
    cfg = text.cfg
    stems, which = torch.unique(captions[:, :2], dim=0, return_inverse=True)  # [U, 2], [n_texts]
    n_stem, n_cap = stems.shape[0], captions.shape[0]
    k_hook = "hook_rot_k" if cfg.positional == "rope" else "hook_k"
    names = [(f"blocks.{i}.attn.{k_hook}", f"blocks.{i}.attn.hook_v") for i in range(len(text.blocks))]
    last = text.embed(captions[:, 2:3])  # position 3 reads Y [n_texts, 1, d]: block 0's input, whatever the image
    if cfg.positional == "learned":
        last = last + text.pos_embed.W_pos[3]
    step = max(1, SCORE_ROWS // n_cap)  # images a chunk: ~SCORE_ROWS pairs at position 3
    rows = []
    for i in range(0, prefix.shape[0], step):
        m = min(step, prefix.shape[0] - i)
        # positions 0-2, once per (image, stem), by the tower's own forward: [image (X's id, replaced), X, rel]
        seq = torch.cat([stems[:, :1], stems], 1).repeat(m, 1)
        kept: dict[str, torch.Tensor] = {}  # each layer's keys (turned, with RoPE) and values at positions 0-2

        def keep(name: str, kept: dict[str, torch.Tensor] = kept) -> Any:
            def hook(x: torch.Tensor, hook: Any) -> torch.Tensor:
                kept[name] = x
                return x

            return hook

        with text.hooks(fwd_hooks=[(n, keep(n)) for pair in names for n in pair]):
            final = text(
                seq, return_type="resid", validate=False, prefix=prefix[i : i + m].repeat_interleave(n_stem, 0)
            )
        logp = (final @ model.W_U).log_softmax(-1).view(m, n_stem, 3, -1)
        # their log-probabilities of the caption's X, rel (per stem) and Y (per caption) [m, n_texts]
        t0 = logp[:, :, 0].gather(-1, stems[None, :, :1].expand(m, -1, -1).long())[..., 0][:, which]
        t1 = logp[:, :, 1].gather(-1, stems[None, :, 1:].expand(m, -1, -1).long())[..., 0][:, which]
        t2 = logp[torch.arange(m, device=logp.device)[:, None], which[None], 2, captions[None, :, 2].long()]
        # position 3, per pair, reading each layer's stem keys and values (a pair's row: image * n_texts + caption)
        r = last
        for block, pair in zip(text.blocks, names, strict=True):
            k_stem, v_stem = (kept[n].view(m, n_stem, 3, *kept[n].shape[2:])[:, which].flatten(0, 1) for n in pair)
            r = _last_position_block(block, r, k_stem, v_stem)
        if cfg.final_ln:
            r = text.ln_final(r)
        t3 = (r[:, 0] @ model.W_U).log_softmax(-1).gather(-1, captions[:, 3].repeat(m)[:, None].long())
        # summed over the four tokens in order, as token_log_likelihoods(...).sum(-1)
        rows.append(torch.stack([t0, t1, t2, t3.view(m, n_cap)], -1).sum(-1))
    return torch.cat(rows)


def _post_ln(cfg: Any) -> bool:
    return cfg.ln_position == "post" and cfg.normalization_type == "LN"


def _last_position_block(
    block: Any,
    resid: Float[torch.Tensor, "rows_or_texts 1 d_model"],
    k_stem: Float[torch.Tensor, "rows 3 head d_head"],
    v_stem: Float[torch.Tensor, "rows 3 head d_head"],
) -> Float[torch.Tensor, "rows 1 d_model"]:
    """``TransformerBlock.forward`` at position 3 alone (eval mode, no hooks), given its keys and values at positions
    0-2 (one row a pair): the block's own LayerNorms, attention weights, head mask and MLP. ``resid`` may hold one
    row a caption (block 0's input, the same for every image): its projections are computed once and repeated."""
    cfg, attn = block.cfg, block.attn
    post = _post_ln(cfg)
    q, k, v = attn._qkv(resid if post else block.ln1(resid))  # [rows or texts, 1, h, d_head]
    if cfg.positional == "rope":
        q = rotate(q, attn.rotary_sin[3:4, None], attn.rotary_cos[3:4, None])
        k = rotate(k, attn.rotary_sin[3:4, None], attn.rotary_cos[3:4, None])
    reps = k_stem.shape[0] // resid.shape[0]
    if reps > 1:  # block 0: one row a caption; a pair's row is image * n_texts + caption
        q, k, v = q.repeat(reps, 1, 1, 1), k.repeat(reps, 1, 1, 1), v.repeat(reps, 1, 1, 1)
        resid = resid.repeat(reps, 1, 1)
    # position 3 sees positions 0-3 (no mask): its scores on the stem's keys and on its own [rows, keys, h]
    scores = torch.cat([(q * k_stem).sum(-1), (q * k).sum(-1)], 1) / cfg.attn_scale
    pattern = scores.softmax(1)[..., None]
    z = (pattern[:, :3] * v_stem).sum(1, keepdim=True) + pattern[:, 3:] * v  # [rows, 1, h, d_head]
    if attn.head_mask is not None:
        z = z * attn.head_mask[:, None]
    h, dh, dm = attn.W_O.shape
    out = z.flatten(-2) @ attn.W_O.reshape(h * dh, dm) + attn.b_O
    if cfg.attn_only:
        return block.ln1(resid + out) if post else resid + out
    mid = block.ln1(resid + out) if post else resid + out
    mlp_out = block.mlp(mid if post else block.ln2(mid))
    return block.ln2(mid + mlp_out) if post else mid + mlp_out
