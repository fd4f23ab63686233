"""SAELens's on-disk format and objects for ``SparseAutoencoder``: the config, save, load and in-memory conversions.

``SparseAutoencoder.save_sae_lens`` / ``load_sae_lens`` / ``to_sae_lens`` / ``from_sae_lens`` / ``sae_lens_config``
are the public names (methods of the SAE, which call these); the format needs no SAELens, the conversions to and from
its objects do (``pip install sae-lens``, which needs ``transformer-lens<4``). This module does not import ``sae`` (no
circle): ``sae`` is a ``SparseAutoencoder`` and ``cls`` its class, typed ``Any`` / ``type`` here.

Example:
    >>> import tempfile, torch
    >>> from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder
    >>> sae = SparseAutoencoder(4, 8, k=2)
    >>> folder = save(sae, tempfile.mkdtemp() + "/sae", hook_name="hook_pooled")
    >>> x = torch.randn(3, 4)
    >>> torch.equal(load(SparseAutoencoder, folder)(x), sae(x))
    True
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

SAE_LENS_CFG = "cfg.json"  # SAELens's file names (sae_lens.constants SAE_CFG_FILENAME / SAE_WEIGHTS_FILENAME)
SAE_LENS_WEIGHTS = "sae_weights.safetensors"
SAE_LENS_FORMAT = "6.0.0"  # the SAELens cfg.json layout written here (6.x: "metadata", "architecture")
SAE_LENS_KEYS = ("W_enc", "W_dec", "b_enc", "b_dec")  # SAELens's parameter names, ours too


def _sae_lens() -> Any:
    try:
        import sae_lens
    except ImportError as e:
        raise ImportError(
            f"this needs SAELens (pip install sae-lens; it needs transformer-lens<4): {e}; the on-disk format needs "
            "no SAELens: save_sae_lens / load_sae_lens"
        ) from None
    return sae_lens


def config(sae: Any, **metadata: Any) -> dict[str, Any]:
    """``SparseAutoencoder.sae_lens_config``: the SAE's SAELens ``cfg.json`` (6.x layout)."""
    meta = {**sae.metadata, **{k: v for k, v in metadata.items() if v is not None}}
    hook = str(meta.get("hook_name") or "")
    reshape = "hook_z" if hook.endswith("hook_z") and meta.get("hook_head_index") is None else "none"
    cfg: dict[str, Any] = {
        "d_in": int(sae.W_enc.shape[0]),
        "d_sae": int(sae.W_enc.shape[1]),
        "dtype": str(sae.W_enc.dtype).removeprefix("torch."),
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": reshape,
        "metadata": {"sae_lens_version": SAE_LENS_FORMAT, "sae_lens_training_version": None, **meta},
        "architecture": "standard" if sae.k is None else "topk",
    }
    if sae.k is not None:
        cfg.update(k=sae.k, rescale_acts_by_decoder_norm=sae.rescale_acts_by_decoder_norm)
    return cfg


def save(sae: Any, path: str | os.PathLike, **metadata: Any) -> Path:
    """``SparseAutoencoder.save_sae_lens``: weights, then ``cfg.json``, each atomically, the old cfg removed first."""
    from safetensors.torch import save_file

    from hooked_clip1d.files import atomic_write, atomic_write_text

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"save_sae_lens: {str(folder)!r} is a file; SAELens's format is a folder")
    cfg = config(sae, **metadata)
    text = json.dumps(cfg, indent=2) + "\n"  # checked to be JSON before anything is written
    state = {k: getattr(sae, k).detach().cpu().contiguous() for k in SAE_LENS_KEYS}
    # the old cfg goes first: a failure between the two files (a full disk) leaves weights without a cfg, which
    # load_sae_lens refuses by name, never an old cfg beside new weights (another SAE that loads)
    (folder / SAE_LENS_CFG).unlink(missing_ok=True)
    atomic_write(folder / SAE_LENS_WEIGHTS, lambda tmp: save_file(state, tmp))
    atomic_write_text(folder / SAE_LENS_CFG, text)
    return folder


def load(cls: type, path: str | os.PathLike) -> Any:
    """``SparseAutoencoder.load_sae_lens``: a missing file, bad JSON or an unreadable weights file named."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    cfg_path, weights = folder / SAE_LENS_CFG, folder / SAE_LENS_WEIGHTS
    for f in (cfg_path, weights):
        if not f.is_file():
            raise FileNotFoundError(
                f"{str(f)!r} is missing: not a SAELens SAE folder ({SAE_LENS_CFG} + {SAE_LENS_WEIGHTS})"
            )
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{str(cfg_path)!r} is not valid JSON: {e}") from None
    try:
        tensors = load_file(weights)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:  # truncated, corrupt, not safetensors
        raise ValueError(f"{str(weights)!r} is not a readable safetensors file (truncated or corrupt?): {e}") from None
    return from_parts(cls, cfg, tensors, str(folder))


def to_object(sae: Any, **metadata: Any) -> Any:
    """``SparseAutoencoder.to_sae_lens``: a ``sae_lens.SAE`` with identical outputs."""
    SAE = _sae_lens().SAE
    out = SAE.from_dict(config(sae, **metadata))
    out.load_state_dict({k: getattr(sae, k).detach().clone() for k in SAE_LENS_KEYS})
    return out.eval()


def from_object(cls: type, sae: Any) -> Any:
    """``SparseAutoencoder.from_sae_lens``: a ``SparseAutoencoder`` from a ``sae_lens.SAE``."""
    if not hasattr(sae, "cfg") or not hasattr(sae.cfg, "to_dict"):
        raise TypeError(f"from_sae_lens takes a sae_lens.SAE, got {type(sae).__name__}")
    state = {k: v.detach().cpu() for k, v in sae.state_dict().items()}
    return from_parts(cls, sae.cfg.to_dict(), state, type(sae).__name__)


def from_parts(cls: type, cfg: Any, state: dict[str, torch.Tensor], where: str) -> Any:
    """An SAE of class ``cls`` from a SAELens cfg and state dict; what it cannot reproduce is refused by name."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: a SAELens cfg is a JSON object, got a {type(cfg).__name__}")
    arch = cfg.get("architecture", "standard")
    if arch not in ("standard", "topk"):
        raise ValueError(f"{where}: SAELens architecture {arch!r} is not supported (standard and topk are)")
    wanted = {"apply_b_dec_to_input": True, "normalize_activations": "none"}
    if arch == "standard":
        wanted["rescale_acts_by_decoder_norm"] = False
    for field, value in wanted.items():
        if cfg.get(field, value) != value:
            raise ValueError(f"{where}: {field}={cfg[field]!r} is not supported (only {value!r})")
    if cfg.get("reshape_activations", "none") not in ("none", "hook_z"):
        raise ValueError(f"{where}: reshape_activations={cfg['reshape_activations']!r} is not supported")
    d_in, d_sae = (_count(cfg, f, where) for f in ("d_in", "d_sae"))
    k = None
    if arch == "topk":
        k = _count(cfg, "k", where)
        if k > d_sae:
            raise ValueError(f"{where}: k={k} is more than d_sae={d_sae}")
    rescale = cfg.get("rescale_acts_by_decoder_norm", False) if arch == "topk" else False
    if not isinstance(rescale, bool):
        raise ValueError(f"{where}: rescale_acts_by_decoder_norm must be true or false, got {rescale!r}")
    missing, extra = sorted(set(SAE_LENS_KEYS) - set(state)), sorted(set(state) - set(SAE_LENS_KEYS))
    if missing or extra:
        raise ValueError(f"{where}: weights {missing} missing, {extra} unexpected (SAELens keys {SAE_LENS_KEYS})")
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,)}
    for name, shape in shapes.items():
        if tuple(state[name].shape) != shape:
            raise ValueError(f"{where}: {name} has shape {list(state[name].shape)}, cfg says {list(shape)}")
        if not bool(torch.isfinite(state[name].float()).all()):
            raise ValueError(f"{where}: {name} holds NaN or infinite values")
    if rescale and not bool((state["W_dec"].float().norm(dim=-1) > 0).all()):
        raise ValueError(f"{where}: rescale_acts_by_decoder_norm with a zero decoder row divides by 0")
    sae = cls(d_in, d_sae, k=k, rescale_acts_by_decoder_norm=rescale)
    with torch.no_grad():
        for name in SAE_LENS_KEYS:
            getattr(sae, name).copy_(state[name].float())
    meta = cfg.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: metadata must be a JSON object, got {type(meta).__name__}")
    meta = dict(meta)
    for key in ("sae_lens_version", "sae_lens_training_version"):
        meta.pop(key, None)
    sae.metadata = meta
    return sae.eval()


def _count(cfg: dict[str, Any], field: str, where: str) -> int:
    """A positive int field of a SAELens cfg (2.7, "2", True and a missing field are refused by name)."""
    if field not in cfg:
        raise ValueError(f"{where}: the SAELens cfg has no {field!r}")
    v = cfg[field]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{where}: {field} must be a positive int, got {cfg[field]!r}")
    return v
