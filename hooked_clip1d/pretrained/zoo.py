"""The zoo's shipped files: model names, manifests and weights (``hooked_clip1d.pretrained`` re-exports all of it).

``WEIGHTS_DIR`` holds each model's weights and manifest (the package docstring describes them); ``TRAJECTORIES_DIR``
the training trajectories that ``pretrained.checkpoints`` reads. Both are read at call time (tests point them
elsewhere: ``monkeypatch.setattr(hooked_clip1d.pretrained.zoo, "WEIGHTS_DIR", ...)``).

Example:
    >>> from hooked_clip1d.pretrained.zoo import list_pretrained, manifest
    >>> manifest(list_pretrained()[0])["name"] == list_pretrained()[0]
    True
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d.files import UnknownNameError  # defined torch-free, for the CLI's parser
from hooked_clip1d.pretrained.trajectories import file_sha256, unpack_xz

if TYPE_CHECKING:  # torch is imported where weights are read: listing the zoo and its manifests needs none
    from hooked_clip1d.model.clip import CLIP1D

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TRAJECTORIES_DIR = Path(__file__).resolve().parent / "trajectories"  # shipped training trajectories


sha256_file = file_sha256  # one implementation (pretrained.trajectories); the registry's public name kept


WEIGHTS_SUFFIXES = (".safetensors", ".safetensors.xz")  # a zoo model's weights: plain or xz-compressed


def weights_file(name: str) -> Path | None:
    """The weights file of shipped model ``name`` in ``WEIGHTS_DIR`` (``<name>.safetensors`` or
    ``<name>.safetensors.xz``), or None if it has neither; both at once is an error naming them.

    Example:
        >>> weights_file("simplified-ntot20-n2-10").name
        'simplified-ntot20-n2-10.safetensors.xz'
    """
    found = [WEIGHTS_DIR / f"{name}{s}" for s in WEIGHTS_SUFFIXES if (WEIGHTS_DIR / f"{name}{s}").is_file()]
    if len(found) > 1:
        raise ValueError(f"pretrained {name!r} has two weights files, {found[0].name} and {found[1].name}: keep one")
    return found[0] if found else None


def _unpacked_weights(name: str, path: Path) -> bytes:
    """A compressed weights file's bytes, unpacked once per process while the file is unchanged (unpacking costs
    ~0.1 s for a simplified model, ~0.3 s for the full one; the tests load the zoo's models hundreds of times)."""
    st = path.stat()
    return _unpack_cached(str(path), st.st_mtime_ns, st.st_size, name)


@functools.lru_cache(maxsize=64)  # the zoo's 31 models (2026-12-01): ~23 MB unpacked
def _unpack_cached(path: str, mtime_ns: int, size: int, name: str) -> bytes:
    return unpack_xz(path, f"pretrained {name!r}: weights file")


def list_pretrained() -> list[str]:
    """Names of the shipped models."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.json") if weights_file(p.stem) is not None)


def manifest(name: str) -> dict[str, Any]:
    """The manifest of a shipped model (see the module docstring)."""
    known = list_pretrained()
    if name not in known:
        hint = ""
        if Path(name).exists():  # a path, not a name
            hint = (
                f"; {name!r} is a path: load a model file or run directory with load_model({name!r}) or "
                f"`from hooked_clip1d import resolve_model; resolve_model({name!r})`"
            )
        elif str(name).endswith(".safetensors") or os.sep in str(name):
            hint = f"; {name!r} looks like a path, but no such file or directory exists"
        raise UnknownNameError(f"unknown pretrained model {name!r}{hint}; known models: {known}")
    path = WEIGHTS_DIR / f"{name}.json"
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not a JSON object")
    return d


def model_name(model: CLIP1D, default: str = "custom model") -> str:
    """The shipped name of a model loaded with ``load_model``, else ``default``; a checkpoint before the last of a
    trajectory is named with its epoch (``"NAME @ epoch 100"``).

    Example:
        >>> model_name(load_shipped("simplified-ntot20-n2-10"))
        'simplified-ntot20-n2-10'
    """
    man = getattr(model, "manifest", None)
    if not (isinstance(man, dict) and "name" in man):
        return default
    ck = man.get("checkpoint")
    return f"{man['name']} @ epoch {ck['epoch']}" if isinstance(ck, dict) and not ck.get("final") else man["name"]


HISTORY_KEYS = ("epoch", "step", "loss", "single", "seen", "unseen", "unseen_label_set")


def read_history(metrics_path: str | Path, max_epoch: int | None = None) -> dict[str, list[int | float | None]]:
    """The training curve of a run's ``metrics.jsonl`` as columns ``HISTORY_KEYS`` (for Fig. 11-style plots).

    Lines past ``max_epoch`` (written before a resume rewound the run) are dropped; a later line for the same
    epoch replaces an earlier one.

    Example:
        >>> h = manifest("simplified-ntot20-n2-10")["history"]
        >>> h["epoch"][-1], len(h["epoch"]) == len(h["unseen"])
        (10000, True)
    """
    rows: dict[int, dict[str, float | None]] = {}
    path = Path(metrics_path)
    if not path.exists():
        return {k: [] for k in HISTORY_KEYS}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if max_epoch is not None and r["epoch"] > max_epoch:
            continue
        ev = r.get("eval", {})
        rows[r["epoch"]] = {
            "epoch": r["epoch"],
            "step": r["step"],
            "loss": r.get("loss"),
            "single": ev.get("val_single", {}).get("acc"),
            "seen": ev.get("val_seen", {}).get("acc"),
            "unseen": ev.get("val_unseen", {}).get("acc"),
            "unseen_label_set": ev.get("val_unseen", {}).get("label_set"),
        }
    ordered = [rows[e] for e in sorted(rows)]
    return {k: [r[k] for r in ordered] for k in HISTORY_KEYS}


def registry_table() -> str:
    """Markdown table of the shipped models and their measured accuracies (the table of docs/zoo.md)."""
    rows = [
        "| name | description | epochs (planned) | train time "
        "| single-object | seen-pair | unseen-pair | unseen label-set |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in list_pretrained():
        m = manifest(name)
        acc = m["metrics"]
        rows.append(
            f"| `{name}` | {m['description']} | {m['epochs']} ({m['epochs_planned']}) | "
            f"{m['train_seconds'] / 60:.0f} min | {acc['val_single']['acc']:.3f} | {acc['val_seen']['acc']:.3f} | "
            f"{acc['val_unseen']['acc']:.3f} | {acc['val_unseen']['label_set']:.3f} |"
        )
    return "\n".join(rows)


def names_a_path(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` names a file or folder rather than a shipped model: a ``Path`` always; a string unless it is a
    shipped model's name. A string that is both a shipped name and a path here is refused (``load_model`` read the
    zoo's model and ``resolve_model`` the folder, so one name loaded two models): give the folder as ``./NAME`` or a
    ``Path``.

    Example:
        >>> names_a_path("simplified-ntot20-n2-10"), names_a_path("runs/my-run")
        (False, True)
    """
    if not isinstance(spec, str):
        return True
    if spec in list_pretrained():
        if Path(spec).exists():
            raise ValueError(
                f"{spec!r} names both a shipped model and {'a folder' if Path(spec).is_dir() else 'a file'} here "
                f"({str(Path(spec).resolve())!r}): give the folder as './{spec}' (or a Path), or rename it, to say "
                "which"
            )
        return False
    return True


# the writing side (``export_run``, ``ship_trajectory``, ``portable_command``) is ``hooked_clip1d.pretrained.ship``:
# it reads this module, so this module does not re-export it (no circle; one import path per name)


def load_shipped(name: str, device: str = "cpu") -> CLIP1D:
    """The shipped model ``name``'s weights (its last checkpoint), checked against the manifest's sha256, in eval
    mode with ``.data_config`` and ``.manifest``: what ``load_model(name)`` gives for a shipped name.

    Example:
        >>> load_shipped("simplified-ntot20-n2-10").manifest["name"]
        'simplified-ntot20-n2-10'
    """
    from hooked_clip1d.model.checkpoint import CheckpointError, build_model_from, load_model_file, read_tensors_bytes

    man = manifest(name)
    path = weights_file(name)
    assert path is not None  # manifest() lists only names with weights
    data = _unpacked_weights(name, path) if path.suffix == ".xz" else None
    digest = sha256_file(path) if data is None else hashlib.sha256(data).hexdigest()  # of the safetensors bytes
    if digest != man.get("sha256"):
        raise CheckpointError(f"pretrained {name!r}: weights sha256 {digest} does not match the manifest")
    if data is None:
        model = load_model_file(path)
    else:
        model = build_model_from(*read_tensors_bytes(data, str(path)), repr(str(path)))
    model = model.to(device)
    model.manifest = man
    return model
