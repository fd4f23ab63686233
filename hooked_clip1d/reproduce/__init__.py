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
into ``docs/results.md``.

The package, by module:

- ``core``: ``FigureSpec``, ``Outcome``, ``verdict_of``, the zoo model names, ``SWEEPS_DIR``, the record writing.
- ``mechanism_figs``: the flagship's mechanism (Sec. 4-5, App. D-F: fig4b, 4c, 5d, 5e, 6, 7, 11, 13, 14, 15).
- ``sweep_figs``: figures built on a sweep (fig3, 4a, 10, 21, 21b) and ``grid_cell`` for unfinished sweeps.
- ``appendix_figs``: other architectures and captions (Sec. 6, App. I-L: fig8, 18, 19, 20, 22, 23).
- ``beyond``: the beyond-the-paper experiments x1-x7; ``recipe_study``: x8, the training-recipe study.
- ``runner``: ``reproduce()`` and ``FIGURES``, every figure's spec by key.

Each figure module ends with its ``SPECS``; to add a figure, write its function and spec there and add its key to
``runner.ORDER``.

Example:
    >>> import tempfile
    >>> rec = reproduce("fig11", out_dir=tempfile.mkdtemp())
    >>> rec["verdict"] in VERDICTS, rec["figure"]
    (True, 'fig11')
"""

from hooked_clip1d.reproduce.appendix_figs import _fig18, _fig19, _fig22, _fig23
from hooked_clip1d.reproduce.beyond import (
    STEER_ALPHAS,
    _x_mirror_swap,
    _x_single_head_seeds,
    _x_small_init,
    _x_spatial_ids,
    _x_train_ablate_ep,
    _x_two_layer,
)
from hooked_clip1d.reproduce.core import (
    ABLATE_EP,
    FLAGSHIP,
    FULL,
    NONGEN,
    PRUNED,
    SMALL_INIT,
    SPATIAL_ID_MODELS,
    SWEEPS_DIR,
    VERDICTS,
    VISION2,
    FigureSpec,
    Outcome,
    verdict_of,
)
from hooked_clip1d.reproduce.mechanism_figs import (
    FIG4B_IMAGES,
    PAPER_XWX_SHARE,
    _fig4b,
    _fig4c,
    _fig5d,
    _fig5e,
    _fig6,
    _fig7,
    _fig11,
    _fig13,
    _fig14,
    _fig15,
)
from hooked_clip1d.reproduce.recipe_study import _x_recipe
from hooked_clip1d.reproduce.runner import FIGURES, reproduce
from hooked_clip1d.reproduce.sweep_figs import _fig4a, _fig10, _fig21, _fig21b, grid_cell

__all__ = [
    "ABLATE_EP",
    "FIG4B_IMAGES",
    "FIGURES",
    "FLAGSHIP",
    "FULL",
    "NONGEN",
    "PAPER_XWX_SHARE",
    "PRUNED",
    "SMALL_INIT",
    "SPATIAL_ID_MODELS",
    "STEER_ALPHAS",
    "SWEEPS_DIR",
    "VERDICTS",
    "VISION2",
    "FigureSpec",
    "Outcome",
    "grid_cell",
    "reproduce",
    "verdict_of",
    # the figure functions (private: called through FIGURES; re-exported for tests and interactive use)
    "_fig4a",
    "_fig4b",
    "_fig4c",
    "_fig5d",
    "_fig5e",
    "_fig6",
    "_fig7",
    "_fig10",
    "_fig11",
    "_fig13",
    "_fig14",
    "_fig15",
    "_fig18",
    "_fig19",
    "_fig21",
    "_fig21b",
    "_fig22",
    "_fig23",
    "_x_mirror_swap",
    "_x_recipe",
    "_x_single_head_seeds",
    "_x_small_init",
    "_x_spatial_ids",
    "_x_train_ablate_ep",
    "_x_two_layer",
]
