"""The sweep figures' permutation null (issue 42; docs/fidelity.md, "Sweep figures under a permutation null")."""

from __future__ import annotations

import numpy as np

from hooked_clip1d.reproduce.controls import counted_checks
from hooked_clip1d.reproduce.core import Outcome
from hooked_clip1d.reproduce.sweep_figs import fig4a_outcome, trend_test


def _rows(acc_of):
    rng = np.random.default_rng(1)
    return [
        {"n_labels": n, "n2": n2, "seed": s, "epochs": 10, "val_unseen.acc": float(acc_of(n, n2, rng))}
        for n in (10, 15, 20, 25)
        for n2 in (5, 10, 15)
        for s in range(3)
    ]


def test_a_label_trend_passes_and_no_trend_fails():
    """A seed-level rise with Ntot (and none with n2) passes both counted checks; the same noise without the rise
    passes neither; a curve saturated at 0.98-1.00 can still pass (the old check over four means could not)."""
    rising = fig4a_outcome(_rows(lambda n, n2, rng: 0.5 + 0.02 * n + rng.normal(0, 0.02)))
    flat = fig4a_outcome(_rows(lambda n, n2, rng: 0.7 + rng.normal(0, 0.05)))
    saturating = fig4a_outcome(_rows(lambda n, n2, rng: min(1.0, 0.9 + 0.005 * n + rng.normal(0, 0.01))))
    assert [ok for _, ok in rising.checks[:2]] == [True, True]
    assert [ok for _, ok in flat.checks[:2]] == [False, False]
    assert saturating.checks[0][1]
    assert set(rising.permutation) == {c for c, _ in rising.checks[:2]}
    assert all(c in rising.secondary for c, _ in rising.checks[2:])


def test_trend_test_is_seeded_and_calibrated():
    assert trend_test([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4]) == trend_test([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    rng = np.random.default_rng(0)  # no effect: p below 0.05 about 5 % of the time
    ps = [trend_test(np.repeat([1, 2, 3], 4), rng.normal(size=12), n_perm=500, seed=i)[1] for i in range(200)]
    assert 0.01 <= np.mean(np.array(ps) < 0.05) <= 0.12


def test_a_permutation_check_counts_by_its_own_null():
    out = Outcome({}, "", [("trend", True)], {}, permutation={"trend": 0.001})
    null = {"variants": [{"model": f"u{i}", "checks": {"trend": i == 0}, "values": {}} for i in range(10)]}
    row = counted_checks(out, null)[0]
    assert row.counted and row.counted_holds and row.permutation_p == 0.001 and row.null_passes == 1
