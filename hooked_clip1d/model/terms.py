"""The token / position / bias terms of attention scores (Paper Eq. 2, App. D, H), written once for the model and the
analysis.

A layer's query and key are sums of parts, ``q = sum_a q_a`` and ``k = sum_c k_c`` (at layer 0 without LayerNorm:
E = the token embedding's share ``E W``, P = the positional embedding's ``P W``, B = the bias ``b_Q`` / ``b_K``), so
its pre-softmax score ``q k^T / sqrt(d_head)`` is the sum of the terms ``q_a k_c^T / sqrt(d_head)``, named by the
two parts ("EP": query from E, key from P). ``VP`` is the positional part ``P W_V`` of the values.

Two users share this table and ``term_scores``: the model itself, which removes ``EncoderConfig.ablated_terms`` in
every forward pass (training-time ablation, ``components.Attention``), and
``analysis.interventions.terms.ablate_terms``, hooks that
remove terms at any layer (with R, the rest of the residual stream, at later layers or through LayerNorm). Each
computes its parts (projections through ``W_Q`` / ``W_K``, LayerNorm, RoPE) its own way and hands them here.

Example:
    >>> import torch
    >>> q = {"E": torch.randn(2, 5, 4, 8), "P": torch.randn(2, 5, 4, 8)}
    >>> k = {"E": torch.randn(2, 5, 4, 8), "P": torch.randn(2, 5, 4, 8)}
    >>> full = (q["E"] + q["P"]).transpose(1, 2) @ (k["E"] + k["P"]).permute(0, 2, 3, 1) / 8**0.5
    >>> torch.allclose(term_scores(q, k, ["EE", "EP", "PE", "PP"], 8**0.5), full, atol=1e-5)
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from jaxtyping import Float

#: the nine layer-0 score terms (query part, key part): Eq. 2 (EE, EP, PE, PP) and App. D (the bias terms)
SCORE_TERMS = ("EE", "EP", "PE", "PP", "BE", "BP", "EB", "PB", "BB")
#: the value term of App. H: the positional part of the values
VALUE_TERMS = ("VP",)
#: every layer-0 term a model can remove itself (``EncoderConfig.ablated_terms``)
LAYER0_TERMS = SCORE_TERMS + VALUE_TERMS

QueryPart = Float[torch.Tensor, "batch query_pos head_index d_head"]
KeyPart = Float[torch.Tensor, "batch key_pos head_index d_head"]


def term_scores(
    q_parts: Mapping[str, QueryPart],
    k_parts: Mapping[str, KeyPart],
    terms: Sequence[str],
    scale: float,
) -> Float[torch.Tensor, "batch head_index query_pos key_pos"]:
    """The sum of the score ``terms`` (each "ac": query part ``a`` times key part ``c``), divided by ``scale``
    (sqrt(d_head)), from parts ``[batch, pos, head_index, d_head]`` already rotated where the tower uses RoPE. A term
    without a score (``VP``) is skipped; no score term gives a zero scalar.

    Example:
        >>> q = {"B": torch.ones(1, 2, 1, 4)}
        >>> k = {"E": torch.ones(1, 3, 1, 4)}
        >>> term_scores(q, k, ["BE", "VP"], 2.0).shape
        torch.Size([1, 1, 2, 3])
    """
    ref = next(iter(q_parts.values()))
    total = torch.zeros((), dtype=ref.dtype, device=ref.device)
    for t in terms:
        if t in VALUE_TERMS:
            continue
        total = total + q_parts[t[0]].transpose(1, 2) @ k_parts[t[1]].permute(0, 2, 3, 1)
    return total / scale


__all__ = ["LAYER0_TERMS", "SCORE_TERMS", "VALUE_TERMS", "term_scores"]
