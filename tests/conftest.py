"""Shared tiny fixtures: every model here has d_model=16, d_head=4, 2 heads and 6 labels so the suite stays fast.

Session-scoped models are shared between tests: tests that change a model (flags, weights, hooks left on) must
build their own with ``make_model``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # transformer_lens.patching always draws progress bars
# The processes tests start (notebook kernels, CLI subprocesses, sweep workers) inherit one intra-op thread too (see
# torch.set_num_threads below): a notebook kernel at torch's default of one thread per core, beside the other test
# worker, trained its SAE in 55 s instead of 1.5 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from typing import Any

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, Dataset, build_dataset

# These models are tiny: intra-op threading only adds overhead, and with another process busy on a core it makes
# every forward ~100x slower (threads spin-waiting for each other).
torch.set_num_threads(1)

N_LABELS = 6
TINY: dict[str, Any] = dict(n_labels=N_LABELS, d_model=16, d_head=4, n_heads=2)


def tiny_config(preset: str = "simplified", **overrides: Any) -> CLIPConfig:
    """A tiny ``CLIPConfig`` of a paper preset; ``overrides`` go to both towers (plus vision_/text_overrides)."""
    kw: dict[str, Any] = dict(TINY)
    if preset == "full":
        kw.update(d_mlp=32, n_layers=2)
    kw.update(overrides)
    return CLIPConfig.from_preset(preset, **kw)


@torch.no_grad()
def randomize_biases(model: torch.nn.Module, seed: int = 123) -> None:
    """Give every bias and LayerNorm weight a random value (they are initialised to 0 / 1, which hides bugs)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("b_") or name.endswith(("ln1.b", "ln2.b", "ln_final.b")):
            p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        elif name.endswith(("ln1.w", "ln2.w", "ln_final.w")):
            p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def make_model(preset: str = "simplified", seed: int = 0, random_biases: bool = True, **overrides: Any) -> CLIP1D:
    """A fresh tiny ``CLIP1D`` in eval mode, with N(0, 1) embeddings (unless ``init_std`` is given): at the default
    0.02 a random model's attention terms are ~1e-4 and the maths tests would compare rounding noise."""
    overrides.setdefault("init_std", 1.0)
    model = CLIP1D(tiny_config(preset, **overrides), seed=seed)
    if random_biases:
        randomize_biases(model, seed + 1000)
    return model.eval()


#: for code run in a plain interpreter (no jaxtyping / beartype): ``refusal(fn)`` -> the error's type and message
REFUSAL_SNIPPET = """
def refusal(fn):
    try:
        fn()
    except (ValueError, TypeError) as e:
        return type(e).__name__ + ": " + str(e)
    return "no error"
"""

ROPE = dict(vision_overrides={"positional": "rope"}, text_overrides={"positional": "rope"})


@pytest.fixture(scope="session")
def data_config() -> DataConfig:
    return DataConfig(n_labels=N_LABELS, n_heldout=2, n2=2)


@pytest.fixture(scope="session")
def dataset(data_config: DataConfig) -> Dataset:
    return build_dataset(data_config)


@pytest.fixture(scope="session")
def dataset_lr() -> Dataset:
    return build_dataset(DataConfig(n_labels=N_LABELS, n_heldout=2, n2=2, caption_mode="left_right"))


@pytest.fixture(scope="session")
def simplified_model() -> CLIP1D:
    return make_model("simplified", seed=0)


@pytest.fixture(scope="session")
def full_model() -> CLIP1D:
    return make_model("full", seed=1)


@pytest.fixture(scope="session")
def rope_model() -> CLIP1D:
    return make_model("simplified", seed=2, **ROPE)


@pytest.fixture(scope="session")
def two_layer_model() -> CLIP1D:
    return make_model("simplified", seed=3, n_layers=2)


MODEL_FIXTURES = ("simplified_model", "full_model", "rope_model", "two_layer_model")


@pytest.fixture(params=MODEL_FIXTURES)
def any_model(request: pytest.FixtureRequest) -> CLIP1D:
    """Each shared model variant in turn."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def images(dataset: Dataset) -> torch.Tensor:
    """A few images: single- and two-object, from several splits."""
    s = dataset.splits
    return torch.cat([s["train"].images[:2], s["val_seen"].images[:2], s["val_unseen"].images[:2]])


@pytest.fixture(scope="session")
def captions(dataset: Dataset) -> torch.Tensor:
    """A few captions of the caption table (single and pair captions)."""
    return dataset.captions[torch.tensor([0, 1, 6, 7, 8, 19])]


def no_hooks_left(encoder: Any) -> bool:
    """True when no hook function (forward or backward, permanent or not) is attached to any hook point."""
    return encoder.list_hooks() == {} and all(
        not hp.fwd_hooks and not hp.bwd_hooks for hp in encoder.hook_dict.values()
    )


@pytest.fixture(autouse=True)
def _sweeps_home(tmp_path, monkeypatch):
    """Sweeps default to a user data folder: tests keep theirs under tmp_path/res/sweeps."""
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path / "res" / "sweeps"))


@pytest.fixture(autouse=True)
def _close_figures():
    """Figures a test made and did not close (figure functions return them open) do not pile up across tests."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


# torch, machine, the CPU's vector extensions and the kernels ATen dispatches to (ATEN_CPU_CAPABILITY can lower them):
# the pin tests (test_forward_pins.py, test_step_pins.py) compare float digests only where this matches the recording
PINS_RECORDED_ON = ("2.13.0+cpu", "x86_64", "avx2,fma,avx512f,avx512_bf16,amx_bf16", "AVX512")


def numeric_environment() -> tuple[str, str, str, str]:
    """What decides the bits of a float result here: torch's version, the machine, the CPU's vector extensions (from
    /proc/cpuinfo; "?" where it cannot be read) and ATen's dispatched kernel set."""
    import platform

    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        text = ""
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), None)
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
    found = "?" if flags is None else ",".join(f for f in wanted if f in flags)
    return torch.__version__, platform.machine(), found, torch.backends.cpu.get_cpu_capability()


def skip_unless_pinned_here() -> None:
    """Skip a float-digest pin test unless this is the numeric environment its digests were recorded in."""
    here = numeric_environment()
    if here != PINS_RECORDED_ON:
        pytest.skip(f"recorded on (torch, machine, vector extensions, ATen kernels) {PINS_RECORDED_ON}, this is {here}")
