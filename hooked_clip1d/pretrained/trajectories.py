"""The file format of a training trajectory (the precision measurement behind it is ``pretrained.precision``,
re-exported here; the zoo's API on top of these is in ``hooked_clip1d.pretrained``: ``list_checkpoints``,
``load_model(name, checkpoint_index=...)``, ``load_trajectory``, ``trajectory_emergence``, ``ship_trajectory``).

A shipped trajectory is two files in ``hooked_clip1d/pretrained/trajectories/``:

- ``<name>.safetensors.xz`` (and ``<name>.partN.safetensors.xz`` past ``PART_BYTES``): every checkpoint but the
  last, xz-compressed (the standard library's ``lzma``; ``xz -d`` gives the safetensors file; a quarter of the bytes
  saved, as the working tree travels to a GPU window within 64 MiB; the older uncompressed ``.safetensors`` files
  still load), keys ``epoch_NNNNN.<state-dict key>`` (e.g.
  ``epoch_00100.vision.embed.W_E``), each at the smallest precision that keeps its accuracies (``measure_precision``:
  the first of float16, bfloat16, float32 at which its accuracies on every split equal its float32 ones: float16
  mostly; float32 where rounding flips a near-tie, as in a left/right-symmetric plateau); loading upcasts to
  float32. Its safetensors metadata carries the configs and a content digest, like every model file of the package
  (``model.checkpoint``).
- ``<name>.json``: the manifest (``MANIFEST_FORMAT``): the epochs (the last is the shipped model's, which is not
  stored again: it is ``weights/<name>.safetensors``, shipped xz-compressed), each checkpoint's dtype, the file's
  sha256, each stored checkpoint's content sha256 (``checkpoint_digest``; for the last, the sha256 of the shipped
  weights' safetensors bytes, the zoo manifest's ``sha256``), the precision
  measurement and the emergence rows measured on the stored weights.

A run directory's ``snapshots/epoch_NNNNN.safetensors`` (``TrainConfig.snapshot_epochs``) is the same trajectory
before shipping: ``run_snapshots`` lists them. Nothing here imports torch at module level.

Example:
    >>> trajectory_schedule(10_000)[:8], checkpoint_key(100)
    ((0, 1, 2, 5, 10, 20, 50, 100), 'epoch_00100')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d.pretrained.precision import (  # re-exported: the precision measurement lives there
    PRECISION_METHOD,
    STORE_DTYPES,
    dtype_summary,
    images_differing,
    is_accuracy,
    measure_precision,
    rounded,
    snapshot_metrics,
    stored_metrics,
)
from hooked_clip1d.settings.checks import check_int

if TYPE_CHECKING:
    import torch

    from hooked_clip1d.model.clip import CLIP1D

MANIFEST_FORMAT = "hooked_clip1d-trajectory/1"
SUFFIX = ".safetensors.xz"  # a trajectory file: xz-compressed safetensors (module docstring)
MAX_UNPACKED_BYTES = 256 * 2**20  # a compressed file that claims more is refused (a decompression bomb)


class NoTrajectoryError(ValueError):
    """A model has no shipped training trajectory, or a checkpoint index / epoch it does not have."""


class StaleTrajectoryError(ValueError):
    """A shipped trajectory whose last checkpoint is not the shipped weights (exported again, not shipped again)."""


CHECKPOINT_LABEL_TYPE = "epoch"  # what a checkpoint label counts (TransformerLens's checkpoint_label_type: "step"...)


class CheckpointLabels(list):
    """A trajectory's checkpoint labels (its epochs, in order): a plain ``list`` of ints, as ``list_checkpoints``
    always returned, that also carries ``label_type`` (``"epoch"``), as TransformerLens's ``get_checkpoint_labels``
    returns its labels with their type ("step" or "token" there).

    Example:
        >>> labels = CheckpointLabels([0, 10, 100])
        >>> labels, labels.label_type, labels == [0, 10, 100]
        ([0, 10, 100], 'epoch', True)
        >>> labels.with_type()  # TransformerLens's (labels, label_type)
        ([0, 10, 100], 'epoch')
    """

    label_type: str = CHECKPOINT_LABEL_TYPE

    def with_type(self) -> tuple[list[int], str]:
        """``(labels, label_type)``, as TransformerLens's ``get_checkpoint_labels`` returns them."""
        return list(self), self.label_type


def set_checkpoint_fields(model: Any, epochs: Sequence[int], epoch: int) -> None:
    """Put ``checkpoint_fields`` on ``model.cfg`` (a ``CLIPConfig``: TransformerLens's fields on the loaded config)
    and in ``model.manifest``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5))
        >>> m.manifest = {}
        >>> set_checkpoint_fields(m, [0, 10, 100], 10)
        >>> m.cfg.from_checkpoint, m.cfg.checkpoint_index, m.cfg.checkpoint_value, m.cfg.checkpoint_label_type
        (True, 1, 10, 'epoch')
    """
    fields = checkpoint_fields(epochs, epoch)
    model.cfg = dataclasses.replace(model.cfg, **fields)
    model.manifest = {**(getattr(model, "manifest", None) or {}), **fields}


def checkpoint_fields(epochs: Sequence[int], epoch: int) -> dict[str, Any]:
    """The checkpoint fields TransformerLens's ``from_pretrained(..., checkpoint_index=...)`` puts in a model's
    config, for the checkpoint at ``epoch`` of a trajectory with ``epochs``: ``from_checkpoint``,
    ``checkpoint_index``, ``checkpoint_value`` (the epoch) and ``checkpoint_label_type`` (``"epoch"``).

    Example:
        >>> checkpoint_fields([0, 10, 100], 10)
        {'from_checkpoint': True, 'checkpoint_index': 1, 'checkpoint_value': 10, 'checkpoint_label_type': 'epoch'}
    """
    epochs = [int(e) for e in epochs]
    return {
        "from_checkpoint": True,
        "checkpoint_index": epochs.index(int(epoch)),
        "checkpoint_value": int(epoch),
        "checkpoint_label_type": CHECKPOINT_LABEL_TYPE,
    }


def incomplete_trajectory(directory: str | Path, name: str) -> str | None:
    """Why ``name``'s trajectory in ``directory`` is half there (its manifest without its main file, or the file
    without its manifest), naming the missing file; None when neither or both are there.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "m.json").write_text("{}")
        >>> why = incomplete_trajectory(d, "m")
        >>> why.split(": ")[0], "m.safetensors.xz' is missing" in why
        ("the training trajectory of 'm' is incomplete", True)
    """
    directory = Path(directory)
    man, main = directory / f"{name}.json", trajectory_file(directory, name)
    if man.is_file() == main.is_file():
        return None
    gone, there = (main, man) if man.is_file() else (man, main)
    what = "file" if gone is main else "manifest"
    other = "manifest" if gone is main else "file"
    return (
        f"the training trajectory of {name!r} is incomplete: its {what} {str(gone)!r} is missing (its {other} "
        f"{there.name} is there); reinstall the package or ship the trajectory again"
    )


def trajectory_file(directory: str | Path, name: str) -> Path:
    """The first file of ``name``'s trajectory in ``directory``: ``<name>.safetensors.xz``, or the older
    uncompressed ``<name>.safetensors`` where only that is there.

    Example:
        >>> trajectory_file("/nonexistent", "m").name
        'm.safetensors.xz'
    """
    directory = Path(directory)
    old = directory / f"{name}.safetensors"
    return old if old.is_file() and not (directory / f"{name}{SUFFIX}").is_file() else directory / f"{name}{SUFFIX}"


def checkpoint_key(epoch: int) -> str:
    """The key prefix of one checkpoint in a trajectory file (as a run's snapshot file names it)."""
    return f"epoch_{epoch:05d}"


def trajectory_schedule(epochs: int) -> tuple[int, ...]:
    """The epochs a shipped trajectory keeps by default: 0, 1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 700, 1000, then
    every 500, and ``epochs`` itself (31 checkpoints for 10,000 epochs; a subset of ``settings.dense_schedule``).

    Example:
        >>> s = trajectory_schedule(10_000)
        >>> s[:13], s[-2:], len(s)
        ((0, 1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 700, 1000), (9500, 10000), 31)
        >>> trajectory_schedule(30)
        (0, 1, 2, 5, 10, 20, 30)
    """
    epochs = check_int(epochs, "epochs")
    pts = {0, 1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 700, epochs} | set(range(1000, epochs + 1, 500))
    return tuple(sorted(e for e in pts if e <= epochs))


def run_snapshots(run_dir: str | Path) -> dict[int, Path]:
    """A run directory's kept snapshots, ``{epoch: snapshots/epoch_NNNNN.safetensors}`` in epoch order ({} if none)."""
    snaps: dict[int, Path] = {}
    for p in (Path(run_dir) / "snapshots").glob("epoch_*.safetensors"):
        m = re.fullmatch(r"epoch_(\d+)", p.stem)
        if m:
            snaps[int(m.group(1))] = p
    return dict(sorted(snaps.items()))


def checkpoint_epoch(epochs: Sequence[int], checkpoint_index: int | None, checkpoint_value: int | None) -> int:
    """The epoch that ``checkpoint_index`` (a position in ``epochs``, negative from the end) or ``checkpoint_value``
    (an epoch) names; an error listing ``epochs`` for one that does not exist.

    Example:
        >>> checkpoint_epoch([0, 10, 100], -1, None), checkpoint_epoch([0, 10, 100], None, 10)
        (100, 10)
        >>> checkpoint_epoch([0, 10, 100], 1, 10)  # both, naming one checkpoint: the value (TransformerLens 4.3)
        10
        >>> try:
        ...     checkpoint_epoch([0, 10, 100], None, 50)
        ... except NoTrajectoryError as e:
        ...     print(e)
        no checkpoint at epoch 50; the trajectory has epochs [0, 10, 100] (indexes 0..2)
    """
    epochs = list(epochs)
    where = f"the trajectory has epochs {epochs} (indexes 0..{len(epochs) - 1})"
    for what, v in (("checkpoint_index", checkpoint_index), ("checkpoint_value", checkpoint_value)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{what} must be an int, got {v!r}")
    if checkpoint_index is None and checkpoint_value is None:
        raise ValueError("give checkpoint_index or checkpoint_value")
    if checkpoint_index is not None and checkpoint_value is not None:
        # TransformerLens 4.3 loads the value and sets the index from it (3.x loaded the index); the same here, and
        # a warning where the two name different checkpoints
        named = epochs[checkpoint_index] if -len(epochs) <= checkpoint_index < len(epochs) else None
        if named != checkpoint_value:
            warnings.warn(
                f"checkpoint_index={checkpoint_index} and checkpoint_value={checkpoint_value} name different "
                f"checkpoints; the value is loaded, as TransformerLens 4.3 does (3.x loaded the index)",
                stacklevel=3,
            )
        checkpoint_index = None
    if checkpoint_index is not None:
        if not -len(epochs) <= checkpoint_index < len(epochs):
            raise NoTrajectoryError(f"no checkpoint index {checkpoint_index}; {where}")
        return epochs[checkpoint_index]
    if checkpoint_value not in epochs:
        raise NoTrajectoryError(f"no checkpoint at epoch {checkpoint_value}; {where}")
    return int(checkpoint_value)  # type: ignore[arg-type]


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A trajectory manifest, checked to be one (``MANIFEST_FORMAT``)."""
    path = Path(path)
    try:
        man = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"the trajectory manifest {str(path)!r} is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(man, dict) or man.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{str(path)!r} is not a hooked_clip1d trajectory manifest (format {MANIFEST_FORMAT!r})")
    return man


def read_trajectory(directory: str | Path, man: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A shipped trajectory's tensors from all its files (``man["file"]`` and its ``parts``, each sha256-checked) and
    the metadata of the first."""
    directory = Path(directory)
    tensors, meta = read_trajectory_file(directory / man["file"], man.get("sha256"))
    for part in man.get("parts", []):
        more, _ = read_trajectory_file(directory / part["file"], part["sha256"])
        tensors.update(more)
    return tensors, meta


def read_trajectory_file(path: str | Path, sha256: str | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A trajectory file's tensors and metadata (``model.checkpoint.read_tensors``: format and content digest checked,
    nothing unpickled), after checking the file's sha256 against the manifest's ``sha256``; an ``.xz`` file is
    decompressed in memory (at most ``MAX_UNPACKED_BYTES``)."""
    from hooked_clip1d.model.checkpoint import CheckpointError, read_tensors, read_tensors_bytes

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"the trajectory file {str(path)!r} is missing")
    digest = file_sha256(path)
    if digest != sha256:
        raise CheckpointError(f"trajectory file {path.name}: sha256 {digest} does not match its manifest")
    if path.suffix != ".xz":
        return read_tensors(path)
    return read_tensors_bytes(unpack_xz(path, "trajectory file"), str(path))


def unpack_xz(path: str | Path, what: str) -> bytes:
    """The bytes an xz-compressed shipped file (a trajectory's, or a zoo model's weights) unpacks to, in memory;
    a file that is not xz, is truncated or unpacks past ``MAX_UNPACKED_BYTES`` is refused with a ``CheckpointError``
    naming it (``what``: what the file is, for the message).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "x.safetensors.xz"
        >>> write_compressed(p, b"hello")
        >>> unpack_xz(p, "test file")
        b'hello'
    """
    import lzma

    from hooked_clip1d.model.checkpoint import CheckpointError

    path = Path(path)
    unpack = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        data = unpack.decompress(path.read_bytes(), max_length=MAX_UNPACKED_BYTES)
    except lzma.LZMAError as e:
        raise CheckpointError(f"{what} {path.name} is not a readable xz file: {e}") from None
    if not unpack.eof:
        raise CheckpointError(f"{what} {path.name} is truncated or unpacks past {MAX_UNPACKED_BYTES} bytes: refused")
    return data


def write_compressed(path: str | Path, data: bytes) -> None:
    """Write ``data`` xz-compressed to ``path``, atomically (a trajectory file; module docstring)."""
    import lzma

    from hooked_clip1d.files import atomic_write

    packed = lzma.compress(data, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(packed))


def checkpoint_digest(state: Mapping[str, torch.Tensor]) -> str:
    """The content sha256 of one checkpoint's tensors as stored (names, dtypes, shapes, bytes)."""
    from hooked_clip1d.model.checkpoint import content_digest

    return content_digest(dict(state), {})


def stored_checkpoint(
    tensors: Mapping[str, torch.Tensor], meta: dict[str, Any], epoch: int, digest: str | None, source: str
) -> CLIP1D:
    """The model of ``epoch`` in a trajectory file (``read_trajectory_file`` output), its weights upcast to float32,
    in eval mode with ``.data_config``; its content must match ``digest``."""
    from hooked_clip1d.model.checkpoint import CheckpointError, build_model_from

    prefix = checkpoint_key(epoch) + "."
    state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    if not state:
        raise CheckpointError(f"{source}: the trajectory file holds no tensors for epoch {epoch}")
    if checkpoint_digest(state) != digest:
        raise CheckpointError(f"{source}: the weights of epoch {epoch} do not match their sha256 in the manifest")
    return build_model_from({f"model.{k}": v for k, v in state.items()}, meta, f"{source} epoch {epoch}")


def trajectory_tensors(
    models: Mapping[int, CLIP1D], dtypes: Mapping[int, str]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a trajectory file (``epoch_NNNNN.<key>``, each checkpoint's floating-point weights in its dtype
    of ``dtypes``) and each checkpoint's ``checkpoint_digest``."""
    import torch

    tensors: dict[str, torch.Tensor] = {}
    digests: dict[str, str] = {}
    for e, model in models.items():
        store = getattr(torch, dtypes[e])
        state = {k: v.detach().to(store) if v.is_floating_point() else v for k, v in model.state_dict().items()}
        digests[str(e)] = checkpoint_digest(state)
        tensors.update({f"{checkpoint_key(e)}.{k}": v for k, v in state.items()})
    return tensors, digests


PART_BYTES = 4_000_000  # a trajectory is stored in files of at most this many tensor bytes (whole checkpoints each)


def split_checkpoints(tensors: Mapping[str, torch.Tensor], part_bytes: int) -> list[dict[str, torch.Tensor]]:
    """``trajectory_tensors``' tensors in groups of whole checkpoints (in epoch order), each of at most ``part_bytes``
    tensor bytes unless one checkpoint alone is larger: the files a trajectory is stored in.

    Example:
        >>> import torch
        >>> t = {f"epoch_{e:05d}.w": torch.zeros(250) for e in (0, 1, 2)}  # 1000 bytes a checkpoint
        >>> [sorted(g) for g in split_checkpoints(t, 2000)]
        [['epoch_00000.w', 'epoch_00001.w'], ['epoch_00002.w']]
    """
    by_epoch: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        by_epoch.setdefault(k.split(".", 1)[0], {})[k] = v
    parts: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(by_epoch):
        ckpt = by_epoch[key]
        n = sum(v.numel() * v.element_size() for v in ckpt.values())
        if parts[-1] and size + n > part_bytes:
            parts.append({})
            size = 0
        parts[-1].update(ckpt)
        size += n
    return parts


def numeric_diff(a: Any, b: Any) -> float:
    """The largest absolute difference between the numbers of two JSON-like values of the same shape (booleans and
    None must be equal, else inf).

    Example:
        >>> numeric_diff({"x": [1.0, 2.0], "y": 0.5}, {"x": [1.0, 2.25], "y": 0.5})
        0.25
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return max((numeric_diff(a[k], b.get(k)) for k in a if k != "checks"), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        return max((numeric_diff(x, y) for x, y in zip(a, b, strict=False)), default=0.0)
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return 0.0 if a == b else float("inf")
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b))
    return 0.0 if a == b else float("inf")


__all__ = [
    "CHECKPOINT_LABEL_TYPE",
    "CheckpointLabels",
    "MANIFEST_FORMAT",
    "NoTrajectoryError",
    "PRECISION_METHOD",
    "STORE_DTYPES",
    "checkpoint_digest",
    "checkpoint_epoch",
    "checkpoint_fields",
    "checkpoint_key",
    "dtype_summary",
    "file_sha256",
    "images_differing",
    "incomplete_trajectory",
    "is_accuracy",
    "measure_precision",
    "numeric_diff",
    "read_manifest",
    "read_trajectory",
    "read_trajectory_file",
    "split_checkpoints",
    "PART_BYTES",
    "SUFFIX",
    "trajectory_file",
    "write_compressed",
    "rounded",
    "run_snapshots",
    "stored_checkpoint",
    "snapshot_metrics",
    "stored_metrics",
    "trajectory_schedule",
    "trajectory_tensors",
]
