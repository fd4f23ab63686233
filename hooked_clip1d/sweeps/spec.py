"""Sweep specs: a TOML file -> a grid of runs (``RunSpec``: model, data and training configs each), for ``sweep``.

A spec (``examples/sweeps/fig3_small.toml``) has five tables::

    name = "fig3-small"
    [model]              # CLIPConfig.from_preset(preset, **fields); [model.vision] / [model.text]: one tower only
    preset = "simplified"
    [data]               # DataConfig fields
    n_heldout = 5
    [train]              # TrainConfig fields
    epochs = 1000
    [grid]               # lists; the sweep is their product, in this order
    n_labels = [10, 15, 20, 25]
    n2 = [5, 10, 15]
    seed = [0]
    [zip]                # optional: lists of one length taken row by row (lr[i] with epochs[i]), times the
    lr = [1e-4, 3e-4]    # grid (a key is in [grid] or [zip], not both)
    epochs = [1000, 300]
    [run]                # how to execute: max_group_size, dropout_rng ("fast" | "matched"), threads, compile, amp,
                         # cudagraphs
    max_group_size = 32

A grid (or ``[model]``/``[data]``/``[train]``) key names one field: ``n_labels`` sets the label count of the model and
the data, ``seed`` the training seed (``data.seed`` is the dataset's), ``d_image`` the data and the vision tower; a
prefixed key (``data.n1``, ``train.lr``, ``model.init_std``, ``vision.positional``, ``text.positional``) says where
it goes, and an unprefixed one goes wherever such a field exists (an ambiguous one is an error).

Example:
    >>> spec = load_spec(text='[grid]\\nn_labels = [10, 20]\\nseed = [0, 1]\\n[model]\\npreset = "simplified"')
    >>> [r.name for r in spec.runs]
    ['n_labels-10_seed-0', 'n_labels-10_seed-1', 'n_labels-20_seed-0', 'n_labels-20_seed-1']
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooked_clip1d.model.clip import CLIPConfig
from hooked_clip1d.model.config import PRESETS, EncoderConfig, TextConfig, VisionConfig
from hooked_clip1d.settings import RECIPES, DataConfig, TrainConfig
from hooked_clip1d.settings.checks import check_int
from hooked_clip1d.training.run_config import RunConfig

# the folder of the shipped sweep specs (the figures' sweeps), and a tiny one for examples and doctests
SPECS_DIR = Path(__file__).resolve().parent
TINY_SPEC = SPECS_DIR / "tiny.toml"

_DATA_FIELDS = {f.name for f in dataclasses.fields(DataConfig)}
_TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
_ENC_FIELDS = {f.name for f in dataclasses.fields(EncoderConfig) if f.init} - {"device"}
_CLIP_FIELDS = {"init_logit_scale", "max_logit_scale", "objective"}  # CLIPConfig's own (the head's and the objective)
_RUN_DEFAULTS: dict[str, Any] = {
    "max_group_size": 32,  # members per batched group
    "dropout_rng": "fast",  # "matched": each member's dropout masks equal Trainer's (slower)
    "threads": None,  # torch threads per group (None: torch's default)
    "compile": False,  # torch.compile the stacked loss (needs dropout_rng = "fast")
    "amp": False,  # bfloat16 autocast
    "cudagraphs": False,  # with compile, on a GPU: replay each step as CUDA graphs
    "graph_step": False,  # on a GPU: the whole step (forward, backward, AdamW) as one CUDA graph (compile: inductor's)
    "streams": False,  # on a GPU: the text tower on a second CUDA stream (StackedCLIP.use_streams)
}


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its name, its grid values and the three configs."""

    name: str
    params: dict[str, Any]
    model_cfg: CLIPConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec: its name, the expanded runs and the execution settings (``[run]``)."""

    name: str
    runs: list[RunSpec]
    run: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the TOML text


def _route(key: str) -> list[tuple[str, str]]:
    """Where a spec key goes: [(section, field)] with section in model/vision/text/clip/data/train."""
    if "." in key:
        section, name = key.split(".", 1)
        if section == "model" and name in _CLIP_FIELDS:
            return [("clip", name)]
        known = {
            "model": _ENC_FIELDS,
            "vision": _ENC_FIELDS,
            "text": _ENC_FIELDS,
            "data": _DATA_FIELDS,
            "train": _TRAIN_FIELDS,
        }
        if section not in known:
            raise ValueError(f"sweep key {key!r}: unknown section {section!r}; use model/vision/text/data/train")
        if name not in known[section]:
            raise ValueError(f"sweep key {key!r}: {section} has no field {name!r}")
        return [(section, name)]
    if key == "recipe":  # a named recipe (settings.RECIPES): expanded into its fields by _build_run
        return []
    if key == "n_labels":
        return [("model", "n_labels"), ("data", "n_labels")]
    if key == "seed":
        return [("train", "seed")]
    if key == "d_image":
        return [("data", "d_image"), ("vision", "d_image")]
    if key in _CLIP_FIELDS:
        return [("clip", key)]
    where = [
        s for s, names in (("data", _DATA_FIELDS), ("train", _TRAIN_FIELDS), ("model", _ENC_FIELDS)) if key in names
    ]
    if not where:
        raise ValueError(f"sweep key {key!r} is not a field of DataConfig, TrainConfig or EncoderConfig")
    if len(where) > 1:
        raise ValueError(f"sweep key {key!r} is ambiguous ({' and '.join(where)}); write e.g. '{where[0]}.{key}'")
    return [(where[0], key)]


def _fmt(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return re.sub(r"[^A-Za-z0-9.]+", "-", s).strip("-") or "x"


def _build_run(base: dict[str, dict[str, Any]], params: dict[str, Any], preset: str, text_preset: str) -> RunSpec:
    sec: dict[str, dict[str, Any]] = {k: {} for k in base}
    if "recipe" in params:  # first, so that the spec's own keys and the run's override what the recipe sets
        if params["recipe"] not in RECIPES:
            raise ValueError(f"sweep spec: unknown recipe {params['recipe']!r}; known: {sorted(RECIPES)}")
        fields = RECIPES[params["recipe"]].fields()
        sec["train"].update(fields["train"])
        sec["model"].update(fields["model"])
    for k, v in base.items():
        sec[k].update(v)
    for key, value in params.items():
        for section, name in _route(key):
            if isinstance(value, list) and name in ("betas", "pruned_heads", "no_decay", "frozen"):
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            sec[section][name] = value
    if "n_labels" in sec["model"] and "n_labels" not in sec["data"]:
        sec["data"]["n_labels"] = sec["model"]["n_labels"]
    if "n_labels" in sec["data"] and "n_labels" not in sec["model"]:
        sec["model"]["n_labels"] = sec["data"]["n_labels"]
    if "d_image" in sec["data"] and "d_image" not in sec["vision"]:
        sec["vision"]["d_image"] = sec["data"]["d_image"]
    if "d_image" in sec["vision"]:
        sec["vision"].setdefault("n_ctx", sec["vision"]["d_image"] + 1)
    for s in ("vision", "text"):
        if "pruned_heads" in sec[s]:
            sec[s]["pruned_heads"] = tuple(tuple(x) for x in sec[s]["pruned_heads"])
    for k in ("betas", "no_decay", "frozen", "snapshot_epochs"):  # TOML gives lists; a string stays one and is refused
        if isinstance(sec["train"].get(k), list):
            sec["train"][k] = tuple(sec["train"][k])
    try:
        vision = VisionConfig(**{**PRESETS[preset], **sec["model"], **sec["vision"]})
        text = TextConfig(**{**PRESETS[text_preset], **sec["model"], **sec["text"]})
        model_cfg = CLIPConfig(vision=vision, text=text, **sec["clip"])
        data_cfg = DataConfig(**sec["data"])
        train_cfg = TrainConfig(**sec["train"])
        RunConfig(model_cfg, data_cfg, train_cfg)  # the three together (e.g. a held temperature above the clamp)
    except (TypeError, ValueError) as e:
        raise ValueError(f"sweep run {params}: {e}") from None
    name = "_".join(f"{k.replace('.', '-')}-{_fmt(v)}" for k, v in params.items()) or "run"
    return RunSpec(name, dict(params), model_cfg, data_cfg, train_cfg)


def load_spec(path: str | Path | None = None, *, text: str | None = None) -> SweepSpec:
    """Parse and expand a sweep spec (a TOML file, or ``text``); every run's configs are validated here.

    Example:
        >>> spec = load_spec(text='[grid]\\nn_labels = [10, 20]\\nn2 = [5, 10]\\n[train]\\nepochs = 3')
        >>> [r.name for r in spec.runs]
        ['n_labels-10_n2-5', 'n_labels-10_n2-10', 'n_labels-20_n2-5', 'n_labels-20_n2-10']
        >>> spec.runs[3].data_cfg.n2, spec.runs[3].model_cfg.n_labels, spec.runs[3].train_cfg.epochs
        (10, 20, 3)
        >>> spec = load_spec(text='[zip]\\nn_labels = [10, 20]\\nepochs = [8, 2]\\n[grid]\\nseed = [0, 1]')
        >>> [(r.name, r.train_cfg.epochs) for r in spec.runs][:3]
        [('n_labels-10_epochs-8_seed-0', 8), ('n_labels-10_epochs-8_seed-1', 8), ('n_labels-20_epochs-2_seed-0', 2)]
    """
    if (path is None) == (text is None):
        raise ValueError("load_spec needs a path or text (exactly one)")
    if text is None:
        p = Path(path)  # type: ignore[arg-type]
        if not p.is_file():
            raise FileNotFoundError(f"sweep spec {str(p)!r} does not exist")
        text = p.read_text()
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"sweep spec is not valid TOML: {e}") from None
    allowed = {"name", "description", "model", "data", "train", "grid", "zip", "run"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"sweep spec: unknown top-level keys {unknown}; allowed: {sorted(allowed)}")
    model = dict(raw.get("model", {}))
    preset = model.pop("preset", "simplified")
    text_preset = model.pop("text_preset", preset)
    for pr in (preset, text_preset):
        if pr not in PRESETS:
            raise ValueError(f"sweep spec: unknown preset {pr!r}; known: {sorted(PRESETS)}")
    base: dict[str, dict[str, Any]] = {"model": {}, "vision": {}, "text": {}, "clip": {}, "data": {}, "train": {}}
    for tower in ("vision", "text"):
        for k, v in dict(model.pop(tower, {})).items():
            base[tower][k] = v
            _route(f"{tower}.{k}")
    fixed: dict[str, Any] = {}
    for k, v in model.items():
        fixed[f"model.{k}" if k != "n_labels" else "n_labels"] = v
    for section in ("data", "train"):
        for k, v in dict(raw.get(section, {})).items():
            fixed[f"{section}.{k}" if k not in ("n_labels", "d_image") else k] = v
    for key, value in fixed.items():
        for section, name in _route(key):
            base[section][name] = value
    grid = dict(raw.get("grid", {}))
    for k, v in grid.items():
        _route(k)
        if not isinstance(v, list) or not v:
            raise ValueError(f"sweep spec: grid.{k} must be a non-empty list, got {v!r}")
    zipped = dict(raw.get("zip", {}))  # lists of one length, taken together (row i of each), times the grid
    for k, v in zipped.items():
        _route(k)
        if k in grid:
            raise ValueError(f"sweep spec: {k!r} is in both [grid] and [zip]")
        if not isinstance(v, list) or not v:
            raise ValueError(f"sweep spec: zip.{k} must be a non-empty list, got {v!r}")
    lengths = {k: len(v) for k, v in zipped.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"sweep spec: the [zip] lists must have one length, got {lengths}")
    zrows = [dict(zip(zipped, vals, strict=True)) for vals in zip(*zipped.values(), strict=True)] or [{}]
    run = dict(_RUN_DEFAULTS)
    for k, v in dict(raw.get("run", {})).items():
        if k not in _RUN_DEFAULTS:
            raise ValueError(f"sweep spec: unknown [run] setting {k!r}; known: {sorted(_RUN_DEFAULTS)}")
        run[k] = v
    run["max_group_size"] = check_int(run["max_group_size"], "sweep spec: run.max_group_size")
    run["threads"] = check_int(run["threads"], "sweep spec: run.threads", none_ok=True)
    for k in ("compile", "amp", "cudagraphs", "graph_step", "streams"):  # a string "false" would read as true
        if not isinstance(run[k], bool):
            raise ValueError(f"sweep spec: run.{k} must be true or false, got {run[k]!r}")
    if run["dropout_rng"] not in ("fast", "matched"):
        raise ValueError(f"sweep spec: run.dropout_rng must be 'fast' or 'matched', got {run['dropout_rng']!r}")
    runs = []
    keys = list(grid)
    for zrow in zrows:
        for values in itertools.product(*(grid[k] for k in keys)):
            runs.append(_build_run(base, {**zrow, **dict(zip(keys, values, strict=True))}, preset, text_preset))
    names = [r.name for r in runs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"sweep spec: runs {dup} appear more than once (repeated grid values?)")
    name = raw.get("name", "sweep")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise ValueError(
            f"sweep spec: name {name!r} must be a plain identifier (letters, digits, '_', '-', '.'; it names a folder)"
        )
    return SweepSpec(name=name, runs=runs, run=run, source=text)
