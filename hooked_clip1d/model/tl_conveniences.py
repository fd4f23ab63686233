"""The TransformerLens conveniences of a tower, beside its forward pass (``encoders``): what TransformerLens users
reach for around the forward, none of which the forward itself runs.

``TLConveniences`` is the base every tower (``encoders.HookedEncoder``) inherits, a ``HookedRootModule`` with:

- **inputs**: ``validate_tokens`` (the checks shared by both towers; each tower adds its own), ``to_tokens`` (ids from a
  tensor, a readable string or a list of them), ``to_str_tokens``, ``to_string``;
- **hooks**: ``hook_names``, ``inactive_hook_names``; ``add_hook`` / ``hooks`` / ``run_with_hooks`` refuse an unknown
  hook name, one that cannot fire with the current flags or a predicate matching nothing, and check what a forward
  hook returns (``checked_hook``); ``run_with_cache`` (TransformerLens's, plus ``fwd_hooks`` during the cached run,
  never caching a point that cannot fire, the same cache on TransformerLens 3 and 4);
- **flags**: ``set_use_attn_result``, ``set_use_split_qkv_input``, ``set_use_attn_in``, ``set_use_hook_mlp_in``;
- **weights**: the stacks over layers ``W_Q``, ``W_K``, ``W_V``, ``W_O``, ``b_Q`` ... ``W_in``, ``b_out``
  ([n_layers, ...]), ``W_E``, ``W_pos``, ``W_E_pos``, the ``QK`` / ``OV`` circuits (``FactoredMatrix``),
  ``all_composition_scores``, ``accumulated_bias``, ``n_params``; a weight the tower does not have says why
  (``W_pos`` without learned positions, ``W_in`` in an attention-only tower).

Example:
    >>> from hooked_clip1d import HookedVisionEncoder, VisionConfig
    >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, init_seed=0))
    >>> enc.to_str_tokens("C 3 . . . . . . . . 5")[:2], enc.W_Q.shape, enc.OV.AB.shape
    (['[CLS]', '3'], torch.Size([1, 4, 128, 32]), torch.Size([1, 4, 128, 128]))
    >>> enc.hook_names()[:2]
    ['hook_embed', 'hook_pos_embed']
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, no_type_check

import torch
from jaxtyping import Float, Int
from torch import nn
from transformer_lens import ActivationCache, FactoredMatrix

from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.model.tl_compat import HookedRootModule, slice_positions
from hooked_clip1d.model.tl_compat import remove_batch_dim as _drop_batch


class PostLNCache(ActivationCache):
    """A post-LN tower's ``ActivationCache`` (``ln_position="post"``): each block normalises the residual stream
    itself, so its components do not add up to the output (``decompose_resid`` summed 1.18 away from it) and there
    is no final LayerNorm to read them through (``apply_ln=True`` failed with a bare IndexError). Those methods are
    refused by name; the activations themselves (``cache[name]``, ``accumulated_resid()``, ``stack_head_results()``
    without ``apply_ln``) are as TransformerLens gives them."""

    def _refuse(self, what: str) -> None:
        raise ValueError(
            f"{what}: this tower is post-LN (ln_position='post'): each block's LayerNorm normalises the residual "
            "stream, so its components do not sum to the output and there is no final LayerNorm to apply; the "
            "residual decompositions need a pre-LN or LayerNorm-free tower"
        )

    def decompose_resid(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse("decompose_resid")

    def get_full_resid_decomposition(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse("get_full_resid_decomposition")

    def apply_ln_to_stack(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse("apply_ln_to_stack")

    def accumulated_resid(self, *args: Any, apply_ln: bool = False, **kwargs: Any) -> Any:
        if apply_ln:
            self._refuse("accumulated_resid(apply_ln=True)")
        return super().accumulated_resid(*args, **kwargs)

    def stack_head_results(self, *args: Any, apply_ln: bool = False, **kwargs: Any) -> Any:
        if apply_ln:
            self._refuse("stack_head_results(apply_ln=True)")
        return super().stack_head_results(*args, **kwargs)


def tower_cache(cache_dict: dict[str, torch.Tensor], tower: nn.Module, has_batch_dim: bool = True) -> ActivationCache:
    """A tower's ``ActivationCache`` (a ``PostLNCache`` for a post-LN tower)."""
    kind = PostLNCache if tower.cfg.ln_position == "post" else ActivationCache
    return kind(cache_dict, tower, has_batch_dim=has_batch_dim)


def names_filter_list(names_filter: Any, owner: str) -> list[str]:
    """``names_filter`` given as a list (any iterable) of hook names, as a list; anything else is a ``TypeError``
    naming the argument and what it accepts (a bare int once gave "'int' object is not iterable")."""
    names = list(names_filter) if isinstance(names_filter, Iterable) and not isinstance(names_filter, bytes) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{owner}: names_filter must be a hook name, a list of hook names or a callable (name -> bool) "
            f"(or None: every hook point); got {type(names_filter).__name__} {names_filter!r}"
        )
    return names


def hook_pairs(hooks: Any, what: str) -> list:
    """``fwd_hooks`` / ``bwd_hooks`` as a list of ``(name, hook)`` pairs; a dict, a single pair or an entry that is
    not a pair is a ``TypeError`` saying so (TransformerLens unpacks them and fails with "too many values to unpack").

    >>> hook_pairs([("hook_embed", print)], "fwd_hooks")[0][0]
    'hook_embed'
    >>> hook_pairs(("hook_embed", print), "fwd_hooks")
    Traceback (most recent call last):
    TypeError: fwd_hooks must be a list of (name, hook) pairs, got one pair: wrap it in a list, [(name, hook)]
    """
    if isinstance(hooks, dict):
        raise TypeError(f"{what} must be a list of (name, hook) pairs, got a dict: pass list(hooks.items())")
    if isinstance(hooks, str):
        raise TypeError(f"{what} must be a list of (name, hook) pairs, got the string {hooks!r}")
    if isinstance(hooks, tuple) and len(hooks) == 2 and isinstance(hooks[0], str | Callable) and callable(hooks[1]):
        if not isinstance(hooks[0], tuple | list):
            raise TypeError(
                f"{what} must be a list of (name, hook) pairs, got one pair: wrap it in a list, [(name, hook)]"
            )
    pairs = list(hooks or ())
    for item in pairs:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise TypeError(f"{what}: each entry must be a (name, hook) pair, got {item!r}")
    return pairs


def checked_hook(fn: Callable) -> Callable:
    """Wrap a forward hook so that what it returns is checked: ``None`` (activation unchanged, as in
    TransformerLens) or a tensor of the activation's shape, dtype and device; anything else is an error naming the
    hook point and both shapes."""
    if getattr(fn, "_hc1d_checked", False):
        return fn

    def checked(tensor: torch.Tensor, hook: Any) -> Any:
        out = fn(tensor, hook=hook)
        if out is None:
            return None
        where = getattr(hook, "name", "?")
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"the hook on {where!r} returned a {type(out).__name__}, not a tensor; return a tensor of shape "
                f"{list(tensor.shape)} (or None to leave the activation unchanged)"
            )
        if out.shape != tensor.shape or out.dtype != tensor.dtype or out.device != tensor.device:
            raise ValueError(
                f"the hook on {where!r} returned a tensor of shape {list(out.shape)} ({out.dtype}, {out.device}); "
                f"the activation is {list(tensor.shape)} ({tensor.dtype}, {tensor.device})"
            )
        return out

    checked._hc1d_checked = True  # type: ignore[attr-defined]
    checked.__name__ = getattr(fn, "__name__", "hook")
    return checked


class TLConveniences(HookedRootModule):
    """The TransformerLens conveniences both towers inherit (module docstring); a tower adds its forward pass
    (``encoders.HookedEncoder``) and what its inputs are (``readout_positions``, ``parse``, ``token_strs``, its own
    ``validate_tokens`` checks)."""

    cfg: EncoderConfig
    blocks: nn.ModuleList

    @contextlib.contextmanager
    def hooks(
        self,
        fwd_hooks: Any = (),
        bwd_hooks: Any = (),
        reset_hooks_end: bool = True,
        clear_contexts: bool = False,
    ) -> Iterator[Any]:
        """TransformerLens's ``hooks`` (and so ``run_with_hooks``), with ``fwd_hooks`` / ``bwd_hooks`` checked to be
        lists of ``(name, hook)`` pairs first (``hook_pairs``)."""
        fwd, bwd = hook_pairs(fwd_hooks, "fwd_hooks"), hook_pairs(bwd_hooks, "bwd_hooks")
        with super().hooks(fwd, bwd, reset_hooks_end, clear_contexts) as model:
            yield model

    # ---- inputs -----------------------------------------------------------------------------------------------------
    def validate_tokens(self, tokens: Any) -> None:
        """Raise ``ValueError``/``TypeError`` naming the problem if ``tokens`` is not a valid input batch."""
        name = type(self).__name__
        cfg = self.cfg
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"{name} expects a torch.Tensor of token ids, got {type(tokens).__name__}")
        if tokens.dtype in (torch.bool,) or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"{name} expects integer token ids (torch.long), got dtype {tokens.dtype}")
        if tokens.ndim != 2:
            raise ValueError(f"{name} expects token ids shaped [batch, {cfg.n_ctx}], got shape {tuple(tokens.shape)}")
        if tokens.shape[0] == 0:
            raise ValueError(f"{name} got an empty batch (shape {tuple(tokens.shape)})")
        if tokens.shape[1] != cfg.n_ctx:
            raise ValueError(
                f"{name} expects sequences of length n_ctx={cfg.n_ctx}, got length {tokens.shape[1]} "
                f"(shape {tuple(tokens.shape)})"
            )
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= cfg.d_vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name}: token id {bad} is out of range; valid ids are 0..{cfg.d_vocab - 1}")

    input_kind = "input"  # "image" or "caption", for messages

    def parse(self, text: str) -> Int[torch.Tensor, " pos"]:
        """One readable input string -> ids (the tower's ``Vocabulary`` format)."""
        raise NotImplementedError

    def token_strs(self, tokens: Int[torch.Tensor, " pos"]) -> list[str]:
        """The token strings of one input's ids (the tower's ``Vocabulary`` format)."""
        raise NotImplementedError

    def to_tokens(self, x: Any) -> Int[torch.Tensor, "batch pos"]:
        """Validated ids [batch, n_ctx] from a tensor, a readable string or a list of strings."""
        what = f"{type(self).__name__}.to_tokens"
        if isinstance(x, torch.Tensor):
            if x.ndim not in (1, 2):
                raise ValueError(f"{what} takes ids [pos] or [batch, pos], got a tensor of shape {tuple(x.shape)}")
            t = x if x.ndim == 2 else x[None]
        elif isinstance(x, str):
            t = self.parse(x)[None]
        else:
            if not isinstance(x, list | tuple) or not all(isinstance(s, str) for s in x):
                raise TypeError(
                    f"{what} takes a token tensor, a readable {self.input_kind} string or a list of them, got "
                    f"{type(x).__name__}" + (" with non-string items" if isinstance(x, list | tuple) else "")
                )
            rows = [self.parse(s) for s in x]
            if not rows:
                raise ValueError(f"{type(self).__name__}.to_tokens got an empty list of {self.input_kind}s")
            lengths = sorted({len(r) for r in rows})
            if len(lengths) > 1:
                raise ValueError(
                    f"{type(self).__name__}.to_tokens: the {self.input_kind}s have different lengths {lengths}"
                )
            t = torch.stack(rows)
        self.validate_tokens(t)
        return t.to(self.W_E.device)

    def to_str_tokens(self, x: Any) -> list[str] | list[list[str]]:
        """Token strings of one input (a readable string or ids [pos]) or of a batch ([batch, pos] / a list)."""
        t = self.to_tokens(x) if not isinstance(x, torch.Tensor) else x
        if t.ndim == 1:
            return self.token_strs(t)
        rows = [self.token_strs(r) for r in t]
        return rows[0] if isinstance(x, str) else rows

    def to_string(self, tokens: torch.Tensor) -> str | list[str]:
        """The readable form of ids: one string for [pos], a list for [batch, pos]."""
        v = self.cfg.vocab
        fn = v.image_to_text if self.input_kind == "image" else v.caption_to_text
        return fn(tokens) if tokens.ndim == 1 else [fn(r) for r in tokens]

    # ---- hook API ---------------------------------------------------------------------------------------------------
    def hook_names(self) -> list[str]:
        """All hook point names of this tower (including ones that fire only when a ``use_*`` flag is on)."""
        return list(self.hook_dict)

    def inactive_hook_names(self) -> set[str]:
        """Hook points that exist but do not fire with the current config flags."""
        cfg = self.cfg
        split_on = cfg.use_split_qkv_input and not cfg.use_attn_in  # attn_in replaces the split inputs
        off = {
            "attn.hook_result": not cfg.use_attn_result,
            "hook_q_input": not split_on,
            "hook_k_input": not split_on,
            "hook_v_input": not split_on,
            "hook_attn_in": not cfg.use_attn_in,
            "hook_mlp_in": not cfg.use_hook_mlp_in,
        }
        return {n for n in self.hook_dict if any(n.endswith(suffix) and is_off for suffix, is_off in off.items())}

    def _check_hook_name(self, name: str) -> None:
        if name not in self.hook_dict:
            close = difflib.get_close_matches(name, list(self.hook_dict), n=3)
            hint = f"; did you mean {close}?" if close else ""
            raise KeyError(f"{type(self).__name__} has no hook point {name!r}{hint} (see .hook_names())")
        if name in self.inactive_hook_names():
            flag = {
                "hook_result": "use_attn_result (model.set_use_attn_result(True))",
                "hook_mlp_in": "use_hook_mlp_in (model.set_use_hook_mlp_in(True))",
                "hook_attn_in": "use_attn_in (model.set_use_attn_in(True))",
            }.get(name.rsplit(".", 1)[-1], "use_split_qkv_input (model.set_use_split_qkv_input(True))")
            first = ""
            if flag.startswith("use_split_qkv_input") and self.cfg.use_attn_in:
                first = "; use_attn_in replaces it: turn that off first (model.set_use_attn_in(False))"
            raise ValueError(
                f"hook point {name!r} does not fire unless {flag} is on, so a hook there would do nothing{first}"
            )

    def _enable_hook_with_name(self, name: str, hook: Callable, dir: Literal["fwd", "bwd"]):  # noqa: A002
        self._check_hook_name(name)
        super()._enable_hook_with_name(name=name, hook=hook, dir=dir)

    def _check_predicate(self, name: Callable[[str], bool]) -> None:
        active = [n for n in self.hook_dict if n not in self.inactive_hook_names()]
        if not any(name(n) for n in active):
            raise ValueError(
                f"the hook-name predicate {getattr(name, '__name__', name)!r} matches no hook point that fires "
                f"(see .hook_names()), so its hook would never run"
            )

    def _enable_hook(self, name: str | Callable, hook: Callable, dir: Literal["fwd", "bwd"]):  # noqa: A002
        if not isinstance(name, str):
            self._check_predicate(name)
        super()._enable_hook(name=name, hook=checked_hook(hook) if dir == "fwd" else hook, dir=dir)

    def add_hook(self, name, hook, dir="fwd", is_permanent=False, level=None, prepend=False):  # noqa: A002
        # string names are checked (unknown or inactive -> clear error); a predicate must match a point that fires
        if isinstance(name, str):
            self._check_hook_name(name)
        else:
            self._check_predicate(name)
        hook = checked_hook(hook) if dir == "fwd" else hook
        return super().add_hook(name, hook, dir=dir, is_permanent=is_permanent, level=level, prepend=prepend)

    def run_with_cache(
        self,
        *model_args: Any,
        return_cache_object: bool = True,
        remove_batch_dim: bool = False,
        names_filter: str | Sequence[str] | Callable[[str], bool] | None = None,
        fwd_hooks: Sequence[tuple[str | Callable, Callable]] = (),
        **kwargs: Any,
    ) -> tuple[Any, ActivationCache | dict[str, torch.Tensor]]:
        """Run and cache activations; returns ``(output, ActivationCache)``.

        Beyond TL's arguments: ``fwd_hooks`` are applied during the cached run (so the cache shows the edited
        activations), and hook points that cannot fire with the current flags are never cached.
        """
        if names_filter is None:
            base: Callable[[str], bool] = lambda n: True  # noqa: E731
        elif isinstance(names_filter, str):
            self._check_hook_name(names_filter)
            base = lambda n, s=names_filter: n == s  # noqa: E731
        elif callable(names_filter):
            self._check_predicate(names_filter)
            base = names_filter
        else:
            wanted = set(names_filter_list(names_filter, f"{type(self).__name__}.run_with_cache"))
            for n in wanted:
                self._check_hook_name(n)
            base = lambda n: n in wanted  # noqa: E731
        inactive = self.inactive_hook_names()

        def filt(n: str) -> bool:
            return n not in inactive and base(n)

        # the batch axis and pos_slice are handled here, not by TL: TL 3.x's drop fails on hook_pooled, TL checks a
        # batch of one only for a tensor given first (not text or tokens=...), and TL's pos_slice cuts dim -2, which
        # is hook_pooled's batch axis
        pos_slice = kwargs.pop("pos_slice", None)
        if kwargs.get("incl_bwd"):
            raise ValueError(
                f"{type(self).__name__}.run_with_cache(incl_bwd=True) needs a scalar output to backpropagate; a tower "
                "returns [batch, d_model]: run CLIP1D.run_with_cache(..., return_type='loss', incl_bwd=True), or "
                "backpropagate your own metric of the cached activations"
            )
        with self.hooks(fwd_hooks=hook_pairs(fwd_hooks, "fwd_hooks")):
            out, cache_dict = super().run_with_cache(*model_args, names_filter=filt, remove_batch_dim=False, **kwargs)
        if remove_batch_dim:
            sizes = {int(t.shape[0]) for t in cache_dict.values() if t.ndim > 0}
            if sizes - {1}:
                raise ValueError(
                    f"remove_batch_dim=True needs a batch of one input (as TransformerLens), got a batch of "
                    f"{max(sizes)}"
                )
            cache_dict = _drop_batch(cache_dict, pos_slice)
        else:
            cache_dict = slice_positions(cache_dict, pos_slice)
        if return_cache_object:
            return out, tower_cache(cache_dict, self, has_batch_dim=not remove_batch_dim)
        return out, cache_dict

    # ---- flags (TL's set_use_* API; the config is frozen, so each call swaps in a modified copy) -------------------
    def _set_cfg(self, **changes: Any) -> None:
        self.cfg = self.cfg.replace(**changes)
        for m in self.modules():
            if m is not self and hasattr(m, "cfg"):
                m.cfg = self.cfg

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Fire ``blocks.{l}.attn.hook_result`` (per-head outputs, without ``b_O``)."""
        self._set_cfg(use_attn_result=use_attn_result)

    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        """Fire ``blocks.{l}.hook_{q,k,v}_input`` (separate per-head copies of the residual). Refused while
        ``use_attn_in`` is on (one copy for all three replaces them), as TransformerLens refuses it."""
        if use_split_qkv_input and self.cfg.use_attn_in:
            raise ValueError(
                "use_attn_in is on, and hook_attn_in (one copy of the residual for q, k and v) replaces the split "
                "q/k/v inputs: turn it off first (set_use_attn_in(False))"
            )
        self._set_cfg(use_split_qkv_input=use_split_qkv_input)

    def set_use_attn_in(self, use_attn_in: bool) -> None:
        """Fire ``blocks.{l}.hook_attn_in`` (one per-head copy of the residual for q, k and v). Refused while
        ``use_split_qkv_input`` is on (separate copies for each), as TransformerLens refuses it."""
        if use_attn_in and self.cfg.use_split_qkv_input:
            raise ValueError(
                "use_split_qkv_input is on (separate copies of the residual for q, k and v), and hook_attn_in would "
                "replace them: turn it off first (set_use_split_qkv_input(False))"
            )
        self._set_cfg(use_attn_in=use_attn_in)

    def set_use_hook_mlp_in(self, use_hook_mlp_in: bool) -> None:
        """Fire ``blocks.{l}.hook_mlp_in``."""
        if self.cfg.attn_only:
            raise ValueError("an attention-only model has no MLP input")
        self._set_cfg(use_hook_mlp_in=use_hook_mlp_in)

    # ---- weights, TL-style ------------------------------------------------------------------------------------------
    def _why_missing(self, name: str) -> str | None:
        """Why weight ``name`` does not exist in this tower, or None if it should."""
        cfg = self.__dict__.get("cfg")
        if cfg is None:
            return None
        if name == "W_pos" and cfg.positional != "learned":
            return f"W_pos exists only with positional='learned' (this tower: {cfg.positional!r})"
        if name in ("W_in", "b_in", "W_out", "b_out") and cfg.attn_only:
            return f"{name} does not exist in an attention-only model (attn_only=True)"
        return None

    @no_type_check  # every parameter and submodule read goes through here: not type-checked per call
    def __getattr__(self, name: str) -> Any:
        # A property that raises AttributeError falls through to nn.Module.__getattr__, which would replace the
        # message with a bare "has no attribute"; say why the weight does not exist instead.
        try:
            return super().__getattr__(name)
        except AttributeError:
            why = self._why_missing(name)
            if why is not None:
                raise AttributeError(why) from None
            raise

    @property
    def W_E(self) -> Float[torch.Tensor, "d_vocab d_model"]:
        return self.embed.W_E

    @property
    def W_pos(self) -> Float[torch.Tensor, "n_ctx d_model"]:
        if why := self._why_missing("W_pos"):
            raise AttributeError(why)
        return self.pos_embed.W_pos

    def _stack(self, path: str) -> torch.Tensor:
        def get(block: nn.Module) -> torch.Tensor:
            obj: Any = block
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj

        return torch.stack([get(b) for b in self.blocks], dim=0)

    @property
    def W_Q(self) -> Float[torch.Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn.W_Q")

    @property
    def W_K(self) -> Float[torch.Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn.W_K")

    @property
    def W_V(self) -> Float[torch.Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn.W_V")

    @property
    def W_O(self) -> Float[torch.Tensor, "n_layers n_heads d_head d_model"]:
        return self._stack("attn.W_O")

    @property
    def b_Q(self) -> Float[torch.Tensor, "n_layers n_heads d_head"]:
        return self._stack("attn.b_Q")

    @property
    def b_K(self) -> Float[torch.Tensor, "n_layers n_heads d_head"]:
        return self._stack("attn.b_K")

    @property
    def b_V(self) -> Float[torch.Tensor, "n_layers n_heads d_head"]:
        return self._stack("attn.b_V")

    @property
    def b_O(self) -> Float[torch.Tensor, "n_layers d_model"]:
        return self._stack("attn.b_O")

    def _mlp_stack(self, name: str) -> torch.Tensor:
        if why := self._why_missing(name):
            raise AttributeError(why)
        return self._stack(f"mlp.{name}")

    @property
    def W_in(self) -> Float[torch.Tensor, "n_layers d_model d_mlp"]:
        return self._mlp_stack("W_in")

    @property
    def b_in(self) -> Float[torch.Tensor, "n_layers d_mlp"]:
        return self._mlp_stack("b_in")

    @property
    def W_out(self) -> Float[torch.Tensor, "n_layers d_mlp d_model"]:
        return self._mlp_stack("W_out")

    @property
    def b_out(self) -> Float[torch.Tensor, "n_layers d_model"]:
        return self._mlp_stack("b_out")

    @property
    def QK(self) -> FactoredMatrix:
        """``W_Q @ W_K^T`` per layer and head, a FactoredMatrix [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """``W_V @ W_O`` per layer and head, a FactoredMatrix [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_V, self.W_O)

    @property
    def W_E_pos(self) -> Float[torch.Tensor, "d_vocab_plus_n_ctx d_model"]:
        """``W_E`` and ``W_pos`` stacked, as TransformerLens's ``W_E_pos`` (token and position rows together)."""
        return torch.cat([self.W_E, self.W_pos], dim=0)

    @property
    def n_params(self) -> int:
        """Number of trainable parameters of this tower."""
        return sum(p.numel() for p in self.parameters())

    def all_composition_scores(self, mode: str) -> Float[torch.Tensor, "l1 h1 l2 h2"]:
        """TransformerLens's composition scores between every head pair (earlier layer -> later layer), for
        ``mode`` "Q", "K" or "V"; entries where the first head is not in an earlier layer are 0.

        Example:
            >>> from hooked_clip1d import HookedVisionEncoder, VisionConfig
            >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, n_layers=2, init_seed=0))
            >>> enc.all_composition_scores("K").shape
            torch.Size([2, 4, 2, 4])
        """
        from transformer_lens.utilities.matrix import composition_scores

        left = self.OV
        if mode == "Q":
            right = self.QK
        elif mode == "K":
            right = self.QK.T
        elif mode == "V":
            right = self.OV
        else:
            raise ValueError(f"mode must be 'Q', 'K' or 'V', got {mode!r}")
        scores = composition_scores(left, right, broadcast_dims=True)  # [l1, h1, l2, h2]
        L = self.cfg.n_layers
        mask = (
            torch.arange(L, device=scores.device)[:, None, None, None]
            < torch.arange(L, device=scores.device)[None, None, :, None]
        )
        return torch.where(mask, scores, torch.zeros_like(scores))

    def accumulated_bias(
        self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True
    ) -> Float[torch.Tensor, " d_model"]:
        """Sum of the output biases (``b_O``, and ``b_out`` if wanted) added to the residual before ``layer``
        (``0..n_layers``; ``n_layers``: all of them)."""
        if isinstance(layer, bool) or not hasattr(layer, "__index__") or not 0 <= layer <= self.cfg.n_layers:
            raise ValueError(f"accumulated_bias: layer must be an int in 0..{self.cfg.n_layers}, got {layer!r}")
        total = torch.zeros(self.cfg.d_model, device=self.W_E.device, dtype=self.W_E.dtype)
        for i in range(layer):
            total = total + self.blocks[i].attn.b_O
            if include_mlp_biases and not self.cfg.attn_only:
                total = total + self.blocks[i].mlp.b_out
        if mlp_input:
            if not 0 <= layer < self.cfg.n_layers:
                raise ValueError(f"mlp_input=True needs a layer in 0..{self.cfg.n_layers - 1}, got {layer}")
            total = total + self.blocks[layer].attn.b_O
        return total


__all__ = ["PostLNCache", "TLConveniences", "checked_hook", "names_filter_list", "tower_cache"]
