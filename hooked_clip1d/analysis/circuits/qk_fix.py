"""The QK fix's switch (AtP*, Kramár et al. 2024): ``check_freeze`` refuses it with frozen patterns,
``resolve_qk_fix`` gives ``atp``'s and ``eap``'s default (on unless the patterns are frozen), ``remedy_for`` names
the remedy a disagreement warning offers for a method: the QK fix where the method lacks it, or for Hanna et al.'s
EAP-IG the ports line."""

from __future__ import annotations


def check_freeze(freeze_pattern: bool, qk_fix: bool) -> None:
    """Refuse the QK fix with frozen patterns (it corrects a non-linearity that freezing removes).

    >>> check_freeze(True, True)
    Traceback (most recent call last):
    ...
    ValueError: qk_fix corrects the attention pattern's non-linearity; with freeze_pattern there is none
    """
    if freeze_pattern and qk_fix:
        raise ValueError("qk_fix corrects the attention pattern's non-linearity; with freeze_pattern there is none")


def resolve_qk_fix(qk_fix: bool | None, freeze_pattern: bool) -> bool:
    """``atp``'s and ``eap``'s ``qk_fix``: None (the default since 2026-11-29) is on, unless the patterns are frozen
    (then there is no softmax left to fix); an explicit value is checked against ``freeze_pattern``.

    >>> resolve_qk_fix(None, False), resolve_qk_fix(None, True), resolve_qk_fix(False, False)
    (True, False, False)
    """
    if qk_fix is None:
        return not freeze_pattern
    if not isinstance(qk_fix, bool):
        raise TypeError(f"qk_fix must be True, False or None (the default: on unless freeze_pattern), got {qk_fix!r}")
    check_freeze(freeze_pattern, qk_fix)
    return qk_fix


def remedy_for(method: str) -> str:
    """The QK fix as a remedy, where the method takes it and does not apply it already; for EAP-IG along Hanna et
    al.'s line, which takes none, the remedy of its kind: each port on its own line.

    >>> remedy_for("AtP"), remedy_for("AtP+QK"), remedy_for("EAP-IG-ports")
    ('the QK fix for queries, keys and score terms (atp(qk_fix=True), eap(qk_fix=True): their default), ', '', '')
    >>> remedy_for("EAP-IG")
    "each port on its own line (eap_ig(line='ports'), its default), "
    """
    if method == "EAP-IG":  # Hanna et al.'s line: every port moves at once
        return "each port on its own line (eap_ig(line='ports'), its default), "
    if "QK" in method or "*" in method or method.startswith("EAP-IG"):
        return ""
    return "the QK fix for queries, keys and score terms (atp(qk_fix=True), eap(qk_fix=True): their default), "
