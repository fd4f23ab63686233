"""Interchange interventions on the text tower (Gur-Arieh et al. via Binding §5.2, adapted): does EOT read the
subject by position or by identity?

``text_interchange(model, images, captions)`` compares ``X rel Y`` with its counterfactual ``Y rel X`` under three
interventions (slot swap per layer, position-embedding swap, EOT's attention row from the counterfactual run) and
returns an ``InterchangeResult``; its ``fractions()`` are each intervention's share of the base -> counterfactual
belief shift. See ``text_interchange`` for how to read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int

from hooked_clip1d.analysis.hooks import Hook, check_eval, patch_hook, residual_hook_names, swap_slots_hook
from hooked_clip1d.analysis.metrics import (
    caption_belief_metric,
    check_captions_describe,
    check_model,
    check_pair_captions,
    check_pair_images,
    shift_fraction,
    swap_captions,
)
from hooked_clip1d.model.clip import CLIP1D


@dataclass
class InterchangeResult:
    """Caption beliefs of ``text_interchange`` (see its docstring); every tensor ends in a batch axis."""

    base: torch.Tensor  # [batch] beliefs of the captions X rel Y
    counterfactual: torch.Tensor  # [batch] beliefs of the swapped captions Y rel X
    slot_swap: torch.Tensor  # [n_layers, batch]: slots 0 and 2 exchanged in the residual before layer l
    position_id_swap: torch.Tensor | None  # [batch]: positional embeddings of slots 0 and 2 exchanged
    eot_pattern: torch.Tensor  # [n_layers, batch]: EOT's attention row of layer l from the counterfactual
    eot_pattern_heads: torch.Tensor  # [n_layers, n_heads, batch]: the same, one head at a time

    def fractions(self) -> dict[str, Any]:
        """Each intervention's fraction of the base -> counterfactual shift (1 = belief flipped like the swap)."""

        def f(x: torch.Tensor) -> Any:
            return shift_fraction(x, self.base, self.counterfactual).tolist()

        return {
            "slot_swap": f(self.slot_swap),
            "position_id_swap": None if self.position_id_swap is None else f(self.position_id_swap),
            "eot_pattern": f(self.eot_pattern),
            "eot_pattern_heads": f(self.eot_pattern_heads),
            "base_belief": float(self.base.mean()),
            "counterfactual_belief": float(self.counterfactual.mean()),
        }


@torch.no_grad()
def text_interchange(
    model: CLIP1D, images: Int[torch.Tensor, "batch pos"], captions: Int[torch.Tensor, "batch 4"]
) -> InterchangeResult:
    """Interchange interventions on the text tower: does EOT read the subject by position or by identity?

    Base ``X rel Y`` (subject X in slot 0, Y in slot 2), counterfactual ``Y rel X``; beliefs are caption beliefs
    against ``images[i]`` (which ``captions[i]`` describes) and its mirror. Three interventions, each reported as
    the fraction of the base -> counterfactual shift it produces:

    - ``slot_swap`` (per layer l, Feng & Steinhardt's binding-ID swap): exchange the residual vectors of slots 0
      and 2 before layer l. Each vector carries its label *and* whatever role/position information is bound to it.
      1 = EOT takes the subject from the *slot* (sequence position, reachable only through the causal mask of an
      earlier layer); 0 = the subject travels with the vector (read by identity of the bound vector). Before the
      last layer (so always, in a 1-layer tower) this is 0 by construction: EOT's output is a sum over its keys,
      blind to their order; only swaps before earlier layers can measure anything.
    - ``position_id_swap`` (learned positions only): exchange the positional embeddings of slots 0 and 2, tokens
      left in place. 1 = the subject is whichever label carries position embedding 0 (for a 1-layer tower this
      is exactly the counterfactual input, so 1 by construction).
    - ``eot_pattern`` (per layer, all heads / ``eot_pattern_heads`` per head; Gur-Arieh's query-side
      interchange): EOT's attention row from the counterfactual run, values from the base run. 0 = EOT attends by
      slot (the same weights whichever label sits there; exactly 0 if its attention ignores content); away from 0
      = the weights follow the labels (e.g. a head that prefers label 17 in either slot); 1 = the whole order
      signal rides on those weights, i.e. on how much of each slot's (position-carrying) value EOT mixes in.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
    >>> r = text_interchange(m, m.vision.to_tokens(["C 1 2 . . . . . . . .", "C . 3 . . 4 . . . . ."]),
    ...                      m.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"]))
    >>> fr = r.fractions()
    >>> abs(fr["slot_swap"][0]) < 1e-4, abs(fr["position_id_swap"] - 1) < 1e-4  # forced in a 1-layer text tower
    (True, True)
    """
    model = check_eval(check_model(model))
    text = model.text
    vocab = text.cfg.vocab
    check_pair_captions(captions, vocab)
    check_pair_images(images)
    check_captions_describe(images, captions)  # pairs row by row, each caption naming its image's two labels
    dev = model.W_proj.device
    captions = captions.to(dev)
    metric = caption_belief_metric(model, images)
    cf = swap_captions(captions, vocab)
    base_m = metric(text(captions)).cpu()
    L, H = text.cfg.n_layers, text.cfg.n_heads
    _, cf_cache = text.run_with_cache(cf, names_filter=lambda n: n.endswith("hook_pattern"))

    resid = residual_hook_names(text)
    slot = torch.stack([metric(text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook(resid[d])])) for d in range(L)])
    pos_swap = None
    if text.cfg.positional == "learned":
        pos_swap = metric(text.run_with_hooks(captions, fwd_hooks=[swap_slots_hook("hook_pos_embed")])).cpu()

    eot_row = torch.zeros(captions.shape, dtype=torch.bool, device=dev)  # EOT's query row (slot 3) of the pattern
    eot_row[:, 3] = True

    def eot_row_hook(layer: int, head: int | None = None) -> Hook:  # all heads, or one
        name = f"blocks.{layer}.attn.hook_pattern"
        return patch_hook(name, cf_cache[name], eot_row, head)

    eot = torch.stack([metric(text.run_with_hooks(captions, fwd_hooks=[eot_row_hook(l_)])) for l_ in range(L)])
    eot_heads = torch.stack(
        [
            torch.stack([metric(text.run_with_hooks(captions, fwd_hooks=[eot_row_hook(l_, h)])) for h in range(H)])
            for l_ in range(L)
        ]
    )
    return InterchangeResult(
        base=base_m,
        counterfactual=metric(text(cf)).cpu(),
        slot_swap=slot.cpu(),
        position_id_swap=pos_swap,
        eot_pattern=eot.cpu(),
        eot_pattern_heads=eot_heads.cpu(),
    )


__all__ = ["InterchangeResult", "text_interchange"]
