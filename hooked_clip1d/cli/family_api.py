"""What an analysis family of ``hooked-clip1d analyze`` builds on: the ``Report`` it returns, the ``@family``
declaration that registers it in ``FAMILIES``, and the option helpers families share (the model's dataset, the
``split`` option, yes/no options, the first two-object image).

A family is one function ``(model, options) -> Report`` in ``cli/families.py``, built only from the public functions
of ``hooked_clip1d.analysis`` and ``hooked_clip1d.visualization`` and this module; ``cli/analyze.py`` (the command:
option checks, the listing, ``run_analysis``) imports the families, so nothing else lists them.

Example:
    >>> from hooked_clip1d.cli.family_api import Report, family, flag_option
    >>> @family("example-only", what="an example", data="no data", options={"center": "true/false"})
    ... def _example(model, opts):
    ...     return Report(table=f"center={flag_option(opts, 'center', False)}", data={})
    >>> FAMILIES["example-only"].run(None, {"center": "TRUE"}).table
    'center=True'
    >>> del FAMILIES["example-only"]  # (an example: not left registered)
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from matplotlib.figure import Figure

from hooked_clip1d.data.dataset import Dataset, Split, build_dataset
from hooked_clip1d.data.vocab import Vocabulary
from hooked_clip1d.model.clip import CLIP1D

__all__ = ["FAMILIES", "Family", "Report", "family", "first_pair_image", "flag_option", "model_dataset", "pair_split"]


@dataclass
class Report:
    """What an analysis family returns: a human-readable table, JSON-able numbers, figures (key -> matplotlib
    figure, written as ``<analysis>_<key>.png``) and HTML pages (key -> (circuitsvis view, heading))."""

    table: str
    data: dict[str, Any]
    figures: dict[str, Figure] = field(default_factory=dict)
    pages: dict[str, tuple[Any, str]] = field(default_factory=dict)


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
    """Declare the decorated function ``(model, options) -> Report`` as the analysis family ``name``: ``what`` it
    does (the listing), the ``data`` its figures show (their footer) and its ``options`` (key -> what it does).
    A second family with the same name is an error."""

    def register(fn: Callable[[CLIP1D, dict[str, Any]], Report]) -> Callable[[CLIP1D, dict[str, Any]], Report]:
        if name in FAMILIES:
            raise ValueError(f"two analysis families are named {name!r}")
        FAMILIES[name] = Family(name, what, data, dict(options or {}), fn)
        return fn

    return register


def model_dataset(model: CLIP1D) -> Dataset:
    """The dataset the model was trained on (from its ``data_config``), or a ``ValueError`` saying how to load a
    model that carries one."""
    if getattr(model, "data_config", None) is None:
        raise ValueError("the model has no data_config; load it with load_model or from a training run")
    return build_dataset(model.data_config)


def pair_split(ds: Dataset, opts: dict[str, Any]) -> Split:
    """The split named by option ``split`` (default ``val_unseen``), one with two-object images, or a ValueError
    naming those."""
    name = opts.get("split", "val_unseen")
    pairs = [n for n, sp in ds.splits.items() if bool(sp.is_pair.any())]
    if name not in pairs:
        raise ValueError(f"unknown split {name!r} for this analysis; splits with two-object images: {', '.join(pairs)}")
    return ds.splits[name]


def flag_option(opts: dict[str, Any], key: str, default: bool) -> bool:
    """A yes/no option: a bool (numpy's too), true/false (any case) or 1/0; anything else is an error naming it.

    Example:
        >>> flag_option({"center": "FALSE"}, "center", True), flag_option({}, "center", True)
        (False, True)
    """
    value = opts.get(key, default)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Number) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"option {key} must be true or false, got {value!r}")


def image_caption(vocab: Vocabulary, image: str) -> Int[torch.Tensor, " 4"]:
    """The caption that describes ``image`` (a readable image): ``X is on the left of Y`` for two objects (the
    paper's left caption), ``X is in the image`` for one (what ``analyze attention`` shows beside an image).

    >>> from hooked_clip1d.data.vocab import Vocabulary
    >>> Vocabulary(20).caption_to_text(image_caption(Vocabulary(20), "C . 16 . . 17 . . . . ."))
    '16 is on the left of 17'
    """
    labels = [int(t) for t in vocab.text_to_image(image)[1:] if 1 <= int(t) <= vocab.n_labels]
    if len(labels) == 2:
        return vocab.left_caption(*labels)
    if len(labels) == 1:
        return vocab.single_caption(labels[0])
    raise ValueError(f"the image {image!r} holds {len(labels)} objects: give its caption too (-o caption=...)")


def first_pair_image(ds: Dataset, split: str = "val_unseen") -> Int[torch.Tensor, " pos"]:
    """The first two-object image of ``split`` (the image an analysis shows when none is asked for)."""
    s = ds.splits[split]
    return s.images[s.is_pair][0]
