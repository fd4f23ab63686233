"""Pretrained registry: models trained by this package, shipped as package data, loaded offline.

Each model is two files in ``hooked_clip1d/pretrained/weights/``: ``<name>.safetensors`` (weights + configs, see
``hooked_clip1d.model.checkpoint``) and ``<name>.json``, its manifest: description, configs, the exact training command,
seed, epochs, steps, training time, the accuracies measured on its dataset, the sha256 of the weights and
provenance (git commit, versions). ``load_model`` checks the sha256 before loading.

Example:
    >>> from hooked_clip1d import list_pretrained, load_model
    >>> "simplified-ntot20-n2-10" in list_pretrained()
    True
    >>> model = load_model("simplified-ntot20-n2-10")
    >>> model.data_config.n_labels, model.training
    (20, False)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d._version import DEFAULT_MODEL as DEFAULT_MODEL  # defined torch-free, for the CLI's parser

if TYPE_CHECKING:  # torch is imported where weights are read: listing the zoo and its manifests needs none
    from hooked_clip1d.model.clip import CLIP1D

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def list_pretrained() -> list[str]:
    """Names of the shipped models."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.json") if (WEIGHTS_DIR / f"{p.stem}.safetensors").exists())


def manifest(name: str) -> dict[str, Any]:
    """The manifest of a shipped model (see the module docstring)."""
    known = list_pretrained()
    if name not in known:
        hint = ""
        if Path(name).exists() or str(name).endswith(".safetensors"):  # a path, not a name
            hint = (
                f"; {name!r} is a path: load a model file or run directory with "
                f"`from hooked_clip1d import resolve_model; resolve_model({name!r})`"
            )
        raise KeyError(f"unknown pretrained model {name!r}{hint}; known models: {known}")
    path = WEIGHTS_DIR / f"{name}.json"
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not a JSON object")
    return d


def resolve_model(spec: str | os.PathLike) -> CLIP1D:
    """The model a command line names: a shipped model's name, a ``.safetensors`` model file, or a training run
    directory (its ``model.safetensors``, else its latest ``checkpoint.safetensors``). Every command uses this.

    Example:
        >>> resolve_model("simplified-ntot20-n2-10").cfg.n_labels
        20
    """
    from hooked_clip1d.model.checkpoint import load_model_file

    p = Path(spec)
    if p.is_dir():
        p = p / "model.safetensors" if (p / "model.safetensors").exists() else p / "checkpoint.safetensors"
    if p.suffix == ".safetensors" or p.exists():
        return load_model_file(p)
    if str(spec) in list_pretrained():
        return load_model(str(spec))
    raise ValueError(f"{str(spec)!r} is neither a file nor a pretrained model; known models: {list_pretrained()}")


def model_name(model: CLIP1D, default: str = "custom model") -> str:
    """The shipped name of a model loaded with ``load_model``, else ``default``.

    Example:
        >>> model_name(load_model("simplified-ntot20-n2-10"))
        'simplified-ntot20-n2-10'
    """
    man = getattr(model, "manifest", None)
    return man["name"] if isinstance(man, dict) and "name" in man else default


def load_model(name: str = DEFAULT_MODEL, device: str = "cpu") -> CLIP1D:
    """Load a shipped model in eval mode, offline, with ``.data_config`` and ``.manifest`` attached.

    Raises ``KeyError`` listing the known names for an unknown name, and ``CheckpointError`` if the weights do
    not match the manifest's sha256.
    """
    from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file

    man = manifest(name)
    path = WEIGHTS_DIR / f"{name}.safetensors"
    digest = sha256_file(path)
    if digest != man.get("sha256"):
        raise CheckpointError(f"pretrained {name!r}: weights sha256 {digest} does not match the manifest")
    model = load_model_file(path).to(device)
    model.manifest = man
    return model


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


def export_run(
    run_dir: str | Path,
    name: str,
    description: str,
    dest: str | Path | None = None,
    weights_dtype: str = "float32",
) -> Path:
    """Ship a training run (``train`` output) as pretrained model ``name``: weights-only file plus manifest.

    The manifest's accuracies are measured here, on the exported weights: with ``weights_dtype="float16"`` (half
    the file, for the larger models) on the rounded ones. A run that has not finished is shipped from its latest
    ``checkpoint.safetensors``; the manifest then records the epochs actually trained. ``dest`` defaults to the
    package's ``WEIGHTS_DIR``.
    """
    from hooked_clip1d.training.rundir import RunLock, is_run_dir

    run_dir, dest = Path(run_dir), Path(dest) if dest is not None else WEIGHTS_DIR
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise ValueError(f"model name {name!r} must be a plain identifier (letters, digits, '_', '-', '.')")
    if not (run_dir / "config.json").exists():
        raise FileNotFoundError(f"{run_dir / 'config.json'} is missing: is {run_dir} a training run directory?")
    if not is_run_dir(run_dir):
        raise ValueError(f"{str(run_dir / 'config.json')!r} is not a hooked_clip1d run config (foreign folder?)")
    with RunLock(run_dir, "run directory"):  # a run still training there is refused, not exported half-way
        return _export_locked(run_dir, name, description, dest, weights_dtype)


def portable_command(cmd: str) -> str:
    """A recorded command line without this machine's paths: the checkout's root dropped, the home folder as ``~``
    (manifests ship with the package and must not name one machine's folders).

    Example:
        >>> home = str(Path.home())
        >>> portable_command(f"hooked-clip1d train --out {home}/runs/x")
        'hooked-clip1d train --out ~/runs/x'
    """
    root = str(Path(__file__).resolve().parents[2]) + "/"
    return cmd.replace(root, "").replace(str(Path.home()), "~")


def _export_locked(run_dir: Path, name: str, description: str, dest: Path, weights_dtype: str) -> Path:
    import torch

    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.evaluation import evaluate
    from hooked_clip1d.files import atomic_write_text
    from hooked_clip1d.model.checkpoint import load_model_file, read_tensors, save_model

    config = json.loads((run_dir / "config.json").read_text())
    final = run_dir / "model.safetensors"
    src = final if final.exists() else run_dir / "checkpoint.safetensors"
    if weights_dtype not in ("float32", "float16"):
        raise ValueError(f"weights_dtype must be 'float32' or 'float16', got {weights_dtype!r}")
    store = getattr(torch, weights_dtype)
    model = load_model_file(src)
    with torch.no_grad():
        for p in model.state_dict().values():
            if p.is_floating_point():
                p.copy_(p.to(store))  # evaluate what the file will hold
    if final.exists():
        summary = json.loads((run_dir / "summary.json").read_text())
        epochs, steps, seconds = summary["epochs"], summary["steps"], summary["train_seconds"]
    else:
        st = read_tensors(src)[1]["train_state"]
        epochs, steps, seconds = st["epoch"], st["step"], round(st["elapsed_s"], 1)
    metrics = evaluate(model, build_dataset(model.data_config))
    history = read_history(run_dir / "metrics.jsonl", max_epoch=epochs)
    target = dest / f"{name}.safetensors"
    save_model(model, target, extra={"train_config": config["train_config"]}, dtype=store)
    man = {
        "name": name,
        "description": description,
        "model_config": config["model_config"],
        "data_config": config["data_config"],
        "train_config": config["train_config"],
        "command": portable_command(config["provenance"]["command"]),
        "seed": config["train_config"]["seed"],
        "epochs": epochs,
        "epochs_planned": config["train_config"]["epochs"],
        "steps": steps,
        "train_seconds": seconds,
        "metrics": metrics,
        "provenance": {**config["provenance"], "command": portable_command(config["provenance"]["command"])},
        "history": history,
        "weights_dtype": weights_dtype,
        "sha256": sha256_file(target),
        "bytes": target.stat().st_size,
    }
    atomic_write_text(dest / f"{name}.json", json.dumps(man, indent=2) + "\n")
    return target


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
