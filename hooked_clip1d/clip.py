"""The CLIP-style model: two hooked towers, a text projection and a learnable temperature (Paper Sec. 2.2).

``CLIP1D`` is a plain ``nn.Module`` on purpose: each tower is its own ``HookedRootModule`` root, so
``model.vision.run_with_cache(...)`` keys its cache ``blocks.0.attn.hook_pattern`` (not ``vision.blocks...``), and
``transformer_lens.patching`` runs on each tower. Hook one tower, score with the other.

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> model = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = model.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
    >>> cap = model.text.to_tokens(["1 is on the left of 2", "2 is on the left of 1"])
    >>> model.similarity(img, cap).shape
    torch.Size([2, 2])
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import nn

from hooked_clip1d.config import EncoderConfig, TextConfig, VisionConfig, preset
from hooked_clip1d.encoders import HookedTextEncoder, HookedVisionEncoder


@dataclass(frozen=True)
class CLIPConfig:
    """Both towers plus the CLIP head settings."""

    vision: VisionConfig  # vision tower (bidirectional, CLS readout)
    text: TextConfig  # text tower (causal, EOT readout)
    init_logit_scale: float = math.log(1 / 0.07)  # initial log inverse temperature (CLIP's 1/0.07)
    max_logit_scale: float = math.log(100.0)  # the log inverse temperature is clamped here (CLIP's 100)

    def __post_init__(self) -> None:
        if not isinstance(self.vision, VisionConfig) or not isinstance(self.text, TextConfig):
            raise TypeError("CLIPConfig needs vision=VisionConfig(...) and text=TextConfig(...)")
        if self.vision.n_labels != self.text.n_labels:
            raise ValueError(
                f"vision.n_labels={self.vision.n_labels} != text.n_labels={self.text.n_labels}: "
                "both towers must share one label vocabulary"
            )

    @property
    def n_labels(self) -> int:
        return self.vision.n_labels

    @staticmethod
    def from_preset(vision: str, text: str | None = None, **shared: Any) -> CLIPConfig:
        """Both towers from named presets (``"full"``/``"simplified"``); ``text`` defaults to ``vision``.

        Keyword overrides apply to both towers; use ``vision_overrides=`` / ``text_overrides=`` dicts for one.
        """
        v_over = shared.pop("vision_overrides", {})
        t_over = shared.pop("text_overrides", {})
        return CLIPConfig(
            vision=preset(vision, VisionConfig, **shared, **v_over),  # type: ignore[arg-type]
            text=preset(text or vision, TextConfig, **shared, **t_over),  # type: ignore[arg-type]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "vision": self.vision.to_dict(),
            "text": self.text.to_dict(),
            "init_logit_scale": self.init_logit_scale,
            "max_logit_scale": self.max_logit_scale,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CLIPConfig:
        d = dict(d)
        try:
            vision = EncoderConfig.from_dict(d.pop("vision"))
            text = EncoderConfig.from_dict(d.pop("text"))
        except KeyError as e:
            raise ValueError(f"CLIP config is missing {e}") from None
        known = {f.name for f in dataclasses.fields(CLIPConfig)}
        if set(d) - known:
            raise ValueError(f"unknown CLIPConfig fields {sorted(set(d) - known)}")
        return CLIPConfig(vision=vision, text=text, **d)  # type: ignore[arg-type]


class CLIP1D(nn.Module):
    """Vision tower, text tower, text projection ``W_proj[d_text, d_vision]`` and learnable ``logit_scale``.

    The image representation is the vision CLS output; the text representation is the EOT output projected by
    ``W_proj`` (only the text side is projected, as in the paper). Similarities are cosines.
    """

    def __init__(self, cfg: CLIPConfig, seed: int | None = None):
        super().__init__()
        self.cfg = cfg
        if seed is not None:  # seed both towers' init from one seed (vision: seed, text: seed + 1)
            cfg = dataclasses.replace(
                cfg, vision=cfg.vision.replace(init_seed=seed), text=cfg.text.replace(init_seed=seed + 1)
            )
            self.cfg = cfg
        self.vision = HookedVisionEncoder(cfg.vision)
        self.text = HookedTextEncoder(cfg.text)
        gen = torch.Generator().manual_seed(cfg.text.init_seed + 1) if cfg.text.init_seed is not None else None
        d_t, d_v = cfg.text.d_model, cfg.vision.d_model
        self.W_proj = nn.Parameter(torch.randn(d_t, d_v, generator=gen, dtype=cfg.text.dtype) / math.sqrt(d_t))
        self.logit_scale = nn.Parameter(torch.tensor(cfg.init_logit_scale, dtype=cfg.text.dtype))
        self.data_config = None  # set by load_model / the trainer: the DataConfig the model was trained on
        self.to(cfg.vision.device)

    # ---- representations --------------------------------------------------------------------------------------------
    def encode_image(
        self, images: Int[torch.Tensor, "batch pos"], validate: bool = True
    ) -> Float[torch.Tensor, "batch d_embed"]:
        """Image representation (vision CLS output), not normalised."""
        return self.vision(images, validate=validate)

    def project_text(self, pooled: Float[torch.Tensor, "batch d_text"]) -> Float[torch.Tensor, "batch d_embed"]:
        """Apply the text projection to text-tower outputs (for metrics on ``model.text`` runs)."""
        return pooled @ self.W_proj

    def encode_text(
        self, captions: Int[torch.Tensor, "batch 4"], validate: bool = True
    ) -> Float[torch.Tensor, "batch d_embed"]:
        """Text representation (projected EOT output), not normalised."""
        return self.project_text(self.text(captions, validate=validate))

    @staticmethod
    def cosine(
        image_emb: Float[torch.Tensor, "n_images d_embed"], text_emb: Float[torch.Tensor, "n_texts d_embed"]
    ) -> Float[torch.Tensor, "n_images n_texts"]:
        """Cosine-similarity matrix of two sets of representations."""
        return F.normalize(image_emb, dim=-1) @ F.normalize(text_emb, dim=-1).T

    def similarity(
        self, images: Int[torch.Tensor, "n_images pos"], captions: Int[torch.Tensor, "n_texts 4"]
    ) -> Float[torch.Tensor, "n_images n_texts"]:
        """Cosine similarity of every image with every caption."""
        return self.cosine(self.encode_image(images), self.encode_text(captions))

    def temperature_scale(self) -> torch.Tensor:
        """``exp(logit_scale)`` clamped at ``exp(max_logit_scale)``."""
        return self.logit_scale.clamp(max=self.cfg.max_logit_scale).exp()

    def forward(
        self, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"], validate: bool = True
    ) -> Float[torch.Tensor, "batch batch"]:
        """Image-to-text logits ``scale * cos`` [images, captions]."""
        if validate and images.shape[0] != captions.shape[0]:
            raise ValueError(
                f"CLIP1D: {images.shape[0]} images but {captions.shape[0]} captions; the contrastive loss pairs "
                "image i with caption i, so the batches must have equal size"
            )
        sim = self.cosine(self.encode_image(images, validate), self.encode_text(captions, validate))
        return self.temperature_scale() * sim

    def loss(
        self, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"], validate: bool = True
    ) -> torch.Tensor:
        """Symmetric CLIP loss: mean of image->text and text->image cross-entropy over the batch."""
        return clip_loss(self(images, captions, validate))


def clip_loss(logits: Float[torch.Tensor, "batch batch"]) -> torch.Tensor:
    """Average of the image->text and text->image cross-entropies with targets on the diagonal."""
    labels = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
