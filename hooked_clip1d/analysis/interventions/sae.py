"""Sparse autoencoders on any hook point: collect activations, train a small SAE, splice it back in.

``SparseAutoencoder`` is a ``HookedRootModule`` with its own hook points (``hook_sae_acts_pre``,
``hook_sae_acts_post``, ``hook_sae_recons``), SAELens-style names and layout (``W_enc [d_in, d_sae]``,
``W_dec [d_sae, d_in]``, ``b_dec`` subtracted before encoding): ReLU with an L1 penalty, or top-k (``k`` set).
``collect_activations`` gathers a hook's activations over inputs (one position, or all), ``train_sae`` fits an SAE
and reports reconstruction (MSE, fraction of variance unexplained) and sparsity (mean L0), and ``hooks.splice_hook``
(defined in ``hooks``, re-exported here) returns a hook that replaces the activation by its reconstruction, so
accuracy with the SAE in the loop is one ``evaluate(..., vision_hooks=[("hook_pooled", splice_hook(sae))])`` away.

Example:
    >>> from hooked_clip1d import load_model, build_dataset, evaluate
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> ds = build_dataset(m.data_config)
    >>> acts = collect_activations(m.vision, "hook_pooled", ds.splits["train"].images)
    >>> sae, report = train_sae(acts, d_sae=64, k=8, steps=300, seed=0)
    >>> report["l0"] <= 8
    True

SAELens interop: ``sae.save_sae_lens(folder, hook_name=...)`` writes SAELens's on-disk format (``cfg.json`` +
``sae_weights.safetensors``, architecture ``standard`` for ReLU, ``topk`` for top-k), which
``sae_lens.SAE.load_from_disk(folder)`` loads with identical outputs; ``SparseAutoencoder.load_sae_lens(folder)``
reads a folder SAELens wrote (``SAE.save_model``), and ``to_sae_lens`` / ``from_sae_lens`` convert in memory.
Nothing here imports SAELens unless a conversion to or from its objects is asked for.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import nn
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.model.tl_compat import HookedRootModule
from hooked_clip1d.settings.checks import check_index, check_int, check_real


class SparseAutoencoder(HookedRootModule):
    """``acts = act_fn((x - b_dec) @ W_enc + b_enc)``, ``recons = acts @ W_dec + b_dec``; ``k``: keep the top k.

    SAELens's ``StandardSAE`` (``k=None``: ReLU) and ``TopKSAE`` compute the same, on the same parameter names:
    ``save_sae_lens`` / ``load_sae_lens`` / ``to_sae_lens`` / ``from_sae_lens`` move an SAE between the two.
    """

    def __init__(
        self, d_in: int, d_sae: int, k: int | None = None, seed: int = 0, rescale_acts_by_decoder_norm: bool = False
    ):
        super().__init__()
        if d_in < 1 or d_sae < 1 or (k is not None and not 1 <= k <= d_sae):
            raise ValueError(f"SparseAutoencoder needs d_in, d_sae >= 1 and 1 <= k <= d_sae; got {d_in}, {d_sae}, {k}")
        if rescale_acts_by_decoder_norm and k is None:
            raise ValueError("rescale_acts_by_decoder_norm is SAELens's top-k option: it needs k")
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(d_sae, d_in, generator=gen)
        W = W / W.norm(dim=-1, keepdim=True)
        self.W_dec = nn.Parameter(W)  # unit-norm decoder rows
        self.W_enc = nn.Parameter(W.T.contiguous())  # row-major, as SAELens loads it: same matmul, same bits
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.k = k
        # SAELens's top-k option (its training default): the top k chosen on pre-activations times each decoder row's
        # norm, and the activations divided by it before decoding (the decoder read as if its rows had unit norm)
        self.rescale_acts_by_decoder_norm = bool(rescale_acts_by_decoder_norm)
        self.hook_sae_input = HookPoint()  # [batch, d_in] (SAELens's names: in a splice they cache under the hook)
        self.hook_sae_acts_pre = HookPoint()  # [batch, d_sae]
        self.hook_sae_acts_post = HookPoint()  # [batch, d_sae]
        self.hook_sae_recons = HookPoint()  # [batch, d_in]
        self.hook_sae_error = HookPoint()  # [batch, d_in]: input - reconstruction (spliced with error_term)
        self.hook_sae_output = HookPoint()  # [batch, d_in]: what the model reads on (spliced)
        self.metadata: dict[str, Any] = {}  # what SAELens's cfg.json "metadata" holds (hook_name, model_name, ...)
        self.setup()

    def encode(self, x: Float[torch.Tensor, "batch d_in"]) -> Float[torch.Tensor, "batch d_sae"]:
        pre = self.hook_sae_acts_pre((x - self.b_dec) @ self.W_enc + self.b_enc)
        if self.k is None:
            return self.hook_sae_acts_post(F.relu(pre))
        if self.rescale_acts_by_decoder_norm:
            pre = pre * self.W_dec.norm(dim=-1)
        top = pre.topk(self.k, dim=-1)
        return self.hook_sae_acts_post(torch.zeros_like(pre).scatter(-1, top.indices, F.relu(top.values)))

    def decode(self, acts: Float[torch.Tensor, "batch d_sae"]) -> Float[torch.Tensor, "batch d_in"]:
        if self.rescale_acts_by_decoder_norm:
            acts = acts * (1 / self.W_dec.norm(dim=-1))
        return self.hook_sae_recons(acts @ self.W_dec + self.b_dec)

    def forward(self, x: Float[torch.Tensor, "batch d_in"]) -> Float[torch.Tensor, "batch d_in"]:
        return self.decode(self.encode(x))

    # ---- in the loop ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def spliced(
        self, model: Any, hook_name: str, error_term: bool = False, head: int | None = None
    ) -> Iterator[SparseAutoencoder]:
        """Run ``model`` (a tower, or a ``CLIP1D`` with ``vision.`` / ``text.`` names) with this SAE in the loop at
        ``hook_name``, as SAELens's ``HookedSAETransformer.saes(...)`` does: the activation is replaced by the SAE's
        output, and the SAE's hook points join the model's under the hook's name (``f"{hook_name}.hook_sae_acts_post"``,
        ``.hook_sae_input``, ``.hook_sae_acts_pre``, ``.hook_sae_recons``, ``.hook_sae_error``, ``.hook_sae_output``),
        so ``run_with_cache`` caches the features and ``run_with_hooks`` can edit them. With ``error_term`` the output
        is the reconstruction plus the error ``input - reconstruction`` computed without any edit of the features
        (SAELens's ``use_error_term``): the model's outputs are unchanged until a feature is edited. The activation's
        last dimension is the SAE's input (``hook_z`` over every head: its last two, flattened). A one-head SAE on a
        per-head hook (``[batch, pos, head, d]``: ``hook_z``, ``hook_q/k/v``, ``hook_result``, the split inputs)
        replaces that head alone: ``head``, else ``self.metadata["hook_head_index"]`` (SAELens's field, which
        ``collect_activations(..., head=h)`` rows match); one with neither is refused (it was applied to every head).
        On exit the model's hooks and modules are as they were.

        Example:
            >>> from hooked_clip1d import CLIP1D, CLIPConfig
            >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
            >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 3 . . 4 . . . . ."])
            >>> sae = SparseAutoencoder(d_in=128, d_sae=16, k=4)
            >>> with sae.spliced(m.vision, "hook_pooled", error_term=True):
            ...     out, cache = m.vision.run_with_cache(img)
            >>> cache["hook_pooled.hook_sae_acts_post"].shape, bool(torch.allclose(out, m.vision(img), atol=1e-5))
            (torch.Size([2, 16]), True)
            >>> "hook_pooled.hook_sae_acts_post" in m.vision.hook_dict  # gone again
            False
        """
        tower, name = _tower_of(model, hook_name)
        if name not in tower.hook_dict:
            raise ValueError(f"spliced: {hook_name!r} is not a hook point of the model")
        if name in tower.inactive_hook_names():
            tower._check_hook_name(name)  # raises, naming the flag that makes it fire (the splice would never run)
        point = tower.hook_dict[name]
        if any(k.startswith("hook_sae_") for k in point._modules):
            raise ValueError(f"spliced: an SAE is already spliced at {hook_name!r}")
        mine = {k: m for k, m in self._modules.items() if isinstance(m, HookPoint)}
        if head is None:
            head = self.metadata.get("hook_head_index")
        if head is not None:
            head = check_index(head, tower.cfg.n_heads, "spliced: head")
            if name.endswith(("hook_pattern", "hook_attn_scores")):
                raise ValueError(f"spliced: head= splices one head of a [batch, pos, head, d] hook, not {hook_name!r}")
        splice = self._splice_hook(tower, name, hook_name, head, error_term)
        for k, m in mine.items():  # SAELens's layout: the SAE's hook points named under the hook's own name
            point.add_module(k, m)
        handle = point.register_forward_hook(splice)
        tower.setup()
        try:
            yield self
        finally:
            handle.remove()
            for k in mine:
                del point._modules[k]
            tower.setup()
            self.setup()  # the hook points' own names again

    def _splice_hook(self, tower: Any, name: str, hook_name: str, head: int | None, error_term: bool) -> Callable:
        """The forward hook of ``spliced`` at ``tower``'s hook ``name`` (``hook_name`` as the caller gave it): the
        activation (or its head ``head``) replaced by the SAE's output."""
        d_in = self.W_enc.shape[0]
        head_z = head is None and name.endswith("hook_z") and d_in != point_width(tower, name)

        def splice(module: nn.Module, args: Any, act: torch.Tensor) -> torch.Tensor:
            if head is not None:
                if act.ndim != 4:
                    raise ValueError(
                        f"spliced at {hook_name!r} with head={head}: the activation {list(act.shape)} has no head axis"
                    )
                new = act.clone()
                new[:, :, head] = one(act[:, :, head])
                return new
            per_head = act.ndim == 4 and not name.endswith(("hook_pattern", "hook_attn_scores"))
            if per_head and act.shape[-1] == d_in and act.shape[-2] > 1:
                raise ValueError(
                    f"spliced at {hook_name!r}: a one-head SAE (d_in={d_in}) on a hook that holds every head would "
                    "replace each head with it: give head=h (or sae.metadata['hook_head_index'])"
                )
            return one(act)

        def one(act: torch.Tensor) -> torch.Tensor:
            shape = act.shape
            flat = act.reshape(-1, shape[-2] * shape[-1]) if head_z else act.reshape(-1, shape[-1])
            if flat.shape[-1] != d_in:
                raise ValueError(
                    f"spliced at {hook_name!r}: the activation {list(shape)} gives rows of width {flat.shape[-1]}, the "
                    f"SAE takes d_in={d_in}"
                )
            x = self.hook_sae_input(flat.float())
            recons = self.decode(self.encode(x))
            out = recons
            if error_term:
                with torch.no_grad(), _quiet(self):  # the error of the unedited SAE: no hook sees this pass
                    clean = self.decode(self.encode(x))
                out = recons + self.hook_sae_error(x - clean)
            out = self.hook_sae_output(out)
            return out.reshape(shape).to(act.dtype)

        return splice

    # ---- SAELens's format (hooked_clip1d.analysis.interventions.sae_lens_format) ---------------------------------
    def sae_lens_config(self, **metadata: Any) -> dict[str, Any]:
        """This SAE's SAELens ``cfg.json`` (6.x layout): ``architecture`` ``"standard"`` (ReLU) or ``"topk"`` (with
        ``k``); ``metadata`` holds ``self.metadata`` updated by ``metadata`` (e.g. ``hook_name``, ``model_name``,
        ``hook_head_index``). A ``hook_z`` SAE over every head (no ``hook_head_index``) is marked
        ``reshape_activations="hook_z"``, SAELens's flag for inputs ``[..., n_heads, d_head]``.

        Example:
            >>> cfg = SparseAutoencoder(4, 8, k=2).sae_lens_config(hook_name="hook_pooled")
            >>> cfg["architecture"], cfg["k"], cfg["d_in"], cfg["metadata"]["hook_name"]
            ('topk', 2, 4, 'hook_pooled')
        """
        from hooked_clip1d.analysis.interventions import sae_lens_format

        return sae_lens_format.config(self, **metadata)

    def save_sae_lens(self, path: str | os.PathLike, **metadata: Any) -> Path:
        """Write this SAE in SAELens's on-disk format into folder ``path`` (created): ``sae_weights.safetensors`` and
        ``cfg.json`` (``sae_lens_config(**metadata)``), each written atomically, the weights first; returns the
        folder. ``sae_lens.SAE.load_from_disk(path)`` then gives an SAE with identical outputs.

        Example:
            >>> import tempfile
            >>> sae = SparseAutoencoder(4, 8, k=2)
            >>> folder = sae.save_sae_lens(tempfile.mkdtemp() + "/sae", hook_name="hook_pooled")
            >>> sorted(p.name for p in folder.iterdir())
            ['cfg.json', 'sae_weights.safetensors']
            >>> x = torch.randn(3, 4)
            >>> torch.equal(SparseAutoencoder.load_sae_lens(folder)(x), sae(x))
            True
        """
        from hooked_clip1d.analysis.interventions import sae_lens_format

        return sae_lens_format.save(self, path, **metadata)

    @classmethod
    def load_sae_lens(cls, path: str | os.PathLike) -> SparseAutoencoder:
        """An SAE from a folder in SAELens's on-disk format (``SAE.save_model`` or ``save_sae_lens``): architectures
        ``standard`` and ``topk`` (no decoder-norm rescaling, no activation normalisation, ``b_dec`` subtracted from
        the input); anything else is refused naming the field. Weights load as float32; ``.metadata`` is the
        file's metadata (``hook_name`` ...). For a ``hook_z`` SAE over every head, feed it heads flattened:
        ``collect_activations(tower, "blocks.0.attn.hook_z", tokens)`` gives that layout."""
        from hooked_clip1d.analysis.interventions import sae_lens_format

        return sae_lens_format.load(cls, path)

    def to_sae_lens(self, **metadata: Any) -> Any:
        """This SAE as a ``sae_lens.SAE`` (``StandardSAE`` or ``TopKSAE``) with identical outputs; needs SAELens
        (``pip install sae-lens``, which needs ``transformer-lens<4``)."""
        from hooked_clip1d.analysis.interventions import sae_lens_format

        return sae_lens_format.to_object(self, **metadata)

    @classmethod
    def from_sae_lens(cls, sae: Any) -> SparseAutoencoder:
        """A ``SparseAutoencoder`` with the outputs of the ``sae_lens.SAE`` ``sae`` (architectures as in
        ``load_sae_lens``)."""
        from hooked_clip1d.analysis.interventions import sae_lens_format

        return sae_lens_format.from_object(cls, sae)


def _tower_of(model: Any, hook_name: str) -> tuple[Any, str]:
    """The tower a hook name belongs to and its name there (a ``CLIP1D``'s ``vision.`` / ``text.`` names)."""
    towers = {k: getattr(model, k) for k in ("vision", "text") if hasattr(model, k) and hasattr(model, "hook_logits")}
    if towers:
        prefix, _, rest = hook_name.partition(".")
        if prefix not in towers or not rest:
            raise ValueError(f"spliced: on a CLIP1D a hook name starts with 'vision.' or 'text.', got {hook_name!r}")
        return towers[prefix], rest
    if not hasattr(model, "hook_dict"):
        raise TypeError(f"spliced: expected a tower or a CLIP1D, got {type(model).__name__}")
    return model, hook_name


def point_width(tower: Any, name: str) -> int:
    """The last dimension of hook point ``name``'s activation in ``tower`` (``d_head`` for ``hook_z``)."""
    cfg = tower.cfg
    return cfg.d_head if name.endswith(("hook_z", "hook_q", "hook_k", "hook_v")) else cfg.d_model


@contextlib.contextmanager
def _quiet(sae: SparseAutoencoder) -> Iterator[None]:
    """The SAE's own hooks off for a pass (the error term's clean reconstruction)."""
    points = [m for m in sae.modules() if isinstance(m, HookPoint)]
    saved = [(p, dict(p._forward_hooks)) for p in points]
    try:
        for p in points:
            p._forward_hooks.clear()
        yield
    finally:
        for p, hooks in saved:
            p._forward_hooks.update(hooks)


ATTENTION_LAYOUT = ("hook_pattern", "hook_attn_scores")  # [batch, head, query, key]: the query is the position
_FLAGS = {  # hook points that fire only with a flag: the flags collect_activations turns on for the run
    "hook_result": {"use_attn_result": True},
    "hook_q_input": {"use_split_qkv_input": True, "use_attn_in": False},
    "hook_k_input": {"use_split_qkv_input": True, "use_attn_in": False},
    "hook_v_input": {"use_split_qkv_input": True, "use_attn_in": False},
    "hook_attn_in": {"use_attn_in": True, "use_split_qkv_input": False},  # exclusive (as in TransformerLens)
    "hook_mlp_in": {"use_hook_mlp_in": True},
}


@contextlib.contextmanager
def _firing(tower: Any, hook_name: str) -> Iterator[None]:
    """``hook_name`` made to fire (its ``use_*`` flags on) for the duration; every module's config given back."""
    changes = _FLAGS.get(hook_name.rsplit(".", 1)[-1], {}) if hook_name in tower.inactive_hook_names() else {}
    saved = [(m, m.cfg) for m in tower.modules() if "cfg" in m.__dict__]
    try:
        if changes:
            tower._set_cfg(**changes)
        yield
    finally:
        for m, cfg in saved:
            m.cfg = cfg


def _index(value: int | None, size: int, what: str, hook_name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or None, got {value!r}")
    if not -size <= value < size:
        raise IndexError(f"{what}={value} is out of range for {hook_name!r}, which has {size} ({what} 0..{size - 1})")
    return value


@torch.no_grad()
def collect_activations(
    encoder: Any,
    hook_name: str,
    tokens: Int[torch.Tensor, "n pos"] | tuple[torch.Tensor, torch.Tensor],
    pos: int | None = None,
    head: int | None = None,
) -> Float[torch.Tensor, "n_rows d"]:
    """The activations of ``encoder`` at ``hook_name`` over ``tokens``, one row per example (and position), as an
    SAE or a probe takes them: ``[n_rows, d]``, float32, detached.

    Every hook point works. ``encoder`` is a tower (``model.vision``, ``model.text``: any of its ``hook_names()``)
    or a whole ``CLIP1D`` (``"vision.<hook>"`` / ``"text.<hook>"`` with that tower's input as ``tokens``; a head
    hook such as ``hook_logits`` with ``tokens=(images, captions)``). A hook that fires only with a flag
    (``attn.hook_result``, ``hook_{q,k,v}_input``, ``hook_attn_in``) is turned on for this run only.

    - a hook without positions (``hook_pooled`` ``[n, d]``): ``[n, d]``;
    - a per-position hook (``hook_resid_post`` ``[n, pos, d]``): ``[n, d]`` at position ``pos``, or every position
      (``pos=None``: ``[n * pos, d]``, example-major);
    - a per-head hook (``attn.hook_z`` ``[n, pos, head, d_head]``, ``hook_q/k/v``, ``hook_result``, the split
      inputs): as a per-position hook, of head ``head`` (``[.., d_head]``), or of every head flattened
      (``head=None``: ``[.., n_heads * d_head]``, SAELens's ``hook_z`` layout);
    - ``attn.hook_pattern`` / ``hook_attn_scores`` ``[n, head, query, key]``: rows are query positions (``pos``),
      a row holds one head's keys (``head``) or every head's (``[.., n_heads * n_keys]``).

    ``pos`` / ``head`` on a hook without that axis, or out of range, is an error naming the hook.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> img = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
        >>> collect_activations(m.vision, "blocks.0.attn.hook_z", img, pos=0).shape  # 4 heads x 32
        torch.Size([2, 128])
        >>> collect_activations(m.vision, "blocks.0.attn.hook_z", img, head=3).shape  # 2 images x 11 positions
        torch.Size([22, 32])
        >>> collect_activations(m, "vision.blocks.0.attn.hook_result", img, pos=0, head=1).shape
        torch.Size([2, 128])
        >>> collect_activations(m.vision, "blocks.0.attn.hook_pattern", img, pos=0, head=3).shape
        torch.Size([2, 11])
    """
    from hooked_clip1d.model.clip import CLIP1D, HEAD_HOOKS

    if not isinstance(hook_name, str):
        raise TypeError(f"hook_name must be a hook point's name, got {type(hook_name).__name__} {hook_name!r}")
    if isinstance(encoder, CLIP1D):
        if hook_name in HEAD_HOOKS:
            if not (isinstance(tokens, tuple | list) and len(tokens) == 2):
                raise ValueError(f"{hook_name!r} is a CLIP head hook: give tokens=(images, captions)")
            if encoder.training:
                raise ValueError("collect_activations: the model is in training mode (dropout is on); call .eval()")
            _, cache = encoder.run_with_cache(*tokens, names_filter=hook_name)
            return _rows(cache[hook_name], hook_name, pos, head)
        tower_name, _, name = hook_name.partition(".")
        if tower_name not in ("vision", "text"):
            raise KeyError(
                f"CLIP1D has no hook point {hook_name!r}: use 'vision.<hook>', 'text.<hook>' or {HEAD_HOOKS}"
            )
        return collect_activations(getattr(encoder, tower_name), name, tokens, pos=pos, head=head)
    if not hasattr(encoder, "inactive_hook_names"):
        raise TypeError(f"collect_activations takes a tower (model.vision / model.text) or a CLIP1D, got {encoder!r}")
    if isinstance(tokens, tuple | list):
        raise TypeError("a tower's collect_activations takes one token tensor, not (images, captions)")
    if encoder.training:
        raise ValueError("collect_activations: the tower is in training mode (dropout is on); call model.eval() first")
    with _firing(encoder, hook_name):
        _, cache = encoder.run_with_cache(tokens, names_filter=hook_name)
    return _rows(cache[hook_name], hook_name, pos, head)


def _rows(act: torch.Tensor, hook_name: str, pos: int | None, head: int | None) -> Float[torch.Tensor, "n_rows d"]:
    """``collect_activations``' rows of one cached activation (the layouts its docstring lists)."""
    if hook_name.endswith(ATTENTION_LAYOUT) and act.ndim == 4:
        act = act.permute(0, 2, 1, 3)  # [batch, query, head, key]: the query is the position
    if not 2 <= act.ndim <= 4:
        raise ValueError(f"{hook_name!r} has shape {list(act.shape)}; rows need [batch, (pos, (head,)) d]")
    has_pos, has_head = act.ndim >= 3, act.ndim == 4
    shape = list(act.shape)
    if pos is not None and not has_pos:
        raise ValueError(f"{hook_name!r} has no position axis (shape {shape}): leave pos=None")
    if head is not None and not has_head:
        raise ValueError(f"{hook_name!r} has no head axis (shape {shape}): leave head=None")
    if has_head:
        h = _index(head, act.shape[2], "head", hook_name)
        act = act[:, :, h] if h is not None else act.flatten(-2)
    if has_pos:
        p = _index(pos, act.shape[1], "pos", hook_name)
        act = act[:, p] if p is not None else act.reshape(-1, act.shape[-1])
    return act.detach().float()


def train_sae(
    acts: Float[torch.Tensor, "n d_in"],
    d_sae: int,
    *,
    k: int | None = None,
    l1: float = 1e-3,
    steps: int = 2000,
    lr: float = 1e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[SparseAutoencoder, dict[str, float]]:
    """Fit an SAE to ``acts`` (Adam; ReLU + ``l1`` penalty, or top-``k``; decoder rows kept at unit norm).

    Returns the SAE (eval mode) and ``{"mse", "fvu", "l0", "dead"}`` on all of ``acts``: mean squared error, the
    fraction of variance unexplained, mean number of active features, and the fraction of features never active.
    """
    if not isinstance(acts, torch.Tensor) or not acts.is_floating_point():
        got = acts.dtype if isinstance(acts, torch.Tensor) else type(acts).__name__
        raise TypeError(f"train_sae needs floating-point activations (collect_activations gives float32), got {got}")
    if acts.ndim != 2 or acts.shape[0] < 2:
        raise ValueError(f"train_sae needs activations [n >= 2, d], got {list(acts.shape)}")
    d_sae, steps, batch_size = (
        check_int(v, f"train_sae: {w}") for w, v in (("d_sae", d_sae), ("steps", steps), ("batch_size", batch_size))
    )
    k = check_int(k, "train_sae: k", none_ok=True)
    if k is not None and k > d_sae:
        raise ValueError(f"train_sae: k={k} exceeds d_sae={d_sae} (top-k keeps k of the d_sae features)")
    check_real(l1, "train_sae: l1")
    check_real(lr, "train_sae: lr", strict=True)
    acts = acts.float()
    if not torch.isfinite(acts).all():
        raise ValueError("train_sae: the activations are not finite")
    sae = SparseAutoencoder(acts.shape[1], d_sae, k=k, seed=seed)
    with torch.no_grad():
        sae.b_dec.copy_(acts.mean(0))
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = acts[torch.randint(0, acts.shape[0], (min(batch_size, acts.shape[0]),), generator=gen)]
        z = sae.encode(x)
        loss = F.mse_loss(sae.decode(z), x)
        if k is None:
            loss = loss + l1 * z.abs().sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            sae.W_dec.div_(sae.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
    sae.eval()
    with torch.no_grad():
        z = sae.encode(acts)
        rec = sae.decode(z)
        mse = F.mse_loss(rec, acts).item()
        fvu = ((rec - acts).pow(2).sum() / (acts - acts.mean(0)).pow(2).sum()).item()
        report = {
            "mse": mse,
            "fvu": fvu,
            "l0": (z > 0).float().sum(-1).mean().item(),
            "dead": (z.max(0).values <= 0).float().mean().item(),
        }
    return sae, report
