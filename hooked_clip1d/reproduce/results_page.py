"""Generate ``docs/results.md`` from the JSON records that ``hooked-clip1d reproduce`` writes.

The page is never edited by hand: every number, verdict and plot on it comes from ``<results>/<figure>/<figure>.json``
and the PNGs beside it (copied to ``docs/figures/``). Run ``hooked-clip1d reproduce all`` and then
``hooked-clip1d results-page``.

Every record the page shows is also kept beside it, in ``docs/records/<figure>.json`` (committed with the page),
so a later ``results-page`` run that has fresh records for only some figures (say one sweep retrained on a GPU)
keeps the others as they were recorded: a fresh record replaces the kept one of the same figure, a kept record of a
figure ``reproduce`` no longer knows is dropped, and each section says the date its record was made.

Example:
    >>> import tempfile, pathlib
    >>> from hooked_clip1d.reproduce import reproduce
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = reproduce("fig11", out_dir=d / "results", controls=False)  # without its null draws: seconds, not 20
    >>> page = build_results_page(d / "results", d / "docs" / "results.md")
    >>> "fig11" in page.read_text() and (d / "docs" / "figures" / "fig11_fig11.png").exists()
    True
    >>> sorted(p.name for p in (d / "docs" / "records").iterdir())
    ['fig11.json']
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hooked_clip1d.files import atomic_write, atomic_write_text
from hooked_clip1d.pretrained import registry_table
from hooked_clip1d.reproduce.records import Check, Record, checked_verdict, is_record, write_record

ICON = {
    "reproduced": "reproduced",
    "partly": "partly",
    "not reproduced": "**not reproduced**",
    "inconclusive": "*inconclusive*",
    "not run": "not run",
}


def _fig_sort_key(key: str) -> tuple[int, str]:
    digits = "".join(ch for ch in key if ch.isdigit())
    return (int(digits) if digits else 10**6, key)


def _fresh_records(results_dir: str | Path) -> list[tuple[Record, Path]]:
    """``load_records`` with the folder each record was read from (its PNGs are beside it)."""
    records = []
    for path in sorted(Path(results_dir).glob("*.json")):  # a record outside its figure's folder was skipped
        if is_record(_read_json(path, "a file under --results")):
            raise ValueError(
                f"{path} is a record directly under the results folder: reproduce writes DIR/<figure>/<figure>.json "
                "(its PNGs beside it); move it into its figure's folder"
            )
    for path in sorted(Path(results_dir).glob("*/*.json")):
        raw = _read_json(path, "a file under --results")
        if is_record(raw):  # every fresh record checked before anything is written
            rec = checked_verdict(Record.from_dict(raw, where=f"record {path}"), f"record {path}")
            records.append((rec, path.parent))
    return sorted(records, key=lambda rd: _fig_sort_key(rd[0].figure))


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; invalid JSON is an error naming it (reproduce writes valid JSON atomically: a broken
    file under --results was skipped, and the page rebuilt from the old kept record without a word)."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} ({what}) is not valid JSON ({e}): fix or remove it") from e


def load_records(results_dir: str | Path) -> list[Record]:
    """Every ``<results_dir>/*/*.json`` record written by ``reproduce`` (or a beyond-the-paper experiment), read
    through ``records.Record`` (validated; an old record converted); other JSON files there are skipped."""
    return [r for r, _ in _fresh_records(results_dir)]


def load_kept_records(records_dir: str | Path) -> list[Record]:
    """The records a previous ``build_results_page`` kept in ``records_dir`` (``docs/records``), for figures that
    ``reproduce`` still knows; their PNGs are already in the page's ``figures/`` folder."""
    from hooked_clip1d.reproduce.runner import FIGURES  # every figure module imported

    records = []
    for path in sorted(Path(records_dir).glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"kept record {path} is not valid JSON ({e}); delete it or rerun its figure") from e
        if not is_record(rec):
            raise ValueError(f"kept record {path} is not a reproduce record (no 'figure' / 'verdict')")
        if rec["figure"] in FIGURES:  # (a record of a figure no longer known is dropped unread)
            kept = Record.from_dict(rec, where=f"record {path}")  # validated; converted if older
            records.append(checked_verdict(kept, f"kept record {path}"))  # a hand-edited verdict was counted
    return records


def build_results_page(results_dir: str | Path = "results", out: str | Path = "docs/results.md") -> Path:
    """Write the results page (and copy its PNGs to ``<out>/../figures``, its records to ``<out>/../records``);
    return its path. Records under ``results_dir`` replace the kept ones of the same figure (module docstring)."""
    out = Path(out)
    if not Path(results_dir).is_dir():  # a mistyped folder would rebuild the page from the kept records alone
        raise FileNotFoundError(
            f"results folder {str(results_dir)!r} does not exist (the folder `hooked-clip1d reproduce --out DIR` "
            "wrote; an empty folder rebuilds the page from the kept records in docs/records)"
        )
    fig_dir, rec_dir = out.parent / "figures", out.parent / "records"
    fresh = _fresh_records(results_dir)
    src: dict[str, Path | None] = {r.figure: None for r in load_kept_records(rec_dir)}  # PNGs already on the page
    by_key = {r.figure: r for r in load_kept_records(rec_dir)}
    by_key.update({r.figure: r for r, _ in fresh})
    src.update({r.figure: d for r, d in fresh})
    records = sorted(by_key.values(), key=lambda r: _fig_sort_key(r.figure))
    if not records:
        raise FileNotFoundError(
            f"no reproduce records under {results_dir}: run `hooked-clip1d reproduce <figure> --out {results_dir}` "
            "first, or pass the folder reproduce wrote (--results DIR)"
        )
    fig_dir.mkdir(parents=True, exist_ok=True)
    rec_dir.mkdir(parents=True, exist_ok=True)
    for r, _ in fresh:
        write_record(r, rec_dir / f"{r.figure}.json")
    for path in rec_dir.glob("*.json"):  # kept records of figures reproduce no longer knows
        if path.stem not in by_key:
            path.unlink()
    shown = {name for r in records for name in r.plots}
    for path in fig_dir.glob("*.png"):  # plots of replaced or dropped records: not on the page, not kept
        if path.name not in shown:
            path.unlink()
    paper = [r for r in records if not r.beyond_paper]
    beyond = [r for r in records if r.beyond_paper]
    # a record made without controls (``--no-controls``) proves nothing by its passes, and one read on a zoo cell of
    # its unfinished sweep measures a level, not the sweep's trend (session 45, after a review): shown, never tallied
    tallied = [r for r in paper if not _uncontrolled(r) and not _cells_only(r)]
    counts = {v: sum(r.verdict == v for r in tallied) for v in ICON}
    n_sub = sum(bool(r.details.get("substituted")) for r in tallied)
    on_sub = f" ({n_sub} of them made on substitute models (`--model`), not the zoo's)" if n_sub else ""
    n_free = sum(_uncontrolled(r) for r in paper)
    if n_free:
        on_sub += (
            f"; {n_free} record{'s' if n_free != 1 else ''} made without controls (`--no-controls`) "
            "shown below, not counted"
        )
    n_cells = sum(_cells_only(r) and not _uncontrolled(r) for r in paper)
    if n_cells:
        on_sub += (
            f"; {n_cells} record{'s' if n_cells != 1 else ''} read on zoo cells of an unfinished sweep (a level at "
            "a cell, not the sweep's trend) shown below, not counted"
        )
    lines = [
        "# Results: the paper's figures rerun with hooked_clip1d",
        "",
        "Generated by `hooked-clip1d results-page` from the JSON records of `hooked-clip1d reproduce <figure>`; "
        "do not edit by hand.",
        "",
        *HOW_TO_READ,
        "",
        "Verdicts: " + ", ".join(f"{counts[v]} {v}" for v in ICON) + on_sub + ".",
        "",
        "| figure | the paper says | we measured | verdict | why |",
        "|---|---|---|---|---|",
    ]
    for r in paper:
        lines.append(
            f"| [{r.figure}](#{r.figure}) | {_first_sentence(r.paper)} | {_measured(r)} | "
            f"{ICON[r.verdict]}{' (on a substitute model)' if r.details.get('substituted') else ''} | {_why(r)} |"
        )
    lines += ["", "## Models used", "", registry_table(), ""]
    for section, recs in (("Paper figures", paper), ("Beyond the paper", beyond)):
        if not recs:
            continue
        lines += [f"## {section}", ""]
        for r in recs:
            lines += _record_section(r, fig_dir, out.parent, src[r.figure])
    atomic_write_text(out, "\n".join(lines).rstrip() + "\n")
    return out


# the box at the top of the page: how a verdict is made (docs/fidelity.md has the rules and their dates)
HOW_TO_READ = (
    "> **How to read a verdict.** Each figure's checks are written down before its numbers are computed "
    "(docs/fidelity.md). A check *counts* toward the verdict only if it could have failed:",
    "> - **null control**: it fails on every one of 10 untrained models of the figure's configs (10 distinct "
    "draws: init seeds 0-9 at the model's own init), or, where it thresholds one number, ours lies beyond the most "
    "extreme untrained value;",
    "> - **sweep trends** (Fig. 3, 4a, 10) are judged at seed level against a permutation null over the trained "
    "runs themselves (untrained sweeps are at chance everywhere and cannot test a trend);",
    "> - **invariance**: it gives the same result on every output-preserving reparametrisation of the model "
    "(the CLS embedding moved into position 0, b_Q folded into W_Q, a constant moved between W_E and W_pos, W_Q "
    "and W_K rescaled); a check that moves reads a choice of coordinates and is shown, not counted;",
    "> - **identities** (true by construction) are shown, not counted; an **absence** check (training does *not* "
    "produce something, an upper bound untrained models meet) counts only where ours fails it;",
    "> - **restated checks** (Fig. 4c', 5d': restated after their controls were read) are judged only on six runs "
    "that no one had read (the flagship's recipe at seeds 9-11 on ordered and on order-blind captions): they hold if "
    ">= 2 of the 3 ordered runs hold and every order-blind run and untrained draw fails, fail if < 2 ordered runs "
    "hold, and do not count otherwise (docs/fidelity.md, 2026-11-29);",
    "> - ordering checks fail on ties; flagship figures also need the check at >= 2 of 3 fresh seeds.",
    ">",
    "> *reproduced*: every counted check holds; *partly*: some do; *not reproduced*: none does; *inconclusive*: no "
    "check counts; *not run*: a model or sweep it needs is not trained yet (its line says which). Thresholds the "
    "paper does not state come with a sensitivity line (how the check moves as its threshold moves).",
)


# words a period follows without ending the sentence ("Fig. 4c", "Eq. 23", "e.g. a")
_ABBREVIATIONS = ("Fig", "Figs", "Eq", "Eqs", "App", "Sec", "e.g", "i.e", "vs", "cf", "al", "approx")


def _first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence of ``text`` (at most ``limit`` characters), for the summary table; a period after an
    abbreviation (``_ABBREVIATIONS``: "Fig. 4c", "Eq. 23") does not end it.

    Example:
        >>> _first_sentence("Fig. 8c: a left head and Eq. 23 hold. More text.")
        'Fig. 8c: a left head and Eq. 23 hold'
    """
    import re

    first = text
    for m in re.finditer(r"\. ", text):
        word = re.findall(r"[\w.]+$", text[: m.start()])
        if not (word and word[0].rstrip(".") in _ABBREVIATIONS):
            first = text[: m.start()]
            break
    first = first.rstrip(".")
    return (first if len(first) <= limit else first[: limit - 3].rsplit(" ", 1)[0] + "...").replace("|", "/")


def _measured(r: Record) -> str:
    """The record's summary up to its first ';' (the headline number), for the summary table."""
    return _first_sentence((r.summary or "").split("; ")[0])


def _uncontrolled(r: Record) -> bool:
    """A record whose checks ran without any control (``reproduce --no-controls``): its verdict is its raw checks'.

    Example:
        >>> _uncontrolled(Record.from_dict({"figure": "t", "title": "T", "paper": "p", "models": [], "command": "c",
        ...     "verdict": "reproduced", "summary": "s", "plots": [], "checks": [{"check": "a", "holds": True}]}))
        True
    """
    return r.verdict != "not run" and bool(r.checks) and all(c.null_n is None for c in r.checks)


def _cells_only(r: Record) -> bool:
    """A record judged on zoo cells of its unfinished sweep (``cell_controls.cell_reading``): its checks read a level at
    a few cells, and the figure's claim is the sweep's trend, so its verdict is shown, never tallied.

    Example:
        >>> _cells_only(Record.from_dict({"figure": "t", "title": "T", "paper": "p", "models": [], "command": "c",
        ...     "verdict": "partly", "summary": "s", "plots": [], "checks": [], "numbers": {"cells": {"m": {}}}}))
        True
    """
    return r.verdict != "not run" and bool((r.numbers or {}).get("cells"))


def _why(r: Record) -> str:
    """Why the verdict: how many counted checks hold, and the first counted one that fails."""
    counted = [c for c in r.checks if c.counted]
    if not r.checks:
        return "no checks (not run)"
    if _cells_only(r):
        held = sum(c.holds for c in r.checks)
        return f"{held} of {len(r.checks)} checks hold on zoo cells (a level, not the trend: not tallied)"
    if not counted:
        if all(c.null_n is None for c in r.checks):
            return f"{sum(c.holds for c in r.checks)} of {len(r.checks)} checks hold (no controls: not tallied)"
        return f"no check counts: {_uncounted_reasons(r.checks)}"
    held = [c for c in counted if c.counted_holds]
    failing = [c for c in counted if not c.counted_holds]
    out = f"{len(held)} of {len(counted)} counted checks hold"
    if failing:
        out += "; fails: " + _first_sentence(failing[0].text, 90)
    tc = r.details.get("trained_control")
    if tc is not None and not tc.get("runs"):  # a guard declared but not trained: the verdict lacks it
        out += "; its trained control is not trained yet"
    return out


def _uncounted_reasons(checks: list[Check]) -> str:
    """Why checks do not count, each check by its first reason: its fresh runs did not decide it, a trained control
    passes it, it is shown only (an identity, a restated form, a check at its ceiling: its line says which), it moves
    under a reparametrisation, untrained models pass it.

    Example:
        >>> _uncounted_reasons([Check("a", "a", True, control_passes=["c"], null_passes=0),
        ...                     Check("b", "b", True, secondary="identity"), Check("c", "c", True, null_passes=2)])
        '1 passed by a trained control, 1 shown only (each line says why), 1 passed by untrained models'
    """
    reasons = {
        "not decided by its fresh runs": lambda c: bool(c.fresh_rule) and not c.fresh_rule.startswith("not applied"),
        "passed by a trained control": lambda c: bool(c.control_passes),
        "shown only (each line says why)": lambda c: bool(c.secondary),
        "moved by a reparametrisation": lambda c: bool(c.coordinate_dependent),
        "passed by untrained models": lambda c: bool(c.null_passes),
    }
    counts: dict[str, int] = {}
    for c in checks:
        why = next((r for r, test in reasons.items() if test(c)), "not judged (null control incomplete)")
        counts[why] = counts.get(why, 0) + 1
    return ", ".join(f"{n} {why}" for why, n in counts.items())


def _audit_line(audit: dict[str, Any]) -> str:
    """The record's invariance audit in one line: the moves applied, those skipped and why, and what it could not
    see. An audit that applied no move says it says nothing (before, such a record showed no line at all).

    Example:
        >>> _audit_line({"applied": [], "moved": {}, "skipped": {"cls into W_E": ["m: not admitted"]}})[-70:]
        'es to these models, so it says nothing (cls into W_E: m: not admitted)'
        >>> _audit_line({"applied": ["a", "b"], "moved": {"c": ["a"]}, "skipped": {}, "not_auditable": ["d"]})
        '- **Invariance audit:** 2 moves applied; 1 check moved, 1 not auditable'
    """
    skipped = "; ".join(f"{move}: {', '.join(why)}" for move, why in (audit.get("skipped") or {}).items())
    if not audit.get("applied"):
        line = "no output-preserving move applies to these models, so it says nothing" + (
            f" ({skipped})" if skipped else ""
        )
    else:
        n_moved, n_blind = len(audit.get("moved") or {}), len(audit.get("not_auditable") or [])
        names = f" ({', '.join(audit['applied'])})" if audit.get("skipped") else ""  # which, where some were skipped
        line = (
            f"{len(audit['applied'])} moves applied{names}; {n_moved} check"
            + ("s" if n_moved != 1 else "")
            + f" moved, {n_blind} not auditable"
        )
        if skipped:
            line += f"; skipped: {skipped}"
    if audit.get("blind_unknown"):
        why = audit["blind_unknown"]
        line += f"; which checks it cannot see is unknown (the figure does not run on untrained weights: {why})"
    return f"- **Invariance audit:** {line}"


def _trained_control_line(tc: dict[str, Any], judged_elsewhere: frozenset[str] = frozenset()) -> str:
    """The record's trained control (verdicts v3): which runs guarded its checks and what they passed, or why none
    did. A check in ``judged_elsewhere`` (a restated check its fresh runs judge) is not said to be removed by it.

    Example:
        >>> _trained_control_line({"status": "not in the zoo yet", "runs": [], "passes": {}})
        '- **Trained control:** not in the zoo yet: the checks it guards are judged on untrained draws and seeds only'
        >>> _trained_control_line({"status": "2 run(s) of 'c'", "runs": ["c", "s/runs/1"], "passes": {"a": ["c"]}})
        "- **Trained control:** 2 run(s) of 'c'; 1 check passed by a control run, so not counted"
        >>> _trained_control_line({"status": "c", "runs": ["c"], "passes": {}, "unguarded": {"b": "why"}})
        '- **Trained control:** c; it fails every check it guards; 1 counted check not guarded by it (why)'
        >>> _trained_control_line({"status": "1 run(s)", "runs": ["c"], "passes": {"a": ["c"]}}, frozenset({"a"}))
        '- **Trained control:** 1 run(s); 1 check passed by a control run, judged on its fresh runs instead'
    """
    un = tc.get("unguarded") or {}  # a control that guards some checks only (Fig. 22: R3), the others with why
    reasons = "; ".join(dict.fromkeys(un.values()))
    other = f"{len(un)} counted check{'s' if len(un) != 1 else ''} not guarded by it ({reasons})" if un else ""
    if not tc.get("runs"):
        why = "the checks it guards are judged on untrained draws and seeds only"
        return f"- **Trained control:** {tc.get('status', '')}: {why}" + (f"; {other}" if other else "")
    passed = set(tc.get("passes") or {})
    removed, elsewhere = len(passed - judged_elsewhere), len(passed & judged_elsewhere)
    said = [f"{removed} check{'s' if removed != 1 else ''} passed by a control run, so not counted"] if removed else []
    if elsewhere:
        said.append(
            f"{elsewhere} check{'s' if elsewhere != 1 else ''} passed by a control run, "
            "judged on its fresh runs instead"
        )
    if other:
        said = [*(said or ["it fails every check it guards"]), other]
    return f"- **Trained control:** {tc.get('status', '')}; " + ("; ".join(said) or "it fails every check")


def _check_context(c: Check) -> str:
    """What a check's null control, seeds and standing add to its line (empty for records without controls)."""
    if c.null_n is None:
        return ""
    parts = [f"untrained: {c.null_passes}/{c.null_n} pass"]
    if c.null_extreme is not None:
        parts.append(f"ours {c.value:.3g} vs untrained extreme {c.null_extreme:.3g}")
    if c.seeds:
        parts.append("seeds " + " ".join(f"{s}:{'y' if ok else 'n'}" for s, ok in sorted(c.seeds.items(), key=_seed)))
    if c.permutation_p is not None:
        parts.append(f"permutation p = {c.permutation_p:.4f} over the trained runs: counts by it")
    if c.trained_control:
        parts.append("trained control: " + " ".join(f"{k}:{'y' if ok else 'n'}" for k, ok in c.trained_control.items()))
    if c.null_incomplete:
        parts.append(f"not counted: the null control is incomplete ({c.null_incomplete})")
    if c.coordinate_dependent:
        parts.append("not counted: moves under " + ", ".join(c.coordinate_dependent) + " (coordinate-dependent)")
    if c.not_auditable:
        parts.append(
            "invariance audit: not auditable (the same on untrained weights, so no move can be seen to change it: "
            "it reads stored numbers, or fails or holds whatever the weights)"
        )
    judged = c.fresh_rule in ("reproduced", "inconclusive", "not reproduced")  # the rule was applied
    if c.fresh_runs:
        parts.append("fresh runs " + " ".join(f"{k}:{'y' if ok else 'n'}" for k, ok in c.fresh_runs.items()))
    if c.fresh_rule and not judged:  # not judged on its fresh runs: why (the reasons below may add to it)
        parts.append(f"fresh runs: {c.fresh_rule}")
    if judged:  # the rule alone decides (the seeds and the trained control above are reported beside it)
        rule = f"the pre-registered rule on its fresh runs: **{c.fresh_rule}**"
        parts.append(rule + ("" if c.counted else " (not counted)"))
    elif c.control_passes:
        parts.append(
            "**not counted**: a trained control that cannot know what it claims passes it ("
            + ", ".join(c.control_passes)
            + ")"
        )
    elif c.secondary:
        parts.append(f"not counted: {c.secondary}")
    elif c.absence:  # an upper bound untrained models meet too (controls.counted_checks)
        parts.append(
            "absence check: untrained models meet it too, so "
            + ("a trained fail counts" if c.counted else "a trained pass is **not counted**")
        )
    elif not c.counted and not c.coordinate_dependent and not c.null_incomplete and not c.fresh_rule:
        parts.append("**not counted** (an untrained model passes it)")
    elif c.counted_holds is not None and c.counted_holds != c.holds:
        parts.append("counts as failing (" + ("fresh seeds" if c.fresh_holds is not None else "beyond-null rule") + ")")
    return " (" + "; ".join(parts) + ")"


def _seed(item: tuple[str, bool]) -> int:
    return int(item[0])


def _when(r: Record) -> str:
    """When the record was made and, for a record re-judged later, when and under what: the null control
    (``rejudge_record``) or a trained control pre-registered after it (``guard_record``)."""
    rejudged = r.details.get("rejudged")
    if rejudged and rejudged.get("under") == "trained control":
        earlier = rejudged.get("earlier")
        before = f"under the null control on {earlier['on']} and " if earlier else ""
        which = (
            "its own trained control, per check"  # Fig. 7's (replicates.OWN_CONTROLS), pre-registered before it
            if "its own trained control" in rejudged.get("from", "")
            else "the trained control pre-registered after it"
        )
        return (
            f" (recorded {r.recorded or 'on an unknown date'}; its recorded checks re-judged {before}on "
            f"{rejudged['on']} under {which}: `{r.command} --guard-record docs/records`)"
        )
    if rejudged:
        again = f"`{r.command} --rejudge-record docs/records`"
        return (
            f" (recorded {r.recorded or 'on an unknown date'}; its recorded checks re-judged "
            f"{rejudged['on']} under the null control: {again})"
        )
    return f" (recorded {r.recorded})" if r.recorded else ""


def _record_section(r: Record, fig_dir: Path, page_dir: Path, src: Path | None = None) -> list[str]:
    """The record's section of the page; its PNGs are copied from ``src`` (the folder a fresh record was read
    from; None for a kept record, whose PNGs are on the page already)."""
    d = r.details
    lines = [
        f'### {r.figure}: {r.title} <a id="{r.figure}"></a>',
        "",
        # a beyond-the-paper record's text starts with "Question: " itself (FigureSpec.paper); say it once
        f"- **Question:** {r.paper.removeprefix('Question: ')}" if r.beyond_paper else f"- **Paper:** {r.paper}",
        f"- **Ours:** {r.summary}",
        f"- **Command:** `{r.command}`" + _when(r),
    ]
    if not r.beyond_paper:
        lines.insert(4, f"- **Verdict:** {ICON[r.verdict]}")
    if r.models:
        ep, plan = d.get("model_epochs", {}), d.get("model_epochs_planned", {})

        def epochs(m: str) -> str:
            if m not in ep:
                return ""
            if plan.get(m, ep[m]) != ep[m]:
                return f" (**partial run: {ep[m]} of {plan[m]} epochs**)"
            return f" ({ep[m]} epochs)"

        lines.append("- **Models:** " + ", ".join(f"`{m}`" + epochs(m) for m in r.models))
    if d.get("substituted"):  # made with --model: the verdict is the substitute's, not the zoo model's
        lines.append(
            "- **Substituted:** made on "
            + ", ".join(f"{v} in place of `{k}`" for k, v in d["substituted"].items())
            + " (`reproduce --model`): the verdict and numbers are that model's, not the zoo model's"
        )
    if r.checks:
        lines.append("- **Checks:**")
        lines += [f"  - [{'x' if c.holds else ' '}] {c.text}{_check_context(c)}" for c in r.checks]
    for check, steps in (d.get("sensitivity") or {}).items():
        moves = ", ".join(f"{t:g}: {'holds' if ok else 'fails'}" for t, ok in steps)
        lines.append(f'  - sensitivity of "{_first_sentence(check, 80)}" to its threshold: {moves}')
    if d.get("replicates"):
        rep = d["replicates"]
        lines.append(
            f"- **Seeds:** the shipped model (in-sample), study seeds {rep.get('study_seeds', [])}, fresh seeds "
            f"{rep.get('fresh_seeds', [])}" + (f"; {rep['note']}" if rep.get("note") else "")
        )
    if d.get("invariance_audit") is not None:
        lines.append(_audit_line(d["invariance_audit"]))
    if d.get("trained_control") is not None:
        judged = frozenset(c.text for c in r.checks if c.fresh_rule in ("reproduced", "inconclusive", "not reproduced"))
        lines.append(_trained_control_line(d["trained_control"], judged))
    if d.get("fresh_runs") is not None:
        fr = d["fresh_runs"]
        lines.append(f"- **Fresh runs (they alone judge the restated checks):** {fr['status']}")
        lines += [f"  - {label}: {text}" for label, text in fr.get("summaries", {}).items()]
    if d.get("null_control", {}).get("errors"):
        lines.append(f"- **Null control errors:** {d['null_control']['errors']}")
    if d.get("notes"):
        lines.append(f"- **Notes:** {d['notes']}")
    if d.get("table"):
        lines += ["", *d["table"]]
    lines.append("")
    for name in r.plots:
        if src is not None and (png := Path(src) / name).exists():
            atomic_write(fig_dir / name, lambda tmp, png=png: shutil.copyfile(png, tmp))
        if (fig_dir / name).exists():  # a kept record's PNG was copied when its record was fresh
            lines += [f"![{name}]({(fig_dir / name).relative_to(page_dir).as_posix()})", ""]
    return lines
