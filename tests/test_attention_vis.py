"""Attention views: circuitsvis objects (full matrix for the bidirectional vision tower), offline HTML, matplotlib."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from circuitsvis.utils.render import RenderedHTML, render_cdn
from conftest import make_model
from matplotlib.figure import Figure

from hooked_clip1d import load_model
from hooked_clip1d.visualization.attention import (
    AttentionView,
    attention_view,
    plot_attention,
    save_html,
    show_attention,
)

IMAGE = "C . 3 . . 5 . . . . ."  # labels 3 and 5 of the tiny models' 6
CAPTION = "3 is on the left of 5"


def cached_pattern(enc, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """[head, q, k] straight from the tower's own cache, for comparison."""
    _, cache = enc.run_with_cache(enc.to_tokens(tokens))
    return cache["pattern", layer][0]


def props_of(view: RenderedHTML) -> dict:
    """The JSON props circuitsvis hands to its React component (in the offline source)."""
    m = re.search(r"CircuitsVis\.AttentionHeads,\s*(\{.*\})\s*\)\s*</script>", view.local_src, re.S)
    assert m is not None, "no AttentionHeads render call in local_src"
    return json.loads(m.group(1))


# ---- attention_view: the data behind both renderings -------------------------------------------------------------
def test_view_vision_matches_cache_and_is_full(simplified_model):
    v = attention_view(simplified_model, IMAGE)
    assert isinstance(v, AttentionView)
    assert (v.tower, v.layer, v.heads, v.causal) == ("vision", 0, (0, 1), False)
    assert v.tokens == simplified_model.vision.token_strs(simplified_model.vision.to_tokens(IMAGE)[0])
    assert v.tokens[:3] == ["[CLS]", "·", "3"]
    torch.testing.assert_close(v.pattern, cached_pattern(simplified_model.vision, IMAGE, 0))
    upper = torch.triu(torch.ones(11, 11, dtype=torch.bool), diagonal=1)
    assert bool((v.pattern[:, upper] > 0).all())  # bidirectional: keys after the query are attended
    torch.testing.assert_close(v.pattern.sum(-1), torch.ones(2, 11))


def test_view_text_is_causal(simplified_model):
    v = attention_view(simplified_model, CAPTION)
    assert (v.tower, v.causal) == ("text", True)
    assert v.tokens == ["3", "is on the left of", "5", "<eot>"]
    upper = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    assert bool((v.pattern[:, upper] == 0).all())
    torch.testing.assert_close(v.pattern, cached_pattern(simplified_model.text, CAPTION, 0))


def test_view_layer_and_head_subset(two_layer_model):
    full = cached_pattern(two_layer_model.vision, IMAGE, 1)
    v = attention_view(two_layer_model, IMAGE, layer=1, heads=[1, 0])
    assert v.heads == (1, 0) and v.head_names == ["L1H1", "L1H0"]
    torch.testing.assert_close(v.pattern, full[[1, 0]])
    v1 = attention_view(two_layer_model.vision, IMAGE, layer=1, heads=1)
    torch.testing.assert_close(v1.pattern, full[[1]])
    assert not torch.allclose(full, cached_pattern(two_layer_model.vision, IMAGE, 0))  # layer really chosen


def test_every_input_form_gives_the_same_view(simplified_model, dataset):
    split = dataset.splits["val_unseen"]
    row = split.images[3]
    ref = attention_view(simplified_model.vision, row)
    for x, kw in [
        (row, {}),  # CLIP1D + ids: the tower from the length (vision n_ctx 11, text 4)
        (row[None], {}),
        (split.images, {"index": 3}),  # a batch item
        (simplified_model.vision.cfg.vocab.image_to_text(row), {}),  # the same image as a string
        (row, {"tower": "vision"}),
    ]:
        v = attention_view(simplified_model, x, **kw)
        assert v.tower == "vision" and v.tokens == ref.tokens
        torch.testing.assert_close(v.pattern, ref.pattern)
    cap = dataset.captions[7]
    t = attention_view(simplified_model, cap)
    assert t.tower == "text" and t.tokens == simplified_model.text.token_strs(cap)
    torch.testing.assert_close(t.pattern, attention_view(simplified_model.text, cap[None]).pattern)


def test_view_restores_train_mode_and_ignores_dropout():
    m = make_model("simplified", seed=5, n_layers=2).train()  # dropout 0.1 on layer 0's output in train mode
    v = attention_view(m, IMAGE, layer=1)
    assert m.vision.training and m.text.training
    m.eval()
    torch.testing.assert_close(v.pattern, cached_pattern(m.vision, IMAGE, 1))


# ---- show_attention: circuitsvis ---------------------------------------------------------------------------------
def test_show_attention_vision_carries_full_matrix_unmasked(simplified_model):
    view = show_attention(simplified_model, IMAGE)
    assert isinstance(view, RenderedHTML)
    p = props_of(view)
    assert p["maskUpperTri"] is False  # circuitsvis' JS masks by default; the vision tower must not be masked
    assert p["tokens"] == ["[CLS]", "·", "3", "·", "·", "5", "·", "·", "·", "·", "·"]
    assert p["attentionHeadNames"] == ["L0H0", "L0H1"]
    att = torch.tensor(p["attention"])
    assert att.shape == (2, 11, 11)
    pattern = attention_view(simplified_model, IMAGE).pattern
    torch.testing.assert_close(att, pattern)
    upper = torch.triu(torch.ones(11, 11, dtype=torch.bool), diagonal=1)
    assert bool((att[:, upper] > 0).all())
    assert '"maskUpperTri": false' in view.cdn_src  # the CDN variant gets the same props


def test_show_attention_text_is_masked_with_readable_labels(simplified_model):
    p = props_of(show_attention(simplified_model.text, CAPTION, heads=[1]))
    assert p["maskUpperTri"] is True
    assert p["tokens"] == ["3", "is_on_the_left_of", "5", "<eot>"]  # circuitsvis strips whitespace
    assert p["attentionHeadNames"] == ["L0H1"]
    torch.testing.assert_close(torch.tensor(p["attention"]), attention_view(simplified_model.text, CAPTION).pattern[1:])


def test_show_attention_on_shipped_model(tmp_path):
    m = load_model("simplified-ntot20-n2-10-no-qk-bias")
    img = "C . . 17 . . 19 . . . ."
    p = props_of(show_attention(m, img))
    att = torch.tensor(p["attention"])
    assert att.shape == (4, 11, 11) and p["maskUpperTri"] is False
    # the trained CLS row attends mostly to the two objects (Fig. 4b) in its biased heads (2: right, 3: left)
    assert bool((att[[2, 3], 0, 3] + att[[2, 3], 0, 6] > 0.8).all())
    pt = props_of(show_attention(m, "17 is on the left of 19", tower="text"))
    assert pt["maskUpperTri"] is True and len(pt["attention"]) == 4


# ---- save_html: offline, atomic ----------------------------------------------------------------------------------
def test_save_html_is_self_contained(simplified_model, tmp_path):
    view = show_attention(simplified_model, IMAGE)
    path = save_html(view, tmp_path / "sub" / "attn.html", title="vision <L0>")
    assert path == tmp_path / "sub" / "attn.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<title>vision &lt;L0&gt;</title>" in text
    assert re.findall(r"<script\b[^>]*>", text, re.I)[0] == '<script crossorigin type="module">'  # inline
    assert not re.search(r"<script\b[^>]*\bsrc\s*=", text, re.I)  # no script loaded from a file or URL
    assert not re.search(r"src\s*=\s*[\"']?https?:", text, re.I)
    assert "unpkg.com" not in text and "esm.js" not in text
    assert "CircuitsVis.render(" in text and len(text) > 500_000  # the bundled iife.js is inlined
    assert re.search(r'<div id="circuits-vis-[^"]+" style="[^"]*"></div>', text)  # mount point closed
    # the page carries the same full matrix
    m = re.search(r"CircuitsVis\.AttentionHeads,\s*(\{.*\})\s*\)\s*</script>", text, re.S)
    torch.testing.assert_close(
        torch.tensor(json.loads(m.group(1))["attention"]), torch.tensor(props_of(view)["attention"])
    )
    assert [f for f in os.listdir(path.parent)] == ["attn.html"]  # no temp file left behind


def test_save_html_overwrites_atomically(simplified_model, tmp_path):
    path = tmp_path / "a.html"
    path.write_text("old")
    save_html(show_attention(simplified_model, CAPTION), path)
    assert "is_on_the_left_of" in path.read_text(encoding="utf-8")
    assert os.listdir(tmp_path) == ["a.html"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_saved_script_is_valid_javascript(simplified_model, tmp_path):
    text = save_html(show_attention(simplified_model, IMAGE), tmp_path / "a.html").read_text(encoding="utf-8")
    body = re.search(r"<script crossorigin type=\"module\">(.*)</script>", text, re.S).group(1)
    js = tmp_path / "inline.mjs"
    js.write_text(body, encoding="utf-8")
    r = subprocess.run(["node", "--check", str(js)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_save_html_rejects_wrong_objects(simplified_model, tmp_path):
    with pytest.raises(TypeError, match="RenderedHTML"):
        save_html("<p>hi</p>", tmp_path / "x.html")
    cdn = render_cdn("AttentionHeads", attention=[[[1.0]]], tokens=["a"])  # a real CDN-loading page
    with pytest.raises(ValueError, match="offline"):
        save_html(RenderedHTML(cdn, cdn), tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


# ---- plot_attention ----------------------------------------------------------------------------------------------
def test_plot_attention_vision(simplified_model, tmp_path):
    fig = plot_attention(simplified_model, IMAGE, heads=[1, 0])
    assert isinstance(fig, Figure)
    heat = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heat] == ["L0H1", "L0H0"]
    pattern = attention_view(simplified_model, IMAGE).pattern
    for ax, h in zip(heat, [1, 0], strict=True):
        np.testing.assert_allclose(np.ma.getdata(ax.images[0].get_array()), pattern[h].numpy(), rtol=1e-6)
        assert not np.ma.getmaskarray(ax.images[0].get_array()).any()
        assert [t.get_text() for t in ax.get_xticklabels()] == attention_view(simplified_model, IMAGE).tokens
    fig.savefig(tmp_path / "v.png")
    assert (tmp_path / "v.png").stat().st_size > 1000


def test_plot_attention_text_masks_upper_triangle(simplified_model):
    fig = plot_attention(simplified_model.text, CAPTION, layer=0)
    heat = [ax for ax in fig.axes if ax.images]
    assert len(heat) == 2
    mask = np.ma.getmaskarray(heat[0].images[0].get_array())
    np.testing.assert_array_equal(mask, np.triu(np.ones((4, 4), dtype=bool), k=1))
    assert [t.get_text() for t in heat[0].get_yticklabels()] == ["3", "is on the left of", "5", "<eot>"]


# ---- errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"layer": 1}, ValueError, r"layer 1 is out of range.*0\.\.0"),
        ({"layer": -1}, ValueError, "layer -1 is out of range"),
        ({"layer": True}, TypeError, "layer"),
        ({"heads": [0, 2]}, ValueError, r"head 2 is out of range.*0\.\.1"),
        ({"heads": []}, ValueError, "heads is empty"),
        ({"tower": "audio"}, ValueError, "tower must be 'vision' or 'text'"),
        ({"index": 0}, ValueError, "index= picks a row"),
    ],
)
def test_bad_arguments(simplified_model, kwargs, exc, match):
    for fn in (show_attention, plot_attention):
        with pytest.raises(exc, match=match):
            fn(simplified_model, IMAGE, **kwargs)


def test_bad_inputs(simplified_model, dataset):
    m = simplified_model
    with pytest.raises(ValueError, match="cannot tell whether 'hello world'"):
        show_attention(m, "hello world")
    with pytest.raises(ValueError, match="looks like a caption, but the model given is the vision tower"):
        show_attention(m.vision, CAPTION)
    with pytest.raises(ValueError, match="looks like an image, but the model given is the text tower"):
        show_attention(m.text, IMAGE)
    with pytest.raises(ValueError, match="tower='text' was asked for, but the model given is the vision tower"):
        show_attention(m.vision, IMAGE, tower="text")
    with pytest.raises(ValueError, match="cannot parse caption"):
        show_attention(m, "3 is on the top of 5")
    with pytest.raises(ValueError, match="n_ctx=11"):
        show_attention(m, "C . 3 .")
    with pytest.raises(ValueError, match="label 9"):
        show_attention(m, "C . 9 . . 5 . . . . .")  # label 9 > n_labels 6
    with pytest.raises(ValueError, match="fits neither tower"):
        show_attention(m, torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="pass index= to pick one"):
        show_attention(m, dataset.splits["train"].images[:4])
    with pytest.raises(ValueError, match="index 9 is out of range"):
        show_attention(m, dataset.splits["train"].images[:4], index=9)
    with pytest.raises(TypeError):
        show_attention(m, dataset.splits["train"].images[0].float())
    with pytest.raises(TypeError):
        show_attention(torch.nn.Linear(2, 2), IMAGE)
    with pytest.raises(TypeError):
        show_attention(m, ["C . 3 . . 5 . . . . ."])


def test_analyze_attention_writes_offline_html_naming_model_and_input(tmp_path):
    from hooked_clip1d.cli.analyze import run_analysis

    res = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tmp_path)
    pages = [f for f in res["files"] if f.endswith(".html")]
    assert len(pages) == 2
    text = (tmp_path / "attention_vision_L0.html").read_text(encoding="utf-8")
    assert "simplified-ntot20-n2-10: vision tower, layer 0, input" in text and "unpkg.com" not in text
    assert "attention weight: 0 (white) to 1" in text
