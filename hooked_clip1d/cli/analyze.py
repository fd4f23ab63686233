"""``hooked-clip1d analyze <analysis> --model NAME``: run one family of analyses on a model, print a table and
write PNG + JSON.

Each family is a function ``(model, options) -> Report`` built only from the public functions of
``hooked_clip1d.analysis`` and ``hooked_clip1d.visualization``, declared with ``@family(name, what=..., data=...,
options=...)`` (``FAMILIES``: the CLI's listing, option checks and figure footers follow from it; a new family is one
decorated function); ``run_analysis`` writes ``<out>/<analysis>.json`` and ``<out>/<analysis>_<plot>.png``.

Example:
    >>> import tempfile
    >>> rep = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tempfile.mkdtemp())
    >>> sorted(rep["files"])[0].endswith(".json")
    True
"""

from __future__ import annotations

import importlib
import json
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from hooked_clip1d.analysis.heads import to_jsonable
from hooked_clip1d.data.dataset import Dataset, build_dataset
from hooked_clip1d.files import atomic_write, atomic_write_text
from hooked_clip1d.model.clip import CLIP1D


@dataclass
class Report:
    """What an analysis returns: a human-readable table, JSON-able numbers and figures."""

    table: str
    data: dict[str, Any]
    figures: dict[str, Figure] = field(default_factory=dict)
    pages: dict[str, tuple[Any, str]] = field(default_factory=dict)  # key -> (circuitsvis view, heading): HTML


@dataclass(frozen=True)
class Family:
    """One analysis family of ``analyze``: its name, what it does, the data its figures show, its options (key ->
    what it does; any other key is an error) and the function ``(model, options) -> Report``."""

    name: str
    what: str
    data: str
    options: dict[str, str]
    run: Callable[[CLIP1D, dict[str, Any]], Report]


# every analysis family, in declaration order: a family declares itself with @family (the CLI's listing, option
# checking and figure footers follow from the declaration)
FAMILIES: dict[str, Family] = {}


def family(
    name: str, *, what: str, data: str, options: dict[str, str] | None = None
) -> Callable[[Callable[[CLIP1D, dict[str, Any]], Report]], Callable[[CLIP1D, dict[str, Any]], Report]]:
    """Declare the decorated function ``(model, options) -> Report`` as the analysis family ``name``."""

    def register(fn: Callable[[CLIP1D, dict[str, Any]], Report]) -> Callable[[CLIP1D, dict[str, Any]], Report]:
        if name in FAMILIES:
            raise ValueError(f"two analysis families are named {name!r}")
        FAMILIES[name] = Family(name, what, data, dict(options or {}), fn)
        return fn

    return register


def _dataset(model: CLIP1D) -> Dataset:
    if getattr(model, "data_config", None) is None:
        raise ValueError("the model has no data_config; load it with load_model or from a training run")
    return build_dataset(model.data_config)


def _split(ds: Dataset, opts: dict[str, Any]) -> Any:
    """The split named by option ``split`` (default ``val_unseen``), one with two-object images, or a ValueError
    naming those."""
    name = opts.get("split", "val_unseen")
    pairs = [n for n, sp in ds.splits.items() if bool(sp.is_pair.any())]
    if name not in pairs:
        raise ValueError(f"unknown split {name!r} for this analysis; splits with two-object images: {', '.join(pairs)}")
    return ds.splits[name]


def _flag(opts: dict[str, Any], key: str, default: bool) -> bool:
    """A yes/no option: a bool (numpy's too), true/false (any case) or 1/0; anything else is an error naming it."""
    value = opts.get(key, default)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Number) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"option {key} must be true or false, got {value!r}")


def check_options(analysis: str, options: dict[str, Any]) -> None:
    """Raise ``ValueError`` for an unknown analysis (listing every family) or an option it does not take
    (listing its options with what they do).

    Example:
        >>> check_options("decompose", {"layer": 1})
    """
    if analysis not in FAMILIES:
        raise ValueError(f"unknown analysis {analysis!r}; known:\n{describe_analyses()}")
    unknown = sorted(set(options) - set(FAMILIES[analysis].options))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in FAMILIES[analysis].options.items()) or "none"
        raise ValueError(f"unknown option(s) {unknown} for analysis {analysis!r}; its options: {known}")


def _first_pair_image(ds: Dataset, split: str = "val_unseen") -> torch.Tensor:
    s = ds.splits[split]
    return s.images[s.is_pair][0]


def describe_analyses() -> str:
    """Every analysis family, what it does and its options, one block each (the CLI's listing)."""
    lines = []
    for name, fam in FAMILIES.items():
        lines.append(f"  {name:<10} {fam.what}")
        lines += [f"             -o {k}=...  {v}" for k, v in fam.options.items()]
    return "\n".join(lines)


def run_analysis(
    analysis: str, model: str | CLIP1D, out_dir: str | Path = "results/analyze", **options: Any
) -> dict[str, Any]:
    """Run ``analysis`` (a key of ``FAMILIES``) on a pretrained name, run directory, model file or ``CLIP1D``."""
    check_options(analysis, options)
    from hooked_clip1d.pretrained import model_name, resolve_model

    if isinstance(model, str):
        name, model = model, resolve_model(model)
    else:
        name = model_name(model)
    modes = [(m, m.training) for m in model.modules()]  # per module: a tower may be in train mode alone
    model.eval()
    try:
        report = FAMILIES[analysis].run(model, options)
    finally:
        for m, training in modes:  # the caller's model is left in the mode it came in
            m.training = training
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    from hooked_clip1d.visualization.style import stamp

    for key, fig in report.figures.items():
        path = out / f"{analysis}_{key}.png"
        data_text = FAMILIES[analysis].data
        if "split" in options and data_text is not None:  # the footer names the split these figures show
            data_text = f"{data_text}; here split={options['split']}"
        stamp(fig, name, data_text)
        try:
            atomic_write(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight"))
        finally:
            plt.close(fig)
        files.append(str(path))
    if report.pages:
        from hooked_clip1d.visualization.attention import save_html

        for key, (view, heading) in report.pages.items():
            page = save_html(view, out / f"{analysis}_{key}.html", title=heading, heading=heading)
            files.append(str(page))
    record = {"analysis": analysis, "model": name, "options": options, "data": to_jsonable(report.data)}
    atomic_write_text(out / f"{analysis}.json", json.dumps(record, indent=2, default=float) + "\n")
    files.append(str(out / f"{analysis}.json"))
    return {**record, "table": report.table, "files": files}


# the families declare themselves when their module is imported (by name: it imports this module)
importlib.import_module("hooked_clip1d.cli.families")
