"""`hooked-clip1d analyze`: every analysis family runs on small random 1- and 2-layer models and writes PNG + JSON."""

import json

import pytest

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
from hooked_clip1d.cli.analyze import FAMILIES, run_analysis
from hooked_clip1d.cli.commands import main


def _model(n_layers=1, **over):
    """A random small model at nn.Embedding's N(0, 1) init: at the default N(0, 0.02) an untrained model's beliefs are
    ~6e-5, and whether patching's source inputs shift them at all depends on float rounding (patching and steering
    failed with ATen's vector kernels switched off, ATEN_CPU_CAPABILITY=default)."""
    cfg = CLIPConfig.from_preset(
        "simplified", n_labels=6, n_layers=n_layers, d_model=16, d_head=4, init_std=1.0, vision_overrides=over
    )
    m = CLIP1D(cfg, seed=0).eval()
    m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    return m


@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("analysis", sorted(set(FAMILIES) - {"dynamics"}))  # dynamics: test_trajectories.py
@pytest.mark.heavy
def test_every_analysis_runs_and_writes_files(analysis, n_layers, tmp_path):
    opts = {"probes": {"n": 300}, "pruning": {"kept": [1]}}.get(analysis, {})
    res = run_analysis(analysis, _model(n_layers), out_dir=tmp_path, **opts)
    assert res["table"].strip()
    js = json.loads((tmp_path / f"{analysis}.json").read_text())
    assert js["analysis"] == analysis and js["data"]
    assert js["data"] == json.loads(json.dumps(res["data"], default=float))  # the file holds what was returned
    for f in res["files"]:
        if f.endswith(".png"):
            assert open(f, "rb").read(4) == b"\x89PNG"


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_families_report_the_models_own_numbers(tmp_path):
    """The numbers a family writes are the model's, recomputed here without the family: the attention pattern of
    the image asked for, each ablation's metrics, the CLS -> object bias counted from the pattern's peaks."""
    import torch

    from hooked_clip1d import build_dataset, evaluate
    from hooked_clip1d.analysis import ablate_terms

    model = _model()
    ds = build_dataset(model.data_config)
    image, caption = "C . 3 . . . . 5 . . .", "3 is on the left of 5"
    att = run_analysis("attention", model, out_dir=tmp_path, image=image, caption=caption)["data"]
    with torch.no_grad():
        _, vc = model.vision.run_with_cache(model.vision.to_tokens(image))
        _, tc = model.text.run_with_cache(model.text.to_tokens(caption))
    torch.testing.assert_close(torch.tensor(att["vision_L0"]["pattern"]), vc["pattern", 0][0])
    torch.testing.assert_close(torch.tensor(att["text_L0"]["pattern"]), tc["pattern", 0][0])
    assert att["vision_L0"]["tokens"][2] == "3" and att["text_L0"]["tokens"][0] == "3"

    abl = run_analysis("ablate", model, out_dir=tmp_path)["data"]["conditions"]
    assert abl["baseline"]["metrics"] == evaluate(model, ds)
    assert abl["EP"]["metrics"] == evaluate(model, ds, vision_hooks=ablate_terms(model.vision, ["EP"]))

    bias = run_analysis("heads", model, out_dir=tmp_path)["data"]["cls_object_bias"]
    split = ds.splits["val_unseen"]
    with torch.no_grad():
        _, cache = model.vision.run_with_cache(split.images[split.is_pair])
    top = cache["pattern", 0][:, :, 0].argmax(-1)  # [image, head]: where each head's CLS row peaks
    for side, name in ((0, "left"), (1, "right")):
        want = (top == split.positions[split.is_pair][:, side, None] + 1).float().mean(0)
        torch.testing.assert_close(torch.tensor(bias[name][0]), want)


def test_rope_analysis_on_a_rope_tower(tmp_path):
    res = run_analysis("rope", _model(positional="rope"), out_dir=tmp_path)
    assert {"consistency", "effective_rank", "rho"} <= set(res["data"])
    assert any(f.endswith("rope_mechanism.png") for f in res["files"])


def test_ablate_on_a_tower_with_layernorm_names_the_cli_option(tmp_path, capsys):
    """The full model's towers have LayerNorm: `analyze ablate` on it once failed naming the library's keyword
    (ln_scale='live'), which the command line could not pass (session 42); it now names `-o ln_scale=live`, and with
    it reports the same metrics as ablate_terms(..., ln_scale="live")."""
    from hooked_clip1d import build_dataset, evaluate
    from hooked_clip1d.analysis import ablate_terms

    cfg = CLIPConfig.from_preset("full", n_labels=6, n_layers=1, d_model=16, d_head=4, d_mlp=32, init_std=1.0)
    model = CLIP1D(cfg, seed=0).eval()
    model.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    with pytest.raises(ValueError, match="the vision tower has LayerNorm .* add -o ln_scale=live"):
        run_analysis("ablate", model, out_dir=tmp_path)
    assert main(["analyze", "ablate", "--model", "full-ntot20-n2-10", "--out", str(tmp_path)]) == 2  # before any work
    assert "add -o ln_scale=live" in capsys.readouterr().err
    with pytest.raises(ValueError, match="option ln_scale must be live, got 'frozen'"):
        run_analysis("ablate", model, out_dir=tmp_path, ln_scale="frozen")
    abl = run_analysis("ablate", model, out_dir=tmp_path, ln_scale="live")["data"]["conditions"]
    hooks = ablate_terms(model.vision, ["EP"], ln_scale="live")
    assert abl["EP"]["metrics"] == evaluate(model, build_dataset(model.data_config), vision_hooks=hooks)


def test_unknown_analysis_and_bad_option(tmp_path, capsys):
    with pytest.raises(ValueError, match="known"):
        run_analysis("nope", _model(), out_dir=tmp_path)
    assert main(["analyze", "heads", "--option", "novalue", "--out", str(tmp_path)]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_options_are_checked(tmp_path, capsys):
    """Unknown keys, splits and yes/no values are errors naming them, never silently ignored or misread (once,
    `-o foo=1` was ignored, `-o split=bogus` printed 'error: bogus' and `-o center=False` turned centering on)."""
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['foo'\] for analysis 'heads'; its options: split"):
        run_analysis("heads", _model(), out_dir=tmp_path, foo=1)
    for bad in ("bogus", "val_single"):  # val_single has no two-object images: not offered
        with pytest.raises(
            ValueError, match=f"unknown split '{bad}' .*two-object images: train, val_seen, val_unseen$"
        ):
            run_analysis("heads", _model(), out_dir=tmp_path, split=bad)
    with pytest.raises(ValueError, match="option center must be true or false, got 'maybe'"):
        run_analysis("alignment", _model(), out_dir=tmp_path, center="maybe")
    with pytest.raises(ValueError, match="heads +CLS -> object"):  # the listing says what each family does
        run_analysis("nope", _model(), out_dir=tmp_path)
    from hooked_clip1d.cli.commands import parse_options

    assert parse_options(["center=False", "a=True", "b=None", "c=false", "kept=[1,2]", "image=C . 1"]) == {
        "center": False,
        "a": True,
        "b": None,
        "c": False,
        "kept": [1, 2],
        "image": "C . 1",
    }
    assert main(["analyze", "ablate", "-o", "heads=2", "--out", str(tmp_path)]) == 2
    assert "unknown option(s) ['heads'] for analysis 'ablate'" in capsys.readouterr().err
    assert main(["analyze", "list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in FAMILIES) and "-o epochs=...  retrain each pruned model" in listing
    assert main(["analyze", "heads", "-o", "model=x", "--out", str(tmp_path)]) == 2  # not a TypeError
    assert "unknown option(s) ['model'] for analysis 'heads'" in capsys.readouterr().err
    import numpy as np

    from hooked_clip1d.cli.family_api import flag_option

    assert [flag_option({"c": v}, "c", True) for v in (np.False_, np.int64(0), 0.0, "FALSE", False)] == [False] * 5


def test_cli_analyze_on_the_shipped_model(tmp_path, capsys):
    assert main(["analyze", "alignment", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Fig. 7: after the rotation fitted on labels 1-15, the held-out labels 16-20 are retrieved better than raw
    data = out["data"]
    assert data["procrustes"]["acc"] > data["raw"]["acc"]
    assert (tmp_path / "alignment.json").exists()


def test_patching_on_a_text_tower_without_learned_positions(tmp_path):
    """The interchange's position swap does not apply to a RoPE text tower (None): the table once crashed on it.

    At nn.Embedding's N(0, 1) init: at the default N(0, 0.02) an untrained model's beliefs are ~6e-5, and whether
    the mirrored images shift them at all depended on float rounding (it failed on a fresh 2-core machine)."""
    cfg = CLIPConfig.from_preset(
        "simplified", n_labels=6, d_model=16, d_head=4, init_std=1.0, text_overrides={"positional": "rope"}
    )
    m = CLIP1D(cfg, seed=0).eval()
    m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    res = run_analysis("patching", m, out_dir=tmp_path)
    assert "position_id_swap                 n/a" in res["table"]
    assert res["data"]["interchange"]["position_id_swap"] is None


def test_attribution_family_reports_the_methods_own_scores_against_exact_patching(tmp_path):
    """`analyze attribution`: the scores and agreement it writes are the method's and exact patching's on the mirror
    task, recomputed here without the family; an exact or unknown method is refused by name."""
    from hooked_clip1d.analysis.circuits.attribution import agreement
    from hooked_clip1d.analysis.circuits.methods import METHODS
    from hooked_clip1d.analysis.circuits.scores import ground_truth_inputs
    from hooked_clip1d.analysis.circuits.task import mirror_task

    m = _model()
    res = run_analysis("attribution", m, out_dir=tmp_path, method="EAP+QK", split="val_seen", top=3)
    task = mirror_task(m, *ground_truth_inputs(m, "val_seen"))
    exact = METHODS["path patching"](task)
    mine = METHODS["EAP+QK"](task, check=0)
    assert res["data"]["scores"] == pytest.approx(mine.subset(exact.names).as_dict(), abs=1e-6)
    assert res["data"]["agreement"]["pearson"] == pytest.approx(agreement(mine, exact)["pearson"], abs=1e-9)
    assert len(res["table"].splitlines()) == 3 + 3 and (tmp_path / "attribution_vs_exact.png").exists()
    node = run_analysis("attribution", m, out_dir=tmp_path / "n", kinds="[heads,k]", n=4)
    assert node["data"]["method"] == "AtP+QK" and all(".L0.H" in k for k in node["data"]["scores"])
    for bad in ("exact patching", "nope"):
        with pytest.raises(ValueError, match="for attribution; one of"):
            run_analysis("attribution", m, out_dir=tmp_path / "b", method=bad)


@pytest.mark.parametrize("progress", [pytest.param(True, marks=pytest.mark.heavy), False])  # True: >= 4 s, 2 cores
def test_run_analysis_progress_false_silences_a_retraining_family(progress, tmp_path, monkeypatch, capsys):
    """Pruning with ``epochs`` retrains (a bar per retraining); ``analyze --no-progress`` had no way to turn it off
    but the environment, which the bar ignored (session 38). ``progress=False`` runs the family under
    ``settings.progress.no_bars`` and gives the setting back afterwards."""
    from hooked_clip1d.settings.progress import bar_disabled

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    opts = {"kept": [1], "epochs": 1, "runs_dir": str(tmp_path / "runs")}
    run_analysis("pruning", _model(), out_dir=tmp_path / "out", progress=progress, **opts)
    assert ("retrain pruned" in capsys.readouterr().err) is progress
    assert not bar_disabled(True)  # the block's setting did not outlive it


def test_analyze_and_reproduce_take_no_progress():
    from hooked_clip1d.cli.commands import build_parser

    p = build_parser()
    assert p.parse_args(["analyze", "heads", "--no-progress"]).no_progress
    assert p.parse_args(["reproduce", "fig13", "--no-progress"]).no_progress
