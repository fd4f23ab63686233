"""The TransformerLens adapter: ``transformer_lens.patching`` on our towers, as a recovered fraction of the shift.

``tl_patching(tower, base, source, metric, kind)`` gives the same normalised effect as ``patching.patch_sweep``,
``(patched - base) / (source - base)``, per single position / head, computed by TL's own ``get_act_patch_*``
functions. Works on our towers: ``resid_pre``, ``attn_out``, ``head_{out,q,k,v}_{all_pos,by_pos}``,
``head_pattern_{all_pos,by_pos}``, ``head_{all_pos,by_pos}_every`` and, with an MLP, ``resid_mid``, ``mlp_out``,
``block_every`` (``TL_KINDS``). TL's ``get_act_patch_direct_path*`` do not: they hook the bridge-only name
``blocks.{l}.attn.hook_{q,k,v}_input``.
"""

from __future__ import annotations

import torch
from jaxtyping import Int
from transformer_lens import patching as tl_patch

from hooked_clip1d.analysis.hooks import Metric, check_eval, check_tower
from hooked_clip1d.analysis.metrics import shift_fraction
from hooked_clip1d.model.encoders import HookedEncoder

TL_KINDS: dict[str, tuple[str, bool]] = {  # kind -> (transformer_lens.patching function, needs an MLP)
    "resid_pre": ("get_act_patch_resid_pre", False),
    "resid_mid": ("get_act_patch_resid_mid", True),
    "attn_out": ("get_act_patch_attn_out", False),
    "mlp_out": ("get_act_patch_mlp_out", True),
    "block_every": ("get_act_patch_block_every", True),
    "head_out_all_pos": ("get_act_patch_attn_head_out_all_pos", False),
    "head_out_by_pos": ("get_act_patch_attn_head_out_by_pos", False),
    "head_q_all_pos": ("get_act_patch_attn_head_q_all_pos", False),
    "head_q_by_pos": ("get_act_patch_attn_head_q_by_pos", False),
    "head_k_all_pos": ("get_act_patch_attn_head_k_all_pos", False),
    "head_k_by_pos": ("get_act_patch_attn_head_k_by_pos", False),
    "head_v_all_pos": ("get_act_patch_attn_head_v_all_pos", False),
    "head_v_by_pos": ("get_act_patch_attn_head_v_by_pos", False),
    "head_pattern_all_pos": ("get_act_patch_attn_head_pattern_all_pos", False),
    "head_pattern_by_pos": ("get_act_patch_attn_head_pattern_by_pos", False),
    "head_all_pos_every": ("get_act_patch_attn_head_all_pos_every", False),
    "head_by_pos_every": ("get_act_patch_attn_head_by_pos_every", False),
}


@torch.no_grad()
def tl_patching(
    tower: HookedEncoder,
    base: Int[torch.Tensor, "batch pos"],
    source: Int[torch.Tensor, "batch pos"],
    metric: Metric,
    kind: str = "resid_pre",
) -> torch.Tensor:
    """Recovered fraction per single position / head from ``transformer_lens.patching`` (kinds: ``TL_KINDS``).

    TL patches the *clean* cache into the *corrupted* run, so ``source`` plays TL's clean input and ``base`` the
    corrupted one; the output has TL's shape (e.g. ``resid_pre`` -> [n_layers, pos], ``head_out_by_pos`` ->
    [n_layers, pos, n_heads]).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.metrics import image_belief_metric, mirror_images
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> imgs = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
    >>> metric = image_belief_metric(m, m.text.to_tokens(["1 is on the left of 2"]))
    >>> tl_patching(m.vision, imgs, mirror_images(imgs), metric, "head_out_by_pos").shape
    torch.Size([1, 11, 4])
    """
    tower = check_eval(check_tower(tower))
    if kind not in TL_KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {sorted(TL_KINDS)}")
    fn_name, needs_mlp = TL_KINDS[kind]
    if needs_mlp and tower.cfg.attn_only:
        raise ValueError(f"kind {kind!r} patches MLP activations, but this tower is attention-only (no MLP)")
    tower.validate_tokens(base)
    tower.validate_tokens(source)
    if base.shape != source.shape:
        raise ValueError(f"base {tuple(base.shape)} and source {tuple(source.shape)} must have the same shape")
    dev = tower.W_E.device
    base, source = base.to(dev), source.to(dev)
    base_m = metric(tower(base)).mean()
    source_out, cache = tower.run_with_cache(source)
    source_m = metric(source_out).mean()
    res = getattr(tl_patch, fn_name)(tower, base, cache, lambda out: metric(out).mean())
    return shift_fraction(res.cpu()[..., None], base_m.cpu()[None], source_m.cpu()[None])


__all__ = ["TL_KINDS", "tl_patching"]
