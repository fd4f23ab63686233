"""Mean and resample ablation of attention-score terms, beside the zero ablation of ``terms.ablate_terms``.

``terms.ablate_terms`` removes a term (EP, PE, PP, ... of ``terms.attention_terms``) from a head's scores, i.e.
replaces it by zero. ``mean_ablate_terms`` replaces it by its mean over a reference set, per (query, key) position;
``resample_ablate_terms`` by its value on other inputs drawn from the reference set. Both are the live term's
removal (``ablate_terms``) followed by adding the replacement to ``hook_attn_scores``, for the chosen heads only.

A term that is the same on every input is untouched by both: the CLS row of EP and PP in the vision tower (CLS and
its position never change), and PP everywhere. This is why patching- and resampling-based circuit discovery cannot
see the paper's EP mechanism at the readout, while the zero ablation of Fig. 5e removes it (``circuits``).

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> ref = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . .", "C . 3 . . 4 . . . . ."])
    >>> img = m.vision.to_tokens(["C 1 . . . 2 . . . . ."])
    >>> out = m.vision.run_with_hooks(img, fwd_hooks=mean_ablate_terms(m.vision, ["PP"], ref))
    >>> torch.allclose(out, m.vision(img), atol=1e-5)  # PP is constant: its mean is itself
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Int
from transformer_lens.hook_points import HookPoint

from hooked_clip1d.analysis.hooks import Hook, check_eval, check_indices, check_tower
from hooked_clip1d.analysis.interventions.terms import ablate_terms, attention_terms
from hooked_clip1d.model.encoders import HookedEncoder
from hooked_clip1d.settings.checks import check_int


def _terms_on(tower: HookedEncoder, terms: Sequence[str], tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """The sum of ``terms`` on ``tokens``, [batch, head, query, key]."""
    with torch.no_grad():
        _, cache = tower.run_with_cache(tokens.to(tower.W_E.device))
    values = attention_terms(tower, cache, layer)
    missing = [t for t in terms if t not in values]
    if missing:
        raise ValueError(f"terms {missing} do not exist at layer {layer} of this tower; it has {list(values)}")
    return sum(values[t] for t in terms)  # type: ignore[return-value]


def _add(layer: int, value: torch.Tensor, heads: Sequence[int] | None, rows: bool) -> Hook:
    def fn(scores: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        v = value.to(scores.device, scores.dtype)
        if rows and v.shape != scores.shape:
            raise ValueError(
                f"resampled terms {tuple(v.shape)} != scores {tuple(scores.shape)}: draw as many rows as the run has"
            )
        if heads is not None:
            mask = torch.zeros(scores.shape[1], dtype=scores.dtype, device=scores.device)
            mask[list(heads)] = 1
            v = v * mask[:, None, None]
        return scores + v

    return f"blocks.{layer}.attn.hook_attn_scores", fn


def _checked(tower: HookedEncoder, terms: Sequence[str], reference: torch.Tensor, heads: Sequence[int] | None):
    tower = check_eval(check_tower(tower))
    if isinstance(terms, str):
        raise TypeError(f"terms must be a list of term names, e.g. [{terms!r}], not a string")
    if "VP" in terms:
        raise ValueError(
            "VP is the positional part of the values, the same on every input: its mean (and any "
            "resample) is itself; use terms.ablate_terms(['VP']) for its zero ablation"
        )
    tower.validate_tokens(reference)
    if heads is not None:
        check_indices(heads, tower.cfg.n_heads, "heads", empty_ok=False)
    return tower


def mean_ablate_terms(
    tower: HookedEncoder,
    terms: Sequence[str],
    reference: Int[torch.Tensor, "n_ref pos"],
    layer: int = 0,
    heads: Sequence[int] | None = None,
    *,
    ln_scale: str | None = None,
) -> list[Hook]:
    """Forward hooks that replace the score ``terms`` of ``layer`` (for ``heads``, default all) by their mean over
    the ``reference`` inputs, per query and key position (module docstring). ``ln_scale`` as in ``ablate_terms``."""
    tower = _checked(tower, terms, reference, heads)
    mean = _terms_on(tower, list(terms), reference, layer).mean(0)
    return ablate_terms(tower, terms, layer, heads, ln_scale=ln_scale) + [_add(layer, mean, heads, rows=False)]


def resample_ablate_terms(
    tower: HookedEncoder,
    terms: Sequence[str],
    reference: Int[torch.Tensor, "n_ref pos"],
    n: int,
    layer: int = 0,
    heads: Sequence[int] | None = None,
    *,
    seed: int = 0,
    ln_scale: str | None = None,
) -> list[Hook]:
    """Forward hooks that replace the score ``terms`` of ``layer`` (for ``heads``) by their values on ``n`` inputs
    drawn with replacement from ``reference`` (a generator seeded with ``seed``; the global RNG is untouched); the
    run must have ``n`` rows.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> ref = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])
    >>> hooks = resample_ablate_terms(m.vision, ["EP", "EE"], ref, n=1, heads=[2])
    >>> m.vision.run_with_hooks(m.vision.to_tokens(["C . 3 . . 4 . . . . ."]), fwd_hooks=hooks).shape
    torch.Size([1, 128])
    """
    tower = _checked(tower, terms, reference, heads)
    n = check_int(n, "n (rows of the run)")
    rows = torch.randint(0, reference.shape[0], (n,), generator=torch.Generator().manual_seed(seed))
    drawn = _terms_on(tower, list(terms), reference[rows.to(reference.device)], layer)
    return ablate_terms(tower, terms, layer, heads, ln_scale=ln_scale) + [_add(layer, drawn, heads, rows=True)]


__all__ = ["mean_ablate_terms", "resample_ablate_terms"]
