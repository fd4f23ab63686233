"""Evaluate term ablations on a model and dataset (Paper Fig. 5e, 16, 17): one ``evaluate`` call per condition.

The paper zeroes, for all four heads of the 1-layer vision encoder, one positional term at a time (EP, PE, PP and
BP; Sec. 5, Fig. 5e for unseen-pair accuracy, Fig. 16 for label-set recognition), the positional part of the
values VP, and all position-dependent terms of attention and values together (App. H, Fig. 17). ``PAPER_ABLATIONS``
holds exactly these conditions plus the four attention terms together; the result is a JSON-able dict.

Example:
    >>> import json
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> model = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8), seed=0).eval()
    >>> res = evaluate_ablations(model, ds, {"baseline": [], "EP": ["EP"]}, splits=["val_unseen"])
    >>> sorted(res["conditions"]), sorted(res["conditions"]["EP"]["metrics"]["val_unseen"])
    (['EP', 'baseline'], ['acc', 'label_set', 'n', 'relaxed'])
    >>> _ = json.dumps(res)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hooked_clip1d.analysis.interventions.terms import ablate_terms
from hooked_clip1d.data.dataset import SPLITS, Dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.clip import CLIP1D

#: the conditions of Fig. 5e / 16 (EP, PE, PP, BP) and Fig. 17 (VP; all position-dependent terms)
PAPER_ABLATIONS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "EP": ("EP",),
    "PE": ("PE",),
    "PP": ("PP",),
    "BP": ("BP",),
    "VP": ("VP",),
    "EP+PE+PP+BP": ("EP", "PE", "PP", "BP"),
    "EP+PE+PP+BP+VP": ("EP", "PE", "PP", "BP", "VP"),
}


_SHORT = {"train": "train", "val_single": "single", "val_seen": "seen", "val_unseen": "unseen"}


def _conditions(ablations: Mapping[str, Sequence[str]] | Sequence[Sequence[str]]) -> dict[str, list[str]]:
    if isinstance(ablations, str):
        raise TypeError("ablations must be a mapping name -> terms or a list of term lists, not a string")
    if isinstance(ablations, Mapping):
        items = [(str(k), v) for k, v in ablations.items()]
    else:
        items = [("+".join(v) if len(v) else "baseline", v) for v in ablations]
    out: dict[str, list[str]] = {}
    for name, terms in items:
        if isinstance(terms, str):
            raise TypeError(f"condition {name!r}: terms must be a list of term names, e.g. [{terms!r}]")
        if name in out:
            raise ValueError(f"condition {name!r} is given twice")
        out[name] = list(terms)
    if not out:
        raise ValueError("no ablation conditions given")
    return out


def evaluate_ablations(
    model: CLIP1D,
    dataset: Dataset,
    ablations: Mapping[str, Sequence[str]] | Sequence[Sequence[str]] | None = None,
    *,
    tower: str = "vision",
    layer: int = 0,
    heads: Sequence[int] | None = None,
    splits: Sequence[str] = SPLITS,
    ln_scale: str | None = None,
) -> dict[str, Any]:
    """Retrieval metrics of every split under each ablation condition (``ablate_terms`` hooks on ``tower``).

    Args:
        model: a ``CLIP1D`` in eval mode.
        dataset: its dataset (``build_dataset(model.data_config)`` for a shipped model).
        ablations: name -> list of terms (``[]`` = no ablation), or a list of term lists (named ``"EP+PE"``,
            ``"baseline"``); default ``PAPER_ABLATIONS``.
        tower, layer, heads, ln_scale: passed to ``ablate_terms`` (default: every head of vision layer 0).
        splits: the splits to evaluate.

    Returns:
        ``{"tower", "layer", "heads", "splits", "conditions": {name: {"terms": [...], "metrics":
        evaluate(...)}}}`` with plain Python values only (``json.dumps`` works).
    """
    if not isinstance(model, CLIP1D):
        raise TypeError(f"evaluate_ablations needs a CLIP1D model, got {type(model).__name__}")
    if tower not in ("vision", "text"):
        raise ValueError(f"tower must be 'vision' or 'text', got {tower!r}")
    encoder = model.vision if tower == "vision" else model.text
    conditions = _conditions(PAPER_ABLATIONS if ablations is None else ablations)
    # build every hook list first, so that a bad condition fails before any evaluation runs
    hooks = {name: ablate_terms(encoder, terms, layer, heads, ln_scale=ln_scale) for name, terms in conditions.items()}
    out: dict[str, Any] = {
        "tower": tower,
        "layer": layer,
        "heads": list(range(encoder.cfg.n_heads)) if heads is None else [int(h) for h in heads],
        "splits": list(splits),
        "conditions": {},
    }
    for name, terms in conditions.items():
        kw = {"vision_hooks": hooks[name]} if tower == "vision" else {"text_hooks": hooks[name]}
        metrics = evaluate(model, dataset, splits=splits, **kw)
        out["conditions"][name] = {"terms": terms, "metrics": metrics}
    return out


def format_ablations(result: Mapping[str, Any]) -> str:
    """A text table of ``evaluate_ablations`` output: accuracy per split, plus label-set of two-object splits.

    Example:
        >>> res = {"splits": ["val_unseen"], "conditions": {"EP": {"terms": ["EP"],
        ...        "metrics": {"val_unseen": {"n": 4, "acc": 0.5, "relaxed": 0.5, "label_set": 1.0}}}}}
        >>> print(format_ablations(res))
        ablation          unseen acc  unseen label-set
        EP                     0.500             1.000
    """
    splits = list(result["splits"])
    short = {s: _SHORT.get(s, s) for s in splits}
    conds = result["conditions"]
    with_ls = [s for s in splits if any(c["metrics"][s].get("label_set") is not None for c in conds.values())]
    cols = [(s, "acc", f"{short[s]} acc") for s in splits] + [
        (s, "label_set", f"{short[s]} label-set") for s in with_ls
    ]
    head = f"{'ablation':<16}" + "".join(f"{c[2]:>{max(12, len(c[2]) + 2)}}" for c in cols)
    lines = [head]
    for name, c in conds.items():
        row = f"{name:<16}"
        for s, m, label in cols:
            v = c["metrics"][s].get(m)
            row += f"{(f'{v:.3f}' if v is not None else '-'):>{max(12, len(label) + 2)}}"
        lines.append(row)
    return "\n".join(lines)
