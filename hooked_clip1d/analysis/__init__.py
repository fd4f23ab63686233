"""Mechanistic analyses of the paper as hook factories and functions of an ``ActivationCache``.

- ``terms``: the weight-bias and token-position decomposition of layer-0 attention scores (Eq. 1, 2) and
  ``ablate_terms``, hooks that remove chosen terms (EP, PE, PP, BP, VP, ...) during a normal forward pass.
- ``heads``: per-head CLS -> object left/right attention bias (Fig. 4c).
"""

from hooked_clip1d.analysis.heads import cls_object_bias
from hooked_clip1d.analysis.terms import SCORE_TERMS, ablate_terms, attention_terms

__all__ = ["SCORE_TERMS", "ablate_terms", "attention_terms", "cls_object_bias"]
