"""The two towers' forward pass: embed -> blocks -> readout, one TransformerLens ``HookedRootModule`` root per tower.

``HookedVisionEncoder`` (bidirectional) reads an image ``[CLS] + pixels`` and returns the final residual at CLS
(position 0); ``HookedTextEncoder`` (causal) reads a 4-token caption and returns the final residual at its first EOT.
The input tensor is the first positional argument of ``forward`` and input length equals residual length, so
``transformer_lens.patching`` sweeps every position, CLS included. The blocks are ``components``; what TransformerLens
users reach for around the forward (weight stacks, QK / OV, ``to_str_tokens``, ``set_use_*``, the checked hook
API, ``run_with_cache``) is ``tl_conveniences.TLConveniences``, which every tower inherits. The walk-through of the
data's path, with the hook names, is the ``hooked_clip1d.model`` docstring.

Example:
    >>> import torch
    >>> from hooked_clip1d import HookedVisionEncoder, VisionConfig
    >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, init_seed=0)).eval()
    >>> img = enc.cfg.vocab.text_to_image("C . 3 . . 5 . . . . .")[None]
    >>> out, cache = enc.run_with_cache(img)
    >>> out.shape, cache["pattern", 0].shape
    (torch.Size([1, 128]), torch.Size([1, 4, 11, 11]))
    >>> def zero_head_2(z, hook):
    ...     z[:, :, 2] = 0.0
    ...     return z
    >>> out2 = enc.run_with_hooks(img, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_2)])
    >>> bool((out2 - out).abs().max() > 0)
    True
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from torch import nn
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.model.components import Embed, LayerNorm, PosEmbed, TransformerBlock
from hooked_clip1d.model.config import EncoderConfig, TextConfig, VisionConfig
from hooked_clip1d.model.tl_conveniences import TLConveniences

ReturnType = Literal["pooled", "resid", None]
RETURN_TYPES = ("pooled", "resid", None)


class HookedEncoder(TLConveniences):
    """One tower: token (and positional) embeddings, ``n_layers`` blocks, a final LayerNorm (pre-LN towers), the
    readout; the TransformerLens conveniences come from ``TLConveniences``."""

    cfg: EncoderConfig
    needs_prefix = False  # a captioning decoder (model.captioning) runs only with its image prefix

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        gen = None
        if cfg.init_seed is not None:
            gen = torch.Generator().manual_seed(cfg.init_seed)
        self.embed = Embed(cfg, gen)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if cfg.positional == "learned":
            self.pos_embed = PosEmbed(cfg, gen)
            self.hook_pos_embed = HookPoint()  # [batch, pos, d_model]
        self.embed_dropout = nn.Dropout(cfg.embed_dropout)  # on E + P before block 0 (train mode only)
        blocks: list[TransformerBlock] = []
        for layer in range(cfg.n_layers):  # a repeated layer (tied_repeats) reads its block's weights, draws nothing
            tied = blocks[layer % cfg.n_blocks] if layer >= cfg.n_blocks else None
            blocks.append(TransformerBlock(cfg, layer, gen, tied_to=tied))
        self.blocks = nn.ModuleList(blocks)
        if cfg.final_ln:  # pre-LN towers end in a LayerNorm; post-LN ones are normalised by their last block
            self.ln_final = LayerNorm(cfg)
        self.hook_pooled = HookPoint()  # [batch, d_model]: the readout (CLS or EOT) of the final residual
        self.to(cfg.device)
        self.setup()
        # training-time ablation (EncoderConfig.ablated_terms) is computed by block 0's attention itself from the
        # embeddings of each forward pass (after any user hook on hook_embed / hook_pos_embed): no hooks involved

    def readout_positions(self, tokens: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, " batch"]:
        """Residual position read out as the representation of each input."""
        raise NotImplementedError

    def forward(
        self,
        tokens: Int[torch.Tensor, "batch pos"] | str | list[str],
        *,
        return_type: ReturnType = "pooled",
        stop_at_layer: int | None = None,
        validate: bool = True,
        prefix: Float[torch.Tensor, "batch d_model"] | None = None,
    ) -> torch.Tensor | None:
        """Run the tower.

        Args:
            tokens: ids [batch, n_ctx] (the first positional argument, as ``transformer_lens.patching`` needs).
            return_type: ``"pooled"`` -> [batch, d_model] at the readout position; ``"resid"`` -> the final
                (normalised, if LN) residual [batch, pos, d_model]; ``None`` -> nothing (for caching only).
            stop_at_layer: run only blocks ``0..stop_at_layer-1`` and return that residual [batch, pos, d_model].
            validate: check ``tokens`` first (turn off only in trusted hot loops such as training).
            prefix: a vector position 0 reads instead of its token's embedding (a captioning decoder's image
                prefix, ``model.captioning``); ``hook_embed`` sees it there.
        """
        if return_type not in RETURN_TYPES:  # a typo must not return None as if caching only
            raise ValueError(
                f"{type(self).__name__}: unknown return_type {return_type!r}; use one of {list(RETURN_TYPES)} "
                "(a tower returns its pooled readout or its residual; CLIP1D returns logits or the loss)"
            )
        if self.needs_prefix and prefix is None:
            raise ValueError(
                f"{type(self).__name__}: this is a captioning model's decoder (CLIPConfig.objective='captioning'): it "
                "reads the image through its prefix, so a run on captions alone means nothing; score captions with "
                "model(images, captions) (model.captioning); text-tower analyses are for contrastive models"
            )
        if isinstance(tokens, str | list):  # TransformerLens style: a readable input (or a list of them)
            tokens = self.to_tokens(tokens)
        if validate:
            self.validate_tokens(tokens)
        # embed: token (+ learned positional) embeddings [batch, pos, d_model]
        E = self.embed(tokens)
        if prefix is not None:  # position 0 reads the prefix instead of its token (model.captioning)
            if prefix.shape != (E.shape[0], E.shape[2]):
                raise ValueError(
                    f"prefix must be [batch, d_model] = {[E.shape[0], E.shape[2]]}, got {list(prefix.shape)}"
                )
            E = torch.cat([prefix[:, None].to(E.dtype), E[:, 1:]], 1)
        E = resid = self.hook_embed(E)
        pos = None
        if self.cfg.positional == "learned":
            pos = self.hook_pos_embed(self.pos_embed(tokens))
            resid = resid + pos
        if self.cfg.embed_dropout:
            resid = self.embed_dropout(resid)
        # blocks: block 0 also gets (E, P) when the model removes score terms itself (training-time ablation)
        embeddings = (E, pos) if self.cfg.ablated_terms else None
        for i, block in enumerate(self.blocks[:stop_at_layer]):
            resid = block(resid, embeddings if i == 0 else None)
        if stop_at_layer is not None:
            return resid
        if self.cfg.final_ln:
            resid = self.ln_final(resid)
        if return_type == "resid":
            return resid
        # readout: the final residual at one position per input (vision: CLS; text: the first EOT) [batch, d_model]
        pooled = self.hook_pooled(
            resid[torch.arange(resid.shape[0], device=resid.device), self.readout_positions(tokens)]
        )
        return pooled if return_type == "pooled" else None


class HookedVisionEncoder(HookedEncoder):
    """Bidirectional vision tower; input ``[CLS] + d_image`` pixel ids, readout at CLS (position 0)."""

    cfg: VisionConfig
    input_kind = "image"

    def __init__(self, cfg: VisionConfig):
        if not isinstance(cfg, VisionConfig):
            raise TypeError(f"HookedVisionEncoder needs a VisionConfig, got {type(cfg).__name__}")
        super().__init__(cfg)

    def readout_positions(self, tokens: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, " batch"]:
        return torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)

    def validate_tokens(self, tokens: Any) -> None:
        super().validate_tokens(tokens)
        cls = self.cfg.vocab.cls
        if not bool((tokens[:, 0] == cls).all()):
            i = int((tokens[:, 0] != cls).nonzero()[0, 0])
            raise ValueError(
                f"HookedVisionEncoder: image {i} does not start with the CLS id {cls} at position 0 "
                f"(got {int(tokens[i, 0])}); build images with Vocabulary.image(...) or take them from a Dataset"
            )
        if bool((tokens[:, 1:] == cls).any()):
            i = int((tokens[:, 1:] == cls).any(-1).nonzero()[0, 0])
            raise ValueError(f"HookedVisionEncoder: image {i} has the CLS id {cls} at a pixel position")

    def parse(self, text: str) -> Int[torch.Tensor, " pos"]:
        """``"C . 3 . . 5 . . . . ."`` -> ids."""
        return self.cfg.vocab.text_to_image(text)

    def token_strs(self, tokens: Int[torch.Tensor, " pos"]) -> list[str]:
        return self.cfg.vocab.image_tokens_str(tokens)


class HookedTextEncoder(HookedEncoder):
    """Causal text tower; input a 4-token caption, readout at the first EOT token."""

    cfg: TextConfig
    input_kind = "caption"

    def __init__(self, cfg: TextConfig):
        if not isinstance(cfg, TextConfig):
            raise TypeError(f"HookedTextEncoder needs a TextConfig, got {type(cfg).__name__}")
        super().__init__(cfg)

    def readout_positions(self, tokens: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, " batch"]:
        return (tokens == self.cfg.vocab.eot).int().argmax(-1)

    def validate_tokens(self, tokens: Any) -> None:
        super().validate_tokens(tokens)
        has_eot = (tokens == self.cfg.vocab.eot).any(-1)
        if not bool(has_eot.all()):
            i = int((~has_eot).nonzero()[0, 0])
            raise ValueError(
                f"HookedTextEncoder: caption {i} has no EOT token (id {self.cfg.vocab.eot}); the text readout is at EOT"
            )
        v = self.cfg.vocab
        if tokens.shape[1] == 4:  # the paper's templates: X is in-the-image / X left-of Y / Y right-of X, then EOT
            t0, t1, t2, t3 = tokens.unbind(-1)
            label0 = (t0 >= 1) & (t0 <= v.n_labels)
            single = (t1 == v.is_) & (t2 == v.in_the_image)
            label2 = (t2 >= 1) & (t2 <= v.n_labels)
            pair = ((t1 == v.left_of) | (t1 == v.right_of)) & label2 & (t2 != t0)
            ok = label0 & (single | pair) & (t3 == v.eot)
            if not bool(ok.all()):
                i = int((~ok).nonzero()[0, 0])
                raise ValueError(
                    f"HookedTextEncoder: caption {i} ({' '.join(v.caption_tokens_str(tokens[i]))}) is not one the "
                    "vocabulary produces: 'X is in the image', 'X is on the left of Y' or 'Y is on the right of X' "
                    "with labels X != Y, then EOT (a misplaced EOT or a repeated label would be read out wrongly)"
                )

    def parse(self, text: str) -> Int[torch.Tensor, " pos"]:
        """``"17 is on the left of 19"`` -> ids."""
        return self.cfg.vocab.text_to_caption(text)

    def token_strs(self, tokens: Int[torch.Tensor, " pos"]) -> list[str]:
        return self.cfg.vocab.caption_tokens_str(tokens)


__all__ = ["HookedEncoder", "HookedVisionEncoder", "HookedTextEncoder", "LayerNorm"]
