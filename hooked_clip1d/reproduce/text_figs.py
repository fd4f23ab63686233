"""The paper's text-tower and alignment figures on the zoo's flagship (Sec. 6): ``fig6`` (the text tower's EOT
attention to the subject and the second object) and ``fig7`` (vision and text label embeddings align up to a
rotation, with its trained control: the same fit against text towers trained apart on the same data, docs/fidelity.md
2026-11-26 amendment). The checks follow docs/fidelity.md ("Verdicts v2"), as in ``mechanism_figs``.
"""

from __future__ import annotations

from typing import Any

import torch

from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.pretrained import load_model
from hooked_clip1d.reproduce.core import FLAGSHIP, NO_QK_BIAS, SMALL_INIT, FigureSpec, Outcome, register
from hooked_clip1d.reproduce.readings import at_least, at_most
from hooked_clip1d.reproduce.replicates import OWN_CONTROLS, OwnControl


def _fig6(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.mechanism.heads import pair_captions, text_eot_bias
    from hooked_clip1d.visualization.attention import plot_attention
    from hooked_clip1d.visualization.heads import plot_eot_bias

    model = models[name]
    eot = text_eot_bias(model.text, pair_captions(build_dataset(model.data_config), "unseen"))
    first = eot["first"][0].tolist()
    mean = eot["mean"][0]  # [head, caption position]: the EOT row averaged over the captions (Fig. 6b)
    to_subject = (mean[:, 0] - mean[:, 2]).tolist()  # mean attention on the subject minus on the second object
    m_subj, m_obj = max(to_subject), max(-d for d in to_subject)
    c1 = "some head gives the subject (first object) >= 0.2 more mean EOT attention than the second object"
    c2 = "some head gives the second object >= 0.2 more mean EOT attention than the subject"
    s1 = "some head favours the subject (first object) on >= 80% of unseen captions"
    s2 = "some head favours the second object on >= 80% of unseen captions"
    checks = [(c1, m_subj >= 0.2), (c2, m_obj >= 0.2), (s1, at_least(max(first), 0.8)), (s2, at_most(min(first), 0.2))]
    summary = (
        "mean EOT attention on the subject minus on the second object over unseen captions, per head: "
        + ", ".join(f"h{h} {d:+.2f}" for h, d in enumerate(to_subject))
        + "; share of captions where the subject gets more: "
        + ", ".join(f"h{h} {f:.2f}" for h, f in enumerate(first))
    )
    figs = {
        "eot_bias": plot_eot_bias(eot),
        "example_17_19": plot_attention(model, "17 is on the left of 19", layer=0),
        "example_19_17": plot_attention(model, "19 is on the left of 17", layer=0),
    }
    ceiling = (
        "at its ceiling: a share of captions is 0 or 1 on untrained models too (a tiny but consistent positional "
        "tilt decides every caption), so it can never lie beyond the null; the counted check is the attention margin"
    )
    sensitivity = {
        c1: [(t, m_subj >= t) for t in (0.05, 0.1, 0.2, 0.3, 0.5)],
        c2: [(t, m_obj >= t) for t in (0.05, 0.1, 0.2, 0.3, 0.5)],
    }
    numbers = {
        "first": first,
        "second": eot["second"][0].tolist(),
        "subject_minus_object": to_subject,
        "mean": mean.tolist(),
        "sensitivity": sensitivity,
    }
    return Outcome(
        numbers,
        summary + ".",
        checks,
        figs,
        values={c1: (m_subj, ">"), c2: (m_obj, ">")},
        secondary={s1: ceiling, s2: ceiling},
        sensitivity=sensitivity,
    )


# zoo models trained apart from the flagship on the same data, with its text architecture: Fig. 7's trained control
CROSS_TEXT = (SMALL_INIT, NO_QK_BIAS, "simplified-ntot20-n2-10-qkdecay10", "simplified-ntot20-n2-10-w005")


def _with_text_of(model: CLIP1D, other: CLIP1D) -> CLIP1D:
    """A copy of ``other`` whose vision token embeddings are ``model``'s: a pair of label tables never trained
    together (all ``embedding_alignment`` reads), for Fig. 7's trained control."""
    import copy

    if model.vision.W_E.shape != other.vision.W_E.shape or model.text.W_E.shape != other.text.W_E.shape:
        raise ValueError("the cross-model control needs label tables of the same shapes in both models")
    chimera = copy.deepcopy(other).eval()
    with torch.no_grad():
        chimera.vision.W_E.copy_(model.vision.W_E)
    chimera.data_config = model.data_config
    return chimera


def _fig7_cross(model: CLIP1D) -> dict[str, dict[str, Any]]:
    """Fig. 7's trained control (docs/fidelity.md, 2026-11-26 amendment): the same fit from this vision tower to
    text towers trained apart on the same data (``CROSS_TEXT``); the alignment must be the jointly trained pair's."""
    from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment

    return {
        other: embedding_alignment(
            _with_text_of(model, load_model(other)), center=True, rotation="canonical", n_shuffles=0
        )["procrustes"]
        for other in CROSS_TEXT
    }


# why Fig. 7's uncentred checks (the paper's tables) are shown, not counted
UNCENTRED_WHY = (
    "coordinate-dependent: a constant moved from every row of the vision W_E into every row of W_pos "
    "(analysis.mechanism.reparametrize.shift_embeddings) changes no output and moves every uncentred label "
    "embedding"
)


def _fig7(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment
    from hooked_clip1d.visualization.alignment import plot_alignment

    model = models[name]
    # centred tables (a constant moved between every row of W_E and of W_pos changes no output) and the unique
    # rotation closest to the identity (Procrustes on 15 labels fixes a rotation in 128 dims on their span only)
    res = embedding_alignment(model, center=True, rotation="canonical")
    paper = embedding_alignment(model, rotation="canonical", n_shuffles=0)  # uncentred, as the paper
    span = embedding_alignment(model, center=True, rotation="span", n_shuffles=0)  # the fitted part alone
    raw, rot, shuf = res["raw"], res["procrustes"], res["shuffled"]
    p_rot = paper["procrustes"]
    c_raw = "raw cosine shows little alignment (matched - unmatched < 0.1; label tables centred)"
    c_cos = "the rotation fitted on labels 1-15 aligns 16-20 (matched cos >= 0.5; centred, canonical rotation)"
    c_acc = "held-out labels are retrieved after the rotation (acc >= 0.8; centred, canonical rotation)"
    c_shuf = "a rotation fitted on shuffled labels does not align (acc < rotation's)"
    s_cos = "[uncentred, as the paper] the rotation fitted on labels 1-15 aligns 16-20 (matched cos >= 0.5)"
    s_acc = "[uncentred, as the paper] held-out labels are retrieved after the rotation (acc >= 0.8)"
    checks = [
        (c_raw, raw["matched_cos"] - raw["unmatched_cos"] < 0.1),
        (c_cos, rot["matched_cos"] >= 0.5),
        (c_acc, rot["acc"] >= 0.8),
        (c_shuf, shuf["acc"] < rot["acc"]),
        (s_cos, p_rot["matched_cos"] >= 0.5),
        (s_acc, p_rot["acc"] >= 0.8),
    ]
    summary = (
        f"held-out labels {res['test_labels']} (tables centred, canonical rotation): matched cosine raw "
        f"{raw['matched_cos']:.3f} -> rotated {rot['matched_cos']:.3f} (unmatched {rot['unmatched_cos']:.3f}); "
        f"retrieval accuracy raw {raw['acc']:.2f}, rotated {rot['acc']:.2f}, shuffled-label control "
        f"{shuf['acc']:.2f}. Uncentred (the paper's tables, secondary): matched cosine raw "
        f"{paper['raw']['matched_cos']:.3f} -> {p_rot['matched_cos']:.3f}, retrieval {p_rot['acc']:.2f}. The "
        f"rotation restricted to the fit labels' span: matched cosine {span['procrustes']['matched_cos']:.3f}, "
        f"retrieval {span['procrustes']['acc']:.2f}"
    )
    cross = _fig7_cross(model)  # the trained control
    best_cross = max(c["matched_cos"] for c in cross.values())
    c_cross = FIG7_CROSS
    checks.insert(3, (c_cross, rot["matched_cos"] >= 0.5 and rot["matched_cos"] > best_cross))
    summary += (
        ". Trained control, this vision tower with text towers trained apart: matched cosine "
        + ", ".join(f"{c['matched_cos']:.3f}" for c in cross.values())
        + f" (own {rot['matched_cos']:.3f}), retrieval "
        + ", ".join(f"{c['acc']:.2f}" for c in cross.values())
    )
    numbers = {k: res[k] for k in ("fit_labels", "test_labels", "raw", "procrustes", "shuffled")}
    numbers.update(
        center=True,
        rotation="canonical",
        uncentred={k: paper[k] for k in ("raw", "procrustes")},
        span_only=span["procrustes"],
        cross_model=cross,
    )
    sensitivity = {
        c_cos: [(t, rot["matched_cos"] >= t) for t in (0.3, 0.4, 0.5, 0.6, 0.7)],
        c_acc: [(t, rot["acc"] >= t) for t in (0.6, 0.8, 1.0)],
    }
    numbers["sensitivity"] = sensitivity
    values = {c_cos: (rot["matched_cos"], ">"), c_acc: (rot["acc"], ">")}
    why = UNCENTRED_WHY
    return Outcome(
        numbers,
        summary + ".",
        checks,
        {"alignment": plot_alignment(res)},
        values=values,
        absence=(c_raw,),
        secondary={s_cos: why, s_acc: why},
        sensitivity=sensitivity,
        # the trained control on the checks it guards, by the checks' own thresholds (2026-11-30: it was in the
        # summary and in c_cross only; c_cross is the comparison with it: OWN_CONTROLS["fig7"].unguarded says so)
        own_controls={
            c_cos: {f"text tower of {o}": c["matched_cos"] >= 0.5 for o, c in cross.items()},
            c_acc: {f"text tower of {o}": c["acc"] >= 0.8 for o, c in cross.items()},
        },
    )


FIG7_CROSS = (
    "the own pair aligns held-out labels (matched cos >= 0.5) and better than the vision tower with any of 4 "
    "text towers trained apart on the same data (trained control)"
)
# Fig. 7's own trained control (pre-registered in docs/fidelity.md's amendment of 2026-11-26; per check since
# 2026-11-30): it guards the rotation's two checks; the cross check is the comparison with it (2026-12-01, issue 50)
OWN_CONTROLS["fig7"] = OwnControl(
    "its vision tower with 4 text towers trained apart on the same data",
    unguarded={
        FIG7_CROSS: "it is the comparison with this control: it holds only where the own pair beats every control "
        "pair, so no control pair can pass it where it holds (its control outcome would be one by construction)"
    },
)


# the figures of this module, each with its claim, thresholds (in its function) and zoo models
SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "fig6",
        "Text encoder: EOT -> word attention bias (Fig. 6)",
        "Head 3 attends most to the subject (first object) whatever its label; heads 0-2 are right-biased.",
        (FLAGSHIP,),
        _fig6,
        data="the captions of unseen pairs",
        replicate=True,
    ),
    FigureSpec(
        "fig7",
        "Vision and text label embeddings align up to a rotation (Fig. 7)",
        "Raw cosine similarity between vision and text token embeddings shows little alignment; a rotation "
        "fitted on labels 1-15 markedly aligns labels 16-20.",
        (FLAGSHIP,),
        _fig7,
        data="the label embeddings of both towers (no images)",
        replicate=True,
    ),
)
