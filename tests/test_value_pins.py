"""The forward pins in a form every machine can check: test_forward_pins.py compares sha256 digests of output bytes,
which hold only in the numeric environment that recorded them (torch 2.13, x86_64, AVX-512 and its ATen kernels)
and skip elsewhere (on a CI machine without AVX-512, every one). Here each shipped model (and each tiny configuration of
test_forward_pins.TINY) stores a few numbers per output on the same fixed batch: the logits in full, the loss, and for
every cached activation, activation gradient and parameter gradient its norm and its projection on a fixed
direction. They are compared within tolerances that float32 on another vector unit keeps (REL and FLOOR, measured), so a
moved weight, a change of the model's own code or a wrong file fails on any machine.

Recorded 2026-11-29 on the machine that recorded the digests. ``python tests/test_value_pins.py --record NAME ...``
records newly shipped (or renamed) models and drops the entries of models no longer shipped, keeping the others;
``--record`` alone rewrites every entry (only after a deliberate change of outputs).
"""

from __future__ import annotations

import json
import lzma
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_model
from test_forward_pins import TINY, shipped_batch

from hooked_clip1d import CLIP1D, DataConfig, build_dataset, list_pretrained, load_model

PINS = Path(__file__).parent / "pins" / "forward_values.json.xz"  # xz: the entries' names repeat across models
# Tolerance of a tensor's [norm, projection]: REL of its own norm plus FLOOR of the largest norm of its kind. Measured
# 2026-11-29 under ATen's AVX2 and default kernels against the AVX-512 recording, the largest deviation of any tensor
# is 0.17 of its tolerance for activations, 0.33 for activation gradients and 0.28 for parameter gradients (other
# architectures unmeasured). Gradients at a trained model's loss are differences of large per-item terms, so float32's
# reorderings move them most; a tensor that is zero in exact arithmetic (b_K's gradient: softmax ignores a constant
# added to every key's score) is rounding noise, which the floor absorbs. The floor governs the smaller parameter
# gradients (up to ~40 % of a model's tensors), which are so checked only to 1e-3 of the largest; it never governs an
# activation or an activation gradient. A 1 % change of one head's keys moves the flagship's activations beyond it
# (tested below).
REL = {"acts": 1e-5, "grads": 5e-4, "param_grads": 1e-2}
FLOOR = {"acts": 1e-7, "grads": 1e-5, "param_grads": 1e-3}
LOGIT_ATOL = 1e-3  # logits are cosines times the temperature (<= 100)


def _direction(n: int) -> np.ndarray:
    """A fixed direction of n float64 entries, the same on every machine (no RNG): cos(0.7 i + 0.3)."""
    return np.cos(0.7 * np.arange(n, dtype=np.float64) + 0.3)


def _summary(t: torch.Tensor) -> list[float]:
    """[norm, projection] of the finite entries, plus the count of the others where there are any (a causal mask's
    -inf in the text tower's attention scores)."""
    a = t.detach().to(torch.float64).reshape(-1).numpy()
    finite = np.isfinite(a)
    a = np.where(finite, a, 0.0)
    out = [float(np.linalg.norm(a)), float(a @ _direction(a.size))]
    return out if finite.all() else [*out, float((~finite).sum())]


def values(model: CLIP1D, images: torch.Tensor, captions: torch.Tensor) -> dict[str, object]:
    """The logits (in full), the loss, and [norm, projection] of every cached activation, every activation's
    gradient and every parameter's gradient, on one batch (the model in eval mode, left as it was)."""
    was = model.training
    model.eval()
    try:
        logits, cache = model.run_with_cache(images, captions)
        out: dict[str, object] = {"logits": [round(float(x), 6) for x in logits.detach().reshape(-1)]}
        out["acts"] = {k: _summary(v) for k, v in cache.store.items()}
        loss, cache = model.run_with_cache(images, captions, return_type="loss", incl_bwd=True)
        out["loss"] = float(loss.detach())
        out["grads"] = {k: _summary(v) for k, v in cache.store.items() if k.endswith("_grad")}
        out["param_grads"] = {n: _summary(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was)
    return out


def _tiny(case: str) -> tuple[CLIP1D, torch.Tensor, torch.Tensor]:
    kw = dict(TINY[case])
    model = make_model(str(kw.pop("preset")), seed=0, **kw)
    ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
    images, captions = ds.splits["train"].images[:8], ds.captions[ds.splits["train"].targets[:8, 0]]
    return model, images, captions


def _shipped(name: str) -> tuple[CLIP1D, torch.Tensor, torch.Tensor]:
    model = load_model(name)
    return (model, *shipped_batch(model))


def _round(v: object) -> object:
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_round(x) for x in v]
    return float(f"{v:.9g}") if isinstance(v, float) else v


def record(names: list[str] | None = None) -> None:
    """Write PINS: every shipped model's and every tiny case's values, this machine's; with ``names``, only those
    shipped models' (the others kept as recorded; entries of models no longer shipped dropped)."""
    if names is None:
        pins = {"shipped": {}, "tiny": {c: _round(values(*_tiny(c))) for c in sorted(TINY)}}
    else:
        pins = _stored()
        unknown = sorted(set(names) - set(list_pretrained()))
        if unknown:
            raise SystemExit(f"not shipped: {unknown}")
    shipped = set(list_pretrained())
    pins["shipped"] = {n: v for n, v in pins["shipped"].items() if n in shipped}
    for n in sorted(shipped if names is None else names):
        pins["shipped"][n] = _round(values(*_shipped(n)))
    PINS.parent.mkdir(exist_ok=True)
    text = json.dumps(pins, separators=(",", ":"), sort_keys=True) + "\n"
    PINS.write_bytes(lzma.compress(text.encode(), preset=9))


def _stored() -> dict:
    return json.loads(lzma.decompress(PINS.read_bytes()))


def assert_same(got: dict, want: dict) -> None:
    """Every recorded number within tolerance; the same names (a cache entry or gradient that appears or vanishes is
    a change too)."""
    bad = [
        f"logits[{i}]: {g} vs {w}"
        for i, (g, w) in enumerate(zip(got["logits"], want["logits"], strict=True))
        if not abs(g - w) <= LOGIT_ATOL
    ]
    if not math.isclose(got["loss"], want["loss"], rel_tol=1e-5, abs_tol=1e-7):
        bad.append(f"loss: {got['loss']} vs {want['loss']}")
    for part in ("acts", "grads", "param_grads"):
        g, w = got[part], want[part]
        if set(g) != set(w):
            bad.append(f"{part}: names differ: {sorted(set(g) ^ set(w))[:5]}")
            continue
        floor = FLOOR[part] * max(v[0] for v in w.values())
        for k, want_k in w.items():
            norm, proj, *n_inf = want_k
            tol = REL[part] * norm + floor
            got_k = g[k]
            if not (abs(got_k[0] - norm) <= tol and abs(got_k[1] - proj) <= tol and got_k[2:] == n_inf):
                bad.append(f"{part}.{k}: [norm, projection(, non-finite)] {got_k} vs {want_k}")
    assert not bad, f"{len(bad)} values moved: " + "; ".join(bad[:8])


def test_every_shipped_model_has_values_recorded():
    missing = sorted(set(list_pretrained()) ^ set(_stored()["shipped"]))
    assert not missing, f"shipped without recorded values, or recorded and no longer shipped: {missing} (--record)"


@pytest.mark.parametrize("name", sorted(list_pretrained()))
def test_a_shipped_model_computes_its_recorded_values(name):
    assert_same(values(*_shipped(name)), _stored()["shipped"][name])


@pytest.mark.parametrize("case", sorted(TINY))
def test_a_tiny_model_computes_its_recorded_values(case):
    assert_same(values(*_tiny(case)), _stored()["tiny"][case])


def test_a_moved_weight_fails_the_comparison():
    """The comparison can fail: the flagship's vision head 0 keys scaled by 1.01 move its values beyond tolerance."""
    model, images, captions = _shipped("simplified-ntot20-n2-10")
    with torch.no_grad():
        model.vision.blocks[0].attn.W_K[0] *= 1.01
    with pytest.raises(AssertionError, match="values moved"):
        assert_same(values(model, images, captions), _stored()["shipped"]["simplified-ntot20-n2-10"])


def test_values_leave_the_models_mode_and_gradients_as_they_were():
    model, images, captions = _tiny("post-LN full")
    model.train()
    values(model, images, captions)
    assert model.training and all(p.grad is None for p in model.parameters())


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"]:
        sys.exit("usage: python tests/test_value_pins.py --record [SHIPPED_MODEL ...]  (none: every entry)")
    record(sys.argv[2:] or None)
