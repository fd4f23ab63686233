"""Seeded contrastive training with the paper's defaults (Sec. 2.2, App. B, C), logged and resumable.

``train(run, out_dir)`` (``run`` a ``RunConfig``: the model, data and training configs; the older
``train(model_cfg, data_cfg, train_cfg, out_dir)`` still works, deprecated) writes into ``out_dir``:

- ``config.json``: model, data and training configs, the command, versions (provenance);
- ``metrics.jsonl``: one line per evaluation (every ``eval_every`` epochs): epoch, step, mean training loss since the
  previous line, seconds elapsed, and ``evaluate`` output per split (App. C dynamics);
- ``checkpoint.safetensors``: the latest training state (weights, AdamW state, RNG states), written atomically
  every ``checkpoint_every`` epochs; ``train(..., resume=True)`` continues the same run bit for bit;
- ``model.safetensors`` + ``summary.json`` at the end.

Example:
    >>> import tempfile
    >>> from hooked_clip1d import CLIPConfig, DataConfig
    >>> run = RunConfig(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4),
    ...                 DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, eval_every=1))
    >>> trained = train(run, tempfile.mkdtemp(), progress=False)
    >>> trained.epoch, sorted(trained.final_metrics)
    (2, ['train', 'val_seen', 'val_single', 'val_unseen'])
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import torch
from tqdm.auto import tqdm

from hooked_clip1d.data.dataset import DataConfig, Dataset, build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.checkpoint import (
    CheckpointError,
    build_model_from,
    model_tensors,
    read_tensors,
    save_model,
    save_tensors,
)
from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.settings import TrainConfig
from hooked_clip1d.settings.progress import bar_disabled
from hooked_clip1d.training.param_groups import masks_needed, param_rule
from hooked_clip1d.training.run_config import RunConfig, check_init_model, run_args
from hooked_clip1d.training.rundir import (
    RunLock,
    TrainingInterrupted,
    check_run_dir,
    clean_stale_tmp,
    clear_stale_snapshots,
    drop_metrics_after,
    stop_on_signal,
    stop_requested,
    warn_missed_snapshots,
    write_config,
    write_summary,
)


@dataclass
class TrainRun:
    """What ``train`` returns: the trained model (eval mode) and where things are."""

    model: CLIP1D
    out_dir: Path
    epoch: int
    step: int
    final_metrics: dict[str, dict[str, Any]]
    seconds: float


class MaskedAdamW(torch.optim.AdamW):
    """AdamW whose decoupled weight decay follows ``TrainConfig.no_decay`` (and ``qk_bias_decay_scale``) and which
    holds ``frozen`` groups at 0 (and ``logit_scale`` at ``TrainConfig.fixed_temperature``, where set); with
    ``TrainConfig.optimizer="adam"``, Adam with coupled L2 decay instead.

    torch's AdamW multiplies each parameter by ``1 - lr * wd`` and then takes the Adam step; this does the same
    multiplication itself, per element (``param_groups.decay_mask``), and runs the kernel with ``weight_decay=0``.
    Coupled (``optimizer="adam"``, torch's ``Adam(weight_decay=wd)``): ``grad += wd * mask * p`` before the step.
    Frozen entries (``param_groups.frozen_mask``) are set to 0 here and get no gradient: a wholly frozen parameter
    has ``grad = None`` (no Adam state), a partly frozen one a gradient that is 0 there (zero Adam moments, so it
    never moves).

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=8, d_head=4), seed=0)
        >>> opt = MaskedAdamW(m, TrainConfig(frozen=("qk_bias", "cls_pos")))
        >>> m.loss(m.vision.to_tokens(["C 1 . . . . . . . . .", "C 2 . . . . . . . . ."]),
        ...        m.text.to_tokens(["1 is in the image", "2 is in the image"])).backward()
        >>> opt.step()
        >>> bool(m.vision.blocks[0].attn.b_Q.abs().max() == 0), bool(m.vision.W_pos[0].abs().max() == 0)
        (True, True)
    """

    def __init__(self, model: CLIP1D, cfg: TrainConfig):
        names, params = zip(*model.named_parameters(), strict=True)
        super().__init__(list(params), lr=cfg.lr, weight_decay=0.0, betas=cfg.betas, eps=cfg.eps, fused=True)
        self.weight_decay = cfg.weight_decay
        self.coupled = cfg.optimizer == "adam"
        self._frozen: list[torch.Tensor] = []  # held at 0 whole
        self._grad_masks: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, trained where 1)
        # (parameter, its decay mask: None = decayed everywhere, a float = at that multiple of the weight decay, a
        # tensor = decayed where 1); exempt ones left out
        self._decayed: list[tuple[torch.Tensor, torch.Tensor | float | None]] = []
        for n, p in zip(names, params, strict=True):
            rule = param_rule(n, model.cfg, cfg)
            if rule.held is not None:  # set and held there: no gradient, no decay
                with torch.no_grad():
                    p.fill_(rule.held)
                self._frozen.append(p)
                continue
            fm = rule.grad
            if fm is not None:
                fm = fm if isinstance(fm, float) else fm.to(p.device, p.dtype)
                with torch.no_grad():
                    p.mul_(fm)  # frozen entries are 0
                if isinstance(fm, float):
                    self._frozen.append(p)
                    continue
                self._grad_masks.append((p, fm))
            mask = rule.decay
            if isinstance(mask, float) and mask == 0.0:
                continue  # exempt
            if isinstance(mask, torch.Tensor):
                mask = mask.to(p.device, p.dtype)
            self._decayed.append((p, mask))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        for p in self._frozen:
            p.grad = None
        for p, mask in self._grad_masks:
            if p.grad is not None:
                p.grad.mul_(mask)
        lr = self.param_groups[0]["lr"]
        for p, mask in self._decayed:
            if p.grad is None:  # torch's AdamW neither decays nor moves a parameter without a gradient
                continue
            if self.coupled:  # L2 in the gradient, as torch.optim.Adam(weight_decay=wd)
                if isinstance(mask, torch.Tensor):
                    p.grad.addcmul_(p, mask, value=self.weight_decay)
                else:
                    p.grad.add_(p, alpha=self.weight_decay * (1.0 if mask is None else mask))
            elif mask is None:
                p.mul_(1 - lr * self.weight_decay)
            else:
                p.mul_(1 - lr * self.weight_decay * mask)
        return super().step(closure)


def make_optimizer(model: CLIP1D, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters: weight decay on every one, as ``AdamW(model.parameters())`` does, unless
    ``cfg.no_decay`` / ``cfg.frozen`` name groups or ``cfg.qk_bias_decay_scale`` is not 1 (then ``MaskedAdamW``);
    ``cfg.optimizer="adam"``: ``Adam(weight_decay=wd)`` (coupled L2), masked the same way."""
    if masks_needed(cfg.no_decay, cfg.frozen, cfg.qk_bias_decay_scale, cfg.fixed_temperature):
        return MaskedAdamW(model, cfg)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(
            model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas, eps=cfg.eps, fused=True
        )
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas, eps=cfg.eps, fused=True
    )


def save_snapshot(model: CLIP1D, out_dir: Path, epoch: int, data_cfg: DataConfig) -> Path:
    """Keep the weights of a run at ``epoch`` as ``out_dir/snapshots/epoch_NNNNN.safetensors`` (a model file)."""
    path = Path(out_dir) / "snapshots" / f"epoch_{epoch:05d}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, path, data_cfg, extra={"epoch": epoch})
    return path


def _optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {}
    for idx, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            out[f"optim.{idx}.{k}"] = v if isinstance(v, torch.Tensor) else torch.tensor(v)
    return out


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    sd = opt.state_dict()
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    sd["state"] = state
    opt.load_state_dict(sd)


class Trainer:
    """Owns one run: model, optimizer, data, RNGs, logging and checkpoints (see the module docstring).

    ``Trainer(run, out_dir, resume=False, init_model=None)``: ``run`` a ``RunConfig`` (the older
    ``Trainer(model_cfg, data_cfg, train_cfg, out_dir, ...)`` still works, deprecated); ``init_model`` starts from
    its weights (its config must be the run's) instead of a fresh init.

    Example:
        >>> import tempfile
        >>> from hooked_clip1d import CLIPConfig, DataConfig
        >>> run = RunConfig(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4),
        ...                 DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=1))
        >>> Trainer(run, tempfile.mkdtemp()).run(progress=False).step
        2
    """

    def __init__(self, run: Any, *args: Any, **kwargs: Any):
        run, given = run_args(run, args, "Trainer", ("out_dir", "resume", "init_model"))
        self._start(run, **given, **kwargs)

    def _start(self, run: RunConfig, out_dir: str | Path, resume: bool = False, init_model: CLIP1D | None = None):
        model_cfg, data_cfg, train_cfg = run.model, run.data, run.train
        self.model_cfg, self.data_cfg, self.cfg = model_cfg, data_cfg, train_cfg
        self.out_dir = Path(out_dir)
        self.ckpt_path = self.out_dir / "checkpoint.safetensors"
        self.metrics_path = self.out_dir / "metrics.jsonl"
        self.device = torch.device(train_cfg.device)
        self.batch_size = train_cfg.batch_size or data_cfg.batch_size

        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("TrainConfig.device='cuda' but this torch build has no CUDA device (torch.cuda)")
        check_run_dir(self.out_dir)
        self.dataset: Dataset = build_dataset(data_cfg)
        images, captions = self.dataset.training_pairs()
        self.images, self.captions = images.to(self.device), captions.to(self.device)

        caller_rng = torch.get_rng_state()  # training draws from the global RNG; the caller's is given back
        try:  # also when building the model or taking the lock fails (e.g. RunDirBusy)
            torch.manual_seed(train_cfg.seed)
            if init_model is not None:  # e.g. pruned-then-retrained models: start from (a copy of) given weights
                check_init_model(init_model, model_cfg)
                self.model = copy.deepcopy(init_model).to(self.device)
            else:
                self.model = CLIP1D(model_cfg, seed=train_cfg.seed).to(self.device)
            self.model.data_config = data_cfg
            self.run_config = dataclasses.replace(run, model=self.model.cfg)  # init seeds filled in, as saved
            self.opt = make_optimizer(self.model, train_cfg)
            self.gen = torch.Generator().manual_seed(train_cfg.seed)
            self.epoch = 0
            self.step = 0
            self.elapsed = 0.0
            self.lock = RunLock(self.out_dir).acquire()
        except BaseException:
            torch.set_rng_state(caller_rng)
            raise
        try:
            self._open(resume)
        except BaseException:
            self.lock.release()
            torch.set_rng_state(caller_rng)
            raise
        self._rng = torch.get_rng_state()
        torch.set_rng_state(caller_rng)

    def _open(self, resume: bool) -> None:
        """Clean the run directory's stale temporary files, then resume (``resume``), restart a run killed before
        its first checkpoint, or refuse a directory that already holds a run."""
        clean_stale_tmp(self.out_dir)
        fresh = not self.ckpt_path.exists() and not (self.out_dir / "summary.json").exists()
        restart = fresh and self.metrics_path.exists()
        if fresh:  # a killed run's snapshots would load as this run's trajectory
            stale = clear_stale_snapshots(self.out_dir)
            if stale:
                print(
                    f"hooked-clip1d: removed the snapshots of epochs {stale} from {str(self.out_dir)!r} (left by a "
                    "run that stopped before its first checkpoint; this run starts from epoch 0)",
                    file=sys.stderr,
                )
        if restart:  # killed after its first metrics line, before its first checkpoint: nothing to resume
            print(
                f"hooked-clip1d: {str(self.out_dir)!r} holds metrics but no checkpoint (the run stopped before "
                "its first checkpoint): starting it again from epoch 0",
                file=sys.stderr,
            )
            self.metrics_path.unlink()
        elif resume:
            self._resume()
        elif self.ckpt_path.exists() or self.metrics_path.exists():
            raise FileExistsError(
                f"{str(self.out_dir)!r} already holds a run; resume it (resume=True / --resume) or use a new directory"
            )
        if self.cfg.epochs < self.epoch:
            raise ValueError(
                f"{str(self.out_dir)!r} has already trained {self.epoch} epochs; epochs={self.cfg.epochs} would "
                f"train nothing (ask for more than {self.epoch} to continue it)"
            )

    # ---- state ------------------------------------------------------------------------------------------------------
    def _configs(self) -> dict[str, Any]:
        return self.run_config.to_dict()

    def save_checkpoint(self) -> None:
        """Write the checkpoint (and, at a ``checkpoint_every`` epoch or the last, the kept snapshot)."""
        on_schedule = self.epoch % self.cfg.checkpoint_every == 0 or self.epoch == self.cfg.epochs
        if self.cfg.keep_snapshots and on_schedule:  # not at a signal's stop: snapshots keep their schedule
            save_snapshot(self.model, self.out_dir, self.epoch, self.data_cfg)
        tensors = {**model_tensors(self.model), **_optimizer_tensors(self.opt)}
        tensors["rng.torch"] = torch.get_rng_state()
        tensors["rng.data"] = self.gen.get_state()
        meta = {
            **self._configs(),
            "train_state": {"epoch": self.epoch, "step": self.step, "elapsed_s": self.elapsed},
        }
        save_tensors(self.ckpt_path, tensors, meta)

    def _resume(self) -> None:
        if not self.ckpt_path.exists():
            raise FileNotFoundError(f"cannot resume: no checkpoint at {str(self.ckpt_path)!r}")
        tensors, meta = read_tensors(self.ckpt_path)
        problems = self.run_config.resume_problems(meta)
        if problems:
            raise CheckpointError(f"cannot resume {str(self.ckpt_path)!r}: " + "; ".join(problems))
        loaded = build_model_from(tensors, meta, repr(str(self.ckpt_path)))
        self.model.load_state_dict(loaded.state_dict())
        _load_optimizer(self.opt, tensors)
        torch.set_rng_state(tensors["rng.torch"])  # __init__ keeps it as the run's RNG state
        self.gen.set_state(tensors["rng.data"])
        st = meta["train_state"]
        self.epoch, self.step, self.elapsed = int(st["epoch"]), int(st["step"]), float(st["elapsed_s"])
        warn_missed_snapshots(self.out_dir, self.cfg.snapshot_epochs, self.epoch)
        # drop metric lines written after the checkpoint (they will be produced again)
        drop_metrics_after(self.out_dir, "epoch", self.epoch)

    # ---- loop -------------------------------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, dict[str, Any]]:
        self.model.eval()
        try:
            return evaluate(self.model, self.dataset)
        finally:
            self.model.train()

    def close(self) -> None:
        """Release the run directory's lock without training (a Trainer built only to look at its model or dataset;
        ``run`` takes the lock again). ``with Trainer(...) as t:`` closes it on leaving, and so does the garbage
        collector once the Trainer is gone."""
        lock = getattr(self, "lock", None)  # (absent when __init__ failed before taking it)
        if lock is not None:
            lock.release()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: nothing left to release)
            pass

    def run(self, progress: bool = True) -> TrainRun:
        """Train to ``epochs`` (from where a resumed run stopped); the run directory stays locked meanwhile.

        SIGTERM or SIGINT (Ctrl-C) stops it at the end of the epoch, after a checkpoint: ``TrainingInterrupted``
        (``rundir.stop_on_signal``); ``resume=True`` continues bit for bit."""
        if not self.lock.held:
            self.lock.acquire()
        try:
            with stop_on_signal():
                return self._run(progress)
        finally:
            self.lock.release()

    def _run(self, progress: bool) -> TrainRun:
        cfg = self.cfg
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_config(self.out_dir, self._configs())
        old_threads = torch.get_num_threads()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        caller_rng = torch.get_rng_state()
        torch.set_rng_state(self._rng)
        model = self.model
        model.train()
        loss_sum = torch.zeros((), device=self.device)
        n_loss = 0
        metrics: dict[str, dict[str, Any]] = {}
        bar = tqdm(total=cfg.epochs, initial=self.epoch, desc="train", unit="epoch", disable=bar_disabled(progress))
        t0 = time.perf_counter() - self.elapsed
        try:
            if self.epoch == 0 and 0 in cfg.snapshot_epochs:  # inside the try: a failure gives the caller's RNG back
                save_snapshot(model, self.out_dir, 0, self.data_cfg)  # the initial weights
            while self.epoch < cfg.epochs:
                n_loss += self._epoch(loss_sum)
                self.epoch += 1
                bar.update(1)
                if self.epoch in cfg.snapshot_epochs:
                    save_snapshot(model, self.out_dir, self.epoch, self.data_cfg)
                last = self.epoch == cfg.epochs
                if self.epoch % cfg.eval_every == 0 or last:
                    metrics = self._metrics_line(loss_sum, n_loss, t0, bar)
                    n_loss = 0
                sig = None if last else stop_requested()  # SIGTERM / SIGINT: checkpoint here and stop
                if self.epoch % cfg.checkpoint_every == 0 or last or sig:
                    self.elapsed = time.perf_counter() - t0
                    self.save_checkpoint()
                if sig:
                    raise TrainingInterrupted.at(
                        sig, "training", f"epoch {self.epoch}/{cfg.epochs}", str(self.ckpt_path)
                    )
        finally:
            bar.close()
            torch.set_num_threads(old_threads)
            self._rng = torch.get_rng_state()
            torch.set_rng_state(caller_rng)
        model.eval()
        self.elapsed = time.perf_counter() - t0
        if not metrics:
            metrics = evaluate(model, self.dataset)
        save_model(model, self.out_dir / "model.safetensors", self.data_cfg, extra={"train_config": cfg.to_dict()})
        write_summary(self.out_dir, self.epoch, self.step, self.elapsed, metrics)
        return TrainRun(model, self.out_dir, self.epoch, self.step, metrics, self.elapsed)

    def _epoch(self, loss_sum: torch.Tensor) -> int:
        """One epoch's steps, in the order drawn from the run's data generator; each step's loss is added to
        ``loss_sum``. Returns the number of steps."""
        cfg, model, opt = self.cfg, self.model, self.opt
        m, bs = len(self.images), self.batch_size
        spe = -(-m // bs)  # optimizer steps per epoch (the last batch may be short)
        perm = torch.randperm(m, generator=self.gen).to(self.device)
        for start in range(0, m, bs):
            idx = perm[start : start + bs]
            loss = model.loss(self.images[idx], self.captions[idx], validate=False, negatives=self.cfg.negatives)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"training loss is {loss.item()} at step {self.step + 1} (epoch {self.epoch + 1}); the "
                    f"run stopped, its last good checkpoint is {str(self.ckpt_path)!r} (if one was written)"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.lr_schedule != "constant":
                for group in opt.param_groups:
                    group["lr"] = cfg.lr_at(self.step, cfg.epochs * spe, spe)
            opt.step()
            loss_sum += loss.detach()
            self.step += 1
        return spe

    def _metrics_line(self, loss_sum: torch.Tensor, n_loss: int, t0: float, bar: Any) -> dict[str, dict[str, Any]]:
        """Evaluate, append the metrics line (the mean of ``loss_sum`` over ``n_loss`` steps, then zeroed) and
        return the metrics."""
        metrics = self.evaluate()
        self.elapsed = time.perf_counter() - t0
        line = {
            "epoch": self.epoch,
            "step": self.step,
            "loss": (loss_sum / max(n_loss, 1)).item(),
            "elapsed_s": round(self.elapsed, 2),
            "eval": metrics,
        }
        loss_sum.zero_()
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(line) + "\n")
        bar.set_postfix(loss=f"{line['loss']:.3f}", unseen=f"{metrics['val_unseen']['acc']:.2f}", refresh=False)
        return metrics


@overload
def train(
    run: RunConfig,
    out_dir: str | Path,
    resume: bool = ...,
    progress: bool = ...,
    init_model: CLIP1D | None = ...,
) -> TrainRun: ...
@overload
def train(
    model_cfg: CLIPConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = ...,
    progress: bool = ...,
    init_model: CLIP1D | None = ...,
) -> TrainRun: ...
def train(run: Any, *args: Any, **kwargs: Any) -> TrainRun:
    """Train one run (see the module docstring): ``train(run, out_dir, resume=False, progress=True,
    init_model=None)``, ``run`` a ``RunConfig``; the older ``train(model_cfg, data_cfg, train_cfg, out_dir, ...)``
    still works (deprecated: a ``DeprecationWarning``). ``resume=True`` continues the run saved in ``out_dir``;
    ``init_model`` starts from its weights (its config must be the run's model config) instead of a fresh init.

    Example:
        >>> import tempfile
        >>> from hooked_clip1d import CLIPConfig, DataConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4)
        >>> data, tc = DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=1)
        >>> train(RunConfig(cfg, data, tc), tempfile.mkdtemp(), progress=False).step  # the run object
        2
        >>> train(cfg, data, tc, tempfile.mkdtemp(), progress=False).step  # the older signature (deprecated)
        2
    """
    run, given = run_args(run, args, "train", ("out_dir", "resume", "progress", "init_model"))
    return _train(run, **given, **kwargs)


def _train(
    run: RunConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    init_model: CLIP1D | None = None,
) -> TrainRun:
    return Trainer(run, out_dir, resume=resume, init_model=init_model).run(progress=progress)
