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

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import nn
from transformer_lens.hook_points import HookPoint

import hooked_clip1d.model.captioning as captioning
import hooked_clip1d.model.functional as functional
from hooked_clip1d.model.config import EncoderConfig, TextConfig, VisionConfig, preset
from hooked_clip1d.model.encoders import HookedTextEncoder, HookedVisionEncoder
from hooked_clip1d.model.tl_conveniences import checked_hook, hook_pairs, names_filter_list, tower_cache
from hooked_clip1d.settings.checks import is_int, is_real

OBJECTIVES = ("contrastive", "captioning")  # CLIPConfig.objective
HEAD_HOOKS = ("hook_image_embed", "hook_text_embed", "hook_image_feat", "hook_text_feat", "hook_logits")
RETURN_TYPES = ("logits", "loss", None)


@dataclass(frozen=True)
class CLIPConfig:
    """Both towers plus the CLIP head settings."""

    vision: VisionConfig  # vision tower (bidirectional, CLS readout)
    text: TextConfig  # text tower (causal, EOT readout)
    init_logit_scale: float = math.log(1 / 0.07)  # initial log inverse temperature (CLIP's 1/0.07)
    max_logit_scale: float = math.log(100.0)  # the log inverse temperature is clamped here (CLIP's 100)
    # what the text side is trained to do (beyond the paper, its Open Question 4; model.captioning): "contrastive"
    # (the paper's CLIP) or "captioning" (the text tower a causal decoder that reads the image's CLS through a prefix
    # and predicts the caption). Saved only when not contrastive, so every config saved before it reads back the same
    objective: str = "contrastive"
    # TransformerLens's checkpoint fields (HookedTransformerConfig's / TransformerBridgeConfig's names), set by
    # pretrained.load_model on a checkpoint of a training trajectory (False / None on a plain load). Which checkpoint a
    # model is, not what it is: left out of to_dict (nothing saves them) and of == (a checkpoint's config equals its
    # run's)
    from_checkpoint: bool = dataclasses.field(default=False, compare=False)
    checkpoint_index: int | None = dataclasses.field(default=None, compare=False)
    checkpoint_label_type: str | None = dataclasses.field(default=None, compare=False)
    checkpoint_value: int | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.vision, VisionConfig) or not isinstance(self.text, TextConfig):
            raise TypeError("CLIPConfig needs vision=VisionConfig(...) and text=TextConfig(...)")
        if self.vision.n_labels != self.text.n_labels:
            raise ValueError(
                f"vision.n_labels={self.vision.n_labels} != text.n_labels={self.text.n_labels}: "
                "both towers must share one label vocabulary"
            )
        if self.objective not in OBJECTIVES:
            raise ValueError(f"CLIPConfig.objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if self.objective == "captioning" and self.text.attention_dir != "causal":  # a position would see its target
            raise ValueError(
                "CLIPConfig(objective='captioning') needs a causal text tower (text.attention_dir='causal'): a "
                f"decoder position must not see the token it predicts, got {self.text.attention_dir!r}"
            )
        for name in ("init_logit_scale", "max_logit_scale"):
            v = getattr(self, name)
            if not is_real(v):  # NaN gave NaN logits; "4.6" a string compared later
                raise ValueError(f"CLIPConfig.{name} must be a finite number (a log inverse temperature), got {v!r}")

    @property
    def n_labels(self) -> int:
        return self.vision.n_labels

    def __getattr__(self, name: str) -> Any:
        """Only for names that are missing: a per-tower setting read on the whole CLIP's config (TransformerLens's
        ``patching`` functions read ``model.cfg.n_heads`` and fail with a bare AttributeError) says where it lives.
        Still an ``AttributeError`` (``hasattr`` answers as before)."""
        if not name.startswith("_") and name in {f.name for f in dataclasses.fields(EncoderConfig)}:
            raise AttributeError(
                f"CLIPConfig has no {name!r}: it is a setting of each tower (cfg.vision.{name}, cfg.text.{name}); "
                "TransformerLens's functions that read it (transformer_lens.patching's get_act_patch_*) take one "
                "tower, model.vision or model.text"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @staticmethod
    def from_preset(vision: str, text: str | None = None, **shared: Any) -> CLIPConfig:
        """Both towers from named presets (``"full"``/``"simplified"``); ``text`` defaults to ``vision``.

        Keyword overrides apply to both towers; use ``vision_overrides=`` / ``text_overrides=`` dicts for one.
        ``init_logit_scale`` / ``max_logit_scale`` set the CLIP head's, ``objective`` what the text side is trained
        to do (``model.captioning``); ``d_image`` alone sets the vision tower's ``n_ctx`` too (CLS + pixels).

        Example:
            >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_image=5, init_logit_scale=1.0)
            >>> cfg.vision.n_ctx, cfg.text.n_ctx, cfg.init_logit_scale
            (6, 4, 1.0)
        """
        v_over = dict(shared.pop("vision_overrides", {}))
        t_over = shared.pop("text_overrides", {})
        head = {k: shared.pop(k) for k in ("init_logit_scale", "max_logit_scale", "objective") if k in shared}
        given = {**shared, **v_over}
        if is_int(given.get("d_image")) and "n_ctx" not in given:
            v_over["n_ctx"] = given["d_image"] + 1  # the vision tower's length follows the image's
        return CLIPConfig(
            vision=preset(vision, VisionConfig, **shared, **v_over),  # type: ignore[arg-type]
            text=preset(text or vision, TextConfig, **shared, **t_over),  # type: ignore[arg-type]
            **head,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "vision": self.vision.to_dict(),
            "text": self.text.to_dict(),
            "init_logit_scale": self.init_logit_scale,
            "max_logit_scale": self.max_logit_scale,
            **({"objective": self.objective} if self.objective != "contrastive" else {}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CLIPConfig:
        d = dict(d)
        try:
            vision = EncoderConfig.from_dict(d.pop("vision"))
            text = EncoderConfig.from_dict(d.pop("text"))
        except KeyError as e:
            raise ValueError(f"CLIP config is missing {e}") from None
        known = {f.name for f in dataclasses.fields(CLIPConfig) if f.compare}  # checkpoint fields are not saved
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
        if cfg.objective == "captioning":  # the decoder's image prefix and unembedding (model.captioning)
            d_voc = cfg.text.d_vocab
            self.W_prefix = nn.Parameter(torch.randn(d_v, d_t, generator=gen, dtype=cfg.text.dtype) / math.sqrt(d_v))
            self.W_U = nn.Parameter(torch.randn(d_t, d_voc, generator=gen, dtype=cfg.text.dtype) / math.sqrt(d_t))
            # a run of the decoder on captions alone (no image) is refused: text analyses would misread it
            self.text.needs_prefix = True
        # the CLIP head's own hook points (the towers keep theirs, under "vision." / "text." in CLIP1D's verbs)
        self.hook_image_embed = HookPoint()  # [n_images, d_embed]: vision CLS output (not normalised)
        self.hook_text_embed = HookPoint()  # [n_texts, d_embed]: projected text EOT output (not normalised)
        self.hook_image_feat = HookPoint()  # [n_images, d_embed]: normalised image features
        self.hook_text_feat = HookPoint()  # [n_texts, d_embed]: normalised text features
        self.hook_logits = HookPoint()  # [n_images, n_texts]: scale * cosine
        for name in HEAD_HOOKS:
            getattr(self, name).name = name
        self.data_config = None  # set by load_model / the trainer: the DataConfig the model was trained on
        self.to(cfg.vision.device)

    @property
    def cfg(self) -> CLIPConfig:
        """The CLIP's config; its ``vision`` / ``text`` are the towers' own configs, which a tower's ``set_use_*``
        flags swap for a modified copy (the CLIP's config then follows, not a stale copy)."""
        cfg = self.__dict__["_cfg"]
        towers = self.__dict__.get("_modules", {})
        v, t = towers.get("vision"), towers.get("text")
        if v is not None and t is not None and (cfg.vision is not v.cfg or cfg.text is not t.cfg):
            cfg = dataclasses.replace(cfg, vision=v.cfg, text=t.cfg)
            self.__dict__["_cfg"] = cfg
        return cfg

    @cfg.setter
    def cfg(self, value: CLIPConfig) -> None:
        self.__dict__["_cfg"] = value

    # ---- representations --------------------------------------------------------------------------------------------
    def encode_image(
        self, images: Int[torch.Tensor, "batch pos"], validate: bool = True
    ) -> Float[torch.Tensor, "batch d_embed"]:
        """Image representation (vision CLS output), not normalised."""
        return self.vision(images, validate=validate)

    def project_text(self, pooled: Float[torch.Tensor, "batch d_text"]) -> Float[torch.Tensor, "batch d_embed"]:
        """Apply the text projection to text-tower outputs (for metrics on ``model.text`` runs)."""
        captioning.check_contrastive(self, "project_text")
        return pooled @ self.W_proj

    def encode_text(
        self, captions: Int[torch.Tensor, "batch 4"], validate: bool = True
    ) -> Float[torch.Tensor, "batch d_embed"]:
        """Text representation (projected EOT output), not normalised. A captioning model has none (refused)."""
        captioning.check_contrastive(self, "encode_text")
        return self.project_text(self.text(captions, validate=validate))

    @staticmethod
    def cosine(
        image_emb: Float[torch.Tensor, "n_images d_embed"], text_emb: Float[torch.Tensor, "n_texts d_embed"]
    ) -> Float[torch.Tensor, "n_images n_texts"]:
        """Cosine-similarity matrix of two sets of representations."""
        return functional.cosine(image_emb, text_emb)

    def similarity(
        self, images: Int[torch.Tensor, "n_images pos"], captions: Int[torch.Tensor, "n_texts 4"]
    ) -> Float[torch.Tensor, "n_images n_texts"]:
        """Cosine similarity of every image with every caption."""
        return self.cosine(self.encode_image(images), self.encode_text(captions))

    def temperature_scale(self) -> torch.Tensor:
        """``exp(logit_scale)`` clamped at ``exp(max_logit_scale)`` (a captioning model has no temperature)."""
        captioning.check_contrastive(self, "temperature_scale")
        return functional.temperature(self.logit_scale, self.cfg.max_logit_scale)

    def forward(
        self,
        images: Int[torch.Tensor, "n_images pos"],
        captions: Int[torch.Tensor, "n_texts 4"],
        validate: bool = True,
        return_type: str | None = "logits",
    ) -> torch.Tensor | None:
        """Image-to-text logits ``scale * cos`` [images, captions] (``return_type="logits"``), the symmetric CLIP
        loss of paired batches (``"loss"``, a scalar: image i goes with caption i), or nothing (``None``, for caching).
        A captioning model (``model.captioning``) gives each caption's log-likelihood in the logits' place (through
        ``hook_logits``) and its captioning loss.

        The head's hook points fire on the way: ``hook_image_embed``, ``hook_text_embed`` (projected),
        ``hook_image_feat``, ``hook_text_feat`` (normalised) and ``hook_logits``.
        """
        if return_type not in RETURN_TYPES:
            raise ValueError(f"CLIP1D: unknown return_type {return_type!r}; use one of {list(RETURN_TYPES)}")
        if self.cfg.objective == "captioning":  # log-likelihoods in the logits' place; the captioning loss
            if return_type == "loss":
                return captioning.caption_loss(self, images, captions, validate)
            scores = self.hook_logits(captioning.caption_scores(self, images, captions, validate, chunk=False))
            return scores if return_type == "logits" else None
        if validate and return_type == "loss" and images.shape[0] != captions.shape[0]:
            raise ValueError(
                f"CLIP1D: {images.shape[0]} images but {captions.shape[0]} captions; the contrastive loss pairs "
                "image i with caption i, so the batches must have equal size"
            )
        img = self.hook_image_embed(self.encode_image(images, validate))
        txt = self.hook_text_embed(self.encode_text(captions, validate))
        img = self.hook_image_feat(F.normalize(img, dim=-1))
        txt = self.hook_text_feat(F.normalize(txt, dim=-1))
        logits = self.hook_logits(self.temperature_scale() * img @ txt.T)
        if return_type == "loss":
            return clip_loss(logits)
        return logits if return_type == "logits" else None

    def loss(
        self,
        images: Int[torch.Tensor, "batch pos"],
        captions: Int[torch.Tensor, "batch 4"],
        validate: bool = True,
        negatives: str = "all",
    ) -> torch.Tensor:
        """Symmetric CLIP loss: mean of image->text and text->image cross-entropy over the batch.

        ``negatives`` (``TrainConfig.negatives``): how two items with identical captions count: ``"all"`` (standard
        CLIP: the other item's caption is a negative), ``"distinct"`` (masked out of both directions) or
        ``"shared"`` (multi-positive); see ``functional.symmetric_ce``. A captioning model's loss has no negatives:
        ``negatives`` changes nothing there (``model.captioning``).
        """
        if negatives not in functional.NEGATIVES:  # checked for either objective: a typo is an error in both
            raise ValueError(f"CLIP1D.loss: negatives must be one of {list(functional.NEGATIVES)}, got {negatives!r}")
        if self.cfg.objective == "captioning":
            return captioning.caption_loss(self, images, captions, validate)
        if validate and images.shape[0] != captions.shape[0]:
            raise ValueError(
                f"CLIP1D: {images.shape[0]} images but {captions.shape[0]} captions; the contrastive loss pairs "
                "image i with caption i, so the batches must have equal size"
            )
        if negatives == "all":
            return self(images, captions, validate, return_type="loss")
        logits = self(images, captions, validate, return_type="logits")
        return clip_loss(logits, captions, negatives)

    # ---- TransformerLens verbs over both towers and the head -----------------------------------------------------
    def hook_names(self) -> list[str]:
        """Every hook point of the whole model: ``vision.<name>``, ``text.<name>`` and the head's ``HEAD_HOOKS``."""
        return [
            *(f"vision.{n}" for n in self.vision.hook_names()),
            *(f"text.{n}" for n in self.text.hook_names()),
            *self.head_hooks(),
        ]

    def head_hooks(self) -> tuple[str, ...]:
        """The head's hook points this model's forward reaches (a captioning model's: ``captioning.HEAD_HOOKS``).

        Example:
            >>> cfg = CLIPConfig.from_preset("simplified", n_labels=5, objective="captioning")
            >>> CLIP1D(cfg, seed=0).head_hooks()
            ('hook_image_embed', 'hook_logits')
        """
        return HEAD_HOOKS if self.cfg.objective == "contrastive" else captioning.HEAD_HOOKS

    def _route(self, hooks: Any, what: str) -> tuple[list, list, list]:
        """Split ``[(name, fn), ...]`` by owner: vision tower, text tower, head (names without the tower prefix)."""
        v, t, h = [], [], []
        for name, fn in hook_pairs(hooks, what):
            if not isinstance(name, str):
                raise TypeError(
                    "CLIP1D hooks take hook names ('vision.<hook>', 'text.<hook>' or a head hook "
                    f"{list(HEAD_HOOKS)}); for a predicate, hook a tower directly (model.vision.hooks(...))"
                )
            if name.startswith("vision."):
                v.append((name.removeprefix("vision."), fn))
            elif name.startswith("text."):
                t.append((name.removeprefix("text."), fn))
            elif name in HEAD_HOOKS:
                if name not in self.head_hooks():
                    raise ValueError(
                        f"a captioning model's forward never reaches {name!r} (it has no text embedding or cosine); "
                        f"its head hooks are {list(captioning.HEAD_HOOKS)} (model.captioning)"
                    )
                h.append((name, fn))
            else:
                raise KeyError(
                    f"CLIP1D has no hook point {name!r}: use 'vision.<hook>', 'text.<hook>' or one of "
                    f"{list(HEAD_HOOKS)}"
                )
        return v, t, h

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Any = (), bwd_hooks: Any = ()) -> Iterator[CLIP1D]:
        """Temporary hooks on both towers and the head, removed on exit (TransformerLens's ``hooks``).

        Example:
            >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
            >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
            >>> cap = m.text.to_tokens(["1 is on the left of 2", "2 is on the left of 1"])
            >>> with m.hooks([("hook_logits", lambda x, hook: x * 0)]):
            ...     m(img, cap).abs().max().item()
            0.0
        """
        fv, ft, fh = self._route(fwd_hooks, "fwd_hooks")
        bv, bt, bh = self._route(bwd_hooks, "bwd_hooks")
        added: list[tuple[Any, str, Any]] = []  # (hook point, "fwd_hooks" / "bwd_hooks", handle): ours only

        def add(name: str, fn: Any, d: str) -> None:
            point = getattr(self, name)
            listed = f"{d}_hooks"
            before = list(getattr(point, listed))
            point.add_hook(checked_hook(fn) if d == "fwd" else fn, dir=d)
            added.extend((point, listed, h) for h in getattr(point, listed) if not any(h is b for b in before))

        with self.vision.hooks(fwd_hooks=fv, bwd_hooks=bv), self.text.hooks(fwd_hooks=ft, bwd_hooks=bt):
            try:
                for name, fn in fh:
                    add(name, fn, "fwd")
                for name, fn in bh:
                    add(name, fn, "bwd")
                yield self
            finally:  # only the hooks this call added: the caller's own hooks on the head stay
                for point, listed, handle in added:
                    handle.hook.remove()
                    setattr(point, listed, [h for h in getattr(point, listed) if h is not handle])

    def run_with_hooks(
        self,
        images: torch.Tensor,
        captions: torch.Tensor,
        fwd_hooks: Any = (),
        bwd_hooks: Any = (),
        return_type: str | None = "logits",
    ) -> torch.Tensor | None:
        """Run with temporary hooks (names as in ``hook_names()``); see ``forward`` for ``return_type``."""
        with self.hooks(fwd_hooks, bwd_hooks):
            return self(images, captions, return_type=return_type)

    def run_with_cache(
        self,
        images: torch.Tensor,
        captions: torch.Tensor,
        names_filter: str | Sequence[str] | Callable[[str], bool] | None = None,
        return_type: str | None = "logits",
        incl_bwd: bool = False,
        fwd_hooks: Any = (),
    ) -> tuple[torch.Tensor | None, CLIPCache]:
        """Run and cache every activation of both towers and the head (or those ``names_filter`` picks, by the
        names of ``hook_names()``); ``incl_bwd`` also caches gradients (``<name>_grad``) of the scalar output
        (``return_type="loss"``; as in TransformerLens, the backward pass also leaves ``.grad`` on the parameters:
        ``model.zero_grad(set_to_none=True)`` clears them). Returns ``(output, CLIPCache)``: ``cache.vision`` /
        ``cache.text`` are each tower's own ``ActivationCache`` (TransformerLens keys, ``cache.vision["pattern", 0]``),
        ``cache["hook_logits"]`` a head activation, ``cache["vision.hook_pooled"]`` a tower one.

        Example:
            >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
            >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
            >>> cap = m.text.to_tokens(["1 is on the left of 2"])
            >>> logits, cache = m.run_with_cache(img, cap)
            >>> cache.vision["pattern", 0].shape, cache["hook_logits"].shape
            (torch.Size([1, 4, 11, 11]), torch.Size([1, 1]))
        """
        names = self.hook_names()
        if names_filter is None:
            wanted = names
        elif isinstance(names_filter, str):
            wanted = [names_filter]
        elif callable(names_filter):
            wanted = [n for n in names if names_filter(n)]
            if not wanted:
                raise ValueError("CLIP1D.run_with_cache: names_filter matches no hook point (see hook_names())")
        else:
            wanted = names_filter_list(names_filter, "CLIP1D.run_with_cache")
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise KeyError(f"CLIP1D has no hook points {unknown} (see hook_names())")
        inactive = {f"vision.{n}" for n in self.vision.inactive_hook_names()}
        inactive |= {f"text.{n}" for n in self.text.inactive_hook_names()}
        if names_filter is not None and not callable(names_filter):  # named: one that cannot fire is an error
            for n in wanted:
                if n in inactive:
                    tower, sub = n.split(".", 1)
                    getattr(self, tower)._check_hook_name(sub)  # raises, naming the flag that makes it fire
        wanted = [n for n in wanted if n not in inactive]
        if not wanted:
            raise ValueError("CLIP1D.run_with_cache: names_filter matches no hook point that fires (see hook_names())")
        if incl_bwd and return_type != "loss":
            raise ValueError("incl_bwd=True needs a scalar output: return_type='loss'")
        store: dict[str, torch.Tensor] = {}

        def saver(key: str) -> Callable:
            def save(act: torch.Tensor, hook: Any) -> None:
                store[key] = act if incl_bwd and not key.endswith("_grad") else act.detach()

            return save

        fwd = [(n, saver(n)) for n in wanted]
        bwd = [(n, saver(f"{n}_grad")) for n in wanted] if incl_bwd else []
        with self.hooks([*hook_pairs(fwd_hooks, "fwd_hooks"), *fwd], bwd):
            out = self(images, captions, return_type=return_type)
            if incl_bwd:
                out.backward()  # type: ignore[union-attr]
        store = {k: v.detach() for k, v in store.items()}
        return out, CLIPCache(self, store)


class CLIPCache:
    """The activations of one ``CLIP1D.run_with_cache``: ``vision`` and ``text`` are ``ActivationCache``s rooted at
    each tower (TransformerLens keys and methods: ``cache.vision["pattern", 0]``, ``decompose_resid``, ...), and
    ``cache[name]`` gives any activation by its ``CLIP1D.hook_names()`` name (``"hook_logits"``,
    ``"vision.blocks.0.attn.hook_pattern"``, ``"text.hook_pooled_grad"``)."""

    def __init__(self, model: CLIP1D, store: dict[str, torch.Tensor]):
        self.model = model
        self.store = store
        self.vision = tower_cache(
            {k.removeprefix("vision."): v for k, v in store.items() if k.startswith("vision.")}, model.vision
        )
        self.text = tower_cache(
            {k.removeprefix("text."): v for k, v in store.items() if k.startswith("text.")}, model.text
        )

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self.store:
            raise KeyError(f"{key!r} is not in this cache (cached: {len(self.store)} activations; see keys())")
        return self.store[key]

    def __contains__(self, key: object) -> bool:
        return key in self.store

    def keys(self) -> list[str]:
        return list(self.store)

    def __len__(self) -> int:
        return len(self.store)


def clip_loss(
    logits: Float[torch.Tensor, "batch batch"],
    captions: Int[torch.Tensor, "batch L"] | None = None,
    negatives: str = "all",
) -> torch.Tensor:
    """Average of the image->text and text->image cross-entropies with targets on the diagonal; with
    ``negatives="distinct"`` / ``"shared"`` (and the batch's ``captions``), pairs of identical captions are masked out
    / made positives (``functional.symmetric_ce``).

    Example:
        >>> logits = torch.tensor([[5.0, 0.0, 5.0], [0.0, 5.0, 0.0], [5.0, 0.0, 5.0]])
        >>> caps = torch.tensor([[1, 2], [3, 4], [1, 2]])  # items 0 and 2 share their caption
        >>> [round(float(clip_loss(logits, caps, n)), 3) for n in ("all", "distinct", "shared")]
        [0.469, 0.009, 0.469]
    """
    if negatives == "all":
        return functional.symmetric_ce(logits)
    if negatives not in functional.NEGATIVES:
        raise ValueError(f"clip_loss: negatives must be one of {list(functional.NEGATIVES)}, got {negatives!r}")
    if captions is None or captions.shape[0] != logits.shape[-1]:
        raise ValueError(f"clip_loss: negatives={negatives!r} needs the batch's captions, one per logits column")
    same = functional.same_caption(captions)
    return functional.symmetric_ce(logits, same=same, shared=torch.tensor(negatives == "shared"))
