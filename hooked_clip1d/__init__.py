"""hooked_clip1d: train, load, hook, dissect and visualise the tiny 1D CLIP models of
"Left-Right Symmetry Breaking in CLIP-style Vision-Language Models" (arXiv 2601.12809).

Example:
    >>> from hooked_clip1d import build_dataset, load_model
    >>> model = load_model("simplified-ntot20-n2-10")
    >>> ds = build_dataset(model.data_config)
    >>> out, cache = model.vision.run_with_cache(ds.splits["val_unseen"].images[:4])
    >>> cache["pattern", 0].shape
    torch.Size([4, 4, 11, 11])
"""

from hooked_clip1d._version import __version__ as __version__
from hooked_clip1d.lazy import lazy_exports

# the public names and their modules: imported on first use (PEP 562), so `import hooked_clip1d` and the command
# line's --help do not load torch and TransformerLens
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BatchedTrainer": "hooked_clip1d.training.batched",
        "Member": "hooked_clip1d.training.batched",
        "train_batched": "hooked_clip1d.training.batched",
        "train_fast": "hooked_clip1d.training.batched",
        "CLIP1D": "hooked_clip1d.model.clip",
        "CLIPConfig": "hooked_clip1d.model.clip",
        "clip_loss": "hooked_clip1d.model.clip",
        "EncoderConfig": "hooked_clip1d.model.config",
        "TextConfig": "hooked_clip1d.model.config",
        "VisionConfig": "hooked_clip1d.model.config",
        "preset": "hooked_clip1d.model.config",
        "DataConfig": "hooked_clip1d.settings",
        "Dataset": "hooked_clip1d.data.dataset",
        "Split": "hooked_clip1d.data.dataset",
        "build_dataset": "hooked_clip1d.data.dataset",
        "HookedEncoder": "hooked_clip1d.model.encoders",
        "HookedTextEncoder": "hooked_clip1d.model.encoders",
        "HookedVisionEncoder": "hooked_clip1d.model.encoders",
        "evaluate": "hooked_clip1d.evaluation",
        "list_pretrained": "hooked_clip1d.pretrained",
        "list_checkpoints": "hooked_clip1d.pretrained",
        "get_checkpoint_labels": "hooked_clip1d.pretrained",
        "load_model": "hooked_clip1d.pretrained",
        "resolve_model": "hooked_clip1d.pretrained",
        "load_spec": "hooked_clip1d.sweeps.runner",
        "run_sweep": "hooked_clip1d.sweeps.runner",
        "TrainConfig": "hooked_clip1d.settings",
        "RunConfig": "hooked_clip1d.training.run_config",
        "Trainer": "hooked_clip1d.training.trainer",
        "train": "hooked_clip1d.training.trainer",
        "Vocabulary": "hooked_clip1d.data.vocab",
    },
)


__all__ = [
    "BatchedTrainer",
    "Member",
    "CLIP1D",
    "CLIPConfig",
    "clip_loss",
    "DataConfig",
    "Dataset",
    "EncoderConfig",
    "HookedEncoder",
    "HookedTextEncoder",
    "HookedVisionEncoder",
    "RunConfig",
    "Split",
    "TrainConfig",
    "Trainer",
    "TextConfig",
    "VisionConfig",
    "Vocabulary",
    "build_dataset",
    "evaluate",
    "get_checkpoint_labels",
    "list_checkpoints",
    "list_pretrained",
    "load_model",
    "load_spec",
    "resolve_model",
    "run_sweep",
    "preset",
    "train",
    "train_batched",
    "train_fast",
]
