"""The invariance audit (issue 42): the restated checks M1-M4 read the same on every output-preserving
reparametrisation of a trained model; the coordinate-dependent readings (Fig. 13's share, EP's row) do not."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import load_model
from hooked_clip1d.analysis.mechanism.dynamics import INVARIANT_CHECKS, invariant_checks
from hooked_clip1d.analysis.mechanism.reparametrize import (
    REPARAMETRISATIONS,
    fold_query_bias,
    invariance_audit,
    scale_query_key,
    shift_embeddings,
)
from hooked_clip1d.analysis.mechanism.report import mechanism_report


@pytest.fixture(scope="module")
def flagship():
    return load_model("simplified-ntot20-n2-10")


@pytest.fixture(scope="module")
def audit(flagship):
    return invariance_audit(flagship, mechanism_report)


def test_every_reparametrisation_preserves_the_output(flagship):
    ds_images = flagship.vision.to_tokens(["C . . 17 . . 19 . . . .", "C 19 . . . . . . . 2 ."])
    caps = flagship.text.to_tokens(["17 is on the left of 19", "19 is on the left of 2"])
    base = flagship(ds_images, caps)
    for name, f in REPARAMETRISATIONS.items():
        moved = f(flagship).eval()
        torch.testing.assert_close(moved(ds_images, caps), base, atol=2e-4, rtol=1e-4, msg=name)
        _, c0 = flagship.vision.run_with_cache(ds_images)
        _, c1 = moved.vision.run_with_cache(ds_images)
        torch.testing.assert_close(c1["pattern", 0][:, :, 0], c0["pattern", 0][:, :, 0], atol=1e-5, rtol=1e-4)


@pytest.mark.heavy
def test_restated_checks_are_invariant(audit):
    """M1-M4's inputs (accuracies, head biases, the whole-query key-position rows) are the same on every copy."""
    ref = audit["as trained"]
    for name, rep in audit.items():
        for c in INVARIANT_CHECKS:
            assert dict(invariant_checks(rep))[c] == dict(invariant_checks(ref))[c], (name, c)
        assert rep["p_left"] == ref["p_left"] and rep["p_right"] == ref["p_right"], name
        # accuracies to an image or two of 900 (float rounding of the moved parameters breaks near-ties)
        for cond in ("baseline", "CLS-key-position"):
            assert rep["acc"]["probe_unseen"][cond] == pytest.approx(ref["acc"]["probe_unseen"][cond], abs=3e-3), name
        assert rep["kp_spearman"] == pytest.approx(ref["kp_spearman"], abs=2e-3), name
        assert rep["kp_std"] == pytest.approx(ref["kp_std"], abs=2e-3), name


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_coordinate_dependent_readings_move(audit):
    """Fig. 13's share is 1 once b_Q is folded into W_Q; EP's row changes when the CLS embedding moves or the
    embeddings shift: why S1 and S2 are reported and not counted."""
    ref = audit["as trained"]
    assert min(ref["xwx_share"]) < 0.9
    assert audit["b_Q folded into W_Q"]["xwx_share"] == pytest.approx([1.0] * 4, abs=1e-3)
    assert audit["cls into W_pos"]["ep_spearman"] != pytest.approx(ref["ep_spearman"], abs=0.05)
    assert audit["embedding shift"]["row_std"]["EP"] != pytest.approx(ref["row_std"]["EP"], abs=0.01)


def test_reparametrisations_leave_the_callers_model(flagship):
    before = {k: v.clone() for k, v in flagship.state_dict().items()}
    for f in (fold_query_bias, shift_embeddings, scale_query_key):
        f(flagship)
    for k, v in flagship.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="c must be a finite number > 0"):
        scale_query_key(flagship, 0.0)
