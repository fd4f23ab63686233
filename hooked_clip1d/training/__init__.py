"""Training (Sec. 2.2, App. B, C): one run's configs as one object (``run_config.RunConfig``, what the trainers
take: ``train(run, out_dir)``), the weight-decay groups of a recipe (``param_groups``), run directories (``rundir``),
the single-model ``Trainer`` (``trainer``), and the batched engine that trains K models as one (``stacked``
parameters with their ``stacked_forward``, ``stacked_ops`` kernels and ``stacked_support`` checks, ``stacked_adamw``
optimizer, ``members``; the group's state as one object, ``group_state.GroupState``, which its files (``group_io``)
and its whole-step CUDA graph (``graph_step``) receive; ``batched``, the loop).

Example:
    >>> from hooked_clip1d.training import TrainConfig
    >>> TrainConfig().weight_decay
    0.2
"""

from hooked_clip1d.lazy import lazy_exports

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TrainConfig": "hooked_clip1d.settings",
        "BatchedTrainer": "hooked_clip1d.training.batched",
        "GroupState": "hooked_clip1d.training.group_state",
        "Member": "hooked_clip1d.training.members",
        "RunConfig": "hooked_clip1d.training.run_config",
        "train_batched": "hooked_clip1d.training.batched",
        "train_fast": "hooked_clip1d.training.batched",
        "TrainRun": "hooked_clip1d.training.trainer",
        "Trainer": "hooked_clip1d.training.trainer",
        "train": "hooked_clip1d.training.trainer",
    },
)


__all__ = [
    "BatchedTrainer",
    "GroupState",
    "Member",
    "RunConfig",
    "TrainConfig",
    "TrainRun",
    "Trainer",
    "train",
    "train_batched",
    "train_fast",
]
