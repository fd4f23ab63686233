"""Pruning and retraining (Paper App. K, Fig. 22): a copy of a model with heads pruned, trained on.

A pruned head is one whose output ``z`` is zeroed in the forward pass. The pruned heads are a config field
(``EncoderConfig.pruned_heads``, (layer, head) pairs), so a pruned model saves, loads and resumes like any other,
and the trainers retrain it with the mask on (the pruned heads' weights then only see weight decay).

- ``prune_heads(model, vision=..., text=...)``: a copy of a ``CLIP1D`` with those heads pruned.
- ``prune_and_retrain(model, heads, dataset, epochs, out_dir)``: prune, then continue training with ``Trainer``.
- ``retrain_batched(model, split, ...)``: several pruned copies retrained as one batched group.

``analysis.pruning.head_subset_sweep`` measures every subset of kept heads with these.

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
from collections.abc import Sequence
from pathlib import Path

import torch

from hooked_clip1d.data.dataset import DataConfig, Dataset
from hooked_clip1d.model.checkpoint import load_model_file
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.config import check_heads
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
    new.load_state_dict(model.state_dict())
    new.to(next(model.parameters()).device)
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
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
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
        return [load_model_file(d / "model.safetensors") for d in dirs]
    resume = resume and (group_dir / GROUP_CHECKPOINT).exists()
    trainer = BatchedTrainer(members, group_dir, resume=resume, member_dirs=dirs)
    return [run.model for run in trainer.run(progress=progress, desc="retrain pruned")]
