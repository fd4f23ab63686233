"""Direct attribution to captions: CLIP's analogue of a language model's unembedding directions.

A language model scores a residual against ``W_U``; CLIP scores the image representation (the vision CLS output)
against the caption embeddings: ``logit[i, j] = scale * <img_i / |img_i|, t_j>`` with ``t_j`` the normalised,
projected text embedding of caption ``j`` (``caption_directions``). So any additive component ``c`` of the final
CLS residual (an embedding, a head's output, a layer's output: ``ActivationCache.decompose_resid`` /
``stack_head_results`` of the vision tower) contributes ``scale * <c, t_j> / |img_i|`` to that logit
(``caption_attributions``).

Exactness: for the towers without LayerNorm (the paper's simplified model) the final CLS residual *is* the image
representation, so the components' attributions sum exactly to the logits (the norm ``|img_i|`` is fixed by the
whole forward pass, as TransformerLens freezes the LN scale). With LayerNorm (the full model) ``ln_final`` sits in
between: components are first passed through the frozen final LN scale (``cache.apply_ln_to_stack``), the usual
TransformerLens approximation; the LN bias is then one more component. ``cls_logit_lens`` scores each layer's CLS
residual against all captions; intermediate layers were never trained to align, so read it as a probe, not as the
model's belief.

Example:
    >>> from hooked_clip1d import load_model
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> img = m.vision.to_tokens(["C . . 17 . . 19 . . . ."])
    >>> caps = m.text.to_tokens(["17 is on the left of 19", "19 is on the left of 17"])
    >>> _, cache = m.vision.run_with_cache(img)
    >>> comps, labels = cache.decompose_resid(return_labels=True, pos_slice=0)
    >>> attr = caption_attributions(m, comps, cache["hook_pooled"], caption_directions(m, caps))
    >>> import torch
    >>> torch.allclose(attr.sum(0), m(img, caps), atol=1e-4)  # exact without LayerNorm
    True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int

from hooked_clip1d.analysis.hooks import check_eval
from hooked_clip1d.analysis.metrics import check_model
from hooked_clip1d.model.clip import CLIP1D


@torch.no_grad()
def caption_directions(
    model: CLIP1D, captions: Int[torch.Tensor, "n_captions 4"]
) -> Float[torch.Tensor, "n_captions d_vision"]:
    """The image-side direction of each caption: its projected text embedding, normalised (``t_j``). The model must
    be in eval mode (dropout would make the directions noisy)."""
    model = check_eval(check_model(model))
    return F.normalize(model.encode_text(captions.to(model.W_proj.device)), dim=-1)


def caption_attributions(
    model: CLIP1D,
    components: Float[torch.Tensor, "n_components n_images d_vision"],
    image_embed: Float[torch.Tensor, "n_images d_vision"],
    directions: Float[torch.Tensor, "n_captions d_vision"],
) -> Float[torch.Tensor, "n_components n_images n_captions"]:
    """Each residual component's contribution ``scale * <c, t_j> / |img_i|`` to the logit of image i and caption
    j. ``components`` are additive parts of the final CLS residual (``decompose_resid(pos_slice=0)``, heads from
    ``stack_head_results``; with LayerNorm after ``cache.apply_ln_to_stack``); ``image_embed`` the vision output
    (``cache["hook_pooled"]``) whose norm sets the cosine's scale."""
    if components.shape[-1] != directions.shape[-1] or components.shape[1] != image_embed.shape[0]:
        raise ValueError(
            f"shapes do not fit: components {list(components.shape)}, image_embed {list(image_embed.shape)}, "
            f"directions {list(directions.shape)}"
        )
    scale = model.temperature_scale().detach()
    norm = image_embed.norm(dim=-1)  # [n_images]
    return scale * torch.einsum("cid,jd->cij", components, directions) / norm[None, :, None]


@torch.no_grad()
def cls_logit_lens(
    model: CLIP1D, images: Int[torch.Tensor, "n_images pos"], captions: Int[torch.Tensor, "n_captions 4"]
) -> Float[torch.Tensor, "n_layers_plus_1 n_images n_captions"]:
    """``scale * cos`` of the CLS residual after the embeddings and after each block (then the final LN, if any)
    with every caption: entry ``[l]`` is the logit matrix read out after ``l`` blocks. The last entry equals the
    model's logits; earlier ones are a probe (those layers were not trained to align). A post-LN vision tower
    (``ln_position="post"``) is refused: its residual stream has no final LayerNorm to read each layer through."""
    model = check_eval(check_model(model))
    if model.cfg.vision.ln_position == "post":
        raise ValueError(
            "cls_logit_lens: the vision tower is post-LN (ln_position='post'): each block normalises its own output "
            "and there is no final LayerNorm to read the intermediate residuals through; the lens needs a pre-LN or "
            "LayerNorm-free tower"
        )
    images = images.to(model.W_proj.device)
    _, cache = model.vision.run_with_cache(images, names_filter=lambda n: n.endswith(("resid_pre", "resid_post")))
    resid = cache.accumulated_resid(pos_slice=0, apply_ln=model.cfg.vision.normalization_type == "LN")
    t = caption_directions(model, captions)
    return model.temperature_scale() * F.normalize(resid, dim=-1) @ t.T
