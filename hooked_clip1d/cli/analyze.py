"""``hooked-clip1d analyze <analysis> --model NAME``: run one family of analyses on a model, print a table and
write PNG + JSON.

Each family is a function ``(model, options) -> Report`` in ``cli.families``, declared with ``@family(name,
what=..., data=..., options=...)`` and built on ``cli.family_api`` (``Report``, ``family``, the option helpers) and
the public functions of ``hooked_clip1d.analysis`` and ``hooked_clip1d.visualization``. ``FAMILIES`` is filled by
importing ``cli.families`` (this module does); the CLI's listing, option checks and figure footers follow from the
declarations, so a new family is one decorated function. ``run_analysis`` writes ``<out>/<analysis>.json`` and
``<out>/<analysis>_<plot>.png``.

Example:
    >>> import tempfile
    >>> rep = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tempfile.mkdtemp())
    >>> sorted(rep["files"])[0].endswith(".json")
    True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

import hooked_clip1d.cli.families  # noqa: F401 (its @family declarations fill FAMILIES)
from hooked_clip1d.analysis.mechanism.heads import to_jsonable
from hooked_clip1d.cli.family_api import FAMILIES
from hooked_clip1d.files import atomic_write, atomic_write_text
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.modes import eval_mode
from hooked_clip1d.settings.progress import no_bars

__all__ = ["FAMILIES", "check_options", "describe_analyses", "run_analysis"]


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


def describe_analyses() -> str:
    """Every analysis family, what it does and its options, one block each (the CLI's listing)."""
    lines = []
    for name, fam in FAMILIES.items():
        lines.append(f"  {name:<10} {fam.what}")
        lines += [f"             -o {k}=...  {v}" for k, v in fam.options.items()]
    return "\n".join(lines)


def run_analysis(
    analysis: str,
    model: str | CLIP1D,
    out_dir: str | Path = "results/analyze",
    *,
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """Run ``analysis`` (a key of ``FAMILIES``) on a pretrained name, run directory, model file or ``CLIP1D``;
    ``progress=False``: no progress bar (a family that trains, e.g. pruning with ``epochs``)."""
    check_options(analysis, options)
    from hooked_clip1d.pretrained import model_name, resolve_model

    if isinstance(model, str):
        name, model = model, resolve_model(model)
    else:
        name = model_name(model)
    with eval_mode(model), no_bars(on=not progress):  # the caller's mode comes back
        report = FAMILIES[analysis].run(model, options)
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
