"""Checkpoints: one safetensors file holding tensors plus JSON metadata, written atomically, loaded without code.

A file holds the model's parameters under ``model.*``; a training checkpoint adds the AdamW state under
``optim.*`` and the RNG states under ``rng.*``. The safetensors header metadata carries ``format`` (always
``"hooked_clip1d/1"``), ``model_config`` and ``data_config`` (JSON) and, for training checkpoints, ``train_state``.
Nothing is unpickled, so a foreign or malicious file can only fail to load, with a message naming the problem.

Example:
    >>> import tempfile, os
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_model(m, path)
    >>> m2 = load_model_file(path)
    >>> bool((m2.vision.W_E == m.vision.W_E).all())
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from hooked_clip1d.data.dataset import DataConfig
from hooked_clip1d.files import atomic_write
from hooked_clip1d.model.clip import CLIP1D, CLIPConfig

FORMAT = "hooked_clip1d/1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, foreign or does not fit the model."""


def canonical_config(kind: str, d: Any) -> Any:
    """A saved ``model_config`` / ``data_config`` dict as this version writes it: fields added since the save take
    their defaults, so a run saved before a new config field existed still resumes. Unreadable dicts are returned
    as they are (and then compare unequal).

    Example:
        >>> old = DataConfig().to_dict(); del old["caption_mode"]
        >>> canonical_config("data_config", old) == DataConfig().to_dict()
        True
    """
    build = {"model_config": CLIPConfig, "data_config": DataConfig}[kind]
    try:
        return build.from_dict(d).to_dict()
    except (TypeError, ValueError, KeyError, AttributeError):
        return d


def content_digest(tensors: dict[str, torch.Tensor], raw_meta: dict[str, str]) -> str:
    """SHA-256 of every tensor (name, dtype, shape, bytes) and of the stored metadata strings (``digest`` itself
    left out): saved in each file, so a file edited after it was written (its JSON metadata or its tensors) is
    recognised on load."""
    h = hashlib.sha256()
    meta = {k: v for k, v in raw_meta.items() if k != "digest"}
    h.update(json.dumps(meta, sort_keys=True).encode())
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        h.update(f"{k}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.flatten().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_tensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> None:
    """Atomically save ``tensors`` with JSON-encoded ``metadata`` (plus ``format`` and a content ``digest``)."""
    meta = {"format": FORMAT, **{k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}}
    flat = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    meta["digest"] = content_digest(flat, meta)
    atomic_write(path, lambda tmp: save_file(flat, tmp, metadata=meta))


def read_tensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Load tensors and decoded metadata; raise ``CheckpointError`` naming what is wrong with the file."""
    path = Path(path)
    if path.is_dir():
        hint = " (a run directory: load its model.safetensors)" if (path / "model.safetensors").exists() else ""
        raise CheckpointError(f"{str(path)!r} is a directory, not a checkpoint file{hint}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw_meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            f"{str(path)!r} is not a readable safetensors file (truncated or corrupt?): {e}"
        ) from None
    return tensors, _checked_meta(tensors, raw_meta, str(path))


def read_tensors_bytes(data: bytes, label: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``read_tensors`` of a safetensors file held in memory (e.g. decompressed), ``label`` naming it in errors.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
        >>> save_tensors(path, {"x": torch.ones(2)}, {"note": {"epochs": [0, 5]}})
        >>> tensors, meta = read_tensors_bytes(open(path, "rb").read(), "t")
        >>> tensors["x"].tolist(), meta["note"]
        ([1.0, 1.0], {'epochs': [0, 5]})
        >>> try:
        ...     read_tensors_bytes(b"junk", "t")
        ... except CheckpointError as e:
        ...     print(str(e).split(" (")[0])
        't' is not a readable safetensors file
    """
    from safetensors.torch import load

    try:
        n = int.from_bytes(data[:8], "little")
        if len(data) < 8 or n > len(data) - 8:
            raise ValueError(f"a header of {n} bytes in {len(data)} bytes")
        header = json.loads(data[8 : 8 + n])
        raw_meta = header.get("__metadata__") or {}
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(f"{label!r} is not a readable safetensors file (truncated or corrupt?): {e}") from None
    return tensors, _checked_meta(tensors, raw_meta, label)


def _checked_meta(tensors: dict[str, torch.Tensor], raw_meta: dict[str, str], label: str) -> dict[str, Any]:
    """The decoded metadata of a file's ``raw_meta``, after checking its format and content digest."""
    if raw_meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{label!r} is a safetensors file but not a hooked_clip1d checkpoint "
            f"(metadata 'format' is {raw_meta.get('format')!r}, expected {FORMAT!r})"
        )
    if "digest" in raw_meta and content_digest(tensors, raw_meta) != raw_meta["digest"]:
        raise CheckpointError(
            f"{label!r} was modified after it was written: its tensors or metadata no longer match the digest "
            "stored in it (re-export it, or restore the original file)"
        )
    meta: dict[str, Any] = {}
    for k, v in raw_meta.items():
        if k == "digest":
            continue
        try:
            meta[k] = json.loads(v) if k != "format" else v
        except json.JSONDecodeError:
            raise CheckpointError(f"{label!r}: metadata {k!r} is not valid JSON") from None
    return meta


def model_tensors(model: CLIP1D) -> dict[str, torch.Tensor]:
    return {f"model.{k}": v for k, v in model.state_dict().items()}


def save_model(
    model: CLIP1D,
    path: str | os.PathLike,
    data_config: DataConfig | None = None,
    extra: dict | None = None,
    dtype: torch.dtype | None = None,
) -> None:
    """Save weights + configs (no optimizer state) atomically.

    ``dtype`` (e.g. ``torch.float16``) stores the floating-point weights in that type, to halve a shipped file;
    loading casts them back to the model's dtype. A weight the type cannot hold is refused.
    """
    dc = data_config or model.data_config
    meta: dict[str, Any] = {"model_config": model.cfg.to_dict(), **(extra or {})}
    if dc is not None:
        meta["data_config"] = dc.to_dict()
    tensors = model_tensors(model)
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:  # int8 stored every weight as 0
            raise ValueError(f"save_model: dtype must be a floating torch.dtype (e.g. torch.float16), got {dtype!r}")
        for k, v in tensors.items():
            if v.is_floating_point():
                tensors[k] = v.to(dtype)
                if not torch.isfinite(tensors[k]).all():
                    raise ValueError(f"{k} does not fit in {dtype} (max |w| = {v.abs().max().item():.3g})")
    save_tensors(path, tensors, meta)


def build_model_from(tensors: dict[str, torch.Tensor], meta: dict[str, Any], source: str) -> CLIP1D:
    """Rebuild a ``CLIP1D`` from ``read_tensors`` output, checking every key and shape."""
    if "model_config" not in meta:
        raise CheckpointError(f"{source}: metadata has no 'model_config'")
    try:
        cfg = CLIPConfig.from_dict(meta["model_config"])
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{source}: invalid model_config: {e}") from None
    with torch.random.fork_rng(devices=[]):  # the init weights are overwritten below: the caller's RNG stays
        model = CLIP1D(cfg)
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{source}: weights do not match the config: missing {missing}, unexpected {unexpected}")
    for k, v in expected.items():
        if state[k].shape != v.shape:
            raise CheckpointError(f"{source}: {k} has shape {tuple(state[k].shape)}, config needs {tuple(v.shape)}")
        if not torch.isfinite(state[k]).all():
            raise CheckpointError(f"{source}: {k} contains NaN or inf")
    model.load_state_dict(state)
    if "data_config" in meta:
        try:
            model.data_config = DataConfig.from_dict(meta["data_config"])
        except (ValueError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{source}: invalid data_config: {e}") from None
    return model.eval()


def load_model_file(path: str | os.PathLike) -> CLIP1D:
    """Load a model saved by ``save_model`` or the trainer (eval mode, data config attached)."""
    tensors, meta = read_tensors(path)
    return build_model_from(tensors, meta, repr(str(path)))
