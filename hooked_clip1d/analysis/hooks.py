"""Hook factories of the analysis package, the type aliases they share and the checks their callers share.

Every factory returns forward hooks for ``run_with_hooks``, ``run_with_cache(fwd_hooks=...)``, ``model.hooks(...)``
or ``evaluate(..., vision_hooks=...)``: a ``(name, fn)`` pair, a list of them, or (``splice_hook``) the bare
``fn(activation, hook)`` to pair with a name of your choice.

- ``patch_hook``: write a source run's activation into chosen positions (and one head) of this run.
- ``add_hook``: add a fixed tensor to an activation (steering).
- ``swap_slots_hook``: exchange two positions of an activation.
- ``zero_heads_hooks``: zero chosen heads' ``z`` (what ``prune_heads`` does, without a copy).
- ``knockout_hooks``: remove chosen query -> key attention edges.
- ``splice_hook``: replace an activation by a sparse autoencoder's reconstruction.
- ``mean_ablation_hooks`` / ``resample_ablation_hooks``: replace any hook point (or some heads of it) by its mean over
  a reference set, or by its value on other inputs drawn from it; ``mean_heads_hooks`` / ``resample_heads_hooks`` do
  it for (layer, head) outputs. (Score terms: ``term_ablation.mean_ablate_terms`` / ``resample_ablate_terms``.)

Two factories stay with the maths they are built from: ``terms.ablate_terms`` (score / value term ablation, built on
``decompose``) and ``mechanism.ablate_cls_key_position`` (built on the CLS query of that module).

Also here: the residual-stream hook names per depth (``residual_hook_names``, ``depth_labels``) and the checks of
towers, models, hook names, heads and layers that the analyses share (``check_tower``, ``check_eval``,
``check_hook_names``, ``check_heads``, ``check_indices``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
from jaxtyping import Bool, Float, Int
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.metrics import BeliefMetric
from hooked_clip1d.evaluation import Hooks
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.config import check_heads
from hooked_clip1d.model.encoders import HookedEncoder
from hooked_clip1d.model.modes import check_eval
from hooked_clip1d.settings.checks import check_int, repeated

#: one forward hook: (hook point name, fn(activation, hook) -> new activation or None)
Hook = tuple[str, Callable]
#: a batched metric of a tower's pooled output: fn(pooled [batch, d_model]) -> [batch]
Metric = BeliefMetric
#: one attention head: (layer, head)
Head = tuple[int, int]


_QUERY_KEY_HOOKS = ("hook_attn_scores", "hook_pattern")
_HEAD_HOOKS = (
    "hook_q",
    "hook_k",
    "hook_v",
    "hook_z",
    "hook_rot_q",
    "hook_rot_k",
    "hook_result",
    "hook_q_input",
    "hook_k_input",
    "hook_v_input",
    "hook_attn_in",
)


# ---- shared checks --------------------------------------------------------------------------------------------------
def check_tower(tower: object) -> HookedEncoder:
    """``tower`` if it is one tower (``model.vision`` or ``model.text``), else a ``TypeError`` saying what was passed.

    >>> check_tower("vision")
    Traceback (most recent call last):
    TypeError: expected one tower (model.vision or model.text), got str
    """
    if isinstance(tower, CLIP1D):
        raise TypeError("pass one tower (model.vision or model.text), not the whole CLIP1D model")
    if not isinstance(tower, HookedEncoder):
        raise TypeError(f"expected one tower (model.vision or model.text), got {type(tower).__name__}")
    return tower


def check_indices(values: Sequence[int], n: int, what: str, *, empty_ok: bool = True) -> None:
    """A ``TypeError`` unless ``values`` is a list of indices, a ``ValueError`` unless each is in ``0..n - 1`` (and,
    without ``empty_ok``, unless there is one: where ``None`` means all, an empty list changed nothing without a word).

    >>> check_indices([0, 4], 4, "heads")
    Traceback (most recent call last):
    ValueError: heads [4] out of range 0..3
    """
    if isinstance(values, int | str | bytes):
        raise TypeError(f"{what} must be a list of indices, e.g. [{values!r}]")
    if isinstance(values, Iterator):  # a generator: this check used it up, and the caller then ablated nothing
        raise TypeError(f"{what} must be a list (or tuple, range) of indices, not a one-pass {type(values).__name__}")
    values = list(values)
    if not values and not empty_ok:
        raise ValueError(f"{what} is empty: nothing would change; pass None for all {what}")
    not_int = [x for x in values if isinstance(x, bool) or not hasattr(x, "__index__")]
    if not_int:  # a bool mask read as indices 0/1, or 1.5 truncated to 1, named the wrong heads
        raise TypeError(f"{what} must be ints (indices, not a mask or floats), got {not_int}")
    twice = repeated(int(x) for x in values)
    if twice:
        raise ValueError(f"{what} listed twice: {twice}")
    bad = [x for x in values if not 0 <= x < n]
    if bad:
        raise ValueError(f"{what} {bad} out of range 0..{n - 1}")


def check_hook_names(tower: HookedEncoder, names: Sequence[str], heads: bool = False) -> None:
    """Every name is a hook point of ``tower`` that fires (and, with ``heads``, has a head axis)."""
    if not names:
        raise ValueError("hook_names is empty")
    inactive = tower.inactive_hook_names()
    for n in names:
        if n not in tower.hook_dict:
            raise KeyError(f"{type(tower).__name__} has no hook point {n!r} (see .hook_names())")
        if n in inactive:
            raise ValueError(f"hook point {n!r} does not fire with this tower's flags (e.g. set_use_attn_result)")
        if heads and _axes(n)[1] is None:
            raise ValueError(f"per-head patching needs hooks with a head axis (hook_z, hook_q, hook_pattern, ...): {n}")


# ---- hook names -----------------------------------------------------------------------------------------------------
def residual_hook_names(tower: HookedEncoder) -> list[str]:
    """The residual stream at every depth: ``blocks.0.hook_resid_pre`` (embeddings), then each ``hook_resid_post``.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, n_layers=2), seed=0)
    >>> residual_hook_names(m.vision)
    ['blocks.0.hook_resid_pre', 'blocks.0.hook_resid_post', 'blocks.1.hook_resid_post']
    """
    L = check_tower(tower).cfg.n_layers
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(L)]


def depth_labels(tower: HookedEncoder) -> list[str]:
    """Readable names of ``residual_hook_names``: ``embed``, ``after L0``, ...

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> depth_labels(CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).text)
    ['embed', 'after L0']
    """
    return ["embed"] + [f"after L{layer}" for layer in range(tower.cfg.n_layers)]


def hook_label(tower: HookedEncoder, name: str) -> str:
    """A short label of a hook name: the depth label for the residual stream, else e.g. ``L0 z``.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
    >>> hook_label(m.vision, "blocks.0.hook_resid_post"), hook_label(m.vision, "blocks.0.attn.hook_z")
    ('after L0', 'L0 z')
    """
    names = residual_hook_names(tower)
    if name in names:
        return depth_labels(tower)[names.index(name)]
    return name.replace("blocks.", "L").replace(".attn.hook_", " ").replace(".hook_", " ")


def _axes(name: str) -> tuple[int, int | None]:
    """(position axis, head axis) of a hook's activation."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "hook_pooled":
        raise ValueError("hook_pooled has no position axis; patch the residual stream or an attention hook instead")
    if leaf in _QUERY_KEY_HOOKS:
        return 2, 1
    if leaf in _HEAD_HOOKS:
        return 1, 2
    return 1, None


# ---- hook factories -------------------------------------------------------------------------------------------------
def patch_hook(
    name: str,
    source: torch.Tensor,
    mask: Bool[torch.Tensor, "batch pos"],
    head: int | None = None,
) -> Hook:
    """A forward hook ``(name, fn)`` that writes ``source`` (the same hook's activation on the source input) into
    the run at the positions of ``mask`` (query rows for ``hook_pattern`` / ``hook_attn_scores``), only for
    ``head`` if given.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> a, b = m.vision.to_tokens("C 1 . 2 . . . . . . ."), m.vision.to_tokens("C 2 . 1 . . . . . . .")
    >>> _, cache = m.vision.run_with_cache(b)
    >>> name, everywhere = "blocks.0.hook_resid_pre", torch.ones(1, 11, dtype=torch.bool)
    >>> out = m.vision.run_with_hooks(a, fwd_hooks=[patch_hook(name, cache[name], everywhere)])
    >>> torch.allclose(out, m.vision(b))
    True
    """
    pos_axis, head_axis = _axes(name)
    if head is not None and head_axis is None:
        raise ValueError(f"{name} has no head axis; per-head patching needs hook_z, hook_q/k/v, hook_pattern, ...")
    if mask.dtype != torch.bool or mask.ndim != 2:
        raise TypeError(f"mask must be a bool tensor [batch, pos], got {mask.dtype} {tuple(mask.shape)}")

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        if act.shape != source.shape:
            raise ValueError(f"{name}: source activation {tuple(source.shape)} != run activation {tuple(act.shape)}")
        shape = [1] * act.ndim
        shape[0], shape[pos_axis] = mask.shape
        full = mask.view(shape)
        if head is not None:
            hshape = [1] * act.ndim
            hshape[head_axis] = act.shape[head_axis]  # type: ignore[index]
            hmask = torch.zeros(act.shape[head_axis], dtype=torch.bool, device=act.device)  # type: ignore[index]
            hmask[head] = True
            full = full & hmask.view(hshape)
        return torch.where(full, source.to(act.dtype), act)

    return name, fn


def add_hook(name: str, delta: Float[torch.Tensor, "batch pos d_model"]) -> Hook:
    """A forward hook ``(name, fn)`` that adds ``delta`` to a residual-stream activation.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . 2 . . . . . . .")
    >>> out = m.vision.run_with_hooks(img, fwd_hooks=[add_hook("blocks.0.hook_resid_post", torch.zeros(1, 11, 128))])
    >>> torch.equal(out, m.vision(img))
    True
    """

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        if act.shape != delta.shape:
            raise ValueError(f"{name}: steering delta {tuple(delta.shape)} != activation {tuple(act.shape)}")
        return act + delta.to(act.device, act.dtype)

    return name, fn


def swap_slots_hook(name: str, a: int = 0, b: int = 2) -> Hook:
    """A forward hook ``(name, fn)`` that exchanges positions ``a`` and ``b`` of an activation [batch, pos, ...]
    (default: the subject and object slots of an ``X rel Y`` caption).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> cap, swapped = m.text.to_tokens("1 is on the left of 2"), m.text.to_tokens("2 is on the left of 1")
    >>> out = m.text.run_with_hooks(cap, fwd_hooks=[swap_slots_hook("hook_embed")])  # labels swapped, positions not
    >>> torch.equal(out, m.text(swapped)), torch.equal(out, m.text(cap))
    (True, False)
    """

    for what, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"swap_slots_hook: {what} must be a position (an int), got {v!r}")
    a, b = operator.index(a), operator.index(b)

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        n = act.shape[1] if act.ndim > 1 else 0
        if not (-n <= a < n and -n <= b < n):
            raise ValueError(
                f"swap_slots_hook({name!r}, {a}, {b}): the activation at {hook.name!r} has shape {list(act.shape)}; "
                f"positions {a} and {b} must index its position axis (dim 1, {n} positions)"
            )
        out = act.clone()
        out[:, a], out[:, b] = act[:, b], act[:, a]
        return out

    return name, fn


def zero_heads_hooks(encoder: HookedEncoder, heads: Sequence[Sequence[int]]) -> list[Hook]:
    """Forward hooks on ``blocks.{l}.attn.hook_z`` that zero the given (layer, head) outputs of one tower.

    Equivalent to ``prune_heads`` for that tower, without copying the model. Use with ``run_with_hooks``,
    ``model.hooks(...)`` or ``evaluate(..., vision_hooks=...)``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> [name for name, _ in zero_heads_hooks(m.text, [(0, 2)])]
        ['blocks.0.attn.hook_z']
    """
    encoder = check_tower(encoder)
    by_layer: dict[int, list[int]] = {}
    for layer, head in check_heads(heads, encoder.cfg, "zero_heads_hooks"):
        by_layer.setdefault(layer, []).append(head)

    def make(hs: list[int]) -> Callable:
        def zero(z: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            z = z.clone()
            z[:, :, hs] = 0.0
            return z

        return zero

    return [(f"blocks.{layer}.attn.hook_z", make(hs)) for layer, hs in sorted(by_layer.items())]


def _edge_mask(tower: HookedEncoder, edges: Any) -> torch.Tensor:
    """``edges`` (a bool mask or (query_pos, key_pos) pairs) as a bool mask [batch or 1, pos, pos]."""
    P = tower.cfg.n_ctx
    if isinstance(edges, torch.Tensor):
        if edges.dtype != torch.bool:
            raise TypeError(f"an edge mask must be a bool tensor, got dtype {edges.dtype}")
        if edges.ndim not in (2, 3) or tuple(edges.shape[-2:]) != (P, P):
            raise ValueError(f"an edge mask must be [{P}, {P}] or [batch, {P}, {P}], got {tuple(edges.shape)}")
        return edges if edges.ndim == 3 else edges[None]
    m = torch.zeros(1, P, P, dtype=torch.bool)
    for e in edges:
        if len(e) != 2:
            raise ValueError(f"edges must be (query_pos, key_pos) pairs, got {e!r}")
        q, k = int(e[0]), int(e[1])
        if not (0 <= q < P and 0 <= k < P):
            raise ValueError(f"edge ({q}, {k}) is outside positions 0..{P - 1}")
        m[0, q, k] = True
    return m


def knockout_hooks(
    tower: HookedEncoder,
    edges: Any,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    method: Literal["scores", "pattern"] = "scores",
    renormalize: bool = True,
) -> list[Hook]:
    """Forward hooks that knock out query -> key attention edges in ``layers`` (default all) and ``heads``.

    ``edges`` is a bool mask [pos, pos] or [batch, pos, pos] (True = remove query -> key), or a list of
    ``(query_pos, key_pos)``. ``method="scores"`` puts -inf on the pre-softmax scores (``hook_attn_scores``);
    ``method="pattern"`` zeroes the pattern (``hook_pattern``) and, if ``renormalize``, rescales each row to sum
    to 1 again, which equals the -inf method.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . 2 . . . . . . .")
    >>> _, cache = m.vision.run_with_cache(img, fwd_hooks=knockout_hooks(m.vision, [(0, 1)]))
    >>> float(cache["pattern", 0][0, :, 0, 1].abs().max()), round(float(cache["pattern", 0][0, 0, 0].sum()), 4)
    (0.0, 1.0)
    """
    tower = check_eval(check_tower(tower))
    mask = _edge_mask(tower, edges)
    L, H = tower.cfg.n_layers, tower.cfg.n_heads
    if layers is not None:  # checked as given: int() first read 1.5 as layer 1
        check_indices(layers, L, "layers", empty_ok=False)
    layers = list(range(L)) if layers is None else [int(x) for x in layers]
    head_mask = torch.ones(H, dtype=torch.bool)
    if heads is not None:
        check_indices(heads, H, "heads", empty_ok=False)
        head_mask = torch.zeros(H, dtype=torch.bool)
        head_mask[list(heads)] = True
    if method not in ("scores", "pattern"):
        raise ValueError(f"method must be 'scores' or 'pattern', got {method!r}")

    def full_mask(act: torch.Tensor) -> torch.Tensor:
        m = mask.to(act.device)
        if m.shape[0] not in (1, act.shape[0]):
            raise ValueError(f"the edge mask has batch {m.shape[0]} but the run has batch {act.shape[0]}")
        return m[:, None] & head_mask.to(act.device)[None, :, None, None]

    def on_scores(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        return act.masked_fill(full_mask(act), float("-inf"))

    def on_pattern(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        out = act.masked_fill(full_mask(act), 0.0)
        if renormalize:
            s = out.sum(-1, keepdim=True)
            out = torch.where(s > 0, out / s.clamp(min=torch.finfo(out.dtype).tiny), out)
        return out

    fn = on_scores if method == "scores" else on_pattern
    leaf = "hook_attn_scores" if method == "scores" else "hook_pattern"
    return [(f"blocks.{layer}.attn.{leaf}", fn) for layer in layers]


def splice_hook(sae: Callable[[torch.Tensor], torch.Tensor], pos: int | None = None) -> Callable:
    """A forward hook ``fn`` that replaces the activation (at ``pos`` for a per-position hook) by the reconstruction
    ``sae(activation)`` of a ``sae.SparseAutoencoder``: the model then runs with the SAE in the loop. Pair it with
    the hook name: ``("hook_pooled", splice_hook(sae))``. Activations ``[batch, d]`` or ``[batch, pos, d]`` only (a
    per-head or attention-pattern hook: ``sae.spliced``); a width other than the SAE's ``d_in`` is refused.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> img = m.vision.to_tokens("C 1 . 2 . . . . . . .")
    >>> sae = SparseAutoencoder(d_in=128, d_sae=16, k=4)
    >>> out = m.vision.run_with_hooks(img, fwd_hooks=[("hook_pooled", splice_hook(sae))])
    >>> torch.allclose(out, sae(m.vision(img)))
    True
    """

    d_in = getattr(getattr(sae, "W_enc", None), "shape", (None,))[0]

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        if act.ndim not in (2, 3):
            raise ValueError(
                f"splice_hook at {hook.name!r}: the activation {list(act.shape)} has a head axis (or another layout "
                "than [batch, d] / [batch, pos, d]); splice a per-head hook with sae.spliced(model, hook_name) "
                "(hook_z over every head), whose rows match collect_activations'"
            )
        if d_in is not None and act.shape[-1] != d_in:
            raise ValueError(
                f"splice_hook at {hook.name!r}: the activation's width is {act.shape[-1]}, the SAE's d_in {d_in}"
            )
        if act.ndim == 2:
            return sae(act.float()).to(act.dtype)
        out = act.clone()
        if pos is None:
            out = sae(act.reshape(-1, act.shape[-1]).float()).reshape(act.shape).to(act.dtype)
        else:
            out[:, pos] = sae(act[:, pos].float()).to(act.dtype)
        return out

    return fn


def _reference_acts(tower: HookedEncoder, names: Sequence[str], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each hook's activation on ``tokens`` (the reference set), after the input checks."""
    tower = check_eval(check_tower(tower))
    check_hook_names(tower, list(names))
    tower.validate_tokens(tokens)
    with torch.no_grad():
        _, cache = tower.run_with_cache(tokens.to(tower.W_E.device), names_filter=list(names))
    return {n: cache[n] for n in names}


def _replace_fn(name: str, value: torch.Tensor, head: int | None, rows: bool) -> Callable:
    """fn(act) -> act with ``value`` written in (all of it, or ``head``'s slice); ``rows``: ``value`` has the run's
    batch (resampling) instead of broadcasting over it (a mean)."""
    _, head_axis = _axes(name) if head is not None else (1, None)
    if head is not None and head_axis is None:
        raise ValueError(f"{name} has no head axis; per-head ablation needs hook_z, hook_q/k/v, hook_pattern, ...")

    def fn(act: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        v = value.to(act.device, act.dtype)
        if rows and v.shape != act.shape:
            raise ValueError(
                f"{name}: resampled activation {tuple(v.shape)} != run activation {tuple(act.shape)}; "
                "draw as many resampled rows as the run has"
            )
        if not rows and v.shape != act.shape[1:]:
            raise ValueError(f"{name}: mean activation {tuple(v.shape)} != run activation {tuple(act.shape[1:])}")
        if head is None:
            return v.expand_as(act).clone()
        out = act.clone()
        index = [slice(None)] * act.ndim
        index[head_axis] = head  # type: ignore[index]
        src = v if rows else v[None].expand_as(act)
        out[tuple(index)] = src[tuple(index)]
        return out

    return fn


def mean_ablation_hooks(
    tower: HookedEncoder,
    names: Sequence[str],
    reference: Int[torch.Tensor, "n_ref pos"],
    heads: Sequence[int] | None = None,
) -> list[Hook]:
    """Mean ablation: forward hooks that replace each hook point of ``names`` (or only ``heads`` of it, for hooks with
    a head axis) by its mean over the ``reference`` inputs, per position (the mean ablation of Wang et al. 2022 over
    a reference distribution; EAP-IG's ``mean-positional``). The mean is computed once, here.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> ref = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
    >>> hooks = mean_ablation_hooks(m.vision, ["blocks.0.attn.hook_z"], ref, heads=[2])
    >>> m.vision.run_with_hooks(ref, fwd_hooks=hooks).shape
    torch.Size([2, 128])
    """
    acts = _reference_acts(tower, names, reference)
    if heads is not None:
        check_indices(heads, tower.cfg.n_heads, "heads", empty_ok=False)
    head_list: list[int | None] = [None] if heads is None else list(heads)
    return [(n, _replace_fn(n, acts[n].mean(0), h, rows=False)) for n in names for h in head_list]


def resample_ablation_hooks(
    tower: HookedEncoder,
    names: Sequence[str],
    reference: Int[torch.Tensor, "n_ref pos"],
    n: int,
    heads: Sequence[int] | None = None,
    seed: int = 0,
) -> list[Hook]:
    """Resample ablation: forward hooks that replace each hook point of ``names`` (or ``heads`` of it) by its value on
    other inputs: ``n`` rows drawn with replacement from ``reference`` (a ``torch.Generator`` seeded with ``seed``;
    the global RNG is untouched), row ``i`` of the run getting draw ``i`` (Chan et al. 2022's resampling ablation).
    The run must have ``n`` rows.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> ref = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
    >>> img = m.vision.to_tokens(["C . 3 . . 4 . . . . ."])
    >>> hooks = resample_ablation_hooks(m.vision, ["blocks.0.hook_resid_pre"], ref, n=1)
    >>> out = m.vision.run_with_hooks(img, fwd_hooks=hooks)  # the whole input resampled: a reference image's output
    >>> any(torch.allclose(out[0], m.vision(ref)[i], atol=1e-5) for i in range(2))
    True
    """
    n = check_int(n, "n (rows of the run)")
    tower.validate_tokens(reference)
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, reference.shape[0], (n,), generator=gen)
    acts = _reference_acts(tower, names, reference[rows.to(reference.device)])
    if heads is not None:
        check_indices(heads, tower.cfg.n_heads, "heads", empty_ok=False)
    head_list: list[int | None] = [None] if heads is None else list(heads)
    return [(nm, _replace_fn(nm, acts[nm], h, rows=True)) for nm in names for h in head_list]


def mean_heads_hooks(
    tower: HookedEncoder, heads: Sequence[Sequence[int]], reference: Int[torch.Tensor, "n_ref pos"]
) -> list[Hook]:
    """Mean-ablate (layer, head) outputs: ``mean_ablation_hooks`` on each layer's ``hook_z`` for its heads.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> ref = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
    >>> [name for name, _ in mean_heads_hooks(m.vision, [(0, 1), (0, 3)], ref)]
    ['blocks.0.attn.hook_z', 'blocks.0.attn.hook_z']
    """
    tower = check_tower(tower)
    out: list[Hook] = []
    for layer, head in check_heads(heads, tower.cfg, "mean_heads_hooks"):
        out += mean_ablation_hooks(tower, [f"blocks.{layer}.attn.hook_z"], reference, heads=[head])
    return out


def resample_heads_hooks(
    tower: HookedEncoder,
    heads: Sequence[Sequence[int]],
    reference: Int[torch.Tensor, "n_ref pos"],
    n: int,
    seed: int = 0,
) -> list[Hook]:
    """Resample-ablate (layer, head) outputs: ``resample_ablation_hooks`` on each layer's ``hook_z`` (one draw of
    ``n`` reference rows, shared by every head, so the heads see the same other inputs)."""
    tower = check_tower(tower)
    out: list[Hook] = []
    for layer, head in check_heads(heads, tower.cfg, "resample_heads_hooks"):
        out += resample_ablation_hooks(tower, [f"blocks.{layer}.attn.hook_z"], reference, n, heads=[head], seed=seed)
    return out


__all__ = [
    "Head",
    "Hook",
    "Hooks",
    "Metric",
    "add_hook",
    "check_eval",
    "check_heads",
    "check_hook_names",
    "check_indices",
    "check_tower",
    "depth_labels",
    "hook_label",
    "knockout_hooks",
    "mean_ablation_hooks",
    "mean_heads_hooks",
    "patch_hook",
    "resample_ablation_hooks",
    "resample_heads_hooks",
    "residual_hook_names",
    "splice_hook",
    "swap_slots_hook",
    "zero_heads_hooks",
]
