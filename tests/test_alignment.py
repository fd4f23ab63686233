"""Vision / text label-embedding alignment by orthogonal Procrustes (Sec. 6.2, Fig. 7)."""

import json

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, load_model
from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment, procrustes
from hooked_clip1d.visualization.alignment import plot_alignment


def _narrow_model(n_labels: int = 8, d_text: int = 4, d_vision: int = 4, seed: int = 0) -> CLIP1D:
    """Fewer dims than fit labels, so a rotation fitted on the fit labels is fully determined."""
    cfg = CLIPConfig.from_preset(
        "simplified",
        n_labels=n_labels,
        n_heads=2,
        d_head=2,
        vision_overrides={"d_model": d_vision},
        text_overrides={"d_model": d_text},
    )
    return CLIP1D(cfg, seed=seed).eval()


def _rotation(d: int, seed: int = 1) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    return q


def test_procrustes_recovers_a_rotation_and_is_semi_orthogonal():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 5, generator=g)
    q = _rotation(5)
    torch.testing.assert_close(procrustes(x, x @ q), q, atol=1e-5, rtol=1e-5)
    r = procrustes(torch.randn(12, 3, generator=g), torch.randn(12, 6, generator=g))
    assert r.shape == (3, 6)
    torch.testing.assert_close(r @ r.T, torch.eye(3), atol=1e-5, rtol=0)
    with pytest.raises((ValueError, TypeError)):  # our ValueError, or jaxtyping's shape check first under pytest
        procrustes(torch.zeros(3, 2), torch.zeros(4, 2))


def test_rotated_embeddings_align_exactly_on_held_out_labels():
    m = _narrow_model()
    q = _rotation(4)
    with torch.no_grad():
        m.text.embed.W_E[1:9] = m.vision.W_E[1:9] @ q.T  # text = vision rotated
    res = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8])
    assert res["fit_labels"] == [1, 2, 3, 4, 5, 6] and res["test_labels"] == [7, 8]
    pro, raw, shuf = res["procrustes"], res["raw"], res["shuffled"]
    assert pro["matched_cos"] == pytest.approx(1.0, abs=1e-5) and pro["acc"] == 1.0 and pro["acc_all"] == 1.0
    assert pro["fit_matched_cos"] == pytest.approx(1.0, abs=1e-5)
    assert raw["matched_cos"] < 0.99 and shuf["matched_cos"] < pro["matched_cos"] - 0.2
    assert res["orthogonality_error"] < 1e-5
    cos = torch.tensor(res["cos_procrustes"])
    assert cos.shape == (8, 8)
    torch.testing.assert_close(cos.diagonal(), torch.ones(8), atol=1e-5, rtol=0)
    json.dumps(res)


def test_raw_cosine_of_identical_embeddings():
    m = _narrow_model()
    with torch.no_grad():
        m.text.embed.W_E[1:9] = m.vision.W_E[1:9]
    res = embedding_alignment(m, fit_labels=[1, 2, 3, 4, 5], test_labels=[6, 7, 8], n_shuffles=0)
    assert res["raw"]["matched_cos"] == pytest.approx(1.0, abs=1e-6) and res["raw"]["acc"] == 1.0
    assert res["shuffled"] is None
    e = torch.nn.functional.normalize(m.vision.W_E[6:9].detach(), dim=-1)
    c = e @ e.T
    expected_unmatched = c[~torch.eye(3, dtype=torch.bool)].mean().item()
    assert res["raw"]["unmatched_cos"] == pytest.approx(expected_unmatched, abs=1e-6)


def test_defaults_come_from_the_data_config():
    m = _narrow_model(n_labels=6)
    m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
    res = embedding_alignment(m)
    assert res["fit_labels"] == [1, 2, 3, 4] and res["test_labels"] == [5, 6]
    m.data_config = None
    res = embedding_alignment(m)
    assert res["fit_labels"] == [1, 2, 3, 4, 5] and res["test_labels"] == [6]


def test_different_widths_and_text_projection():
    m = _narrow_model(d_text=4, d_vision=6)
    res = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8])
    assert res["raw"] is None and res["cos_raw"] is None and res["orthogonality_error"] < 1e-5
    proj = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8], project_text=True)
    assert proj["raw"] is not None and proj["project_text"] is True
    with torch.no_grad():  # W_proj maps text into the vision width; make text @ W_proj equal vision
        m.W_proj.copy_(torch.linalg.pinv(m.text.W_E[1:9]) @ m.vision.W_E[1:9])
    proj = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8], project_text=True)
    assert proj["raw"]["fit_matched_cos"] > 0.5
    fig = plot_alignment(res)  # raw panel is replaced by a note
    assert len(fig.axes) >= 3


def test_centering_changes_the_fit():
    m = _narrow_model()
    a = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8])
    b = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8], center=True)
    assert b["center"] and a["procrustes"]["matched_cos"] != b["procrustes"]["matched_cos"]


def test_bad_arguments():
    m = _narrow_model()
    with pytest.raises(ValueError, match="outside 1..8"):
        embedding_alignment(m, fit_labels=[0, 1], test_labels=[7])
    with pytest.raises(ValueError, match="repeated"):
        embedding_alignment(m, fit_labels=[1, 1, 2], test_labels=[7])
    with pytest.raises(ValueError, match="at least 2"):
        embedding_alignment(m, fit_labels=[1], test_labels=[7])
    with pytest.raises(ValueError, match="n_shuffles"):
        embedding_alignment(m, fit_labels=[1, 2], test_labels=[7], n_shuffles=-1)
    with pytest.raises(TypeError):
        embedding_alignment(m.vision)


def test_shipped_model_and_plot(two_layer_model):
    res = embedding_alignment(load_model("simplified-ntot20-n2-10"))
    assert res["fit_labels"] == list(range(1, 16)) and res["test_labels"] == list(range(16, 21))
    for k in ("raw", "procrustes", "shuffled"):
        assert set(res[k]) >= {"matched_cos", "unmatched_cos", "acc", "acc_all"}
    fig = plot_alignment(json.loads(json.dumps(res)))
    assert len(fig.axes) == 5  # two heat maps, two colour bars, the bars
    assert embedding_alignment(two_layer_model, fit_labels=[1, 2, 3], test_labels=[5, 6])["raw"] is not None


def test_fig7_trained_control_pairs_one_models_vision_table_with_anothers_text_table():
    """Fig. 7's trained control reads the vision label table of the figure model and the text table of a model
    trained apart; neither model is changed, and tables of other shapes are refused."""
    import torch

    from hooked_clip1d import CLIP1D, CLIPConfig
    from hooked_clip1d.reproduce.text_figs import _with_text_of

    cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4)
    a, b = CLIP1D(cfg, seed=0).eval(), CLIP1D(cfg, seed=1).eval()
    before = b.vision.W_E.clone()
    chimera = _with_text_of(a, b)
    assert torch.equal(chimera.vision.W_E, a.vision.W_E) and torch.equal(chimera.text.W_E, b.text.W_E)
    assert torch.equal(b.vision.W_E, before)  # the other model is untouched
    wide = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=32, d_head=8), seed=0)
    with pytest.raises(ValueError, match="same shapes"):
        _with_text_of(a, wide)
