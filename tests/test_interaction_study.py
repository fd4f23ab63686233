"""x21-rope-interaction (reproduce/interaction_study.py): the pre-registered rule names each outcome and refuses a
missing run, a finished sweep of real run folders is read by it with x19's unchanged measures, an unfinished sweep is
not run, the untrained null passes nothing, and the sweep is one batched group of the 12 runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_oscillation_study import _history, _tiny_model, null_outcome

from hooked_clip1d.model.checkpoint import save_model
from hooked_clip1d.reproduce import FIGURES
from hooked_clip1d.reproduce.interaction_study import ARMS, DECIDING_SEEDS, _x_interaction, interaction_decision
from hooked_clip1d.reproduce.oscillation_study import LATE_SNAPSHOTS


def _classes(**arms: str) -> dict[tuple[str, int], str]:
    return {(a, s): c for a, c in arms.items() for s in DECIDING_SEEDS}


def test_the_rule_names_each_outcome_and_refuses_a_missing_run():
    hi = dict(i25="steady", i50="oscillates", i100="oscillates", s100="steady")
    assert interaction_decision(_classes(**hi))["verdict"] == "H-I supported"
    assert interaction_decision(_classes(**hi))["i50"] == "oscillates"  # reported, not deciding
    assert interaction_decision(_classes(**dict(hi, i100="between")))["verdict"].startswith("the swing did not")
    assert interaction_decision(_classes(**dict(hi, s100="oscillates")))["verdict"].endswith("at T = 100 too")
    assert interaction_decision(_classes(**dict(hi, i25="between")))["verdict"] == "not decided by these arms"
    two_of_three = _classes(**hi)
    two_of_three[("i100", 6)] = "between"  # an arm's class is that of >= 2 of its 3 seeds
    assert interaction_decision(two_of_three)["verdict"] == "H-I supported"
    del two_of_three[("s100", 8)]
    with pytest.raises(ValueError, match=r"missing: \[\('s100', 8\)\]"):
        interaction_decision(two_of_three)
    with pytest.raises(ValueError, match="needs a class"):
        interaction_decision(_classes(**dict(hi, i50="swings")))


def _finished_sweep(tmp_path: Path, pattern: dict[str, list[float]]) -> list[dict]:
    rows = []
    for recipe, arm in ARMS.items():
        model = _tiny_model(math.log(100.0))
        for s in DECIDING_SEEDS:
            run = tmp_path / f"{arm}-{s}"
            _history(run, pattern[arm])
            for e in LATE_SNAPSHOTS:
                save_model(model, run / "snapshots" / f"epoch_{e:05d}.safetensors", extra={"epoch": e})
            rows.append({"recipe": recipe, "seed": s, "epochs": 10000, "path": str(run)})
    return rows


def test_a_finished_sweep_is_read_by_the_rule(tmp_path):
    swing, flat = [1.0, 0.4] * 10, [0.97] * 20
    out = _x_interaction(_finished_sweep(tmp_path, {"i25": flat, "i50": swing, "i100": swing, "s100": flat}))
    assert out.numbers["decision"]["verdict"] == "H-I supported" and all(ok for _, ok in out.checks)
    assert len(out.table) == 2 + 12 and out.numbers["runs"]["i100/7"]["class"] == "oscillates"
    assert out.numbers["decision"]["i25_generalizes_steadily"]  # late mean 0.97 >= 0.8 at every seed
    low = _x_interaction(
        _finished_sweep(tmp_path / "low", {"i25": [0.6] * 20, "i50": swing, "i100": swing, "s100": flat})
    )
    assert low.numbers["decision"]["verdict"] == "H-I supported"  # steady at 0.6 ...
    assert not low.numbers["decision"]["i25_generalizes_steadily"]  # ... but not a steady generalization


def test_an_unfinished_sweep_is_not_run_and_a_doubled_run_is_an_error(tmp_path):
    rows = [{"recipe": r, "seed": s, "epochs": 4200, "path": str(tmp_path)} for r in ARMS for s in DECIDING_SEEDS]
    out = _x_interaction(rows)
    assert out.not_run and not any(ok for _, ok in out.checks)
    done = [dict(r, epochs=10000) for r in rows]
    with pytest.raises(ValueError, match="more than one run"):
        _x_interaction([*done, done[0]])


def test_the_sweep_is_one_batched_group_of_the_four_arms_at_seeds_6_to_8():
    from hooked_clip1d.reproduce.core import SWEEPS_DIR
    from hooked_clip1d.sweeps.runner import _saved_plan
    from hooked_clip1d.sweeps.spec import load_spec

    spec = load_spec(SWEEPS_DIR / "rope-interaction.toml")
    assert sorted({(r.params["recipe"], r.train_cfg.seed) for r in spec.runs}) == sorted(
        (a, s) for a in ARMS for s in DECIDING_SEEDS
    )
    held = {r.params["recipe"]: (r.train_cfg.fixed_temperature, r.train_cfg.negatives) for r in spec.runs}
    assert held == {
        "cls-exempt-init002-temp25-distinct": (25.0, "distinct"),
        "cls-exempt-init002-temp50-distinct": (50.0, "distinct"),
        "cls-exempt-init002-temp100-distinct": (100.0, "distinct"),
        "cls-exempt-init002-temp100": (100.0, "all"),
    }
    plan = _saved_plan(Path("/nonexistent"), list(spec.runs), spec.run["max_group_size"])
    assert [len(g) for _, g in plan] == [12]
    assert FIGURES["x21-rope-interaction"].sweep == "rope-interaction"


@pytest.mark.heavy
def test_the_untrained_null_never_passes(tmp_path):
    out = null_outcome("rope-interaction", _x_interaction, tmp_path)
    assert out.numbers["decision"]["verdict"] == "the swing did not replicate at seeds 6-8 (0 of 3)"
    assert not any(ok for _, ok in out.checks)
