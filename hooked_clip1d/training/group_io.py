"""What a batched group writes: each member's ``Trainer``-format run directory and the group's resumable state.

``GroupFiles`` is a part of ``batched.BatchedTrainer`` (``trainer.files``): it reads and writes the trainer's
stacked parameters, optimizer state, data streams and dropout generators through the trainer's public attributes
listed below, and nothing else. A member's ``checkpoint.safetensors`` has exactly the layout ``training.Trainer``
writes (so a finished member continues with ``Trainer(..., resume=True)``); ``group_checkpoint.safetensors``
holds the stacked state of the members still training, at any global step, also mid-epoch.

The trainer's attributes it uses: ``model`` (``stacked.StackedCLIP``), ``opt`` (``stacked_adamw.StackedAdamW``),
``members``, ``names``, ``streams``, ``active``, ``step``, ``elapsed``, ``loss_sum``, ``n_loss``, ``dropout_rng``,
``device``, ``out_dir``, ``group_ckpt``, ``datasets``, ``last_metrics``, ``eval_models``, ``total_steps``, and its
methods ``member_dir``, ``member_model``, ``configs`` and ``run_config``. Member
directories get ``config.json`` (with provenance), ``metrics.jsonl`` lines, ``checkpoint.safetensors``,
``model.safetensors`` and ``summary.json`` through ``rundir``, the module ``training.Trainer`` writes with too.

Example (a group checkpointed at step 3 resumes there):
    >>> import tempfile
    >>> from hooked_clip1d.training.batched import BatchedTrainer, Member
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> from hooked_clip1d.data.dataset import DataConfig
    >>> from hooked_clip1d.training.trainer import TrainConfig
    >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
    >>> out = tempfile.mkdtemp()
    >>> member = Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=2, batch_size=16))
    >>> t = BatchedTrainer([member], out)
    >>> t.step = 3
    >>> t.files.save_group_checkpoint(); t.release_locks()
    >>> BatchedTrainer([member], out, resume=True).step
    3
    >>> gs = read_group_state(t.group_ckpt)  # its metadata alone
    >>> gs["step"], gs["active"]
    (3, [0])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.checkpoint import CheckpointError, read_tensors, save_model, save_tensors
from hooked_clip1d.training.rundir import append_metrics, drop_metrics_after, provenance, write_config, write_summary
from hooked_clip1d.training.trainer import TrainRun, save_snapshot

if TYPE_CHECKING:
    from hooked_clip1d.training.batched import BatchedTrainer


GROUP_CHECKPOINT = "group_checkpoint.safetensors"  # a group's resumable state, in its folder


def read_group_state(path: str | Path) -> dict[str, Any] | None:
    """The ``group_state`` of a group checkpoint (``step``, ``elapsed_s``, ``names`` of the members it trains,
    ``active``, ...) from its metadata alone, no tensor read; None if the file is missing, being replaced or not a
    group checkpoint."""
    path = Path(path)
    if not path.exists():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            gs = json.loads((f.metadata() or {}).get("group_state", "null"))
    except Exception:  # noqa: BLE001 - a checkpoint being replaced or damaged: the caller falls back
        return None
    if not isinstance(gs, dict) or not isinstance(gs.get("step"), int):
        return None
    return gs


class GroupFiles:
    """What a ``BatchedTrainer`` writes and reads back: a part of the trainer (``trainer.files``), reading its
    public state (the attributes listed in the module docstring) and writing through ``rundir``."""

    def __init__(self, trainer: BatchedTrainer):
        self.t = trainer

    def _member_optimizer_tensors(self, k: int) -> dict[str, torch.Tensor]:
        """``Trainer``-format optimizer state (``optim.{i}.{step,exp_avg,exp_avg_sq}``) of stack row ``k``."""
        out = {}
        for i, (name, st) in enumerate(zip(self.t.model.names, self.t.opt.state, strict=True)):
            out[f"optim.{i}.step"] = st["step"].detach().cpu().clone()
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"optim.{i}.{key}"] = self.t.model.to_member(k, name, st[key].detach())
        return out

    def save_member_checkpoint(self, i: int, epoch: int) -> None:
        """A ``Trainer``-format training checkpoint of member ``i`` at the end of ``epoch``."""
        k = self.t.active.index(i)
        tensors = {f"model.{n}": v for n, v in self.t.model.member_state_dict(k).items()}
        tensors.update(self._member_optimizer_tensors(k))
        if self.t.dropout_rng == "matched":
            tensors["rng.torch"] = self.t.model.generators[k].get_state()
        else:
            tensors["rng.torch"] = torch.get_rng_state()  # fast mode draws from the global RNG
        tensors["rng.data"] = self.t.streams[i].state_before(epoch)
        meta = {
            **self.t.configs(i),
            "train_state": {"epoch": epoch, "step": self.t.step, "elapsed_s": self.t.elapsed},
            "batched": {"dropout_rng": self.t.dropout_rng, "group_size": len(self.t.members)},
        }
        save_tensors(self.t.member_dir(i) / "checkpoint.safetensors", tensors, meta)
        if self.t.members[i].train_cfg.keep_snapshots:
            save_snapshot(self.t.member_model(i), self.t.member_dir(i), epoch, self.t.members[i].data_cfg)

    # ---- group checkpoint -----------------------------------------------------------------------------------------
    def save_group_checkpoint(self) -> None:
        """Everything needed to continue the whole group from this step (any step, also mid-epoch)."""
        if self.t.out_dir is None:
            return
        tensors: dict[str, torch.Tensor] = {}
        for name, p in zip(self.t.model.names, self.t.model.flat, strict=True):
            tensors[f"stack.{name}"] = p.detach()
        for i, st in enumerate(self.t.opt.state):
            for key, t in st.items():
                tensors[f"optim.{i}.{key}"] = t
        for k, i in enumerate(self.t.active):
            s = self.t.streams[i]
            tensors[f"rng.data.{i}"] = s.state_before(self.t.step // s.spe)
            if self.t.dropout_rng == "matched":
                tensors[f"rng.dropout.{i}"] = self.t.model.generators[k].get_state()
        if self.t.dropout_rng == "fast":
            tensors["rng.dropout"] = torch.get_rng_state()
            if self.t.device.type == "cuda":
                tensors["rng.dropout_cuda"] = torch.cuda.get_rng_state(self.t.device)
        tensors["loss_sum"] = self.t.loss_sum
        meta = {
            "group_state": {
                "step": self.t.step,
                "elapsed_s": self.t.elapsed,
                "active": self.t.active,
                "n_loss": self.t.n_loss,
                "names": self.t.names,
                "dropout_rng": self.t.dropout_rng,
            },
            "members": [self.t.configs(i) for i in range(len(self.t.members))],
        }
        save_tensors(self.t.group_ckpt, tensors, meta)

    def resume(self) -> None:
        dirs = [self.t.member_dir(i) for i in range(len(self.t.members))]
        finished = all((d / "summary.json").exists() and (d / "checkpoint.safetensors").exists() for d in dirs)
        if finished and self._resume_from_members():  # asked for more epochs: the group checkpoint is older
            return
        if not self.t.group_ckpt.exists():
            hint = " (every member has finished its epochs; give more epochs to continue them)" if finished else ""
            raise FileNotFoundError(f"cannot resume: no group checkpoint at {str(self.t.group_ckpt)!r}{hint}")
        tensors, meta = read_tensors(self.t.group_ckpt)
        gs = meta.get("group_state")
        if not isinstance(gs, dict) or "members" not in meta:
            raise CheckpointError(f"{str(self.t.group_ckpt)!r} is not a batched-group checkpoint")
        if gs["names"] != self.t.names:
            raise CheckpointError(f"cannot resume {str(self.t.group_ckpt)!r}: it holds members {gs['names']}")
        if gs["dropout_rng"] != self.t.dropout_rng:
            raise CheckpointError(
                f"cannot resume {str(self.t.group_ckpt)!r}: it was trained with dropout_rng={gs['dropout_rng']!r}"
            )
        for i, saved in enumerate(meta["members"]):
            problems = self.t.run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume {str(self.t.group_ckpt)!r}: member {i}: " + "; ".join(problems))
        active = [int(i) for i in gs["active"]]
        self.t.step = int(gs["step"])
        self.t.elapsed = float(gs["elapsed_s"])
        if active != self.t.active:
            self.t.model.keep(active)
            self.t.opt.keep(active, list(self.t.model.flat))
        with torch.no_grad():
            for name, p in zip(self.t.model.names, self.t.model.flat, strict=True):
                p.copy_(tensors[f"stack.{name}"])
            for i, st in enumerate(self.t.opt.state):
                for key in st:
                    st[key].copy_(tensors[f"optim.{i}.{key}"])
        self.t.loss_sum = tensors["loss_sum"].to(self.t.device).clone()
        self.t.n_loss = [int(v) for v in gs["n_loss"]]
        for k, i in enumerate(active):
            s = self.t.streams[i]
            s.restore(self.t.step // s.spe, tensors[f"rng.data.{i}"])
            if self.t.dropout_rng == "matched":
                self.t.model.generators[k].set_state(tensors[f"rng.dropout.{i}"])
        if self.t.dropout_rng == "fast":
            torch.set_rng_state(tensors["rng.dropout"])
            if "rng.dropout_cuda" in tensors and self.t.device.type == "cuda":
                torch.cuda.set_rng_state(tensors["rng.dropout_cuda"], self.t.device)
        self.t.active = active
        for i in range(len(self.t.members)):
            if i in active:  # drop metric lines written after the checkpoint (they will be written again)
                drop_metrics_after(self.t.member_dir(i), "step", self.t.step)
            else:
                summary = self.t.member_dir(i) / "summary.json"
                if not summary.exists():
                    raise CheckpointError(f"member {self.t.names[i]!r} is marked finished but has no {summary}")

    def _resume_from_members(self) -> bool:
        """Continue a finished group from its members' ``Trainer``-format checkpoints with more epochs: weights,
        AdamW moments and step count, data order and dropout stream.

        The members must have stopped at the same step (a group steps them together) with the configs they are
        resumed with, ``epochs`` aside; a member's ``summary.json`` is removed, as it is no longer finished.
        Returns False, changing nothing, when no member has epochs left (resuming a finished group as it was).
        """
        ckpts = [read_tensors(self.t.member_dir(i) / "checkpoint.safetensors") for i in range(len(self.t.members))]
        where = f"the members' checkpoints ({str(self.t.member_dir(0) / 'checkpoint.safetensors')!r}, ...)"
        steps = [int(meta["train_state"]["step"]) for _, meta in ckpts]
        if all(st >= total for st, total in zip(steps, self.t.total_steps, strict=True)):
            return False
        if len(set(steps)) != 1:
            raise CheckpointError(f"cannot resume from {where}: they stopped at different steps {sorted(set(steps))}")
        for i, (_, saved) in enumerate(ckpts):
            problems = self.t.run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume member {self.t.names[i]!r}: " + "; ".join(problems))
        self.t.step = steps[0]
        self.t.elapsed = max(float(meta["train_state"]["elapsed_s"]) for _, meta in ckpts)
        with torch.no_grad():
            for j, (name, p) in enumerate(zip(self.t.model.names, self.t.model.flat, strict=True)):
                p.copy_(self.t.model.stack(name, [t[f"model.{name}"] for t, _ in ckpts]))
                st = self.t.opt.state[j]
                st["step"].copy_(ckpts[0][0][f"optim.{j}.step"])
                for key in ("exp_avg", "exp_avg_sq"):
                    st[key].copy_(self.t.model.stack(name, [t[f"optim.{j}.{key}"] for t, _ in ckpts]))
        for k, i in enumerate(self.t.active):
            s = self.t.streams[i]
            s.restore(self.t.step // s.spe, ckpts[i][0]["rng.data"])
            if self.t.dropout_rng == "matched":
                self.t.model.generators[k].set_state(ckpts[i][0]["rng.torch"])
        if self.t.dropout_rng == "fast":
            torch.set_rng_state(ckpts[0][0]["rng.torch"])
        for i in range(len(self.t.members)):
            drop_metrics_after(self.t.member_dir(i), "step", self.t.step)
            (self.t.member_dir(i) / "summary.json").unlink(missing_ok=True)
        return True

    # ---- member run directories ---------------------------------------------------------------------------------
    def write_configs(self) -> None:
        if self.t.out_dir is None:
            return
        prov = provenance()
        for i in range(len(self.t.members)):
            d = self.t.member_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            write_config(d, self.t.configs(i), prov, batched={"group": self.t.names})

    def write_metrics(self, i: int, epoch: int) -> None:
        k = self.t.active.index(i)
        model = self.t.member_model(i)
        metrics = evaluate(model, self.t.datasets[i])
        self.t.last_metrics[i] = metrics
        line = {
            "epoch": epoch,
            "step": self.t.step,
            "loss": (self.t.loss_sum[k] / max(self.t.n_loss[i], 1)).item(),
            "elapsed_s": round(self.t.elapsed, 2),
            "eval": metrics,
        }
        self.t.loss_sum[k] = 0.0
        self.t.n_loss[i] = 0
        if self.t.out_dir is not None:
            append_metrics(self.t.member_dir(i), line)

    def finish(self, i: int) -> TrainRun:
        model = self.t.member_model(i)
        self.t.eval_models.pop(i, None)
        m = self.t.members[i]
        metrics = self.t.last_metrics.get(i) or evaluate(model, self.t.datasets[i])
        epochs = m.train_cfg.epochs
        if self.t.out_dir is not None:
            d = self.t.member_dir(i)
            save_model(model, d / "model.safetensors", m.data_cfg, extra={"train_config": m.train_cfg.to_dict()})
            batched = {"group_size": len(self.t.members), "dropout_rng": self.t.dropout_rng}
            write_summary(d, epochs, self.t.step, self.t.elapsed, metrics, batched=batched)
        return TrainRun(model, self.t.member_dir(i) or Path("."), epochs, self.t.step, metrics, self.t.elapsed)
