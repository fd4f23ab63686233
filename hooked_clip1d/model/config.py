"""Architecture configs: one frozen dataclass per encoder tower, the single source of truth for shapes.

The field names follow TransformerLens's ``HookedTransformerConfig`` wherever a TL tool reads them
(``ActivationCache`` reads ``n_layers, n_heads, d_model, d_mlp, attn_only, normalization_type``;
``transformer_lens.patching`` reads ``n_layers, n_heads, device, n_key_value_heads``), so those tools run on our
encoders unchanged. Paper names are given in the comments: MB x Mrep = ``n_layers``, Mh = ``n_heads``.

Presets (``preset(...)``) give the paper's two architectures:

- ``"full"``: MB = 2, Mrep = 2 (4 blocks), 4 heads, d_head 32, d_model 128, LayerNorm, GeLU MLP 512 (Fig. 3).
  Two readings of the paper are open choices (docs/configs.md): ``tied_repeats=2`` applies 2 distinct blocks twice
  instead of 4 independent blocks, ``ln_position="post"`` puts LayerNorm after each residual add.
- ``"simplified"``: 1 block, 4 heads, attention only, no LayerNorm (Sec. 4 onwards).

Example:
    >>> from hooked_clip1d.model.config import VisionConfig, preset
    >>> cfg = preset("simplified", VisionConfig, n_labels=20)
    >>> (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.attn_only, cfg.n_ctx, cfg.d_vocab)
    (1, 4, 32, True, 11, 22)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

import hooked_clip1d.model.functional as functional
from hooked_clip1d.data.vocab import Vocabulary
from hooked_clip1d.model.terms import LAYER0_TERMS
from hooked_clip1d.settings import TowerKnobs, knob, legacy_values
from hooked_clip1d.settings.checks import is_int

Positional = Literal["learned", "rope", "none"]

_TL_POSITIONAL = {"learned": "standard", "rope": "rotary", "none": "none"}


# the layer-0 terms ``ablated_terms`` may remove (query part x key part; VP: positional part of the values): the
# table of ``model.terms``, which the analysis shares
TRAINABLE_ABLATIONS = LAYER0_TERMS


# init_std of a saved config that predates the field (every such model was initialised like nn.Embedding)
LEGACY_INIT_STD = legacy_values(TowerKnobs)["init_std"]


@dataclass(frozen=True)
class EncoderConfig(TowerKnobs):
    """Shapes and switches of one Transformer tower. Validated on construction.

    ``VisionConfig`` and ``TextConfig`` only change the defaults that differ between the towers
    (attention direction, context length, vocabulary size). Every field is declared once with ``settings.knob``
    (its help and how the batched engine treats it); the recipe choices among them (``init_std``, ``attn_dropout``,
    ``embed_dropout``) are declared in ``settings.TowerKnobs``, which this class inherits, so that recipes are read
    without torch.
    """

    n_labels: int = knob(20, "Ntot: object categories 1..n_labels; sets d_vocab", batched="member")
    n_layers: int = knob(1, "MB x Mrep layers applied (distinct blocks: n_layers // tied_repeats)", batched="shape")
    n_heads: int = knob(4, "Mh attention heads per block", batched="shape")
    d_head: int = knob(32, "dimension of each head's query/key/value", batched="shape")
    d_model: int = knob(128, "residual stream width (token and positional embeddings too)", batched="shape")
    d_mlp: int | None = knob(None, "MLP hidden width; None when attn_only", batched="shape")
    attn_only: bool = knob(True, "no MLP sublayer (the paper's simplified model)", batched="shape")
    normalization_type: Literal["LN"] | None = knob(
        None, "'LN': LayerNorm blocks (see ln_position); None: no LayerNorm", batched="shape"
    )
    # The paper says only "LayerNorm ... applied". "pre": x + attn(ln1(x)), x + mlp(ln2(x)), then ln_final (GPT-2,
    # CLIP, TL: what every shipped model uses); "post": ln1(x + attn(x)), ln2(x + mlp(x)), no ln_final (the original
    # Transformer's and nn.TransformerEncoderLayer's default). See docs/configs.md, "Open choices"
    ln_position: Literal["pre", "post"] = knob("pre", "where LayerNorm sits: 'pre' or 'post'", batched="shape")
    # The paper's "Mrep repetitions of MB blocks" read as weight tying: the n_layers // tied_repeats distinct blocks
    # (MB) are applied tied_repeats (Mrep) times in turn (0, 1, 0, 1 for MB = Mrep = 2), each application a layer
    # with its own hooks (blocks.{layer}) sharing its block's weights. 1: every layer has its own weights (MB x Mrep
    # independent blocks: what every shipped model uses)
    tied_repeats: int = knob(1, "apply the n_layers // tied_repeats distinct blocks this often", batched="shape")
    positional: Positional = knob("learned", "learned absolute embeddings (paper), rotary (App. I) or none",
                                  batched="shape")  # fmt: skip
    rotary_dim: int | None = knob(None, "dims of each head rotated by RoPE; None = d_head", batched="shape")
    rotary_base: int = knob(10000, "RoPE frequency base", batched="shape")
    dropout: float = knob(0.1, "p, on each sublayer's output (and the MLP hidden), train mode only", batched="shape",
                          free=True)  # fmt: skip
    act_fn: Literal["gelu"] = knob("gelu", "MLP nonlinearity (the paper's GeLU)", batched="shape")
    attention_dir: Literal["causal", "bidirectional"] = knob(
        "bidirectional", "vision: bidirectional; text: causal", batched="shape"
    )
    n_ctx: int = knob(11, "sequence length: 1 CLS + d_image pixels (vision) or 4 caption tokens (text)",
                      batched="shape")  # fmt: skip
    d_image: int = knob(10, "Dimage, pixels per 1D image (vision only; text ignores it)", batched="shape")
    init_seed: int | None = knob(None, "seed for the weights; None = the torch global RNG", batched="member",
                                 free=True)  # fmt: skip
    pruned_heads: tuple[tuple[int, int], ...] = knob(
        (), "(layer, head) pairs whose output z is zeroed (App. K pruning)", batched="member"
    )
    # training-time ablation (beyond the paper): see analysis.interventions.terms
    ablated_terms: tuple[str, ...] = knob(
        (), "layer-0 attention terms (EP, PE, ..., VP) removed in every forward pass, training included",
        batched="unsupported",
    )  # fmt: skip
    use_attn_result: bool = knob(False, "fire blocks.{l}.attn.hook_result (per-head outputs) [TL]", batched="hook",
                                 free=True)  # fmt: skip
    use_split_qkv_input: bool = knob(False, "fire blocks.{l}.hook_{q,k,v}_input per head [TL]", batched="hook",
                                     free=True)  # fmt: skip
    use_attn_in: bool = knob(False, "fire blocks.{l}.hook_attn_in per head [TL]", batched="hook", free=True)
    use_hook_mlp_in: bool = knob(False, "fire blocks.{l}.hook_mlp_in [TL]", batched="hook", free=True)
    device: str = knob("cpu", "where parameters live (read by transformer_lens.patching)", batched="shape",
                       free=True, results=False)  # fmt: skip
    dtype: torch.dtype = knob(torch.float32, "parameter dtype", batched="shape", free=True)
    n_key_value_heads: int | None = knob(None, "read by transformer_lens.patching; always None (no GQA)",
                                         batched="shape")  # fmt: skip
    final_rms: bool = knob(False, "read by ActivationCache; always False", batched="shape")

    tower: str = dataclasses.field(default="vision", init=False)  # "vision" or "text"; set by subclass

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"{type(self).__name__}.{field}: {why}")

        for name in ("n_labels", "n_layers", "n_heads", "d_head", "d_model", "n_ctx"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad(name, f"must be a positive int, got {v!r}")
        if self.positional not in _TL_POSITIONAL:
            raise bad("positional", f"must be one of {sorted(_TL_POSITIONAL)}, got {self.positional!r}")
        if self.normalization_type not in (None, "LN"):
            raise bad("normalization_type", f"must be 'LN' or None, got {self.normalization_type!r}")
        if self.ln_position not in ("pre", "post"):
            raise bad("ln_position", f"must be 'pre' or 'post', got {self.ln_position!r}")
        if self.use_attn_in and self.use_split_qkv_input:
            raise bad(
                "use_attn_in", "and use_split_qkv_input exclude each other (hook_attn_in replaces the split inputs)"
            )
        if self.ln_position == "post" and self.normalization_type is None:
            raise bad("ln_position", "'post' needs normalization_type='LN' (there is no LayerNorm to place)")
        v = self.tied_repeats
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or self.n_layers % v:
            raise bad(
                "tied_repeats",
                f"must be a positive int dividing n_layers={self.n_layers} (n_layers // tied_repeats distinct "
                f"blocks applied tied_repeats times), got {v!r}",
            )
        if self.attention_dir not in ("causal", "bidirectional"):
            raise bad("attention_dir", f"must be 'causal' or 'bidirectional', got {self.attention_dir!r}")
        if self.attn_only:
            if self.d_mlp is not None:
                raise bad("d_mlp", "must be None when attn_only=True (an attention-only model has no MLP)")
            if self.use_hook_mlp_in:
                raise bad("use_hook_mlp_in", "an attention-only model has no MLP input")
        elif not isinstance(self.d_mlp, int) or isinstance(self.d_mlp, bool) or self.d_mlp < 1:
            raise bad("d_mlp", f"must be a positive int when attn_only=False, got {self.d_mlp!r}")
        for name in ("dropout", "attn_dropout", "embed_dropout"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0.0 <= v < 1.0:
                raise bad(name, f"must be a number in [0, 1), got {v!r}")
        if not isinstance(self.rotary_base, int | float) or isinstance(self.rotary_base, bool) or self.rotary_base <= 1:
            raise bad("rotary_base", f"must be a number > 1, got {self.rotary_base!r}")
        if self.positional == "rope":
            rd = self.rotary_dim_
            if rd % 2 or not 2 <= rd <= self.d_head:
                raise bad("rotary_dim", f"must be even and in [2, d_head={self.d_head}], got {rd}")
        if not is_int(self.d_image) or self.d_image < 2:
            raise bad("d_image", f"must be an int >= 2 (two objects need two pixels), got {self.d_image!r}")
        if self.rotary_dim is not None and not is_int(self.rotary_dim):
            raise bad("rotary_dim", f"must be an int or None (= d_head), got {self.rotary_dim!r}")
        if self.act_fn != "gelu":  # the towers run GeLU whatever this says: another name would be a false record
            raise bad("act_fn", f"must be 'gelu' (the paper's MLP nonlinearity, the only one the towers run), got "
                      f"{self.act_fn!r}")  # fmt: skip
        if self.init_seed is not None and not is_int(self.init_seed):
            raise bad("init_seed", f"must be an int or None (the torch global RNG), got {self.init_seed!r}")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise bad("dtype", f"must be a floating torch.dtype (e.g. torch.float32), got {self.dtype!r}")
        for name in ("attn_only", "use_attn_result", "use_split_qkv_input", "use_attn_in", "use_hook_mlp_in"):
            if not isinstance(getattr(self, name), bool):  # "no" would be true
                raise bad(name, f"must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.init_std, int | float) or isinstance(self.init_std, bool) or not self.init_std > 0:
            raise bad("init_std", f"must be a positive number, got {self.init_std!r}")
        try:
            pruned = tuple(sorted({(int(lh[0]), int(lh[1])) for lh in self.pruned_heads if len(lh) == 2}))
            ok = len(pruned) == len(self.pruned_heads)  # no duplicates, every entry a pair
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise bad("pruned_heads", f"must be distinct (layer, head) pairs, got {self.pruned_heads!r}")
        out = [lh for lh in pruned if not (0 <= lh[0] < self.n_layers and 0 <= lh[1] < self.n_heads)]
        if out:
            raise bad(
                "pruned_heads",
                f"{out} out of range: layers 0..{self.n_layers - 1}, heads 0..{self.n_heads - 1}",
            )
        object.__setattr__(self, "pruned_heads", pruned)  # canonical: sorted tuple of int pairs
        self._check_ablated_terms()

    def _check_ablated_terms(self) -> None:
        terms = self.ablated_terms
        if isinstance(terms, str) or not all(isinstance(t, str) for t in terms):
            raise ValueError(f"EncoderConfig.ablated_terms: must be a tuple of term names, got {terms!r}")
        unknown = sorted(set(terms) - set(TRAINABLE_ABLATIONS))
        if unknown:
            raise ValueError(
                f"EncoderConfig.ablated_terms: unknown {unknown}; choose from {list(TRAINABLE_ABLATIONS)} "
                "(layer-0 query x key parts E token, P position, B bias; VP the positional part of the values)"
            )
        if terms and self.embed_dropout:
            raise ValueError(
                "EncoderConfig.ablated_terms: not with embed_dropout (the layer-0 terms are read from the embeddings "
                "before dropout)"
            )
        if terms and self.normalization_type is not None:
            raise ValueError(
                "EncoderConfig.ablated_terms: needs normalization_type=None (with LayerNorm the layer-0 terms are "
                "only defined up to the LN convention)"
            )
        if self.positional != "learned" and any("P" in t for t in terms):
            raise ValueError(f"EncoderConfig.ablated_terms: P terms need positional='learned', not {self.positional!r}")
        object.__setattr__(self, "ablated_terms", tuple(sorted(set(terms))))

    # ---- derived fields read by TransformerLens and by our modules -------------------------------------------------
    @property
    def vocab(self) -> Vocabulary:
        """The token vocabulary of this tower's inputs."""
        return Vocabulary(self.n_labels)

    @property
    def d_vocab(self) -> int:
        """Number of input token ids (``W_E.shape[0]``)."""
        raise NotImplementedError

    @property
    def model_name(self) -> str:
        """A name for TransformerLens tools that print one: ``hooked-clip1d-vision`` / ``hooked-clip1d-text``."""
        return f"hooked-clip1d-{self.tower}"

    @property
    def positional_embedding_type(self) -> str:
        """TransformerLens's name for ``positional``: 'standard' | 'rotary' | 'none'."""
        return _TL_POSITIONAL[self.positional]

    @property
    def rotary_dim_(self) -> int:
        """The number of dims each head rotates: ``rotary_dim``, or ``d_head`` when it is None."""
        return self.rotary_dim if self.rotary_dim is not None else self.d_head

    @property
    def attn_scale(self) -> float:
        """Scores are divided by this (sqrt(d_head)) before ``hook_attn_scores``, as in TL."""
        return functional.attn_scale(self.d_head)

    @property
    def use_attn_scale(self) -> bool:
        return True

    @property
    def n_blocks(self) -> int:
        """Distinct blocks (the paper's MB): layer ``l`` applies block ``l % n_blocks`` (``tied_repeats``)."""
        return self.n_layers // self.tied_repeats

    @property
    def final_ln(self) -> bool:
        """Whether the tower ends in ``ln_final``: pre-LN towers do, post-LN ones (already normalised) do not."""
        return self.normalization_type == "LN" and self.ln_position == "pre"

    def heads_kept(self, layer: int) -> list[bool]:
        """For each head of ``layer``, False when it is in ``pruned_heads``."""
        return [(layer, h) not in self.pruned_heads for h in range(self.n_heads)]

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with some fields changed (the config is frozen)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (dtype as its name); ``from_dict`` inverts it."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        d["dtype"] = str(self.dtype).removeprefix("torch.")
        d["pruned_heads"] = [list(lh) for lh in self.pruned_heads]
        d["ablated_terms"] = list(self.ablated_terms)
        d["tower"] = self.tower
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> EncoderConfig:
        """Rebuild a ``VisionConfig`` or ``TextConfig`` from ``to_dict`` output; unknown fields are an error."""
        d = dict(d)
        tower = d.pop("tower", None)
        cls = {"vision": VisionConfig, "text": TextConfig}.get(tower)
        if cls is None:
            raise ValueError(f"encoder config has tower={tower!r}; expected 'vision' or 'text'")
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}")
        if "dtype" in d:
            dt = getattr(torch, str(d["dtype"]), None)
            if not isinstance(dt, torch.dtype):
                raise ValueError(f"unknown dtype {d['dtype']!r}")
            d["dtype"] = dt
        if "pruned_heads" in d:
            d["pruned_heads"] = tuple(tuple(lh) for lh in d["pruned_heads"])
        if "ablated_terms" in d:
            d["ablated_terms"] = tuple(d["ablated_terms"])
        d.setdefault("init_std", LEGACY_INIT_STD)  # saved before the field existed: trained at N(0, 1)
        return cls(**d)


@dataclass(frozen=True)
class VisionConfig(EncoderConfig):
    """Vision tower: bidirectional, input ``[CLS] + d_image pixels``, readout at CLS (position 0)."""

    tower: str = dataclasses.field(default="vision", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_ctx != self.d_image + 1:
            raise ValueError(
                f"VisionConfig.n_ctx must be d_image + 1 = {self.d_image + 1} (CLS + pixels), got {self.n_ctx}"
            )
        if self.attention_dir != "bidirectional":  # the readout is CLS at position 0: causal, it sees only itself
            raise ValueError(
                f"VisionConfig.attention_dir must be 'bidirectional' (the readout is CLS at position 0, which under a "
                f"causal mask sees only itself, not the image), got {self.attention_dir!r}"
            )

    @property
    def d_vocab(self) -> int:
        return self.vocab.image_vocab_size


@dataclass(frozen=True)
class TextConfig(EncoderConfig):
    """Text tower: causal, input = a 4-token caption, readout at the (first) EOT token."""

    attention_dir: Literal["causal", "bidirectional"] = "causal"
    n_ctx: int = 4

    tower: str = dataclasses.field(default="text", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_ctx != 4:
            raise ValueError(
                f"TextConfig.n_ctx must be 4 (a caption is 4 tokens), got {self.n_ctx} (CLIPConfig.from_preset applies "
                "a keyword to both towers: vision_overrides={'n_ctx': ...} sets the vision tower's alone)"
            )

    @property
    def d_vocab(self) -> int:
        return self.vocab.text_vocab_size


PRESETS: dict[str, dict[str, Any]] = {
    # Fig. 3: MB=2, Mrep=2, Mh=4, d_head=32, d_MLP=512, d_model=128, LayerNorm, GeLU MLP.
    "full": dict(n_layers=4, n_heads=4, d_head=32, d_model=128, d_mlp=512, attn_only=False, normalization_type="LN"),
    # Sec. 4: one block, attention only, no LayerNorm.
    "simplified": dict(
        n_layers=1, n_heads=4, d_head=32, d_model=128, d_mlp=None, attn_only=True, normalization_type=None
    ),
}


def preset(name: str, cls: type[EncoderConfig] = VisionConfig, **overrides: Any) -> EncoderConfig:
    """Build a tower config from a named preset (``"full"`` or ``"simplified"``) plus overrides.

    Example:
        >>> preset("full", TextConfig, n_labels=10).n_layers
        4
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
    return cls(**{**PRESETS[name], **overrides})


def check_heads(heads: Sequence[Sequence[int]], cfg: EncoderConfig, what: str) -> tuple[tuple[int, int], ...]:
    """``heads`` as a tuple of (layer, head) pairs of ints, each inside the tower config ``cfg``.

    >>> check_heads([[0, 1]], VisionConfig(n_labels=5), "prune_heads")
    ((0, 1),)
    """
    out = []
    for lh in heads:
        if isinstance(lh, str | bytes) or not isinstance(lh, Sequence) or len(lh) != 2:
            raise TypeError(f"{what}: heads must be (layer, head) pairs, got {lh!r}")
        layer, head = lh
        if isinstance(layer, bool) or isinstance(head, bool) or not isinstance(layer, int) or not isinstance(head, int):
            raise TypeError(f"{what}: heads must be (layer, head) pairs of ints, got {lh!r}")
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ValueError(
                f"{what}: head {(layer, head)} out of range (layers 0..{cfg.n_layers - 1}, heads 0..{cfg.n_heads - 1})"
            )
        out.append((layer, head))
    return tuple(out)
