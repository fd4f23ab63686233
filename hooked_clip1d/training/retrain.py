"""Pruning and retraining (Paper App. K, Fig. 22): a copy of a model with heads pruned, trained on.

A pruned head is one whose output ``z`` is zeroed in the forward pass. The pruned heads are a config field
(``EncoderConfig.pruned_heads``, (layer, head) pairs), so a pruned model saves, loads and resumes like any other,
and the trainers retrain it with the mask on (the pruned heads' weights then only see weight decay).

- ``prune_heads(model, vision=..., text=...)``: a copy of a ``CLIP1D`` with those heads pruned.
- ``prune_and_retrain(model, heads, dataset, epochs, out_dir)``: prune, then continue training with ``Trainer``.
- ``retrain_batched(model, split, ...)``: several pruned copies retrained as one batched group.
- ``head_subset_sweep(model, n_kept, ...)``: every subset of ``n_kept`` heads kept, each scored before and after
  retraining (Fig. 22a); ``format_sweep`` prints it as a table. (It lived in ``analysis.pruning`` until the analysis
  wings of issue 52: it retrains, and analysis never imports training.)

Example:
    >>> import torch
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.hooks import zero_heads_hooks
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> p = prune_heads(m, vision=[(0, 1), (0, 3)])
    >>> p.cfg.vision.pruned_heads, p.cfg.text.pruned_heads
    (((0, 1), (0, 3)), ())
    >>> img = m.vision.to_tokens("C 1 . . 2 . . . . . .")
    >>> masked = m.vision.run_with_hooks(img, fwd_hooks=zero_heads_hooks(m.vision, [(0, 1), (0, 3)]))
    >>> bool(torch.allclose(p.vision(img), masked))
    True
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hooked_clip1d.data.dataset import DataConfig, Dataset, build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.files import atomic_write_text
from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.config import check_heads
from hooked_clip1d.settings.checks import check_int, repeated
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.trainer import TrainConfig, Trainer, TrainRun

Head = tuple[int, int]


def prune_heads(
    model: CLIP1D, vision: Sequence[Sequence[int]] = (), text: Sequence[Sequence[int]] = (), replace: bool = False
) -> CLIP1D:
    """A copy of ``model`` whose ``vision`` / ``text`` heads ((layer, head) pairs) are pruned (their ``z`` zeroed).

    Heads already pruned in ``model`` stay pruned unless ``replace=True`` (then exactly the given heads are). The
    copy has the same weights, ``data_config`` and train/eval mode; ``model`` is not changed.
    """
    if not isinstance(model, CLIP1D):
        raise TypeError(f"prune_heads needs a CLIP1D, got {type(model).__name__}")
    cfg = model.cfg
    v = check_heads(vision, cfg.vision, "prune_heads(vision=...)")
    t = check_heads(text, cfg.text, "prune_heads(text=...)")
    if not replace:
        v, t = v + cfg.vision.pruned_heads, t + cfg.text.pruned_heads
    new_cfg = dataclasses.replace(
        cfg,
        vision=cfg.vision.replace(pruned_heads=tuple(sorted(set(v)))),
        text=cfg.text.replace(pruned_heads=tuple(sorted(set(t)))),
    )
    with torch.random.fork_rng(devices=[]):  # building the copy must not move the caller's global RNG
        new = CLIP1D(new_cfg)
    first = next(model.parameters())
    new.to(first.device, first.dtype)  # a .double() model's copy was float32: its weights rounded
    new.load_state_dict(model.state_dict())
    new.data_config = model.data_config
    return new.train(model.training)


def data_config_of(model: CLIP1D, dataset: Dataset | DataConfig | None) -> DataConfig:
    """The ``DataConfig`` a model is (re)trained on: ``dataset``'s (a ``Dataset`` or a ``DataConfig``) or, for None,
    the one attached to the model (``model.data_config``, as ``load_model`` attaches it).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
        >>> data_config_of(m, DataConfig(n_labels=5, n_heldout=2, n2=2)).n_labels
        5
        >>> data_config_of(m, None)
        Traceback (most recent call last):
        ...
        ValueError: the model has no data_config attached; pass dataset= (a Dataset or DataConfig)
    """
    if dataset is None:
        if model.data_config is None:
            raise ValueError("the model has no data_config attached; pass dataset= (a Dataset or DataConfig)")
        return model.data_config
    if isinstance(dataset, Dataset):
        return dataset.config
    if isinstance(dataset, DataConfig):
        return dataset
    raise TypeError(f"dataset must be a Dataset or DataConfig, got {type(dataset).__name__}")


def prune_and_retrain(
    model: CLIP1D,
    heads: Sequence[Sequence[int]],
    dataset: Dataset | DataConfig | None,
    epochs: int,
    out_dir: str | Path,
    text_heads: Sequence[Sequence[int]] = (),
    train_cfg: TrainConfig | None = None,
    resume: bool = False,
    progress: bool = False,
) -> TrainRun:
    """Prune ``heads`` of the vision tower (and ``text_heads`` of the text tower), then train for ``epochs`` more
    epochs with ``Trainer(..., init_model=pruned)`` into ``out_dir`` (App. K: the paper retrains 10,000 epochs).

    ``train_cfg`` gives the optimiser settings (default: the paper's); its ``epochs`` is replaced by ``epochs``.
    The pruned heads are in the saved config, so ``out_dir`` resumes (``resume=True``) and loads as usual.
    Returns the ``TrainRun`` (``.model`` in eval mode, ``.final_metrics``).

    Example:
        >>> import tempfile
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=16, d_head=4), seed=0).eval()
        >>> run = prune_and_retrain(m, [(0, 0)], DataConfig(n_labels=5, n_heldout=2, n2=2), 1, tempfile.mkdtemp())
        >>> run.model.cfg.vision.pruned_heads, run.epoch
        (((0, 0),), 1)
    """
    epochs = check_int(epochs, "epochs")
    data_cfg = data_config_of(model, dataset)
    pruned = prune_heads(model, vision=heads, text=text_heads)
    tc = dataclasses.replace(train_cfg or TrainConfig(), epochs=epochs)
    trainer = Trainer(RunConfig(pruned.cfg, data_cfg, tc), out_dir, resume=resume, init_model=pruned)
    return trainer.run(progress=progress)


def retrain_batched(
    model: CLIP1D,
    split: Sequence[tuple[Sequence[Head], Sequence[Head]]],
    data_cfg: DataConfig,
    epochs: int,
    group_dir: Path,
    run_dirs: Sequence[Path | None],
    train_cfg: TrainConfig | None,
    resume: bool,
    progress: bool,
) -> list[CLIP1D]:
    """Retrain every pruned copy of ``model`` (``split``: (vision heads, text heads) pruned per copy) in one
    ``BatchedTrainer`` group; returns the retrained models (or, with ``resume`` and every run finished, the saved
    ones)."""
    tc = dataclasses.replace(train_cfg or TrainConfig(), epochs=epochs)
    members = []
    for vis, txt in split:
        pruned = prune_heads(model, vision=vis, text=txt)
        members.append(Member(pruned.cfg, data_cfg, tc, init_model=pruned))
    dirs = [d for d in run_dirs if d is not None]
    if resume and all((d / "summary.json").exists() for d in dirs):  # finished earlier: load the saved models
        for d, m in zip(dirs, members, strict=True):  # another base model / epochs / recipe was reused unchecked
            saved = json.loads((d / "config.json").read_text())
            problems = m.run.resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot reuse the finished run {str(d)!r}: " + "; ".join(problems))
        return [load_model_file(d / "model.safetensors") for d in dirs]
    resume = resume and (group_dir / GROUP_CHECKPOINT).exists()
    trainer = BatchedTrainer(members, group_dir, resume=resume, member_dirs=dirs)
    return [run.model for run in trainer.run(progress=progress, desc="retrain pruned")]


def subset_run_name(kept: Sequence[Head]) -> str:
    """The folder name of a retraining run that keeps ``kept`` heads (``head_subset_sweep``'s ``out_dir/<name>``).

    Example:
        >>> subset_run_name([(0, 0), (0, 2)])
        'keep-L0H0-L0H2'
    """
    return "keep-" + ("-".join(f"L{layer}H{head}" for layer, head in kept) or "none")


def head_subset_sweep(
    model: CLIP1D,
    n_kept: int | Sequence[int],
    dataset: Dataset | DataConfig | None = None,
    epochs: int = 0,
    out_dir: str | Path | None = None,
    tower: str = "vision",
    train_cfg: TrainConfig | None = None,
    resume: bool = False,
    progress: bool = False,
    engine: str = "standard",
) -> dict[str, Any]:
    """For every subset of ``n_kept`` heads of one tower (all others pruned), evaluate the pruned model before
    and, if ``epochs > 0``, after retraining it for ``epochs`` epochs (Paper App. K, Fig. 22a).

    Heads are the (layer, head) pairs of the tower not already pruned in ``model``; ``n_kept`` may be a list
    (e.g. ``[1, 2, 3]`` for every configuration of a 4-head layer). Each retraining run goes to
    ``out_dir/keep-L0H0-L0H2`` and the whole result to ``out_dir/sweep.json``. ``resume=True`` resumes (or reuses,
    when finished) runs already in ``out_dir``. ``engine="batched"`` retrains every subset at once as one stacked
    group of ``batched.BatchedTrainer`` (same trajectories to float rounding, several times faster; its group
    checkpoint is ``out_dir/group_checkpoint.safetensors``).

    Returns a JSON-able dict: ``tower``, ``epochs``, ``baseline`` (``evaluate`` of ``model``) and ``runs``, one per
    subset with ``kept``, ``pruned`` (lists of [layer, head]), ``before`` and ``after`` (``evaluate`` output;
    ``after`` is None without retraining) and ``out_dir``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=16, d_head=4), seed=0).eval()
        >>> res = head_subset_sweep(m, 2, DataConfig(n_labels=5, n_heldout=2, n2=2))
        >>> [r["kept"] for r in res["runs"]][:2]
        [[[0, 0], [0, 1]], [[0, 0], [0, 2]]]
    """
    if tower not in ("vision", "text"):
        raise ValueError(f"tower must be 'vision' or 'text', got {tower!r}")
    epochs = check_int(epochs, "epochs", minimum=0)
    if epochs > 0 and out_dir is None:
        raise ValueError("retraining (epochs > 0) needs out_dir for the runs' checkpoints")
    if epochs == 0 and train_cfg is not None:  # nothing retrained: its epochs are replaced by this argument
        raise ValueError("train_cfg retrains the pruned copies: give epochs > 0 (train_cfg.epochs is not read)")
    if engine not in ("standard", "batched"):
        raise ValueError(f"engine must be 'standard' or 'batched', got {engine!r}")
    cfg = getattr(model.cfg, tower)
    heads = [(lyr, h) for lyr in range(cfg.n_layers) for h in range(cfg.n_heads) if (lyr, h) not in cfg.pruned_heads]
    if isinstance(n_kept, Dataset | DataConfig):
        raise TypeError(
            "head_subset_sweep(model, n_kept, dataset, ...): n_kept (how many heads to keep, an int or a list of "
            f"ints) comes before the dataset; got a {type(n_kept).__name__} as n_kept"
        )
    if not isinstance(n_kept, int | Sequence):
        raise TypeError(f"n_kept must be an int or a list of ints, got {type(n_kept).__name__}")
    ks = [n_kept] if isinstance(n_kept, int) else list(n_kept)
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(heads)]
    if bad or not ks or repeated(ks):  # a repeat gave every subset twice (or two runs in one folder)
        raise ValueError(
            f"n_kept must be distinct ints in 1..{len(heads)} (the unpruned heads of the {tower} tower), got {n_kept!r}"
        )
    data_cfg = data_config_of(model, dataset)
    ds = dataset if isinstance(dataset, Dataset) else build_dataset(data_cfg)
    was_training = model.training
    model.eval()
    try:
        baseline = evaluate(model, ds)
        subsets = [kept for k in ks for kept in itertools.combinations(heads, k)]
        pruned_of = [[lh for lh in heads if lh not in kept] for kept in subsets]
        run_dirs: list[Path | None] = [None] * len(subsets)
        afters: list[dict | None] = [None] * len(subsets)
        if epochs > 0:
            assert out_dir is not None
            run_dirs = [Path(out_dir) / subset_run_name(kept) for kept in subsets]
            split = [(p, ()) if tower == "vision" else ((), p) for p in pruned_of]
            if engine == "batched":
                retrained = retrain_batched(
                    model, split, data_cfg, epochs, Path(out_dir), run_dirs, train_cfg, resume, progress
                )
            else:
                retrained = []
                for (vis, txt), run_dir in zip(split, run_dirs, strict=True):
                    assert run_dir is not None
                    resume_this = resume and (run_dir / "checkpoint.safetensors").exists()
                    retrained.append(
                        prune_and_retrain(
                            model,
                            vis,
                            data_cfg,
                            epochs,
                            run_dir,
                            text_heads=txt,
                            train_cfg=train_cfg,
                            resume=resume_this,
                            progress=progress,
                        ).model
                    )
            afters = [evaluate(m.eval(), ds) for m in retrained]
        runs = []
        for kept, pruned, run_dir, after in zip(subsets, pruned_of, run_dirs, afters, strict=True):
            before = evaluate(prune_heads(model, **{tower: pruned}).eval(), ds)
            runs.append(
                {
                    "kept": [list(lh) for lh in kept],
                    "pruned": [list(lh) for lh in pruned],
                    "before": before,
                    "after": after,
                    "out_dir": None if run_dir is None else str(run_dir),
                }
            )
    finally:
        model.train(was_training)
    result = {"tower": tower, "epochs": epochs, "baseline": baseline, "runs": runs}
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(out_dir) / "sweep.json", json.dumps(result, indent=2))
    return result


def format_sweep(result: dict[str, Any], split: str = "val_unseen", metric: str = "acc") -> str:
    """A text table of ``head_subset_sweep`` output: kept heads, ``metric`` of ``split`` before / after retraining.

    Example:
        >>> r = {"baseline": {"val_unseen": {"acc": 0.9}},
        ...      "runs": [{"kept": [[0, 1]], "before": {"val_unseen": {"acc": 0.5}}, "after": None}]}
        >>> print(format_sweep(r))
        kept heads          before   after
        all (baseline)       0.900       -
        L0H1                 0.500       -
    """

    def val(m: dict | None) -> str:
        return "-" if m is None else f"{m[split][metric]:.3f}"

    lines = [
        f"{'kept heads':<18}{'before':>8}{'after':>8}",
        f"{'all (baseline)':<18}{val(result['baseline']):>8}{'-':>8}",
    ]
    for r in result["runs"]:
        name = ",".join(f"L{a}H{b}" for a, b in r["kept"])
        lines.append(f"{name:<18}{val(r['before']):>8}{val(r['after']):>8}")
    return "\n".join(lines)
