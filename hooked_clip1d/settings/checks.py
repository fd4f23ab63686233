"""The package's one check of a count a caller passes (an epoch count, a sample size, a number of workers):
``check_int``, and of a real number (a learning rate, a penalty, a scale): ``check_real``. Every public function that
takes such a value calls them, so the refusal reads the same everywhere."""

from __future__ import annotations

import math
import operator
from typing import Any


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy int), not a bool (``True`` is not a count).

    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return not isinstance(value, bool) and hasattr(value, "__index__")


def check_int(value: Any, name: str, minimum: int = 1, *, none_ok: bool = False) -> Any:
    """``value`` as an ``int`` if it is an integer >= ``minimum`` (None passes through where ``none_ok``), else a
    ``ValueError`` naming ``name``, the bound and the value given: a bool, a float (even ``2.0``), a string or a
    smaller int is refused rather than truncated or read as a count.

    >>> check_int(3, "epochs")
    3
    >>> check_int(0, "check (how many nodes to patch exactly; 0: none)", minimum=0)
    0
    >>> check_int(2.0, "n (images sampled)")
    Traceback (most recent call last):
    ...
    ValueError: n (images sampled) must be an int >= 1, got 2.0
    """
    if value is None and none_ok:
        return None
    if not is_int(value) or operator.index(value) < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{' or None' if none_ok else ''}, got {value!r}")
    return operator.index(value)


def check_int_list(values: Any, name: str, minimum: int = 0) -> list[int]:
    """``values`` (an iterable of integers >= ``minimum``, e.g. epochs) as a sorted list without repeats, else a
    ``ValueError`` naming ``name``: a string (read digit by digit otherwise), a bare number, a float (truncated
    otherwise) or a bool among them is refused.

    >>> check_int_list((20, 5, 5), "epochs")
    [5, 20]
    >>> check_int_list([1.9, 5], "epochs")
    Traceback (most recent call last):
    ...
    ValueError: epochs must be a list of ints >= 0, got [1.9, 5]
    """
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list of ints >= {minimum}, got {values!r}")
    values = list(values)
    if not all(is_int(v) and operator.index(v) >= minimum for v in values):
        raise ValueError(f"{name} must be a list of ints >= {minimum}, got {values!r}")
    return sorted({operator.index(v) for v in values})


def is_real(value: Any) -> bool:
    """Whether ``value`` is a finite real number (a Python int or float; NumPy's float64 is one), not a bool, NaN or an
    infinity. Other NumPy scalars are refused: a config stores the value as given, and JSON cannot write them.

    >>> is_real(0.5), is_real(3), is_real(True), is_real(float("nan")), is_real("1")
    (True, True, False, False, False)
    """
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_real(value: Any, name: str, minimum: int | float = 0.0, *, strict: bool = False) -> float:
    """``value`` as a ``float`` if it is a finite real number >= ``minimum`` (> ``minimum`` where ``strict``), else a
    ``ValueError`` naming ``name``, the bound and the value given: a bool, a string, NaN and an infinity are refused.

    >>> check_real(3e-4, "lr", strict=True)
    0.0003
    >>> check_real(float("inf"), "c (the scale)", strict=True)
    Traceback (most recent call last):
    ...
    ValueError: c (the scale) must be a finite number > 0, got inf
    """
    if not is_real(value) or not (float(value) > minimum if strict else float(value) >= minimum):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {minimum:g}, got {value!r}")
    return float(value)


def check_index(value: Any, n: int, name: str, detail: str = "") -> int:
    """``value`` as an ``int`` if it is an integer in ``0..n - 1`` (a layer, a depth), else a ``ValueError`` naming
    ``name``, the range (with ``detail`` after it, e.g. what the range counts) and the value given: a bool, a float
    and a negative index (read from the end by Python) are refused.

    >>> check_index(-1, 2, "layer", " (the model has 2 layers)")
    Traceback (most recent call last):
    ...
    ValueError: layer must be in 0..1 (the model has 2 layers), got -1
    """
    if not is_int(value) or not 0 <= operator.index(value) < n:
        raise ValueError(f"{name} must be in 0..{n - 1}{detail}, got {value!r}")
    return operator.index(value)


def repeated(values: Any) -> list[Any]:
    """The values listed more than once, sorted (for a "listed twice" refusal).

    >>> repeated([3, 1, 3, 2, 1])
    [1, 3]
    """
    seen: set[Any] = set()
    twice: set[Any] = set()
    for v in values:
        (twice if v in seen else seen).add(v)
    return sorted(twice)


def check_label_list(labels: Any, n_labels: int, name: str = "labels", need: int = 1) -> list[int]:
    """``labels`` (object labels, ints in ``1..n_labels``, each once; a list, tuple, range or 1-d tensor) as a list
    of ints in the given order, else an error naming ``name``: a float (truncated otherwise) or a bool is a
    ``TypeError``; a repeat (dropped or weighed twice otherwise), a label outside the vocabulary, a bare string or
    fewer than ``need`` labels a ``ValueError``.

    >>> check_label_list([3, 1, 2], 20)
    [3, 1, 2]
    >>> check_label_list([2.7], 20, "fit_labels")
    Traceback (most recent call last):
    ...
    TypeError: fit_labels must be ints, got [2.7]
    """
    if isinstance(labels, str | bytes) or not hasattr(labels, "__iter__"):
        raise ValueError(f"{name} must be a list of labels in 1..{n_labels}, got {labels!r}")
    given = labels.tolist() if hasattr(labels, "tolist") else list(labels)
    not_int = [x for x in given if not is_int(x)]
    if not_int:  # 2.7 was truncated to 2, True read as 1
        raise TypeError(f"{name} must be ints, got {not_int}")
    out = [operator.index(x) for x in given]
    twice = repeated(out)
    if twice:
        raise ValueError(f"{name}: repeated labels in {out} ({twice} twice)")
    bad = [x for x in out if not 1 <= x <= n_labels]
    if bad:
        raise ValueError(f"{name}: labels {bad} are outside 1..{n_labels}")
    if len(out) < need:
        raise ValueError(f"{name}: need at least {need} distinct labels, got {out}")
    return out


__all__ = [
    "check_index",
    "check_int",
    "check_int_list",
    "check_label_list",
    "check_real",
    "is_int",
    "is_real",
    "repeated",
]
