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
from hooked_clip1d.batched import BatchedTrainer, Member, train_batched, train_fast
from hooked_clip1d.clip import CLIP1D, CLIPConfig, clip_loss
from hooked_clip1d.config import EncoderConfig, TextConfig, VisionConfig, preset
from hooked_clip1d.data import DataConfig, Dataset, Split, build_dataset
from hooked_clip1d.encoders import HookedEncoder, HookedTextEncoder, HookedVisionEncoder
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.pretrained import list_pretrained, load_model
from hooked_clip1d.sweep import load_spec, run_sweep
from hooked_clip1d.training import TrainConfig, Trainer, train
from hooked_clip1d.vocab import Vocabulary

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
    "Split",
    "TrainConfig",
    "Trainer",
    "TextConfig",
    "VisionConfig",
    "Vocabulary",
    "build_dataset",
    "evaluate",
    "list_pretrained",
    "load_model",
    "load_spec",
    "run_sweep",
    "preset",
    "train",
    "train_batched",
    "train_fast",
]
