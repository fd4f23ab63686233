"""EncoderConfig.ablated_terms is computed by the model itself: equal to the analysis hooks, not removable."""

from __future__ import annotations

import pytest
import torch
from conftest import randomize_biases

from hooked_clip1d import CLIP1D, CLIPConfig, load_model
from hooked_clip1d.analysis.interventions.terms import ablate_terms

IMGS = ["C 1 . 2 . . . . . . .", "C 2 . . . 1 . . . . .", "C . . . 3 . . 4 . . ."]


TERM_SETS = [("EP",), ("PE", "PP"), ("BP", "EB", "BB"), ("VP",), ("EP", "PE", "PP", "BP", "VP"), ("EE",)]
# RoPE towers have no positional embedding, so only the sets without P terms apply to them
CASES = [(t, "learned") for t in TERM_SETS] + [(t, "rope") for t in TERM_SETS if not any("P" in x for x in t)]


@pytest.mark.parametrize(("terms", "positional"), CASES)
def test_config_ablation_equals_the_analysis_hooks(terms, positional):
    base_cfg = CLIPConfig.from_preset(
        "simplified", n_labels=5, d_model=16, d_head=4, positional=positional, init_std=1.0
    )  # N(0, 1) embeddings: every term is large at init
    base = CLIP1D(base_cfg, seed=0).eval()
    randomize_biases(base)
    abl_cfg = CLIPConfig(vision=base_cfg.vision.replace(ablated_terms=terms), text=base_cfg.text)
    abl = CLIP1D(abl_cfg, seed=0).eval()
    abl.load_state_dict(base.state_dict())
    imgs = base.vision.to_tokens(IMGS)
    want = base.vision.run_with_hooks(imgs, fwd_hooks=ablate_terms(base.vision, list(terms)))
    torch.testing.assert_close(abl.vision(imgs), want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(abl.vision(imgs), base.vision(imgs), atol=1e-4)


def test_reset_hooks_cannot_remove_the_models_own_ablation():
    m = load_model("ablate-ep-ntot20-n2-10-init002")
    imgs = m.vision.to_tokens(IMGS)
    before = m.vision(imgs)
    m.vision.reset_hooks(including_permanent=True)
    torch.testing.assert_close(m.vision(imgs), before, atol=0, rtol=0)
    # and the shipped model still does what its manifest says
    from hooked_clip1d import build_dataset, evaluate

    acc = evaluate(m, build_dataset(m.data_config), splits=["val_unseen"])["val_unseen"]["acc"]
    assert acc == pytest.approx(m.manifest["metrics"]["val_unseen"]["acc"], abs=1e-6)


def test_encoders_import_nothing_from_analysis():
    import ast
    from pathlib import Path

    import hooked_clip1d

    root = Path(hooked_clip1d.__file__).parent
    for mod in (
        "model/encoders.py",
        "model/components.py",
        "model/config.py",
        "model/clip.py",
        "data/vocab.py",
        "data/dataset.py",
    ):
        tree = ast.parse((root / mod).read_text())
        names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert not [n for n in names if n.startswith(("hooked_clip1d.analysis", "hooked_clip1d.cli.commands"))], mod
