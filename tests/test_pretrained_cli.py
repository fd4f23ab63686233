"""The shipped model, the registry's error handling, the CLI commands and the example notebook."""

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hooked_clip1d.pretrained as reg
from hooked_clip1d import build_dataset, evaluate, list_pretrained, load_model
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = reg.DEFAULT_MODEL


@pytest.fixture(scope="module")
def shipped():
    return load_model(DEFAULT)


def test_default_model_is_listed():
    """The listing is every name shipped with both its manifest and its weights, read here from the folder."""
    weights = {p.name.split(".safetensors")[0] for p in reg.zoo.WEIGHTS_DIR.glob("*.safetensors*")}
    shipped = {p.stem for p in reg.zoo.WEIGHTS_DIR.glob("*.json")} & weights
    assert list_pretrained() == sorted(shipped) and DEFAULT in shipped
    assert all(reg.manifest(n)["name"] == n for n in shipped)  # each manifest names its own file


def test_unknown_name_lists_known_ones(tmp_path):
    with pytest.raises(KeyError, match=DEFAULT):
        load_model("no-such-model")
    with pytest.raises(CheckpointError, match="is a directory without model.safetensors"):
        load_model(str(tmp_path))  # a path loads as resolve_model loads it (since session 30): not a run directory
    with pytest.raises(KeyError, match="looks like a path, but no such file"):
        load_model(str(tmp_path / "gone" / "model.safetensors"))
    with pytest.raises(KeyError, match="is a path: load a model file or run directory with load_model"):
        reg.manifest(str(tmp_path))
    import hooked_clip1d

    assert hooked_clip1d.resolve_model(DEFAULT).cfg.n_labels > 0  # the hint's import works (it once did not)


def test_shipped_model_loads_in_eval_mode_with_manifest(shipped):
    assert not shipped.training
    man = shipped.manifest
    for key in ("command", "seed", "epochs", "steps", "sha256", "metrics", "model_config", "data_config", "provenance"):
        assert key in man, key
    # the flagship is a member of the recipe study's sweep: its command's spec holds exactly one run with its configs
    import shlex

    from hooked_clip1d.model.checkpoint import canonical_config
    from hooked_clip1d.sweeps.runner import load_spec
    from hooked_clip1d.training.run_config import comparable_train_config

    args = shlex.split(man["command"])
    assert args[:2] == ["hooked-clip1d", "sweep"]

    def model_dict(d):  # the init seeds are filled in from the training seed when the run starts
        d = canonical_config("model_config", d)
        towers = {t: {k: v for k, v in d[t].items() if k != "init_seed"} for t in ("vision", "text")}
        return {**d, **towers}

    runs = [
        r
        for r in load_spec(ROOT / args[2]).runs
        if r.data_cfg.to_dict() == canonical_config("data_config", man["data_config"])
        and comparable_train_config(r.train_cfg.to_dict()) == comparable_train_config(man["train_config"])
        and model_dict(r.model_cfg.to_dict()) == model_dict(man["model_config"])
    ]
    assert len(runs) == 1 and runs[0].train_cfg.seed == man["seed"]
    assert shipped.data_config.n_labels == 20 and shipped.data_config.n2 == 10
    assert shipped.cfg.vision.n_layers == 1 and shipped.cfg.vision.n_heads == 4 and shipped.cfg.vision.attn_only


def test_shipped_accuracies_match_manifest(shipped):
    res = evaluate(shipped, build_dataset(shipped.data_config))
    for split, m in shipped.manifest["metrics"].items():
        # accuracies are counts over n images; allow one image of slack for a different BLAS breaking a near-tie
        assert abs(res[split]["acc"] - m["acc"]) <= 1.0 / m["n"] + 1e-9, split


@pytest.mark.parametrize("packed", [True, False], ids=["xz", "plain"])
def test_tampered_weights_are_refused(tmp_path, monkeypatch, packed):
    """A weights file whose bytes changed is refused, compressed (the xz check or the sha256 of what it unpacks to)
    or plain (the sha256)."""
    shutil.copy(reg.zoo.WEIGHTS_DIR / f"{DEFAULT}.json", tmp_path)
    weights = tmp_path / f"{DEFAULT}.safetensors"
    data = reg.weights_file(DEFAULT).read_bytes()
    if packed:
        weights = weights.with_name(weights.name + ".xz")
    else:
        data = lzma.decompress(data)
    blob = bytearray(data)
    blob[-1] ^= 0xFF
    weights.write_bytes(bytes(blob))
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(CheckpointError, match="sha256|not a readable xz file"):
        reg.load_model(DEFAULT)


def test_a_model_with_both_weights_files_is_refused_by_name(tmp_path, monkeypatch):
    for f in (f"{DEFAULT}.json", reg.weights_file(DEFAULT).name):
        shutil.copy(reg.zoo.WEIGHTS_DIR / f, tmp_path)
    (tmp_path / f"{DEFAULT}.safetensors").write_bytes(lzma.decompress(reg.weights_file(DEFAULT).read_bytes()))
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ValueError, match="two weights files.*keep one"):
        reg.load_model(DEFAULT)


def test_compressed_weights_unpack_to_the_manifests_safetensors_bytes():
    """Every shipped weights file: the manifest's sha256 and bytes are those of the safetensors bytes (what
    trajectories and records cite); a compressed one records its own file's under ``packed``."""
    for name in reg.list_pretrained():
        man, path = reg.manifest(name), reg.weights_file(name)
        data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == man["sha256"] and len(data) == man["bytes"], name
        if path.suffix == ".xz":
            assert man["packed"] == {"format": "xz", "sha256": reg.sha256_file(path), "bytes": path.stat().st_size}


def test_cli_eval_json(capsys):
    assert main(["eval", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) == {"train", "val_single", "val_seen", "val_unseen"}
    assert res["val_unseen"]["n"] == 100


@pytest.mark.heavy
def test_cli_demo_writes_png_and_json(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    on_disk = json.loads((tmp_path / "demo.json").read_text())
    assert on_disk["accuracy"] == res["accuracy"]
    assert set(on_disk["ablation"]) == {"none", "EP", "PE", "PP", "BP", "VP", "positional", "CLS-key-position"}
    # the head bias, counted by hand: where each head's CLS row peaks on the unseen pairs
    model = load_model(DEFAULT)
    split = build_dataset(model.data_config).splits["val_unseen"]
    pairs = split.is_pair
    _, cache = model.vision.run_with_cache(split.images[pairs])
    top = cache["pattern", 0][:, :, 0].argmax(-1)  # [image, head]
    for side, name in ((0, "left"), (1, "right")):
        want = (top == split.positions[pairs][:, side, None] + 1).float().mean(0)
        torch.testing.assert_close(torch.tensor(res["head_bias_val_unseen"][name]), want[None])
    # the ablation table: each row is evaluate() with that term's ablation hooks (none: no hooks)
    from hooked_clip1d.analysis import ablate_terms

    ds = build_dataset(model.data_config)
    for term in ("none", "EP", "PE", "BP"):
        hooks = [] if term == "none" else ablate_terms(model.vision, [term])
        want = evaluate(model, ds, splits=("val_unseen",), vision_hooks=hooks)["val_unseen"]["acc"]
        assert res["ablation"][term]["val_unseen"]["acc"] == pytest.approx(want, abs=1e-6), term
    from hooked_clip1d.analysis.mechanism.report import ablate_cls_key_position

    hooks = {
        "positional": ablate_terms(model.vision, ["EP", "PE", "PP", "BP", "VP"]),
        "CLS-key-position": ablate_cls_key_position(model.vision),
    }
    for key, h in hooks.items():  # the readings independent of how the CLS query is split into parameters
        want = evaluate(model, ds, splits=("val_unseen",), vision_hooks=h)["val_unseen"]["acc"]
        assert res["ablation"][key]["val_unseen"]["acc"] == pytest.approx(want, abs=1e-6), key


def test_cli_errors_are_clear(capsys):
    assert main(["eval", "--model", "no-such-model"]) == 2
    assert "known models" in capsys.readouterr().err
    assert main(["train", "--out", "unused", "--n-labels", "6", "--n-heldout", "5"]) == 2
    assert "n_pair" in capsys.readouterr().err


def test_cli_train_then_resume(tmp_path, capsys):
    args = [
        "train",
        "--out",
        str(tmp_path / "run"),
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--eval-every",
        "1",
        "--no-progress",
        "--json",
    ]
    assert main([*args, "--epochs", "1"]) == 0
    assert main([*args, "--epochs", "2", "--resume"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 2
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2]


def test_cli_train_recipe_flags_set_the_run_config_and_resume_checks_them(tmp_path, capsys):
    base = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "1", "--no-progress", "--json"]

    def saved(run):
        cfg = json.loads((run / "config.json").read_text())
        return cfg["train_config"]["no_decay"], cfg["train_config"]["frozen"], cfg["model_config"]["vision"]["init_std"]

    assert main([*base, "--out", str(tmp_path / "d")]) == 0
    # the default recipe (cls-exempt-init002-temp-nodecay-distinct: b_Q, b_K trained, the temperature not decayed,
    # identical captions masked out of the loss)
    assert saved(tmp_path / "d") == (["cls", "logit_scale"], [], 0.02)
    assert json.loads((tmp_path / "d" / "config.json").read_text())["train_config"]["negatives"] == "distinct"
    assert main([*base, "--recipe", "all-decay", "--out", str(tmp_path / "a")]) == 0
    assert saved(tmp_path / "a") == ([], [], 1.0)
    # explicit flags override the recipe
    assert (
        main(
            [
                *base,
                "--recipe",
                "all-decay",
                "--no-decay",
                "cls,biases",
                "--init-std",
                "0.1",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert saved(tmp_path / "b") == (["biases", "cls"], [], 0.1)
    capsys.readouterr()
    assert main([*base, "--epochs", "2", "--resume", "--recipe", "cls-exempt", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "train_config.no_decay: the run has []" in err and "init_std" not in err  # cls-exempt is at N(0, 1)
    assert main([*base, "--no-decay", "clss", "--out", str(tmp_path / "c")]) == 2
    assert "unknown groups ['clss']" in capsys.readouterr().err
    # the q/k-bias decay scale: from a recipe, from the flag, and checked on resume
    scale = lambda run: json.loads((run / "config.json").read_text())["train_config"]["qk_bias_decay_scale"]  # noqa: E731
    assert main([*base, "--recipe", "cls-exempt-qkdecay10-init002", "--out", str(tmp_path / "q")]) == 0
    assert scale(tmp_path / "q") == 10.0 and saved(tmp_path / "q") == (["cls"], [], 0.02)
    assert main([*base, "--frozen", "", "--qk-bias-decay-scale", "3", "--out", str(tmp_path / "q3")]) == 0
    assert scale(tmp_path / "q3") == 3.0
    capsys.readouterr()
    assert main([*base, "--resume", "--qk-bias-decay-scale", "30", "--out", str(tmp_path / "q")]) == 2
    assert "train_config.qk_bias_decay_scale: the run has 10.0, the flags say 30.0" in capsys.readouterr().err
    assert main([*base, "--frozen", "qk_bias", "--qk-bias-decay-scale", "3", "--out", str(tmp_path / "q4")]) == 2
    assert "frozen=('qk_bias',) holds them at 0" in capsys.readouterr().err  # no q/k biases to decay
    assert main([*base, "--qk-bias-decay-scale", "3", "--out", str(tmp_path / "q5")]) == 0  # the default trains them


def test_shipped_manifests_name_no_machine_paths():
    from pathlib import Path

    from hooked_clip1d.pretrained import WEIGHTS_DIR
    from hooked_clip1d.pretrained.ship import portable_command

    home, root = str(Path.home()), str(ROOT)
    for path in WEIGHTS_DIR.glob("*.json"):
        text = path.read_text()
        assert home not in text and root not in text, path.name
    cmd = portable_command(f"hooked-clip1d sweep {root}/x.toml --out {home}/s")
    assert cmd == "hooked-clip1d sweep x.toml --out ~/s"


def test_example_notebook_executes():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "unseen-pair accuracy" in outputs


def test_run_demo_names_a_custom_model_by_itself(tmp_path):
    # regression: a model passed in was reported under the default pretrained name
    from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
    from hooked_clip1d.cli.demo import run_demo

    m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6), seed=0).eval()
    m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    res = run_demo(out_dir=tmp_path, model=m)
    assert res["model"] == "custom model"
    assert (tmp_path / "demo.png").exists()


def test_cli_train_engines_agree(tmp_path):

    args = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "3", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "std")]) == 0
    assert main([*args, "--out", str(tmp_path / "fast"), "--engine", "batched"]) == 0
    a = load_model_file(tmp_path / "std" / "model.safetensors")
    b = load_model_file(tmp_path / "fast" / "model.safetensors")
    img = a.vision.to_tokens(["C 1 . . 2 . . . . . .", "C . 3 . . . . 4 . . ."])
    cap = a.text.to_tokens(["1 is on the left of 2", "3 is on the left of 4"])
    torch.testing.assert_close(a.similarity(img, cap), b.similarity(img, cap), atol=1e-4, rtol=1e-4)


def test_cli_train_init_from_a_pruned_shipped_model(tmp_path, capsys):
    """App. K from the command line: start from the shipped weights, prune two heads, retrain."""
    base = ["train", "--n-labels", "20", "--n2", "10", "--epochs", "1", "--no-progress", "--init-from", DEFAULT]
    out = tmp_path / "pruned"
    assert main([*base, "--prune-vision-heads", "0:0,0:1", "--engine", "batched", "--out", str(out)]) == 0
    m, ref = load_model_file(out / "model.safetensors"), load_model(DEFAULT)
    assert m.cfg.vision.pruned_heads == ((0, 0), (0, 1))
    # one epoch of lr 1e-4 from the shipped weights, not a fresh init: the weights moved only a little
    delta = (m.vision.W_E - ref.vision.W_E).abs().max()
    assert 0 < delta < 0.05 * ref.vision.W_E.abs().max()
    capsys.readouterr()
    assert main([*base, "--vision-layers", "2", "--out", str(tmp_path / "a")]) == 2
    assert "--vision-layers" in capsys.readouterr().err
    assert main([*base[:2], "10", *base[3:], "--out", str(tmp_path / "b")]) == 2
    assert "n_labels=20" in capsys.readouterr().err
    assert main([*base[:-1], "no-such-model", "--out", str(tmp_path / "c")]) == 2
    assert "neither a pretrained name" in capsys.readouterr().err


def test_cli_train_compile_uses_the_group_dropout_stream(tmp_path, monkeypatch):
    """--compile used to fail whenever dropout > 0 (compiled steps need dropout_rng="fast"); the CLI now asks for it."""
    import hooked_clip1d.training.batched as batched

    seen = {}
    real = batched.train_fast

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **{**kwargs, "compile": False})  # the compiled step itself: the slow test below

    monkeypatch.setattr(batched, "train_fast", spy)
    args = [
        "train",
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--no-progress",
        "--engine",
        "batched",
        "--epochs",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert main([*args, "--compile"]) == 0
    assert seen["compile"] is True and seen["dropout_rng"] == "fast"


@pytest.mark.slow
def test_cli_train_compiled_with_dropout(tmp_path):
    """The real torch.compile step, trained and resumed (a subprocess: the tests' jaxtyping hook does not trace)."""
    import subprocess
    import sys

    args = [
        sys.executable,
        "-m",
        "hooked_clip1d",
        "train",
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--no-progress",
        "--engine",
        "batched",
        "--compile",
        "--out",
        str(tmp_path),
    ]
    subprocess.run([*args, "--epochs", "2"], check=True)
    assert json.loads((tmp_path / "summary.json").read_text())["epochs"] == 2
    # a finished batched run keeps a Trainer-format checkpoint: the standard engine extends it
    std = [a for a in args[3:] if a not in ("--compile", "batched", "--engine")]
    assert main([*std, "--epochs", "3", "--resume"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["epochs"] == 3


def test_export_measures_and_ships_the_stored_weights(tmp_path, monkeypatch):
    from safetensors import safe_open

    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--out",
                str(run),
                "--n-labels",
                "6",
                "--n-heldout",
                "2",
                "--n2",
                "2",
                "--epochs",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    dest = tmp_path / "weights"
    dest.mkdir()
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", dest)
    for dtype, plain in (("float32", []), ("float16", ["--no-xz"])):  # compressed by default
        assert main(["export", str(run), "--name", dtype, "--description", "d", "--weights-dtype", dtype, *plain]) == 0
    assert sorted(p.name for p in dest.iterdir()) == [
        "float16.json",
        "float16.safetensors",
        "float32.json",
        "float32.safetensors.xz",
    ]
    trained = load_model_file(run / "model.safetensors").state_dict()
    with safe_open(str(dest / "float16.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    assert reg.manifest("float16")["bytes"] < 0.6 * reg.manifest("float32")["bytes"]
    assert reg.manifest("float32")["packed"]["bytes"] < reg.manifest("float32")["bytes"]
    for dtype in ("float32", "float16"):
        model = load_model(dtype)
        assert model.manifest["weights_dtype"] == dtype and model.manifest["epochs"] == 1
        for k, v in model.state_dict().items():
            assert v.dtype == torch.float32 and torch.equal(v, trained[k].to(getattr(torch, dtype)).float()), k
        # the manifest's accuracies are those of the weights in the file
        assert evaluate(model, build_dataset(model.data_config)) == model.manifest["metrics"]
    with pytest.raises(SystemExit):
        main(["export", str(run), "--name", "x", "--description", "d", "--weights-dtype", "int8"])


def test_save_model_refuses_weights_the_dtype_cannot_hold(tmp_path):
    from hooked_clip1d.model.checkpoint import save_model

    model = load_model(DEFAULT)
    with torch.no_grad():
        model.W_proj[0, 0] = 1e6
    with pytest.raises(ValueError, match="W_proj does not fit in torch.float16"):
        save_model(model, tmp_path / "m.safetensors", dtype=torch.float16)
    assert not (tmp_path / "m.safetensors").exists()


def test_shipped_weight_files_stay_under_4_mib():
    big = [p.name for p in reg.zoo.WEIGHTS_DIR.glob("*.safetensors*") if p.stat().st_size > 4 * 2**20]
    assert not big, f"ship these with `export --weights-dtype float16`: {big}"


def test_docs_zoo_table_is_the_manifests_table():
    """The zoo table in docs/zoo.md (linked from the README) is what `hooked-clip1d list --markdown` prints from the
    shipped manifests (a manifest edited without docs/zoo.md, or the reverse, fails here)."""
    zoo = (Path(__file__).resolve().parents[1] / "docs" / "zoo.md").read_text()
    assert reg.registry_table() in zoo


def test_list_update_writes_the_zoo_tables_into_the_page(tmp_path, capsys):
    """`list --markdown --update PAGE` splices both tables into a page whose tables went stale, keeps the rest of the
    page, says when nothing changed, and refuses a page without the tables (unchanged) or without --markdown."""
    page = tmp_path / "zoo.md"
    shipped = (ROOT / "docs" / "zoo.md").read_text()
    stale = shipped.replace(reg.trajectory_table(), "| model | checkpoints | old |\n|---|---|---|\n| `x` | 1 | 0 |")
    stale = stale.replace(reg.registry_table().splitlines()[2], "| `gone` | a removed model | 1 (1) |")
    assert stale != shipped
    page.write_text(stale)
    assert main(["list", "--markdown", "--update", str(page)]) == 0
    assert page.read_text() == shipped and "tables updated" in capsys.readouterr().out
    assert main(["list", "--markdown", "--update", str(page)]) == 0
    assert "already up to date" in capsys.readouterr().out
    twice = tmp_path / "twice.md"
    twice.write_text(shipped + "\n" + reg.trajectory_table() + "\n")
    for bad, says in ((twice, "2 tables starting"), (tmp_path / "none.md", "no zoo page")):
        before = bad.read_text() if bad.exists() else None
        assert main(["list", "--markdown", "--update", str(bad)]) == 2
        assert says in capsys.readouterr().err
        assert (bad.read_text() if bad.exists() else None) == before
    assert main(["list", "--update", str(page)]) == 2
    assert "give it with --markdown" in capsys.readouterr().err
    assert main(["list", "--markdown", "--update", str(page), "--checkpoints", "simplified-ntot20-n2-10"]) == 2
    assert "without --checkpoints" in capsys.readouterr().err
    crlf = tmp_path / "crlf.md"  # a CRLF page keeps its line ends
    crlf.write_bytes(stale.replace("\n", "\r\n").encode())
    assert main(["list", "--markdown", "--update", str(crlf)]) == 0
    assert crlf.read_bytes() == shipped.replace("\n", "\r\n").encode()
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"caf\xe9\n")
    assert main(["list", "--markdown", "--update", str(latin)]) == 2
    assert "latin.md' is not UTF-8 text" in capsys.readouterr().err


def test_cli_json_has_no_float32_noise(capsys):
    assert main(["eval", "--model", "simplified-ntot10-n2-5-no-qk-bias", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["val_unseen"]["acc"] == 0.76 and "00000" not in out


def test_list_reads_manifests_without_importing_torch():
    """`hooked-clip1d list` only reads the manifests: it answers without importing torch (or TransformerLens)."""
    code = (
        "import sys; from hooked_clip1d.cli.commands import main; main(['list', '--json']); "
        "sys.stderr.write(str(sorted(m for m in ('torch', 'transformer_lens') if m in sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().endswith("[]"), r.stderr[-500:]
    assert "simplified-ntot20-n2-10" in r.stdout


def test_train_help_shows_each_default_once_and_every_option_helps():
    """`train --help` once printed "(default: --preset) (default: None)" and options without help."""
    import argparse

    from hooked_clip1d.cli.commands import build_parser

    p = build_parser()
    train = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    text = train.format_help()
    assert "(default: None)" not in text and "(default: 10000)" in text
    assert [a.dest for a in train._actions if not a.help] == []


def test_cli_train_attention_dropout_from_recipe_or_flag_on_both_engines(tmp_path, capsys):
    """An attention-dropout recipe reaches the model config (a recipe's model fields are not only init_std), the
    flag overrides it, resume checks it, and the batched engine trains it (with its 'fast' dropout stream)."""
    base = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "1", "--no-progress", "--json"]
    attn = lambda run: json.loads((run / "config.json").read_text())["model_config"]["vision"]["attn_dropout"]  # noqa: E731
    assert main([*base, "--out", str(tmp_path / "d")]) == 0
    assert attn(tmp_path / "d") == 0.0
    assert main([*base, "--recipe", "cls-exempt-init002-attndrop", "--out", str(tmp_path / "r")]) == 0
    assert attn(tmp_path / "r") == 0.1
    assert main([*base, "--attn-dropout", "0.3", "--engine", "batched", "--out", str(tmp_path / "b")]) == 0
    assert attn(tmp_path / "b") == 0.3
    capsys.readouterr()
    assert (
        main(
            [*base, "--resume", "--recipe", "cls-exempt-init002", "--attn-dropout", "0.2", "--out", str(tmp_path / "r")]
        )
        == 2
    )
    assert "attn_dropout: the run has 0.1, the flags say 0.2" in capsys.readouterr().err
    assert main([*base, "--attn-dropout", "1.5", "--out", str(tmp_path / "x")]) == 2
    assert "attn_dropout: must be a number in [0, 1), got 1.5" in capsys.readouterr().err
