"""The precision a trajectory stores each checkpoint at, and the accuracies it records (split from
``pretrained.trajectories``, the file format, which re-exports every name here).

``measure_precision`` keeps each checkpoint at the first of ``STORE_DTYPES`` at which its accuracies on every split
equal its float32 ones (``PRECISION_METHOD``, recorded in the manifest); ``stored_metrics`` reads the accuracies
measured on a stored checkpoint, ``snapshot_metrics`` those of the run snapshots a trajectory records without
storing them (``ship_trajectory``'s ``metrics_epochs``). Nothing here imports torch at module level.

Example:
    >>> dtype_summary({0: "float16", 5: "float32"}), is_accuracy(1.0)
    ('float16 x 1, float32 x 1', True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hooked_clip1d.settings.checks import check_int

if TYPE_CHECKING:
    from hooked_clip1d.data.dataset import Dataset
    from hooked_clip1d.model.clip import CLIP1D

STORE_DTYPES = ("float16", "bfloat16", "float32")  # tried in this order: the first whose accuracies match is kept
PRECISION_METHOD = (
    "each checkpoint's weights rounded to a candidate dtype (and back to float32) are evaluated on every split of "
    "the dataset plus probe_unseen (every unseen ordered pair at every position pair); a checkpoint is stored at the "
    "first candidate at which its acc, relaxed and label-set accuracies on every split equal those of its float32 "
    "weights (exactly, or within the recorded tolerance in images); candidates in order float16, bfloat16, float32 "
    "(float16 and bfloat16 take the same bytes; float16 keeps more mantissa bits)"
)


def rounded(model: CLIP1D, dtype: str) -> CLIP1D | None:
    """A copy of ``model`` whose floating-point weights are rounded to ``dtype`` and back (the weights a trajectory
    stored in ``dtype`` loads as), or None where a weight does not fit in ``dtype``."""
    import copy

    import torch

    out = copy.deepcopy(model)
    store = getattr(torch, dtype)
    with torch.no_grad():
        for p in out.state_dict().values():
            if p.is_floating_point():
                r = p.to(store)
                if not torch.isfinite(r).all():
                    return None
                p.copy_(r)
    return out


def images_differing(got: Mapping[str, Any], ref: Mapping[str, Any], dataset: Dataset) -> int:
    """The largest number of images by which two ``evaluate`` results differ, over every split and metric (``acc``
    and ``relaxed`` count over a split's images, ``label_set`` over its two-object images); 0 when they are equal.

    Example:
        >>> from hooked_clip1d import DataConfig, build_dataset
        >>> ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
        >>> a = {"val_unseen": {"n": 10, "acc": 0.5, "relaxed": 0.5, "label_set": 1.0}}
        >>> images_differing(a, {"val_unseen": {**a["val_unseen"], "acc": 0.7}}, ds)
        2
    """
    worst = 0
    for split, r in ref.items():
        g = got[split]
        n_pair = int(dataset.splits[split].is_pair.sum())
        for metric, denom in (("acc", r["n"]), ("relaxed", r["n"]), ("label_set", n_pair)):
            a, b = r.get(metric), g.get(metric)
            if a is None or b is None or a != a or b != b:  # no such metric here, or an empty split's NaN
                if (a is None) != (b is None) or (a != a) != (b != b):
                    return 1 << 30
                continue
            worst = max(worst, round(abs(a - b) * denom))
    return worst


def measure_precision(
    models: Mapping[int, CLIP1D], dataset: Dataset, dtypes: Sequence[str] = STORE_DTYPES, tolerance: int = 0
) -> tuple[dict[int, str], dict[int, CLIP1D], dict[str, dict[str, Any]]]:
    """The precision measurement (``PRECISION_METHOD``) of checkpoints ``{epoch: model}`` on ``dataset`` (every split
    of it is evaluated): per checkpoint the first of ``dtypes`` at which its accuracies equal its float32 ones
    (``tolerance`` > 0: differ by at most that many images in any split and metric; 0, the default: equal).

    Returns ``{epoch: dtype}`` (a checkpoint that no candidate keeps is left out), the checkpoints rounded to their
    dtype, and the record ``{epoch: {"dtype": kept or None, "tried": [{"dtype", "accepted", "images_differing",
    "why"}, ...], "metrics": {"float32": ..., dtype: ...}}}`` (``why``: "accuracies differ" or "a weight does not
    fit").

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4), seed=0).eval()
        >>> m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
        >>> kept, _, record = measure_precision({0: m}, build_dataset(m.data_config))
        >>> kept, [t["accepted"] for t in record["0"]["tried"]]
        ({0: 'float16'}, [True])
    """
    from hooked_clip1d.evaluation import evaluate

    unknown = [d for d in dtypes if d not in STORE_DTYPES]
    if unknown or not dtypes:
        raise ValueError(f"dtypes must be a non-empty list of {list(STORE_DTYPES)}, got {list(dtypes)}")
    tolerance = check_int(tolerance, "tolerance (images)", minimum=0)
    splits = list(dataset.splits)
    kept: dict[int, str] = {}
    models_kept: dict[int, CLIP1D] = {}
    record: dict[str, dict[str, Any]] = {}
    for e, m in models.items():
        ref = evaluate(m, dataset, splits=splits)
        rec: dict[str, Any] = {"dtype": None, "tried": [], "metrics": {"float32": ref}}
        for dt in dtypes:
            r = m if dt == "float32" else rounded(m, dt)
            if r is None:
                no_fit = {"dtype": dt, "accepted": False, "images_differing": None, "why": "a weight does not fit"}
                rec["tried"].append(no_fit)
                continue
            got = ref if dt == "float32" else evaluate(r, dataset, splits=splits)
            rec["metrics"][dt] = got
            diff = images_differing(got, ref, dataset)
            ok = diff <= tolerance
            why = None if ok else "accuracies differ"
            rec["tried"].append({"dtype": dt, "accepted": ok, "images_differing": diff, "why": why})
            if ok:
                rec["dtype"], kept[e], models_kept[e] = dt, dt, r
                break
        record[str(e)] = rec
    return kept, models_kept, record


def is_accuracy(v: Any) -> bool:
    """Whether ``v`` is an accuracy: a finite number in [0, 1], not a bool (``None`` and NaN are not).

    Example:
        >>> is_accuracy(0.5), is_accuracy(float("nan")), is_accuracy(True), is_accuracy(None)
        (True, False, False, False)
    """
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1


def snapshot_metrics(man: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """The accuracies a trajectory records at epochs whose weights it does not store (``ship_trajectory``'s
    ``metrics_epochs``: float32, measured at shipping on the run's snapshots): ``{epoch: {split: metrics}}``; ``{}``
    for a trajectory without them.

    Example:
        >>> snapshot_metrics({"snapshot_metrics": {"metrics": {"5": {"val_seen": {"acc": 0.5}}}}})
        {5: {'val_seen': {'acc': 0.5}}}
        >>> snapshot_metrics({})
        {}

    A ValueError names the epoch of an entry that is not an epoch with a mapping of split metrics, or whose
    accuracy is not a number in [0, 1] (a NaN included): a figure reads these as they are, and a wrong one would move
    the epoch a threshold is first reached at.
    """
    out: dict[int, dict[str, Any]] = {}
    where = f"trajectory {man.get('name', '?')!r}: snapshot_metrics"
    for e, m in (man.get("snapshot_metrics") or {}).get("metrics", {}).items():
        if not str(e).isdigit() or not isinstance(m, Mapping):
            raise ValueError(f"{where}: entry {e!r} is not an epoch with a mapping of split metrics")
        for split, met in m.items():
            acc = met.get("acc") if isinstance(met, Mapping) else None
            if not is_accuracy(acc):
                raise ValueError(f"{where}: epoch {e}, {split}: accuracy {acc!r} is not a number in [0, 1]")
        out[int(e)] = dict(m)
    return out


def stored_metrics(man: Mapping[str, Any], epoch: int) -> dict[str, Any]:
    """The accuracies of a stored checkpoint, measured at shipping on the weights as stored (every split and the
    unseen probe)."""
    rec = man["precision"]["checkpoints"][str(epoch)]
    return rec["metrics"][rec["dtype"]]


def dtype_summary(dtypes: Mapping[Any, str]) -> str:
    """``"float16"`` when every checkpoint has that dtype, else the counts: ``"float16 x 20, float32 x 10"``.

    Example:
        >>> dtype_summary({0: "float32", 1: "float16", 2: "float16"}), dtype_summary({0: "float16"})
        ('float16 x 2, float32 x 1', 'float16')
    """
    counts: dict[str, int] = {}
    for d in dtypes.values():
        counts[d] = counts.get(d, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{d} x {n}" for d, n in sorted(counts.items(), key=lambda kv: STORE_DTYPES.index(kv[0])))


__all__ = [
    "PRECISION_METHOD",
    "STORE_DTYPES",
    "dtype_summary",
    "images_differing",
    "is_accuracy",
    "measure_precision",
    "rounded",
    "snapshot_metrics",
    "stored_metrics",
]
