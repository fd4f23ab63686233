"""The ground-truth circuits of zoo models, shipped as data: ``hooked_clip1d/pretrained/circuits/<model>.json``.

Each file is an ``analysis.circuits.scores.Circuit`` measured by ``analysis.circuits.scores.ground_truth_circuit``
on every
unseen-pair validation image of the model's own dataset (``ground_truth_inputs(model)``: 100 images for the shipped
models): its nodes and edges (every edge whose mean ablation moves the belief by >= 5 %, in either direction), the
rule and measurements that define it (edge mean ablation; term ablations, mirror swaps and knockouts beside it) and
its faithfulness, completeness and minimality. ``write_circuit`` regenerates a file (``python -m
hooked_clip1d.pretrained.circuit_files`` regenerates all); tests check that the flagship's and the
``-no-qk-bias`` model's files are what the function measures today.

**Inputs.** A circuit is minimal on the inputs it was measured on (``definition["inputs"]``, and
``definition["minimal_on"]`` says so): on seen pairs and training pairs some of its edges move the belief by less
than the threshold (``reproduce x-circuits`` measures it on 100 of each), so read it as the circuit of the
unseen-pair task.

Only attention-only zoo models have a file: on the 4-layer LayerNorm model (``full-ntot20-n2-10``) the single-edge
rule keeps too few edges (its effect is spread over many), and the circuit it gives is not faithful (its belief is
~0), so it is no ground truth.

Example:
    >>> from hooked_clip1d.pretrained.circuit_files import list_circuits, load_circuit
    >>> "simplified-ntot20-n2-10" in list_circuits()
    True
    >>> c = load_circuit("simplified-ntot20-n2-10")  # the flagship: vision heads 1 and 3 (its split), text 0, 2, 3
    >>> c.components(), round(c.scores["faithfulness"], 2), c.definition["inputs"]["split"]
    (['vision.L0.H1', 'vision.L0.H3', 'text.L0.H0', 'text.L0.H2', 'text.L0.H3'], 0.94, 'val_unseen')
    >>> load_circuit("simplified-ntot20-n2-10-standard-loss").components()  # the flagship until 2026-11-28
    ['vision.L0.H3', 'text.L0.H1', 'text.L0.H2', 'text.L0.H3']
"""

from __future__ import annotations

import time
from pathlib import Path

from hooked_clip1d.analysis.circuits.scores import Circuit, ground_truth_circuit, ground_truth_inputs
from hooked_clip1d.pretrained import list_pretrained, load_model

CIRCUITS_DIR = Path(__file__).resolve().parent / "circuits"
#: the zoo models with a shipped ground-truth circuit (attention-only; the flagship first, then the flagship until
#: 2026-11-28, trained with the standard CLIP loss)
CIRCUIT_MODELS = (
    "simplified-ntot20-n2-10",
    "simplified-ntot20-n2-10-standard-loss",
    "simplified-ntot20-n2-10-no-qk-bias",
    "simplified-ntot20-n2-10-init002",
    "vision2-ntot25-n2-15-no-qk-bias",
    "rope-ntot20-n2-15-no-qk-bias",
    "leftright-v1-t2-ntot20-n2-10-no-qk-bias",
)


def list_circuits() -> list[str]:
    """Models with a shipped ground-truth circuit file."""
    return sorted(p.stem for p in CIRCUITS_DIR.glob("*.json"))


def load_circuit(name: str) -> Circuit:
    """The shipped ground-truth circuit of zoo model ``name``."""
    path = CIRCUITS_DIR / f"{name}.json"
    if not path.exists():
        raise KeyError(f"no ground-truth circuit is shipped for {name!r}; shipped: {list_circuits()}")
    return Circuit.load(path)


def measure_circuit(name: str) -> Circuit:
    """Measure zoo model ``name``'s ground-truth circuit as the shipped file was measured (every unseen-pair
    validation image)."""
    if name not in list_pretrained():
        raise KeyError(f"unknown zoo model {name!r}; known: {list_pretrained()}")
    model = load_model(name)
    images, captions = ground_truth_inputs(model)
    circuit = ground_truth_circuit(model, images, captions, name=name)
    circuit.definition["inputs"] = {"split": "val_unseen", "n": int(images.shape[0]), "captions": "left"}
    return circuit


def write_circuit(name: str, out_dir: str | Path = CIRCUITS_DIR) -> Path:
    """Measure and write ``<out_dir>/<name>.json`` (wall time in ``scores.seconds`` is dropped, so a rerun that
    measures the same numbers writes the same file)."""
    circuit = measure_circuit(name)
    circuit.scores.pop("seconds", None)
    return circuit.save(Path(out_dir) / f"{name}.json")


if __name__ == "__main__":  # regenerate every shipped circuit
    import torch

    torch.set_num_threads(1)  # these models are tiny: more threads only wait for each other
    for model_name in CIRCUIT_MODELS:
        t0 = time.perf_counter()
        print(write_circuit(model_name), f"{time.perf_counter() - t0:.1f} s")
