"""Session 36 (2026-11-30): Fig. 22's trained control (issue 50, pre-registered in docs/fidelity.md before any of
its runs), the kept JSON layout, and the SAELens format's own module."""

from __future__ import annotations

import itertools
import json

import pytest

from hooked_clip1d import load_model
from hooked_clip1d.model.checkpoint import save_model
from hooked_clip1d.reproduce import pruned_heads as ph
from hooked_clip1d.settings import TrainConfig
from hooked_clip1d.training.retrain import prune_heads


def _write_control_runs(root, control, wrong=None):  # noqa: ANN001, ANN202
    """The control's six two-head subsets saved as if retrained (pruned copies: the wiring is tested, not the
    science); ``wrong``: a kept pair whose run prunes the wrong heads."""
    for kept in itertools.combinations(range(4), 2):
        run = root / ph.FIG22_CONTROL_RETRAIN / ("keep-" + "-".join(f"L0H{h}" for h in kept))
        run.mkdir(parents=True, exist_ok=True)
        pruned = [h for h in range(4) if h not in kept] if kept != wrong else list(kept)
        save_model(
            prune_heads(control, vision=[(0, h) for h in pruned]),
            run / "model.safetensors",
            data_config=control.data_config,
        )
        (run / "config.json").write_text(json.dumps({"train_config": TrainConfig(epochs=10_000).to_dict()}))
        (run / "summary.json").write_text(json.dumps({"epochs": 10_000}))


def test_fig22s_control_is_an_error_until_its_six_runs_have_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path))
    assert ph.control_status() == (
        False,
        "0 of 6 retrained runs of the control finished in <sweeps>/fig22-retrain-control",
    )
    with pytest.raises(ValueError, match="Fig. 22's trained control is not trained: 0 of 6"):
        ph.fig22_control()
    with pytest.raises(ValueError, match="Fig. 22's trained control is not trained"):
        ph.OWN_CONTROLS["fig22"].reader()


def test_fig22s_control_reads_r3_on_the_order_blind_controls_six_pairs_and_guards_the_kept_record(
    tmp_path, monkeypatch
):
    """Pre-registered 2026-11-30 (revised before any run): the control guards R3 alone (R1 and R2 stay unguarded,
    named with why), read on its two-head models that recognise their label set; the kept record is guarded from the
    control's runs alone (the flagship's 14 runs are not needed) under --sweeps-dir, whatever HOOKED_CLIP1D_SWEEPS
    says, a check the control passes stops counting, and the notes say they predate the guard."""
    from hooked_clip1d.reproduce.records import GUARD_NOTE, load_record
    from hooked_clip1d.reproduce.results_page import _trained_control_line
    from hooked_clip1d.reproduce.runner import guard_record

    control = load_model(ph.FIG22_CONTROL)
    assert control.data_config.caption_order == "shuffled"
    _write_control_runs(tmp_path / "sweeps", control)
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path / "sweeps"))
    assert ph.control_status()[0]
    real = ph._subset_row  # the pruned copies, not retrained, read no label set (next test): here they are said to
    monkeypatch.setattr(ph, "_subset_row", lambda m, ds, kept: {**real(m, ds, kept), "label_set": 0.9})
    table, numbers = ph.fig22_control()
    assert len(numbers["rows"]) == 6 and numbers["r3"] == ph.r3_on_control(numbers["rows"])
    assert numbers["models_read"] == 6 and isinstance(numbers["r3"], bool)
    assert list(table) == [ph.R3_TEXT] and table[ph.R3_TEXT] == {ph.FIG22_CONTROL_LABEL: numbers["r3"]}
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path / "elsewhere"))  # --sweeps-dir decides, not the env
    out = guard_record("fig22", "docs/records", tmp_path / "out", sweeps_dir=tmp_path / "sweeps")
    rows = {c["check"]: c for c in out["checks"]}
    assert rows[ph.R3_TEXT]["trained_control"] == {ph.FIG22_CONTROL_LABEL: numbers["r3"]}
    assert rows[ph.R3_TEXT]["counted"] is (not numbers["r3"])  # counted (it holds on the flagship) unless passed
    assert "trained_control" not in rows[ph.R1_TEXT] and "trained_control" not in rows[ph.R2_TEXT]
    entry = out["trained_control"]
    assert set(entry["unguarded"]) == {ph.R1_TEXT, ph.R2_TEXT} and "(1 check guarded)" in entry["status"]
    assert "2 counted checks not guarded by it (a claim on how many heads" in _trained_control_line(entry)
    kept = load_record("docs/records/fig22.json").details["notes"].split(GUARD_NOTE)[0].rstrip()
    # the notes as recorded before any guard (the kept record's own guard sentence carries its date: on another day
    # the new guard replaces it, so the whole kept notes are not a substring; session 45 ran past midnight)
    assert GUARD_NOTE in out["notes"] and out["notes"].startswith(kept)


def test_a_control_none_of_whose_models_reads_its_label_set_guards_nothing_and_says_so(tmp_path, monkeypatch):
    """Revised pre-registration: no model of the control recognising its label set leaves R3 on its untrained null;
    the figure's entry guards nothing, and guarding the kept record is refused naming why."""
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path))
    _write_control_runs(tmp_path, load_model(ph.FIG22_CONTROL))  # pruned copies: label set 0.25-0.74, none >= 0.8
    table, numbers = ph.fig22_control()
    assert table == {} and numbers["r3"] is None and numbers["models_read"] == 0
    with pytest.raises(ValueError, match="guards nothing: none of its six two-head models recognises"):
        ph.OWN_CONTROLS["fig22"].reader()


def test_fig22s_control_refuses_a_run_that_is_not_the_controls_subset(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKED_CLIP1D_SWEEPS", str(tmp_path / "other"))
    control = load_model(ph.FIG22_CONTROL)
    _write_control_runs(tmp_path / "other", control, wrong=(0, 1))
    with pytest.raises(
        ValueError, match=rf"keep-L0H0-L0H1' is not the order-blind control \({ph.FIG22_CONTROL}\) with vision heads"
    ):
        ph.fig22_control()


def test_r3_on_the_control_needs_six_finite_two_head_rows():
    row = {"kept": [0], "acc": 0.5, "label_set": 0.9, "left": [0.9], "right": [0.1]}
    with pytest.raises(ValueError, match="six two-head models"):
        ph.r3_on_control([row] * 6)
    pair = {"kept": [0, 1], "acc": 0.5, "label_set": 0.9, "left": [0.9, 0.1], "right": [0.1, 0.9]}
    assert ph.r3_on_control([pair] * 6) is True
    with pytest.raises(ValueError, match="non-finite reading"):
        ph.r3_on_control([pair] * 5 + [{**pair, "label_set": float("nan")}])


def test_the_sae_lens_format_module_does_not_import_the_sae_module():
    """sae.py was split (603 lines): the SAELens format lives in sae_lens_format, which takes the SAE's class as an
    argument rather than importing it (no import circle); the methods keep their names."""
    import ast
    from pathlib import Path

    import hooked_clip1d.analysis.interventions.sae_lens_format as fmt
    from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder

    tree = ast.parse(Path(fmt.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "hooked_clip1d.analysis.interventions.sae" not in imported
    for name in ("save_sae_lens", "load_sae_lens", "to_sae_lens", "from_sae_lens", "sae_lens_config"):
        assert callable(getattr(SparseAutoencoder, name))


def test_the_queue_trains_fig22s_control_where_the_figure_reads_it():
    """tools/cpu/long_runs.sh's fig22-control item trains the control pruned_heads reads, into the folder it reads."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "tools/cpu/long_runs.sh").read_text()
    assert re.search(rf'^FIG22_CONTROL="{ph.FIG22_CONTROL}"', text, flags=re.M)
    assert re.search(rf'^FIG22_DIR="\$SWEEPS/{ph.FIG22_CONTROL_RETRAIN}"', text, flags=re.M)
    assert "-o 'kept=[2]'" in text and "-o epochs=10000" in text and ph.FIG22_EPOCHS == 10_000


@pytest.mark.heavy  # runs Fig. 23 on its control
def test_a_record_guarded_once_its_control_was_trained_is_guarded_the_same_again(tmp_path):
    """Fig. 23's record of 2026-11-29 was made before its control was trained (its entry then: no runs, nothing
    applied) and guarded on 2026-11-30 when the control shipped (kept here as tests/records/, since docs/records holds
    its rerun of 2026-12-01 with the control inside); guarding it again undoes that guard and applies the control
    anew: the same checks, verdict and entry, and one guard sentence in the notes (which were empty: none before it)."""
    import shutil
    from pathlib import Path

    from hooked_clip1d.reproduce.records import GUARD_NOTE, load_record, write_record
    from hooked_clip1d.reproduce.runner import _unguard, guard_record

    (tmp_path / "kept").mkdir()
    shutil.copy(Path(__file__).parent / "records" / "fig23-guarded-2026-11-30.json", tmp_path / "kept" / "fig23.json")
    kept = load_record(tmp_path / "kept" / "fig23.json")
    assert kept.details["trained_control"]["runs"] == ["control-shuffled-distinct-vision2-ntot25-n2-15"]
    out = guard_record("fig23", tmp_path / "kept", tmp_path / "out", sweeps_dir=tmp_path / "sweeps")
    assert out["verdict"] == kept.verdict and out["trained_control"] == kept.details["trained_control"]
    assert [(c["check"], c["counted"], c["holds"]) for c in out["checks"]] == [
        (c.text, c.counted, c.holds) for c in kept.checks
    ]
    assert out["notes"].startswith(GUARD_NOTE) and out["notes"].count(GUARD_NOTE) == 1
    # the record as it was made, before its control was trained (an entry with no runs): guarded the same way
    made = load_record(tmp_path / "kept" / "fig23.json")
    _unguard(made, made.details["rejudged"])
    made.details["notes"] = ""
    made.details["trained_control"] = {"status": "'...' is not in the zoo yet", "runs": [], "passes": {}}
    (tmp_path / "made").mkdir()
    write_record(made, tmp_path / "made" / "fig23.json")
    again = guard_record("fig23", tmp_path / "made", tmp_path / "out2", sweeps_dir=tmp_path / "sweeps")
    assert again["trained_control"] == kept.details["trained_control"] and again["verdict"] == kept.verdict
