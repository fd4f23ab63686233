"""What a batched group writes: each member's ``Trainer``-format run directory and the group's resumable state.

``GroupFiles`` receives the group's state (``group_state.GroupState``: the stacked parameters, optimizer state, data
streams, dropout generators, where the loop stands) and reads and writes it, nothing else; ``batched.BatchedTrainer``
keeps one as ``trainer.files``. A member's ``checkpoint.safetensors`` has exactly the layout ``training.Trainer``
writes (so a finished member continues with ``Trainer(..., resume=True)``); ``group_checkpoint.safetensors`` holds
the stacked state of the members still training, at any global step, also mid-epoch. Member directories get
``config.json`` (with provenance), ``metrics.jsonl`` lines, ``checkpoint.safetensors``, ``model.safetensors`` and
``summary.json`` through ``rundir``, the module ``training.Trainer`` writes with too.

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
    >>> t.state.step = 3
    >>> t.files.save_group_checkpoint(); t.release_locks()
    >>> BatchedTrainer([member], out, resume=True).state.step
    3
    >>> gs = read_group_state(t.files.group_ckpt)  # its metadata alone
    >>> gs["step"], gs["active"]
    (3, [0])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.checkpoint import CheckpointError, read_tensors, save_model, save_tensors
from hooked_clip1d.training.group_state import GroupState
from hooked_clip1d.training.rundir import (
    append_metrics,
    drop_metrics_after,
    provenance,
    warn_missed_snapshots,
    write_config,
    write_summary,
)
from hooked_clip1d.training.trainer import TrainRun, save_snapshot

GROUP_CHECKPOINT = "group_checkpoint.safetensors"  # a group's resumable state, in its folder


def read_group_state(path: str | Path) -> dict[str, Any] | None:
    """The ``group_state`` of a group checkpoint (``step``, ``elapsed_s``, ``names`` of the members it trains,
    ``active``, ...) from its metadata alone, no tensor read; None if the file is missing, being replaced or not a
    group checkpoint."""
    return _read_state(path, "group_state")


def read_train_state(path: str | Path) -> dict[str, Any] | None:
    """The ``train_state`` of a single-run checkpoint (``training.Trainer``'s ``checkpoint.safetensors``: ``epoch``,
    ``step``, ``elapsed_s``) from its metadata alone, as ``read_group_state`` reads a group's; None likewise."""
    return _read_state(path, "train_state")


def _read_state(path: str | Path, key: str) -> dict[str, Any] | None:
    path = Path(path)
    if not path.exists():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            gs = json.loads((f.metadata() or {}).get(key, "null"))
    except Exception:  # noqa: BLE001 - a checkpoint being replaced or damaged: the caller falls back
        return None
    if not isinstance(gs, dict) or not isinstance(gs.get("step"), int):
        return None
    return gs


class GroupFiles:
    """What a batched group writes and reads back: the files of ``state`` (a ``GroupState``), written through
    ``rundir``; ``BatchedTrainer`` keeps one as ``trainer.files``."""

    def __init__(self, state: GroupState):
        self.s = state

    @property
    def group_ckpt(self) -> Path | None:
        """The group's resumable state (``GROUP_CHECKPOINT`` in its out_dir); None without an out_dir."""
        return None if self.s.out_dir is None else self.s.out_dir / GROUP_CHECKPOINT

    def _member_optimizer_tensors(self, k: int) -> dict[str, torch.Tensor]:
        """``Trainer``-format optimizer state (``optim.{i}.{step,exp_avg,exp_avg_sq}``) of stack row ``k``."""
        out = {}
        for i, (name, st) in enumerate(zip(self.s.model.names, self.s.opt.state, strict=True)):
            out[f"optim.{i}.step"] = st["step"].detach().cpu().clone()
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"optim.{i}.{key}"] = self.s.model.to_member(k, name, st[key].detach())
        return out

    def save_member_checkpoint(self, i: int, epoch: int) -> None:
        """A ``Trainer``-format training checkpoint of member ``i`` at the end of ``epoch``."""
        k = self.s.active.index(i)
        tensors = {f"model.{n}": v for n, v in self.s.model.member_state_dict(k).items()}
        tensors.update(self._member_optimizer_tensors(k))
        if self.s.dropout_rng == "matched":
            tensors["rng.torch"] = self.s.model.generators[k].get_state()
        else:
            tensors["rng.torch"] = torch.get_rng_state()  # fast mode draws from the global RNG
        tensors["rng.data"] = self.s.streams[i].state_before(epoch)
        meta = {
            **self.s.configs(i),
            "train_state": {"epoch": epoch, "step": self.s.step, "elapsed_s": self.s.elapsed},
            "batched": {"dropout_rng": self.s.dropout_rng, "group_size": len(self.s.members)},
        }
        save_tensors(self.s.member_dir(i) / "checkpoint.safetensors", tensors, meta)
        if self.s.members[i].train_cfg.keep_snapshots:
            save_snapshot(self.s.member_model(i), self.s.member_dir(i), epoch, self.s.members[i].data_cfg)

    # ---- group checkpoint -----------------------------------------------------------------------------------------
    def save_group_checkpoint(self) -> None:
        """Everything needed to continue the whole group from this step (any step, also mid-epoch)."""
        if self.s.out_dir is None:
            return
        tensors: dict[str, torch.Tensor] = {}
        for name, p in zip(self.s.model.names, self.s.model.flat, strict=True):
            tensors[f"stack.{name}"] = p.detach()
        for i, st in enumerate(self.s.opt.state):
            for key, t in st.items():
                tensors[f"optim.{i}.{key}"] = t
        for k, i in enumerate(self.s.active):
            s = self.s.streams[i]
            tensors[f"rng.data.{i}"] = s.state_before(self.s.step // s.spe)
            if self.s.dropout_rng == "matched":
                tensors[f"rng.dropout.{i}"] = self.s.model.generators[k].get_state()
        if self.s.dropout_rng == "fast":
            tensors["rng.dropout"] = torch.get_rng_state()
            if self.s.device.type == "cuda":
                tensors["rng.dropout_cuda"] = torch.cuda.get_rng_state(self.s.device)
        tensors["loss_sum"] = self.s.loss_sum
        meta = {
            "group_state": {
                "step": self.s.step,
                "elapsed_s": self.s.elapsed,
                "active": self.s.active,
                "n_loss": self.s.n_loss,
                "names": self.s.names,
                "dropout_rng": self.s.dropout_rng,
            },
            "members": [self.s.configs(i) for i in range(len(self.s.members))],
        }
        save_tensors(self.group_ckpt, tensors, meta)

    def resume(self) -> None:
        dirs = [self.s.member_dir(i) for i in range(len(self.s.members))]
        finished = all((d / "summary.json").exists() and (d / "checkpoint.safetensors").exists() for d in dirs)
        if finished and self._resume_from_members():  # asked for more epochs: the group checkpoint is older
            return
        if not self.group_ckpt.exists():
            hint = " (every member has finished its epochs; give more epochs to continue them)" if finished else ""
            raise FileNotFoundError(f"cannot resume: no group checkpoint at {str(self.group_ckpt)!r}{hint}")
        tensors, meta = read_tensors(self.group_ckpt)
        gs = meta.get("group_state")
        if not isinstance(gs, dict) or "members" not in meta:
            raise CheckpointError(f"{str(self.group_ckpt)!r} is not a batched-group checkpoint")
        if gs["names"] != self.s.names:
            raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: it holds members {gs['names']}")
        if gs["dropout_rng"] != self.s.dropout_rng:
            raise CheckpointError(
                f"cannot resume {str(self.group_ckpt)!r}: it was trained with dropout_rng={gs['dropout_rng']!r}"
            )
        for i, saved in enumerate(meta["members"]):
            problems = self.s.run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: member {i}: " + "; ".join(problems))
        active = [int(i) for i in gs["active"]]
        self.s.step = int(gs["step"])
        self.s.elapsed = float(gs["elapsed_s"])
        self.s.keep(active)  # the members finished before the checkpoint leave the stack
        with torch.no_grad():
            for name, p in zip(self.s.model.names, self.s.model.flat, strict=True):
                p.copy_(tensors[f"stack.{name}"])
            for i, st in enumerate(self.s.opt.state):
                for key in st:
                    st[key].copy_(tensors[f"optim.{i}.{key}"])
        self.s.loss_sum = tensors["loss_sum"].to(self.s.device).clone()
        self.s.n_loss = [int(v) for v in gs["n_loss"]]
        for k, i in enumerate(active):
            s = self.s.streams[i]
            s.restore(self.s.step // s.spe, tensors[f"rng.data.{i}"])
            if self.s.dropout_rng == "matched":
                self.s.model.generators[k].set_state(tensors[f"rng.dropout.{i}"])
        if self.s.dropout_rng == "fast":
            torch.set_rng_state(tensors["rng.dropout"])
            if "rng.dropout_cuda" in tensors and self.s.device.type == "cuda":
                torch.cuda.set_rng_state(tensors["rng.dropout_cuda"], self.s.device)
        for i in range(len(self.s.members)):
            if i in active:  # drop metric lines written after the checkpoint (they will be written again)
                drop_metrics_after(self.s.member_dir(i), "step", self.s.step)
                spe = self.s.streams[i].spe
                warn_missed_snapshots(
                    self.s.member_dir(i), self.s.members[i].train_cfg.snapshot_epochs, self.s.step // spe
                )
            else:
                summary = self.s.member_dir(i) / "summary.json"
                if not summary.exists():
                    raise CheckpointError(f"member {self.s.names[i]!r} is marked finished but has no {summary}")

    def _resume_from_members(self) -> bool:
        """Continue a finished group from its members' ``Trainer``-format checkpoints with more epochs: weights,
        AdamW moments and step count, data order and dropout stream.

        The members must have stopped at the same step (a group steps them together) with the configs they are
        resumed with, ``epochs`` aside; a member's ``summary.json`` is removed, as it is no longer finished.
        Returns False, changing nothing, when no member has epochs left (resuming a finished group as it was).
        """
        ckpts = [read_tensors(self.s.member_dir(i) / "checkpoint.safetensors") for i in range(len(self.s.members))]
        where = f"the members' checkpoints ({str(self.s.member_dir(0) / 'checkpoint.safetensors')!r}, ...)"
        steps = [int(meta["train_state"]["step"]) for _, meta in ckpts]
        if all(st >= total for st, total in zip(steps, self.s.total_steps, strict=True)):
            return False
        if len(set(steps)) != 1:
            raise CheckpointError(f"cannot resume from {where}: they stopped at different steps {sorted(set(steps))}")
        for i, (_, saved) in enumerate(ckpts):
            problems = self.s.run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume member {self.s.names[i]!r}: " + "; ".join(problems))
        self.s.step = steps[0]
        self.s.elapsed = max(float(meta["train_state"]["elapsed_s"]) for _, meta in ckpts)
        for i in range(len(self.s.members)):
            spe = self.s.streams[i].spe
            warn_missed_snapshots(self.s.member_dir(i), self.s.members[i].train_cfg.snapshot_epochs, self.s.step // spe)
        with torch.no_grad():
            for j, (name, p) in enumerate(zip(self.s.model.names, self.s.model.flat, strict=True)):
                p.copy_(self.s.model.stack(name, [t[f"model.{name}"] for t, _ in ckpts]))
                st = self.s.opt.state[j]
                st["step"].copy_(ckpts[0][0][f"optim.{j}.step"])
                for key in ("exp_avg", "exp_avg_sq"):
                    st[key].copy_(self.s.model.stack(name, [t[f"optim.{j}.{key}"] for t, _ in ckpts]))
        for k, i in enumerate(self.s.active):
            s = self.s.streams[i]
            s.restore(self.s.step // s.spe, ckpts[i][0]["rng.data"])
            if self.s.dropout_rng == "matched":
                self.s.model.generators[k].set_state(ckpts[i][0]["rng.torch"])
        if self.s.dropout_rng == "fast":
            torch.set_rng_state(ckpts[0][0]["rng.torch"])
        for i in range(len(self.s.members)):
            drop_metrics_after(self.s.member_dir(i), "step", self.s.step)
            (self.s.member_dir(i) / "summary.json").unlink(missing_ok=True)
        return True

    # ---- member run directories ---------------------------------------------------------------------------------
    def write_configs(self) -> None:
        if self.s.out_dir is None:
            return
        prov = provenance()
        for i in range(len(self.s.members)):
            d = self.s.member_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            write_config(d, self.s.configs(i), prov, batched={"group": self.s.names})

    def write_metrics(self, i: int, epoch: int) -> None:
        k = self.s.active.index(i)
        model = self.s.member_model(i)
        metrics = evaluate(model, self.s.datasets[i])
        self.s.last_metrics[i] = metrics
        line = {
            "epoch": epoch,
            "step": self.s.step,
            "loss": (self.s.loss_sum[k] / max(self.s.n_loss[i], 1)).item(),
            "elapsed_s": round(self.s.elapsed, 2),
            "eval": metrics,
        }
        self.s.loss_sum[k] = 0.0
        self.s.n_loss[i] = 0
        if self.s.out_dir is not None:
            append_metrics(self.s.member_dir(i), line)

    def finish(self, i: int) -> TrainRun:
        model = self.s.member_model(i)
        self.s.eval_models.pop(i, None)
        m = self.s.members[i]
        metrics = self.s.last_metrics.get(i) or evaluate(model, self.s.datasets[i])
        epochs = m.train_cfg.epochs
        if self.s.out_dir is not None:
            d = self.s.member_dir(i)
            save_model(model, d / "model.safetensors", m.data_cfg, extra={"train_config": m.train_cfg.to_dict()})
            batched = {"group_size": len(self.s.members), "dropout_rng": self.s.dropout_rng}
            write_summary(d, epochs, self.s.step, self.s.elapsed, metrics, batched=batched)
        return TrainRun(model, self.s.member_dir(i) or Path("."), epochs, self.s.step, metrics, self.s.elapsed)
