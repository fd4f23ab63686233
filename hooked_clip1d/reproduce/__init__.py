"""``hooked-clip1d reproduce <figure>``: rerun one of the paper's experiments on the shipped models.

Each figure is a ``FigureSpec``: the paper's claim (quoted numbers), the zoo models it needs, and a function that
measures ours, draws the PNG and states **checks** — named, computed criteria comparing ours with the paper. The
verdict follows from the checks alone: ``reproduced`` (all hold), ``partly`` (some hold) or ``not reproduced``
(none hold); a figure whose models are not in the zoo yet is ``not run`` and says which model is missing. A figure
built on an unfinished sweep is judged on every run's latest evaluation once each run of the grid has one
(``sweep.progress_table``; an interim reading, at most ``partly``), else on the zoo models that are cells of its
grid (``grid_cell``) where it has ``cell_checks`` — at most ``partly``, as cells alone do not measure the sweep's
trend — and is ``not run`` otherwise.
``reproduce`` writes ``<out>/<figure>/<figure>.json`` and its PNGs; ``reproduce.results_page`` turns the JSON files
into ``docs/results.md``. ``rejudge_record`` judges a sweep figure's kept record again under the null control
without its sweep's runs (records made before the controls existed); ``guard_record`` judges a kept record again under
a trained control pre-registered after it, keeping its seeds and null control as recorded.

The package, by module:

- ``core``: ``FigureSpec``, ``Outcome``, ``verdict_of``, the zoo model names, ``SWEEPS_DIR``, the record writing.
- ``mechanism_figs``: the flagship's mechanism (Sec. 4-5, App. D-F: fig4b, 4c, 5d, 5e, 13, 14, 15);
  ``dynamics_figs``: the generalization dynamics (App. C: fig11, fig11a).
- ``sweep_figs``: figures built on a sweep (fig3, 4a, 10, 21, 21b) and ``grid_cell`` for unfinished sweeps.
- ``appendix_figs``: other architectures and captions (Sec. 6, App. I, J, L: fig8, 18, 19, 20, 23).
- ``pruned_heads``: App. K's pruned heads (fig22), with the pre-registered R1-R3 over the 14 retrained subsets.
- ``open_questions``: the beyond-the-paper experiments x2-x5 and x7 (the paper's open questions);
  ``spatial_id_studies``: x1 and x6 (the spatial-IDs paper's methods); ``recipe_study``: x8, the training-recipe study.
- ``dynamics_studies``: the verdict studies x10-x13 (dynamics, fresh seeds, Fig. 4a at fixed steps, emergence);
  ``decay_studies``: x14 and x15, Fig. 13's share at equal decay exposure and over the weight decay;
  ``temperature_study``: x16; ``negatives_study``: x17, the false-negatives study; ``dissolution_study``: x18, why
  the mechanism dissolves; ``oscillation_study``: x19, the RoPE model's oscillation; ``interaction_study``: x21, its
  interaction; ``captioning_study``: x22, an autoregressive captioner (Open Question 4); ``circuits``: circuit
  discovery against the shipped ground truth.
- ``runner``: ``reproduce()``; it imports every figure module of the package (all but ``NOT_FIGURE_MODULES``), so
  ``FIGURES`` (``core``) holds every figure.

A figure declares itself: its module ends with ``SPECS = register(FigureSpec(...), ...)``. To add a figure, write
its function and spec in a module of this package (a new module is found on its own); nothing else lists it.

Example:
    >>> import tempfile
    >>> rec = reproduce("fig11", out_dir=tempfile.mkdtemp(), controls=False)  # controls: the null control too
    >>> rec["verdict"] in VERDICTS, rec["figure"]
    (True, 'fig11')
"""

from hooked_clip1d.reproduce.core import (
    ABLATE_EP,
    FIGURES,
    FLAGSHIP,
    FULL,
    NO_QK_BIAS,
    NONGEN,
    NONGEN_NO_QK_BIAS,
    PRUNED,
    SMALL_INIT,
    SPATIAL_ID_MODELS,
    STANDARD_LOSS,
    SWEEPS_DIR,
    VERDICTS,
    VISION2,
    FigureSpec,
    Outcome,
    register,
    verdict_of,
)
from hooked_clip1d.reproduce.runner import (  # imports every figure module: FIGURES is complete
    guard_record,
    rejudge_record,
    reproduce,
)

__all__ = [
    "ABLATE_EP",
    "FIGURES",
    "FLAGSHIP",
    "NO_QK_BIAS",
    "FULL",
    "NONGEN",
    "NONGEN_NO_QK_BIAS",
    "PRUNED",
    "SMALL_INIT",
    "SPATIAL_ID_MODELS",
    "STANDARD_LOSS",
    "SWEEPS_DIR",
    "VERDICTS",
    "VISION2",
    "FigureSpec",
    "Outcome",
    "register",
    "guard_record",
    "rejudge_record",
    "reproduce",
    "verdict_of",
]
