"""The building blocks every figure module shares: what a figure is and what it returns, the verdict rule, the zoo
model names and where the sweep specs live, and the writing of a figure's record.

- ``FigureSpec``: a figure's key, title, the paper's claim, the zoo models it needs, its function and (for a figure
  built on a sweep) the sweep spec it reads and the checks on the zoo's cells of that sweep's grid.
- ``Outcome``: what a figure function returns (numbers, summary, checks, PNG figures, notes, a table).
- ``verdict_of``: the verdict from the checks alone; ``VERDICTS`` lists every verdict a record can have.
- ``sweeps_root``: where the figure being reproduced reads sweeps' runs (``reproduce``'s ``sweeps_dir``).
- ``SWEEPS_DIR``: the shipped sweep specs (``hooked_clip1d/sweeps/<sweep>.toml``). Read it as ``core.SWEEPS_DIR`` at
  call time (tests point it elsewhere with ``monkeypatch.setattr(core, "SWEEPS_DIR", ...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from hooked_clip1d.files import atomic_write
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.records import VERDICTS as VERDICTS  # the verdicts and their rule live with the records
from hooked_clip1d.reproduce.records import check_id
from hooked_clip1d.reproduce.records import verdict_of as verdict_of

# zoo models (hooked_clip1d/pretrained) the figures use by name
FLAGSHIP = "simplified-ntot20-n2-10"  # the default recipe's model, seed 0
# the flagship until 2026-11-28 (cls-exempt-init002, the standard CLIP loss): x18's model, x-circuits' ground truth
STANDARD_LOSS = "simplified-ntot20-n2-10-standard-loss"
# the pre-study default (no q/k biases; the flagship until 2026-11-26): the fig4a sweep's cell and PRUNED's parent
NO_QK_BIAS = "simplified-ntot20-n2-10-no-qk-bias"
SMALL_INIT = "simplified-ntot20-n2-10-init002"  # the flagship's recipe with init_std = 0.02 (beyond the paper)
ABLATE_EP = "ablate-ep-ntot20-n2-10-init002"  # SMALL_INIT's recipe trained with EP removed (beyond the paper)
PRUNED = "pruned-keep-h2h3-ntot20-n2-10"  # NO_QK_BIAS with heads 0, 1 pruned, retrained 10,000 epochs (App. K)
FULL = "full-ntot20-n2-10"  # the full model (Fig. 3), Ntot = 20, n2 = 10: one cell of the fig3 sweep
NONGEN = "simplified-ntot10-n2-5"  # App. F's non-generalizing model (Fig. 15), the default recipe's, seed 0
NONGEN_NO_QK_BIAS = "simplified-ntot10-n2-5-no-qk-bias"  # App. F's model under fig4a's recipe: a cell of its sweep
VISION2 = "vision2-ntot25-n2-15"  # the 2-layer vision encoder of App. L (Fig. 23)
SPATIAL_ID_MODELS = (FLAGSHIP, SMALL_INIT, "rope-ntot20-n2-15", NONGEN)  # x6-spatial-ids' models

# the shipped sweep specs, hooked_clip1d/sweeps/<sweep>.toml (read as core.SWEEPS_DIR: tests patch it)
SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"

# reproduce()'s sweeps_dir while it runs a figure (None: sweeps_home()); read it with sweeps_root()
_SWEEPS_ROOT: ContextVar[Path | None] = ContextVar("hooked_clip1d_sweeps_root", default=None)


def sweeps_root() -> Path:
    """Where a figure function reads sweeps' runs: the ``sweeps_dir`` given to the ``reproduce`` running it, else
    ``sweeps.runner.sweeps_home()``. A figure that reads runs beside its models (x18 reads the false-negatives
    study's) must use this, not ``sweeps_home()``, or ``reproduce --sweeps-dir`` would not reach it.

    Example:
        >>> with reading_sweeps_from("/data/sweeps"):
        ...     str(sweeps_root())
        '/data/sweeps'
    """
    root = _SWEEPS_ROOT.get()
    if root is not None:
        return root
    from hooked_clip1d.sweeps.runner import sweeps_home

    return sweeps_home()


@contextmanager
def reading_sweeps_from(sweeps_dir: str | Path | None) -> Iterator[None]:
    """Within the block, ``sweeps_root()`` is ``sweeps_dir`` (None: ``sweeps_home()``); restored after it."""
    token = _SWEEPS_ROOT.set(Path(sweeps_dir) if sweeps_dir is not None else None)
    try:
        yield
    finally:
        _SWEEPS_ROOT.reset(token)


@dataclass
class Outcome:
    """What a figure function returns: numbers (JSON-able), a one-paragraph summary, checks and figures."""

    numbers: dict[str, Any]
    summary: str
    checks: list[tuple[str, bool]]
    figures: dict[str, Figure]
    notes: str = ""
    table: tuple[str, ...] = ()  # markdown table lines shown under the checks on the results page
    not_run: str = ""  # set when the experiment measured is not the paper's (e.g. a step skipped): verdict "not run"
    # a check's scalar and the direction the paper claims (">" larger, "<" smaller): where untrained models pass the
    # check, it counts only if this value lies beyond the most extreme untrained value (controls.counted_checks)
    values: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    # checks shown but not counted toward the verdict, with why (true by construction, or coordinate-dependent)
    secondary: dict[str, str] = dataclasses.field(default_factory=dict)
    # absence checks: the claim is that training does NOT produce something (an upper bound untrained models meet
    # too); where an untrained model passes one, a trained pass does not count and a trained fail counts as a fail
    absence: tuple[str, ...] = ()
    # checks whose threshold the paper does not state: {check: [(threshold, holds), ...]}, how the check's outcome
    # moves as its threshold moves (shown beside the verdict; the pre-registered threshold still decides)
    sensitivity: dict[str, list[tuple[float, bool]]] = dataclasses.field(default_factory=dict)
    # checks judged against a permutation null over the trained runs (sweep figures): {check: p-value}; such a check
    # counts by its own null (controls.counted_checks), the untrained null is shown beside it
    permutation: dict[str, float] = dataclasses.field(default_factory=dict)
    # a check's stable id where the figure declares one ({check: id}; kept when its sentence is reworded); the others
    # get records.check_id(sentence)
    check_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    # trained controls the figure computes itself ({check: {control label: holds}}; Fig. 7: its vision tower with
    # text towers trained apart): a counted check some control passes does not count (replicates.apply_own_controls)
    own_controls: dict[str, dict[str, bool]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> Outcome:
        """This outcome; an error if a check's truth is None or NaN (a reading that could not be made), never a fail
        that lets a trained pass count, nor a pass: the verdict machinery's rule. Run at construction and again on
        every figure run the verdict reads (figures that amend ``checks`` after construction). A figure that cannot
        measure a check on some model (e.g. a circuit an untrained model does not have) says so by raising; a null
        draw that raises is a failed control run (``controls.null_control``), re-drawn.

        Example:
            >>> out = Outcome({}, "", [("a", True)], {})
            >>> out.checks[0] = ("a", None)  # a figure that amends its checks after construction
            >>> out.validate()
            Traceback (most recent call last):
            ...
            ValueError: check 'a' has no truth value (None): a reading that could not be made is an error
        """
        named = dict(self.checks)
        for name, ok in [
            *self.checks,
            *((f"{c} on {k}", v) for c, d in self.own_controls.items() for k, v in d.items()),
        ]:
            if ok is None or (isinstance(ok, float) and ok != ok):
                raise ValueError(
                    f"check {name!r} has no truth value ({ok!r}): a reading that could not be made is an error"
                )
        unknown = [c for c in self.own_controls if c not in named]
        if unknown:
            raise ValueError(f"own_controls name checks the outcome does not have: {unknown}")
        return self

    def id_of(self, check: str) -> str:
        """The stable id of check ``check`` (the figure's own, else derived from the sentence)."""
        return self.check_ids.get(check) or check_id(check)


@dataclass(frozen=True)
class FigureSpec:
    key: str  # "fig4c"
    title: str  # what the figure shows
    paper: str  # the paper's claim, with its numbers (or, beyond the paper, the question asked)
    models: tuple[str, ...]  # zoo models needed
    run: Callable[[dict[str, CLIP1D]], Outcome]
    beyond_paper: bool = False  # an experiment the paper does not run (own section of the results page)
    sweep: str | None = None  # a sweep spec in hooked_clip1d/sweeps/ whose results the figure reads
    extra_sweeps: tuple[str, ...] = ()  # further sweeps whose finished runs are added to its rows (key "sweep")
    # While the sweep is unfinished: checks on the zoo models (``models``) that are cells of its grid, given their
    # manifests. The verdict is then at most "partly": the sweep's trend itself is untested.
    cell_checks: Callable[[dict[str, dict[str, Any]]], list[tuple[str, bool]]] | None = None
    data: str = ""  # the data its figures show (named under each PNG with the models)
    # read the checks again on every seed of the shipped model's recipe found in the replicate sweeps (study seeds
    # 0-2, fresh seeds 3-5): a verdict then holds only where it holds at >= 2 of the 3 fresh seeds
    replicate: bool = False

    @property
    def command(self) -> str:
        return f"hooked-clip1d reproduce {self.key}"


# every figure by key, in declaration order: a figure module declares its specs with ``register`` (the runner imports
# every module of the package, so a new module's figures need no other entry; the CLI listing and the results page
# follow from these declarations)
FIGURES: dict[str, FigureSpec] = {}


def register(*specs: FigureSpec) -> tuple[FigureSpec, ...]:
    """Declare figures: add each spec to ``FIGURES`` under its key (two specs with one key are an error)."""
    for spec in specs:
        if spec.key in FIGURES and FIGURES[spec.key] is not spec:
            raise ValueError(f"two figure specs have the key {spec.key!r}")
        FIGURES[spec.key] = spec
    return specs


def outcome_record(res: Outcome, out: Path, spec: FigureSpec, source: str) -> dict[str, Any]:
    """The record's outcome fields; each figure is saved as ``<key>_<name>.png`` with a footer naming ``source``
    (the zoo models or the sweep it shows) and ``spec.data``."""
    figure, data = spec.key, spec.data
    from hooked_clip1d.visualization.style import save_compact_png, stamp

    plots = []
    for name, fig in res.figures.items():
        path = out / f"{figure}_{name}.png"
        shown = data or "each model's own dataset"
        stamp(fig, source, f"{shown} (`hooked-clip1d reproduce {figure}`)")
        try:
            atomic_write(path, lambda tmp, fig=fig: save_compact_png(fig, tmp))
        finally:
            plt.close(fig)
        plots.append(path.name)
    return {
        "verdict": "not run" if res.not_run else verdict_of(res.checks),
        "summary": res.summary + (f" Not run as in the paper: {res.not_run}" if res.not_run else ""),
        "notes": res.notes,
        **({"table": list(res.table)} if res.table else {}),
        **(
            {"sensitivity": {c: [[t, bool(ok)] for t, ok in v] for c, v in res.sensitivity.items()}}
            if res.sensitivity
            else {}
        ),
        "checks": [{"id": res.id_of(c), "check": c, "holds": bool(ok)} for c, ok in res.checks],
        "numbers": res.numbers,
        "plots": plots,
    }
