"""Training dynamics: the paper's mechanism read checkpoint by checkpoint along a training trajectory.

The paper's story is about how its mechanism forms (App. C: single-object, then seen-pair, then unseen-pair
generalization; Sec. 4-6: the EP gradient that breaks left/right symmetry). ``emergence(checkpoints)`` walks a
trajectory (``[(epoch, model), ...]``, e.g. a run's ``snapshots/`` or a zoo trajectory) and returns, per checkpoint: a
fixed-batch loss (the standard CLIP loss, all negatives, whatever the run trained with), the three generalization
accuracies and the probe's unseen-pair accuracy, per-head P(left) / P(right), the EP CLS row's std and rank correlation
per head, the invariant ablation (``mechanism.ablate_cls_key_position``), the Fig. 13 XW_QKX^T share per head, the
per-head rank of ``W_QK``, the decay exposure lr x w x steps, and the checks of the dynamics study; plus, per check, the
first epoch at which it holds and, where it stops holding, the last (``Emergence.windows``).

``dynamics_checks(report)`` states the dynamics study's five checks on one ``mechanism_report``; they were written
in docs/fidelity.md ("The dynamics study") before its runs, and ``picture_holds`` is their conjunction.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=8, d_model=16, d_head=4)
    >>> data = DataConfig(n_labels=8, n_heldout=3, n2=3)
    >>> ckpts = [(e, CLIP1D(cfg, seed=e).eval()) for e in (0, 10)]
    >>> for _, m in ckpts:
    ...     m.data_config = data
    >>> em = emergence(ckpts)
    >>> [r["epoch"] for r in em.rows], em.windows["generalizes"]["first"]  # untrained models do not generalize
    ([0, 10], None)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hooked_clip1d.analysis.hooks import check_eval
from hooked_clip1d.analysis.mechanism.report import PROBE, mechanism_report, unseen_probe
from hooked_clip1d.analysis.metrics import check_model
from hooked_clip1d.data.dataset import Dataset, build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.settings import TrainConfig
from hooked_clip1d.settings.checks import check_int

# Fig. 11's levels (App. C): single-object and seen-pair generalization at 0.95, unseen-pair at 0.8 (the figure's
# check, reproduce.dynamics_figs, and analyze dynamics's accuracy report read the same levels)
FIG11_LEVELS = {"single": 0.95, "seen": 0.95, "unseen": 0.8}
ROW_VERSION = 2  # rows cached in a run's emergence.json; 2: the restated checks and the temperature added
# the dynamics study's checks (docs/fidelity.md, written before its runs), in order
DYNAMICS_CHECKS = ("generalizes", "fig13_split", "fig14_heads", "fig4c_split", "invariant_ablation")
CHECK_TEXT = {
    "generalizes": "unseen-pair accuracy >= 0.8 (probe)",
    "fig13_split": "Fig. 13: every head's XW_QKX^T share in [0.76, 0.91], max - min over heads >= 0.10",
    "fig14_heads": "Fig. 14: >= 3 heads with a monotonic (|Spearman| >= 0.9), non-flat (std >= 0.1) EP CLS row",
    "fig4c_split": "Fig. 4c: >= 1 head biased to one side and >= 2 others to the other side (P >= 0.6 each)",
    "invariant_ablation": "invariant ablation: generalizes, and the CLS key-position ablation gives 0.4-0.6 "
    "with label-set >= 0.8",
}


# the restated checks (mechanism checks v2; docs/fidelity.md, "The temperature study", written before its runs):
# each reads outputs or quantities that no output-preserving reparametrisation changes
# (analysis.mechanism.reparametrize)
INVARIANT_CHECKS = ("generalizes", "fig4c_split", "fig14_whole_query", "invariant_ablation")
# reported beside them, not counted: coordinate-dependent (the b_Q fold, the CLS move change them)
SECONDARY_CHECKS = ("fig13_split", "ep_only_ablation")
CHECK_TEXT |= {
    "fig14_whole_query": "Fig. 14 (whole CLS query): >= 3 heads whose CLS key-position row q_CLS . W_pos[j] W_K is "
    "monotonic (|Spearman| >= 0.9) and not flat (std >= 0.1)",
    "ep_only_ablation": "Fig. 5e (EP only; coordinate-dependent): ablating EP gives 0.3-0.7 and lowers accuracy by "
    ">= 0.15",
    "mechanism_v2": "the restated checks together (generalizes, Fig. 4c split, Fig. 14 whole query, invariant "
    "ablation)",
}


def fig4c_split(p_left: Sequence[float], p_right: Sequence[float], bias: float = 0.6) -> bool:
    """Fig. 4c's split (M2): >= 1 head with P(left) >= ``bias`` and >= 2 others with P(right) >= ``bias``, or the
    mirror. ``p_left`` / ``p_right`` per head, as ``mechanism_report`` gives them (``heads.cls_object_bias``).

    Example:
        >>> fig4c_split([0.9, 0.7, 0.65, 0.1], [0.1, 0.3, 0.35, 0.8]), fig4c_split([0.9, 0.1], [0.1, 0.9])
        (True, False)
    """
    left = sum(p >= bias for p in p_left)
    right = sum(p >= bias for p in p_right)
    return (left >= 1 and right >= 2) or (right >= 1 and left >= 2)


def invariant_checks(report: dict[str, Any], split: str = PROBE) -> list[tuple[str, bool]]:
    """The restated checks M1-M4 (``INVARIANT_CHECKS``) and the secondary S1-S2 (``SECONDARY_CHECKS``) on one
    ``mechanism.mechanism_report`` (docs/fidelity.md, the temperature study's pre-registration).

    Example:
        >>> r = {"acc": {"s": {"baseline": [0.95, 1.0], "CLS-key-position": [0.5, 0.97], "EP": [0.9, 1.0]}},
        ...      "p_left": [0.9, 0.7, 0.65, 0.1], "p_right": [0.1, 0.3, 0.35, 0.8],
        ...      "xwx_share": [0.4, 0.4, 0.4, 0.4], "kp_spearman": [-1.0, -0.95, 0.92, 0.3],
        ...      "kp_std": [2.0, 0.5, 0.2, 0.01]}
        >>> [name for name, ok in invariant_checks(r, "s") if ok]
        ['generalizes', 'fig4c_split', 'fig14_whole_query', 'invariant_ablation']
    """
    a = report["acc"][split]
    base = a["baseline"][0]
    inv, inv_ls = a["CLS-key-position"]
    ep = a["EP"][0]
    share = report["xwx_share"]
    rows = [abs(rho) >= 0.9 and std >= 0.1 for rho, std in zip(report["kp_spearman"], report["kp_std"], strict=True)]
    gen = base >= 0.8
    return [
        ("generalizes", gen),
        ("fig4c_split", fig4c_split(report["p_left"], report["p_right"])),
        ("fig14_whole_query", sum(rows) >= 3),
        ("invariant_ablation", gen and 0.4 <= inv <= 0.6 and inv_ls >= 0.8),
        ("fig13_split", all(0.76 <= s <= 0.91 for s in share) and max(share) - min(share) >= 0.10),
        ("ep_only_ablation", 0.3 <= ep <= 0.7 and base - ep >= 0.15),
    ]


# the threshold grid of every "at some snapshot" count (verdicts v3, docs/fidelity.md): M3's std floor and the side bias
STD_GRID, BIAS_GRID = (0.05, 0.1, 0.2), (0.55, 0.6, 0.7)


def grid_counts(rows: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Per point of the threshold grid (``"std T / bias B"``), the epochs of ``rows`` (emergence rows with the
    restated checks' raw numbers) at which the whole mechanism M1-M4 holds (``mechanism_at``).

    Example:
        >>> row = {"epoch": 5, "probe": 0.95, "invariant": [0.5, 0.97], "p_left": [0.9, 0.7, 0.65, 0.1],
        ...        "p_right": [0.1, 0.3, 0.35, 0.9], "kp_spearman": [-1.0, -0.95, 0.92, 0.3],
        ...        "kp_std": [2.0, 0.5, 0.08, 0.01]}
        >>> g = grid_counts([row]); g["std 0.05 / bias 0.6"], g["std 0.1 / bias 0.6"]
        ([5], [])
    """
    return {
        f"std {t} / bias {b}": [int(r["epoch"]) for r in rows if mechanism_at(r, t, b)["mechanism_v2"]]
        for t in STD_GRID
        for b in BIAS_GRID
    }


def mechanism_at(row: Mapping[str, Any], std_floor: float = 0.1, bias: float = 0.6) -> dict[str, bool]:
    """M1-M4 and their conjunction on one emergence row, at M3's std floor ``std_floor`` and the side-bias threshold
    ``bias`` (the pre-registered 0.1 and 0.6 give the row's own ``checks``).

    Example:
        >>> row = {"probe": 0.95, "invariant": [0.5, 0.97], "p_left": [0.9, 0.7, 0.65, 0.1],
        ...        "p_right": [0.1, 0.3, 0.35, 0.9], "kp_spearman": [-1.0, -0.95, 0.92, 0.3],
        ...        "kp_std": [2.0, 0.5, 0.08, 0.01]}
        >>> mechanism_at(row)["fig14_whole_query"], mechanism_at(row, std_floor=0.05)["mechanism_v2"]
        (False, True)
    """
    gen = row["probe"] >= 0.8
    rows = sum(abs(r) >= 0.9 and s >= std_floor for r, s in zip(row["kp_spearman"], row["kp_std"], strict=True))
    inv, inv_ls = row["invariant"]
    out = {
        "generalizes": gen,
        "fig4c_split": fig4c_split(row["p_left"], row["p_right"], bias),
        "fig14_whole_query": rows >= 3,
        "invariant_ablation": gen and 0.4 <= inv <= 0.6 and inv_ls >= 0.8,
    }
    out["mechanism_v2"] = all(out.values())
    return out


def dynamics_checks(report: dict[str, Any], split: str = PROBE) -> list[tuple[str, bool]]:
    """The dynamics study's five checks (``DYNAMICS_CHECKS``) on one ``mechanism.mechanism_report``.

    Example:
        >>> r = {"acc": {"s": {"baseline": [0.95, 1.0], "CLS-key-position": [0.5, 0.97]}},
        ...      "p_left": [0.9, 0.7, 0.65, 0.1], "p_right": [0.1, 0.3, 0.35, 0.8],
        ...      "xwx_share": [0.77, 0.8, 0.85, 0.9], "ep_spearman": [-1.0, -0.95, 0.92, 0.3],
        ...      "row_std": {"EP": [2.0, 0.5, 0.2, 0.01]}}
        >>> [name for name, ok in dynamics_checks(r, "s") if ok]
        ['generalizes', 'fig13_split', 'fig14_heads', 'fig4c_split', 'invariant_ablation']
    """
    a = report["acc"][split]
    base = a["baseline"][0]
    inv, inv_ls = a["CLS-key-position"]
    share = report["xwx_share"]
    monotonic = [
        abs(rho) >= 0.9 and std >= 0.1 for rho, std in zip(report["ep_spearman"], report["row_std"]["EP"], strict=True)
    ]
    gen = base >= 0.8
    return [
        ("generalizes", gen),
        ("fig13_split", all(0.76 <= s <= 0.91 for s in share) and max(share) - min(share) >= 0.10),
        ("fig14_heads", sum(monotonic) >= 3),
        ("fig4c_split", fig4c_split(report["p_left"], report["p_right"])),
        ("invariant_ablation", gen and 0.4 <= inv <= 0.6 and inv_ls >= 0.8),
    ]


def picture_holds(checks: Sequence[tuple[str, bool]]) -> bool:
    """Whether the paper's picture holds: all five dynamics checks."""
    return all(ok for _, ok in checks)


def decay_exposure(cfg: TrainConfig, step: int, total_steps: int, steps_per_epoch: int) -> float | None:
    """How far decoupled weight decay has gone after ``step`` optimizer steps: ``w x sum of the lr`` over them
    (``lr x w x steps`` at a constant lr); None for Adam with coupled L2 decay, where it has no such meaning.

    Example:
        >>> decay_exposure(TrainConfig(), 440_000, 440_000, 44)
        8.8
        >>> cfg = TrainConfig(lr=1.0, weight_decay=1.0, epochs=4, lr_schedule="warmup_cosine", warmup_epochs=1)
        >>> round(decay_exposure(cfg, 8, 8, 2), 6) == round(sum(cfg.lr_at(s, 8, 2) for s in range(8)), 6)
        True
    """
    if cfg.optimizer != "adamw":
        return None
    n = min(step, total_steps)
    if cfg.lr_schedule == "constant":
        return round(cfg.lr * cfg.weight_decay * n, 10)
    w = cfg.warmup_epochs * steps_per_epoch
    k = min(n, w)
    total = cfg.lr * k * (k + 1) / (2 * w) if w else 0.0  # linear warmup: lr (s + 1) / w
    m = n - w  # cosine steps taken: 0.5 (1 + cos(pi j / T)) for j < m
    if m > 0:
        T = total_steps - w
        a = math.pi / T
        cos_sum = math.sin(m * a / 2) * math.cos((m - 1) * a / 2) / math.sin(a / 2)
        total += cfg.lr * 0.5 * (m + cos_sum)
    return total * cfg.weight_decay


def qk_rank(model: CLIP1D, energy: float = 0.99) -> list[int]:
    """Per head of the vision tower's layer 0: how many singular values of ``W_QK = W_Q W_K^T`` hold ``energy`` of
    its squared norm (a rank-1 head: 1)."""
    if not 0 < energy <= 1:  # NaN included: it gave rank 1; 2.0 gave more than there are singular values
        raise ValueError(f"qk_rank: energy must be in (0, 1], got {energy!r}")
    attn = check_model(model).vision.blocks[0].attn
    out = []
    with torch.no_grad():
        for h in range(model.cfg.vision.n_heads):
            s = torch.linalg.svdvals(attn.W_Q[h] @ attn.W_K[h].T).double() ** 2
            if s.sum() == 0:
                out.append(0)
                continue
            cum = s.cumsum(0) / s.sum()
            out.append(int((cum < energy).sum().item()) + 1)
    return out


@torch.no_grad()
def fixed_batch_loss(
    model: CLIP1D, dataset: Dataset, batch_size: int = 50, seed: int = 0, negatives: str = "all"
) -> float:
    """The mean contrastive loss over the training pairs in fixed batches (one seeded permutation, eval mode): a
    loss that is comparable between checkpoints (the training log's loss is a running mean under dropout). The model
    must be in eval mode (refused otherwise: dropout would draw the global RNG and change the loss); a batch needs
    two items (a contrastive loss of one is 0). ``negatives`` as ``CLIP1D.loss`` takes it: the default ``"all"`` is
    the standard CLIP loss, whatever the run trained with (an emergence row's ``loss``, comparable across runs; a
    run trained with ``"distinct"`` is scored on its own objective with ``negatives="distinct"``).

    Example:
        >>> from hooked_clip1d import load_model, build_dataset
        >>> m = load_model("simplified-ntot20-n2-10")  # trained with negatives="distinct"
        >>> ds = build_dataset(m.data_config)
        >>> fixed_batch_loss(m, ds) > 0.1 > fixed_batch_loss(m, ds, negatives="distinct")  # the shared-caption floor
        True
    """
    check_eval(check_model(model))
    batch_size = check_int(batch_size, "fixed_batch_loss: batch_size", minimum=2)
    images, captions = dataset.training_pairs()
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    total, n = 0.0, 0
    for start in range(0, len(perm), batch_size):
        idx = perm[start : start + batch_size]
        if len(idx) < 2:
            continue
        total += model.loss(images[idx], captions[idx], negatives=negatives).item() * len(idx)
        n += len(idx)
    return total / max(n, 1)


@dataclass
class Emergence:
    """What ``emergence`` returns: ``rows`` (one dict per checkpoint, by epoch) and ``windows`` (per check of
    ``DYNAMICS_CHECKS`` and ``"picture"``: ``first`` / ``last`` epoch at which it holds, ``held_at_end``, and
    ``fraction``, the share of checkpoints from ``first`` on at which it holds; None where it never holds)."""

    rows: list[dict[str, Any]]
    windows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "windows": self.windows, "checks": CHECK_TEXT}


def check_windows(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per check (and ``"picture"``): first and last epoch at which it holds in ``rows`` (each with ``epoch`` and
    ``checks``: {name: bool}), whether it holds at the last row, and the fraction of rows from the first on.

    Example:
        >>> rows = [{"epoch": e, "checks": {"generalizes": ok}} for e, ok in ((0, False), (5, True), (9, False))]
        >>> check_windows(rows)["generalizes"]
        {'first': 5, 'last': 5, 'held_at_end': False, 'fraction': 0.5}
    """
    epochs = [r["epoch"] for r in rows]
    if len(set(epochs)) != len(epochs):
        raise ValueError(f"check_windows: rows repeat an epoch ({sorted(epochs)})")
    rows = sorted(rows, key=lambda r: r["epoch"])  # "held at the end" is the last epoch's, whatever the rows' order
    out: dict[str, dict[str, Any]] = {}
    every = (*DYNAMICS_CHECKS, "picture", "fig14_whole_query", "ep_only_ablation", "mechanism_v2")
    names = [n for n in every if any(n in r["checks"] for r in rows)]
    for name in names:
        held = [r["epoch"] for r in rows if r["checks"].get(name)]
        if not held:
            out[name] = {"first": None, "last": None, "held_at_end": False, "fraction": 0.0}
            continue
        after = [r for r in rows if r["epoch"] >= held[0]]
        out[name] = {
            "first": held[0],
            "last": held[-1],
            "held_at_end": bool(rows[-1]["checks"].get(name)),
            "fraction": round(len(held) / len(after), 4),
        }
    return out


def emergence_row(
    epoch: int,
    model: CLIP1D,
    dataset: Dataset | None = None,
    train_cfg: TrainConfig | None = None,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One checkpoint's row of ``emergence`` (``report``: its ``mechanism_report``, if already computed)."""
    if model.training:
        raise ValueError("emergence needs models in eval mode (call model.eval())")
    ds = dataset if dataset is not None else build_dataset(model.data_config)
    report = report if report is not None else mechanism_report(model, ds)
    acc = evaluate(model, ds, splits=("val_single", "val_seen", "val_unseen"))
    checks = dynamics_checks(report)
    v2 = dict(invariant_checks(report))
    row: dict[str, Any] = {
        "epoch": int(epoch),
        "loss": round(
            fixed_batch_loss(model, ds, train_cfg.batch_size or ds.config.batch_size if train_cfg else 50), 5
        ),
        "single": acc["val_single"]["acc"],
        "seen": acc["val_seen"]["acc"],
        "unseen": acc["val_unseen"]["acc"],
        "probe": report["acc"][PROBE]["baseline"][0],
        "p_left": report["p_left"],
        "p_right": report["p_right"],
        "ep_std": report["row_std"]["EP"],
        "ep_spearman": report["ep_spearman"],
        "invariant": report["acc"][PROBE]["CLS-key-position"],
        "xwx_share": report["xwx_share"],
        "qk_rank": qk_rank(model),
        "b_Q": report["norms"]["b_Q"],
        "kp_spearman": report["kp_spearman"],
        "kp_std": report["kp_std"],
        "ep_only": report["acc"][PROBE]["EP"],
        "temperature": report["temperature"],
        "checks": {
            **dict(checks),
            "picture": picture_holds(checks),
            **v2,
            "mechanism_v2": all(v2[c] for c in INVARIANT_CHECKS),
        },
    }
    if train_cfg is not None:
        spe = -(-len(ds.training_pairs()[0]) // (train_cfg.batch_size or ds.config.batch_size))
        row["step"] = epoch * spe
        row["exposure"] = decay_exposure(train_cfg, epoch * spe, train_cfg.epochs * spe, spe)
    return row


def emergence(
    checkpoints: Sequence[tuple[int, CLIP1D]],
    train_cfg: TrainConfig | None = None,
    dataset: Dataset | None = None,
) -> Emergence:
    """Walk a trajectory ``[(epoch, model), ...]`` (models in eval mode, with ``data_config``; see the module
    docstring); ``train_cfg`` adds each checkpoint's optimizer step and decay exposure."""
    if not checkpoints:
        raise ValueError("emergence needs at least one (epoch, model) checkpoint")
    ckpts = sorted(checkpoints, key=lambda c: c[0])
    ds = dataset if dataset is not None else build_dataset(ckpts[0][1].data_config)
    ds = unseen_probe(ds)
    rows = [emergence_row(e, m, ds, train_cfg) for e, m in ckpts]
    return Emergence(rows, check_windows(rows))


def run_emergence(run_dir: str | Path, epochs: Sequence[int] | None = None) -> Emergence:
    """``emergence`` of a run folder's kept snapshots (``snapshots/epoch_NNNNN.safetensors``: a training run with
    ``TrainConfig.snapshot_epochs`` or ``keep_snapshots``), optionally only at ``epochs``. Rows are cached in
    ``run_dir/emergence.json`` (keyed by epoch and the snapshot's size and mtime)."""
    from hooked_clip1d.files import atomic_write_text
    from hooked_clip1d.model.checkpoint import load_model_file

    run_dir = Path(run_dir)
    snaps = {int(p.stem.split("_")[1]): p for p in (run_dir / "snapshots").glob("epoch_*.safetensors")}
    if not snaps:
        raise FileNotFoundError(f"{str(run_dir)!r} has no snapshots/ (train with TrainConfig.snapshot_epochs)")
    if epochs is not None:
        missing = sorted(set(epochs) - set(snaps))
        if missing:
            raise ValueError(f"{str(run_dir)!r} has no snapshot at epochs {missing}; it has {sorted(snaps)}")
        snaps = {e: snaps[e] for e in epochs}
    cfg_path = run_dir / "config.json"
    train_cfg = TrainConfig.from_dict(json.loads(cfg_path.read_text())["train_config"]) if cfg_path.exists() else None
    cache_path = run_dir / "emergence.json"
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    rows, ds = [], None
    for e in sorted(snaps):
        st = snaps[e].stat()
        key = f"{e}:{st.st_size}:{int(st.st_mtime)}:{ROW_VERSION}"
        if key not in cache:
            model = load_model_file(snaps[e]).eval()
            ds = ds if ds is not None else unseen_probe(build_dataset(model.data_config))
            cache[key] = emergence_row(e, model, ds, train_cfg)
            atomic_write_text(cache_path, json.dumps(cache))  # after every row: an interrupted walk keeps its work
        rows.append(cache[key])
    return Emergence(rows, check_windows(rows))
