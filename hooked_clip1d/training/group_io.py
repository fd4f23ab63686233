"""What a batched group writes: each member's ``Trainer``-format run directory and the group's resumable state.

``GroupFiles`` is a mixin of ``batched.BatchedTrainer``: it reads and writes the trainer's stacked
parameters, optimizer state, data streams and dropout generators, and needs nothing else from it than the attributes
listed below. A member's ``checkpoint.safetensors`` has exactly the layout ``training.Trainer`` writes (so a finished
member continues with ``Trainer(..., resume=True)``); ``group_checkpoint.safetensors`` holds the stacked state of the
members still training, at any global step, also mid-epoch.

Attributes the mixin uses (set by ``BatchedTrainer.__init__``): ``model`` (``stacked.StackedCLIP``), ``opt``
(``stacked_adamw.StackedAdamW``), ``members``, ``names``, ``streams``, ``active``, ``step``, ``elapsed``,
``loss_sum``, ``n_loss``, ``dropout_rng``, ``device``, ``out_dir``, ``group_ckpt``, ``_member_dirs``, ``datasets``,
``last_metrics``, ``_eval_models`` and the methods ``member_dir``, ``member_model`` and ``_configs``. Member
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
    >>> t.save_group_checkpoint(); t.release_locks()
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
    from hooked_clip1d.training.stacked import StackedCLIP
    from hooked_clip1d.training.stacked_adamw import StackedAdamW


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
    """What a ``BatchedTrainer`` writes and reads back (mixin; see the module docstring)."""

    # state of the trainer this mixin reads and writes (set by BatchedTrainer.__init__)
    model: StackedCLIP
    opt: StackedAdamW
    members: list[Any]
    names: list[str]
    active: list[int]
    step: int
    elapsed: float
    loss_sum: torch.Tensor
    n_loss: list[int]
    out_dir: Path | None
    group_ckpt: Path

    def _member_optimizer_tensors(self, k: int) -> dict[str, torch.Tensor]:
        """``Trainer``-format optimizer state (``optim.{i}.{step,exp_avg,exp_avg_sq}``) of stack row ``k``."""
        out = {}
        for i, (name, st) in enumerate(zip(self.model.names, self.opt.state, strict=True)):
            out[f"optim.{i}.step"] = st["step"].detach().cpu().clone()
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"optim.{i}.{key}"] = self.model.to_member(k, name, st[key].detach())
        return out

    def _save_member_checkpoint(self, i: int, epoch: int) -> None:
        """A ``Trainer``-format training checkpoint of member ``i`` at the end of ``epoch``."""
        k = self.active.index(i)
        tensors = {f"model.{n}": v for n, v in self.model.member_state_dict(k).items()}
        tensors.update(self._member_optimizer_tensors(k))
        if self.dropout_rng == "matched":
            tensors["rng.torch"] = self.model.generators[k].get_state()
        else:
            tensors["rng.torch"] = torch.get_rng_state()  # fast mode draws from the global RNG
        tensors["rng.data"] = self.streams[i].state_before(epoch)
        meta = {
            **self._configs(i),
            "train_state": {"epoch": epoch, "step": self.step, "elapsed_s": self.elapsed},
            "batched": {"dropout_rng": self.dropout_rng, "group_size": len(self.members)},
        }
        save_tensors(self.member_dir(i) / "checkpoint.safetensors", tensors, meta)
        if self.members[i].train_cfg.keep_snapshots:
            save_snapshot(self.member_model(i), self.member_dir(i), epoch, self.members[i].data_cfg)

    # ---- group checkpoint -----------------------------------------------------------------------------------------
    def save_group_checkpoint(self) -> None:
        """Everything needed to continue the whole group from this step (any step, also mid-epoch)."""
        if self.out_dir is None:
            return
        tensors: dict[str, torch.Tensor] = {}
        for name, p in zip(self.model.names, self.model.flat, strict=True):
            tensors[f"stack.{name}"] = p.detach()
        for i, st in enumerate(self.opt.state):
            for key, t in st.items():
                tensors[f"optim.{i}.{key}"] = t
        for k, i in enumerate(self.active):
            s = self.streams[i]
            tensors[f"rng.data.{i}"] = s.state_before(self.step // s.spe)
            if self.dropout_rng == "matched":
                tensors[f"rng.dropout.{i}"] = self.model.generators[k].get_state()
        if self.dropout_rng == "fast":
            tensors["rng.dropout"] = torch.get_rng_state()
            if self.device.type == "cuda":
                tensors["rng.dropout_cuda"] = torch.cuda.get_rng_state(self.device)
        tensors["loss_sum"] = self.loss_sum
        meta = {
            "group_state": {
                "step": self.step,
                "elapsed_s": self.elapsed,
                "active": self.active,
                "n_loss": self.n_loss,
                "names": self.names,
                "dropout_rng": self.dropout_rng,
            },
            "members": [self._configs(i) for i in range(len(self.members))],
        }
        save_tensors(self.group_ckpt, tensors, meta)

    def _resume(self) -> None:
        dirs = [self.member_dir(i) for i in range(len(self.members))]
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
        if gs["names"] != self.names:
            raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: it holds members {gs['names']}")
        if gs["dropout_rng"] != self.dropout_rng:
            raise CheckpointError(
                f"cannot resume {str(self.group_ckpt)!r}: it was trained with dropout_rng={gs['dropout_rng']!r}"
            )
        for i, saved in enumerate(meta["members"]):
            problems = self._run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume {str(self.group_ckpt)!r}: member {i}: " + "; ".join(problems))
        active = [int(i) for i in gs["active"]]
        self.step = int(gs["step"])
        self.elapsed = float(gs["elapsed_s"])
        if active != self.active:
            self.model.keep(active)
            self.opt.keep(active, list(self.model.flat))
        with torch.no_grad():
            for name, p in zip(self.model.names, self.model.flat, strict=True):
                p.copy_(tensors[f"stack.{name}"])
            for i, st in enumerate(self.opt.state):
                for key in st:
                    st[key].copy_(tensors[f"optim.{i}.{key}"])
        self.loss_sum = tensors["loss_sum"].to(self.device).clone()
        self.n_loss = [int(v) for v in gs["n_loss"]]
        for k, i in enumerate(active):
            s = self.streams[i]
            s.restore(self.step // s.spe, tensors[f"rng.data.{i}"])
            if self.dropout_rng == "matched":
                self.model.generators[k].set_state(tensors[f"rng.dropout.{i}"])
        if self.dropout_rng == "fast":
            torch.set_rng_state(tensors["rng.dropout"])
            if "rng.dropout_cuda" in tensors and self.device.type == "cuda":
                torch.cuda.set_rng_state(tensors["rng.dropout_cuda"], self.device)
        self.active = active
        for i in range(len(self.members)):
            if i in active:  # drop metric lines written after the checkpoint (they will be written again)
                drop_metrics_after(self.member_dir(i), "step", self.step)
            else:
                summary = self.member_dir(i) / "summary.json"
                if not summary.exists():
                    raise CheckpointError(f"member {self.names[i]!r} is marked finished but has no {summary}")

    def _resume_from_members(self) -> bool:
        """Continue a finished group from its members' ``Trainer``-format checkpoints with more epochs: weights,
        AdamW moments and step count, data order and dropout stream.

        The members must have stopped at the same step (a group steps them together) with the configs they are
        resumed with, ``epochs`` aside; a member's ``summary.json`` is removed, as it is no longer finished.
        Returns False, changing nothing, when no member has epochs left (resuming a finished group as it was).
        """
        ckpts = [read_tensors(self.member_dir(i) / "checkpoint.safetensors") for i in range(len(self.members))]
        where = f"the members' checkpoints ({str(self.member_dir(0) / 'checkpoint.safetensors')!r}, ...)"
        steps = [int(meta["train_state"]["step"]) for _, meta in ckpts]
        if all(st >= total for st, total in zip(steps, self.total_steps, strict=True)):
            return False
        if len(set(steps)) != 1:
            raise CheckpointError(f"cannot resume from {where}: they stopped at different steps {sorted(set(steps))}")
        for i, (_, saved) in enumerate(ckpts):
            problems = self._run_config(i).resume_problems(saved)
            if problems:
                raise CheckpointError(f"cannot resume member {self.names[i]!r}: " + "; ".join(problems))
        self.step = steps[0]
        self.elapsed = max(float(meta["train_state"]["elapsed_s"]) for _, meta in ckpts)
        with torch.no_grad():
            for j, (name, p) in enumerate(zip(self.model.names, self.model.flat, strict=True)):
                p.copy_(self.model.stack(name, [t[f"model.{name}"] for t, _ in ckpts]))
                st = self.opt.state[j]
                st["step"].copy_(ckpts[0][0][f"optim.{j}.step"])
                for key in ("exp_avg", "exp_avg_sq"):
                    st[key].copy_(self.model.stack(name, [t[f"optim.{j}.{key}"] for t, _ in ckpts]))
        for k, i in enumerate(self.active):
            s = self.streams[i]
            s.restore(self.step // s.spe, ckpts[i][0]["rng.data"])
            if self.dropout_rng == "matched":
                self.model.generators[k].set_state(ckpts[i][0]["rng.torch"])
        if self.dropout_rng == "fast":
            torch.set_rng_state(ckpts[0][0]["rng.torch"])
        for i in range(len(self.members)):
            drop_metrics_after(self.member_dir(i), "step", self.step)
            (self.member_dir(i) / "summary.json").unlink(missing_ok=True)
        return True

    # ---- member run directories ---------------------------------------------------------------------------------
    def _write_configs(self) -> None:
        if self.out_dir is None:
            return
        prov = provenance()
        for i in range(len(self.members)):
            d = self.member_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            write_config(d, self._configs(i), prov, batched={"group": self.names})

    def _write_metrics(self, i: int, epoch: int) -> None:
        k = self.active.index(i)
        model = self.member_model(i)
        metrics = evaluate(model, self.datasets[i])
        self.last_metrics[i] = metrics
        line = {
            "epoch": epoch,
            "step": self.step,
            "loss": (self.loss_sum[k] / max(self.n_loss[i], 1)).item(),
            "elapsed_s": round(self.elapsed, 2),
            "eval": metrics,
        }
        self.loss_sum[k] = 0.0
        self.n_loss[i] = 0
        if self.out_dir is not None:
            append_metrics(self.member_dir(i), line)

    def _finish(self, i: int) -> TrainRun:
        model = self.member_model(i)
        self._eval_models.pop(i, None)
        m = self.members[i]
        metrics = self.last_metrics.get(i) or evaluate(model, self.datasets[i])
        epochs = m.train_cfg.epochs
        if self.out_dir is not None:
            d = self.member_dir(i)
            save_model(model, d / "model.safetensors", m.data_cfg, extra={"train_config": m.train_cfg.to_dict()})
            batched = {"group_size": len(self.members), "dropout_rng": self.dropout_rng}
            write_summary(d, epochs, self.step, self.elapsed, metrics, batched=batched)
        return TrainRun(model, self.member_dir(i) or Path("."), epochs, self.step, metrics, self.elapsed)
