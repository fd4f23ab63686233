"""The model (Sec. 2.2, 4): configs and presets (``config``), the shared maths (``functional``: LayerNorm, RoPE's
one rotation, the CLIP head's cosine, temperature and loss), the attention-score terms (``terms``), hooked
components with TransformerLens's hook and weight names (``components``), the two towers' forward pass
(``encoders``) and their TransformerLens conveniences (``tl_conveniences``), the CLIP model (``clip``), the
TransformerLens 3 / 4 differences (``tl_compat``) and model files (``checkpoint``: safetensors weights with their
configs, loaded without running code).

The data's path, with the hook names of ``CLIP1D.run_with_cache`` (a tower's own cache, ``cache.vision``, drops the
``vision.`` prefix; ``l`` is the layer; shapes: b batch, p positions, h heads):

1. **Input** (``data.vocab``): an image is ids [b, 11], ``[CLS]`` at position 0 then 10 pixels (0 background,
   1..Ntot labels); a caption is 4 ids ending in ``<eot>``. ``HookedEncoder.forward`` checks them first.
2. **Embed** (``encoders.HookedEncoder.forward``): ``resid = W_E[tokens]`` (``vision.hook_embed``) ``+ W_pos``
   (``vision.hook_pos_embed``, learned positions; RoPE turns q and k inside attention instead), dropout in train mode.
3. **Blocks** (``components.TransformerBlock``, ``n_layers`` of them; pre-LN shown): ``blocks.{l}.hook_resid_pre``
   -> ``ln1`` (LN towers) -> attention (``components.Attention``): ``attn.hook_q`` / ``hook_k`` / ``hook_v``
   [b, p, h, d_head] (RoPE: ``attn.hook_rot_q`` / ``hook_rot_k``) -> ``q k^T / sqrt(d_head)``
   (``attn.hook_attn_scores``, -inf above the diagonal in the causal text tower) -> softmax (``attn.hook_pattern``)
   -> ``z = pattern v`` (``attn.hook_z``) -> ``z W_O + b_O`` (``hook_attn_out``) added to the residual
   (``hook_resid_mid``), then, in towers with an MLP, ``ln2`` -> ``mlp.hook_pre`` -> GeLU (``mlp.hook_post``) ->
   ``hook_mlp_out`` added: ``blocks.{l}.hook_resid_post``.
4. **Readout** (``encoders``): ``ln_final`` (pre-LN towers), then the residual at one position per input: the
   vision tower's CLS (position 0), the text tower's first EOT: ``vision.hook_pooled`` / ``text.hook_pooled`` [b, d].
5. **Projection and logits** (``clip.CLIP1D.forward``): the image embedding is the vision readout
   (``hook_image_embed``), the text embedding the text readout times ``W_proj`` (``hook_text_embed``; only the text
   side is projected); both are normalised (``hook_image_feat``, ``hook_text_feat``) and the logits are their cosines
   times ``exp(logit_scale)``, clamped at 100 (``hook_logits`` [n_images, n_texts]); ``return_type="loss"`` gives
   the symmetric cross-entropy with image i paired with caption i.

The same path, recomputed from the cache of the paper's simplified model (one attention-only block, no LayerNorm):

    >>> import torch
    >>> import torch.nn.functional as F
    >>> from hooked_clip1d.model import CLIP1D, CLIPConfig
    >>> model = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> images = model.vision.to_tokens(["C 1 . 2 . . . . . . .", "C 2 . 1 . . . . . . ."])  # 1. input
    >>> captions = model.text.to_tokens(["1 is on the left of 2", "2 is on the left of 1"])
    >>> logits, cache = model.run_with_cache(images, captions)
    >>> v, attn = cache.vision, model.vision.blocks[0].attn
    >>> list(v.cache_dict)
    ['hook_embed', 'hook_pos_embed', 'blocks.0.hook_resid_pre', 'blocks.0.attn.hook_q', 'blocks.0.attn.hook_k', \
'blocks.0.attn.hook_v', 'blocks.0.attn.hook_attn_scores', 'blocks.0.attn.hook_pattern', 'blocks.0.attn.hook_z', \
'blocks.0.hook_attn_out', 'blocks.0.hook_resid_post', 'hook_pooled']
    >>> torch.equal(v["hook_embed"] + v["hook_pos_embed"], v["blocks.0.hook_resid_pre"])  # 2. embed
    True
    >>> z = v["pattern", 0] @ v["v", 0].transpose(1, 2)  # 3. block: [b, h, p, d_head]
    >>> torch.allclose(z.transpose(1, 2), v["z", 0])
    True
    >>> out = torch.einsum("bphd,hdm->bpm", v["z", 0], attn.W_O) + attn.b_O
    >>> torch.allclose(out, v["attn_out", 0], atol=1e-6)
    True
    >>> torch.equal(v["blocks.0.hook_resid_pre"] + v["attn_out", 0], v["resid_post", 0])
    True
    >>> torch.equal(v["resid_post", 0][:, 0], v["hook_pooled"])  # 4. readout at CLS
    True
    >>> text = cache["text.hook_pooled"] @ model.W_proj  # 5. projection (text side)
    >>> torch.equal(text, cache["hook_text_embed"])
    True
    >>> again = model.temperature_scale() * F.normalize(v["hook_pooled"], dim=-1) @ F.normalize(text, dim=-1).T
    >>> torch.allclose(again, logits), logits.shape
    (True, torch.Size([2, 2]))
"""

from hooked_clip1d.lazy import lazy_exports

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CLIP1D": "hooked_clip1d.model.clip",
        "CLIPConfig": "hooked_clip1d.model.clip",
        "clip_loss": "hooked_clip1d.model.clip",
        "EncoderConfig": "hooked_clip1d.model.config",
        "TextConfig": "hooked_clip1d.model.config",
        "VisionConfig": "hooked_clip1d.model.config",
        "preset": "hooked_clip1d.model.config",
        "HookedEncoder": "hooked_clip1d.model.encoders",
        "HookedTextEncoder": "hooked_clip1d.model.encoders",
        "HookedVisionEncoder": "hooked_clip1d.model.encoders",
    },
)

__all__ = [
    "CLIP1D",
    "CLIPConfig",
    "EncoderConfig",
    "HookedEncoder",
    "HookedTextEncoder",
    "HookedVisionEncoder",
    "TextConfig",
    "VisionConfig",
    "clip_loss",
    "preset",
]
