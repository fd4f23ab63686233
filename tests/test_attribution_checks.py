"""Attribution that says when it is wrong (issue 45): beliefs for which AtP is exact, the agreement with exact
patching and the cheap check that warns, the metric checks of a Task (shape, dtype, NaN), the method registry, and
the public seams of the attribution toolkit (issue 44)."""

from __future__ import annotations

import ast
import inspect
import warnings
from pathlib import Path

import pytest
import torch

from hooked_clip1d import build_dataset, load_model
from hooked_clip1d.analysis.circuits.attribution import (
    Attribution,
    AttributionWarning,
    agreement,
    check_against_exact,
    moved,
    sample_names,
)
from hooked_clip1d.analysis.circuits.edge_attribution import eap, exact_edge_patching
from hooked_clip1d.analysis.circuits.graph import build_graph
from hooked_clip1d.analysis.circuits.methods import (
    METHODS,
    Method,
    check_attribution,
    register_method,
    unregister_method,
)
from hooked_clip1d.analysis.circuits.node_attribution import atp, atp_star, exact_patching, node_specs
from hooked_clip1d.analysis.circuits.scores import acdc
from hooked_clip1d.analysis.circuits.task import Task, clip_belief_metric, mirror_task
from hooked_clip1d.analysis.metrics import image_belief_metric, mirror_images, pair_inputs

NO_QK = "simplified-ntot20-n2-10-no-qk-bias"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped():
    model = load_model(NO_QK)
    ds = build_dataset(model.data_config)
    imgs, caps = pair_inputs(ds.splits["val_unseen"], ds.vocab, n=16, seed=0)
    return model, imgs, caps


def _rel_err(a: Attribution, b: Attribution) -> float:
    assert a.names == b.names
    return float((a.scores - b.scores).abs().max() / b.scores.abs().max())


# ---- beliefs linear in the embeddings ------------------------------------------------------------------------------
def test_a_belief_linear_in_the_embeddings_makes_atp_exact_on_heads(shipped):
    """One-layer attention-only towers without LN: a head's output reaches the embedding linearly, so AtP on heads
    is exact once the belief is (frozen norms, or none); under CLIP's cosine it is exact with the default
    linearisation (``"readout"``: the towers linearised, the cosine evaluated exactly on the moved embeddings) and
    misses with either linearisation of the cosine itself (the known case before it)."""
    model, imgs, caps = shipped
    for norm in ("frozen", "none"):
        task = mirror_task(model, imgs, caps, norm=norm)
        assert _rel_err(atp(task), exact_patching(task)) < 1e-4, norm
    live = mirror_task(model, imgs, caps)
    assert _rel_err(atp(live), exact_patching(live)) < 1e-4
    for lin in ("held", "live"):
        task = mirror_task(model, imgs, caps, linearise=lin)
        assert _rel_err(atp(task), exact_patching(task)) > 0.05, lin


def test_with_frozen_norms_eap_with_the_qk_fix_is_exact_on_every_edge(shipped):
    model, imgs, caps = shipped
    task = mirror_task(model, imgs, caps, norm="frozen")
    exact = exact_edge_patching(task)
    assert _rel_err(eap(task, qk_fix=True), exact) < 1e-4
    readout_and_values = [e for e in build_graph(model).edges if e[1].endswith((".v", "readout"))]
    assert _rel_err(eap(task, readout_and_values), exact_edge_patching(task, readout_and_values)) < 1e-4
    vision = mirror_task(model, imgs, caps, target="vision", norm="frozen")  # the tower's metric, frozen too
    assert _rel_err(atp(vision), exact_patching(vision)) < 1e-4


def test_the_frozen_belief_has_the_cosines_clean_value(shipped):
    model, imgs, caps = shipped
    live, frozen, none = (mirror_task(model, imgs, caps, norm=n).clean_metric() for n in ("live", "frozen", "none"))
    assert torch.allclose(live, frozen, atol=1e-4) and not torch.allclose(live, none, atol=1e-2)
    for target in ("vision", "text"):
        a = mirror_task(model, imgs, caps, target=target).clean_metric()
        b = mirror_task(model, imgs, caps, target=target, norm="frozen").clean_metric()
        assert torch.allclose(a, b, atol=1e-4), target


def test_bad_norms_raise(shipped):
    model, imgs, caps = shipped
    with pytest.raises(ValueError, match="norm must be one of"):
        mirror_task(model, imgs, caps, norm="cosine")
    with pytest.raises(ValueError, match="pass the clean images"):
        image_belief_metric(model, caps, norm="frozen")
    with pytest.raises(ValueError, match="whole CLIP's logits"):
        Task(model.vision, imgs, mirror_images(imgs), image_belief_metric(model, caps), norm="frozen")


# ---- a task's metric is checked before any work -------------------------------------------------------------------
class _FiniteOnce:
    """A metric finite on its first call (the task's clean check) and NaN after: it fails only inside a method."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = clip_belief_metric(self.n)(logits)
        return out if self.calls == 1 else out * float("nan")


def test_metrics_of_the_wrong_shape_dtype_or_value_are_refused(shipped):
    model, imgs, caps = shipped
    clean = mirror_task(model, imgs[:2], caps[:2])
    args = (model, clean.clean, clean.corrupted)
    with pytest.raises(ValueError, match=r"one value per example: \[2\] for this batch of 2, got shape \(1,\)"):
        Task(*args, lambda logits: clip_belief_metric(2)(logits)[:1])  # one value for a batch of two
    with pytest.raises(ValueError, match="non-finite"):
        Task(*args, lambda logits: clip_belief_metric(2)(logits) * float("nan"))
    with pytest.raises(TypeError, match="floating-point"):
        Task(*args, lambda logits: (clip_belief_metric(2)(logits) > 0).long())
    with pytest.raises(TypeError, match="one value per example"):
        Task(*args, lambda logits: [1.0, 2.0])
    # NaN only inside a method: ACDC refuses it instead of keeping every edge
    task = Task(*args, _FiniteOnce(2))
    with pytest.raises(ValueError, match="non-finite"):
        acdc(task)


# ---- agreement with exact patching and the cheap check --------------------------------------------------------------
def test_agreement_counts_only_what_exact_patching_moves():
    exact = Attribution("exact", ["a", "b", "c", "d"], torch.tensor([4.0, -2.0, 1.0, 0.0]))
    est = Attribution("AtP", ["d", "c", "b", "a"], torch.tensor([0.0, -1.0, -2.0, 3.0]))
    out = agreement(est, exact, k=2)
    assert out["n"] == 3 and out["n_unmoved"] == 1 and moved(exact).tolist() == [True, True, True, False]
    assert out["sign_agreement"] == pytest.approx(2 / 3) and out["weighted_sign_agreement"] == pytest.approx(6 / 7)
    assert out["top_k_overlap"] == 1.0 and out["pearson"] < 1.0
    mags = Attribution("AtP*", exact.names, exact.scores.abs(), signed=False)
    unsigned = agreement(mags, exact)
    assert unsigned["sign_agreement"] is None and unsigned["pearson"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="does not score"):
        agreement(est.subset(["a"]), exact)
    rng = torch.get_rng_state()
    assert sample_names(est, 3, seed=1) == sample_names(est, 3, seed=1)
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_checks_worst_item_is_a_wrong_sign_where_there_is_one():
    """The warning named an item whose sign was right (EAP+QK -7.14 against exact -7.09, the largest gap) while the
    sample's wrong signs went unnamed (x-circuits' run of 2026-11-29): the worst item is now the wrong-signed one of
    largest exact effect; with every sign right, the largest gap."""
    est = Attribution("AtP", ["a", "b", "c"], torch.tensor([-7.14, 0.2, 0.5]))
    effect = {"a": -7.09, "b": -2.0, "c": -0.5}
    exact = lambda names: Attribution("exact", names, torch.tensor([effect[n] for n in names]))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AttributionWarning)
        out = check_against_exact(est, exact, n=3)
    assert out["poor"] and out["worst"] == ("b", pytest.approx(0.2), pytest.approx(-2.0))
    right = Attribution("AtP", ["a", "b", "c"], torch.tensor([-7.0, -2.0, -5.0]))
    out = check_against_exact(right, exact, n=3, warn=False)
    assert out["worst"][0] == "c"  # every sign right: the largest gap (4.5)


def test_the_check_warns_when_atp_is_wrong_and_not_when_it_is_exact(shipped):
    model, imgs, caps = shipped
    live = mirror_task(model, imgs, caps, linearise="live")  # the cosine differentiated: wrong-signed here
    with pytest.warns(AttributionWarning, match="disagrees with exact patching") as caught:
        out = check_attribution(live, atp(live, ["embed", "k", "terms"], check=0))
    assert caught[0].filename == __file__  # the warning names the user's line, not the package's
    assert out["poor"] and out["worst"] is not None and len(out["sample"]) == 8
    frozen = mirror_task(model, imgs, caps, norm="frozen")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttributionWarning)
        res = atp(frozen, check=4)
        assert res.info["check"]["sign_agreement"] == 1.0 and not res.info["check"]["poor"]
        edges = eap(frozen, qk_fix=True, check=6)
        assert edges.info["check"]["pearson"] > 0.999
    with pytest.warns(AttributionWarning):  # magnitudes (AtP*) are compared with |exact|: a constant is no ranking
        check_against_exact(
            Attribution("m", ["a", "b", "c"], torch.tensor([1.0, 2.0, 3.0]), signed=False),
            lambda names: Attribution("exact", names, torch.tensor([3.0, 2.0, 1.0])[: len(names)]),
        )
    with pytest.raises(ValueError, match="check"):
        atp(frozen, check=-1)


def test_exact_patching_takes_node_names(shipped):
    model, imgs, caps = shipped
    task = mirror_task(model, imgs, caps)
    names = ["vision.L0.H2.EP", "vision.embed", "text.L0.H1"]
    picked = exact_patching(task, names)
    every = exact_patching(task, ["heads", "embed", "terms"])
    assert picked.names == names and torch.allclose(picked.scores, every.subset(names).scores, atol=1e-6)
    assert [s.kind for s in node_specs(task, names)] == ["terms", "embed", "heads"]
    with pytest.raises(ValueError, match="not both"):
        exact_patching(task, ["heads", "vision.embed"])
    with pytest.raises(ValueError, match="not nodes of this target"):
        exact_patching(task, ["vision.L0.H9"])


# ---- the registry ---------------------------------------------------------------------------------------------------
def test_the_registry_names_every_method_and_a_new_one_is_benchmarked(shipped, monkeypatch):
    import hooked_clip1d.reproduce.circuits as xc

    monkeypatch.setattr(xc, "_kinds", lambda model: ["heads"])  # keep it fast: heads only, EAP-IG with 2 steps
    monkeypatch.setattr(xc, "OVERRIDES", {"EAP-IG": {"steps": 2}, "EAP-IG-ports": {"steps": 2}})

    assert list(METHODS) == [
        "exact patching",
        "AtP",
        "AtP+QK",
        "AtP*",
        "path patching",
        "EAP",
        "EAP+QK",
        "EAP+AtP*",
        "EAP-IG",
        "EAP-IG-ports",
        "ACDC",
    ]
    assert not METHODS["AtP*"].signed and METHODS["ACDC"].estimate is False and METHODS["path patching"].exact
    with pytest.raises(ValueError, match="already registered"):
        register_method(Method("AtP", atp, "node"))
    with pytest.raises(TypeError):
        METHODS["x"] = METHODS["AtP"]  # type: ignore[index]
    model, imgs, caps = shipped
    register_method(Method("AtP (no QK, GD)", atp_star, "node", signed=False, kwargs={"qk_fix": False}))
    try:
        results = xc._run_methods(model, imgs[:4], caps[:4], "frozen")
        assert results["AtP (no QK, GD)"].method == "AtP (no QK, GD)" and not results["AtP (no QK, GD)"].signed
        assert list(results) == list(METHODS)
    finally:
        unregister_method("AtP (no QK, GD)")
    assert "AtP (no QK, GD)" not in METHODS


# ---- public seams ---------------------------------------------------------------------------------------------------
ATTRIBUTION_CODE = (
    "circuits/attribution",
    "circuits/node_attribution",
    "circuits/edge_attribution",
    "circuits/path_patching",
    "circuits/scores",
    "circuits/graph",
    "metrics",
    "interventions/term_ablation",
    "circuits/methods",
)


def test_no_private_name_crosses_modules_in_the_attribution_code():
    """Issue 44: the toolkit's building blocks are public; no attribution module imports another's private name."""
    bad = []
    for stem in ATTRIBUTION_CODE:
        tree = ast.parse((ROOT / "hooked_clip1d" / "analysis" / f"{stem}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hooked_clip1d"):
                bad += [f"{stem}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad
    import hooked_clip1d.analysis.circuits.attribution as attribution

    for name in attribution.__all__:  # every building block is documented with an example
        obj = getattr(attribution, name)
        if inspect.isfunction(obj):
            assert obj.__doc__ and ">>>" in obj.__doc__, name


@pytest.mark.parametrize(
    "name",
    ["simplified-ntot20-n2-10", "simplified-ntot20-n2-10-no-qk-bias", "simplified-ntot20-n2-10-standard-loss"],
)
@pytest.mark.heavy
def test_default_linearisation_agrees_with_exact_patching_of_clips_own_logits(name):
    """Issue 49: the metric a user reads stays CLIP's logit difference; the first-order methods' default
    linearisation (``"readout"`` for AtP and EAP: the towers linearised, the cosine evaluated exactly; the cosine
    itself for EAP-IG) is measured against exact patching of that same metric, over the items whose |exact effect|
    is at least 5 % of the largest (the stated floor). ``atp`` and ``eap`` as called by default (the QK fix on since
    2026-11-29) get >= 90 % of their signs right on the two models the default was chosen on and on the
    standard-loss flagship, which did not choose it, and are AtP+QK / EAP+QK of the registry; so does ``eap_ig``
    (each port on its own line since 2026-12-01: 13/13 on ``-no-qk-bias``, where Hanna et al.'s line gets 11/13);
    plain AtP's signs (``qk_fix=False``) beat both linearisations of the cosine; Pearson >= 0.9 for every method."""
    from hooked_clip1d.analysis.circuits.attribution import agreement, moved
    from hooked_clip1d.analysis.circuits.edge_attribution import eap_ig
    from hooked_clip1d.analysis.circuits.scores import ground_truth_inputs

    model = load_model(name)
    imgs, caps = ground_truth_inputs(model, "val_unseen")
    kinds = ["heads", "embed", "pos", "resid", "q", "k", "v", "terms"]
    task = mirror_task(model, imgs, caps)
    exact_n = exact_patching(task, kinds)
    exact_e = METHODS["path patching"](task)

    def above(exact):  # noqa: ANN001, ANN202
        return moved(exact) & (exact.scores.abs() >= 0.05 * float(exact.scores.abs().max()))

    def share(res, exact):  # noqa: ANN001, ANN202
        keep = above(exact)
        got = res.subset(exact.names).scores
        return float((torch.sign(got[keep]) == torch.sign(exact.scores[keep])).float().mean())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AttributionWarning)
        plain = atp(task, kinds, qk_fix=False)
        fixed_n, fixed_e = atp(task, kinds), eap(task)  # the defaults
        others = [atp(mirror_task(model, imgs, caps, linearise=lin), kinds, qk_fix=False) for lin in ("held", "live")]
        checks = [agreement(r, exact_n) for r in (plain, fixed_n)]
        ig = eap_ig(task)  # the default line since 2026-12-01: each port on its own
        checks += [agreement(r, exact_e) for r in (eap(task, qk_fix=False), fixed_e, ig)]
    assert (fixed_n.method, fixed_e.method, ig.method) == ("AtP+QK", "EAP+QK", "EAP-IG-ports")
    assert share(ig, exact_e) >= 0.9, share(ig, exact_e)
    assert torch.equal(fixed_n.scores, METHODS["AtP+QK"](task, kinds, check=0).scores)
    assert all(c["pearson"] >= 0.9 for c in checks), [c["pearson"] for c in checks]
    assert share(fixed_n, exact_n) >= 0.9 and share(fixed_e, exact_e) >= 0.9, (
        share(fixed_n, exact_n),
        share(fixed_e, exact_e),
    )
    assert all(share(plain, exact_n) > share(o, exact_n) for o in others), [share(r, exact_n) for r in (plain, *others)]
    assert "check" in plain.info and "check" in fixed_n.info  # the sign check runs by default


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_readout_on_a_metric_linear_in_the_outputs_is_its_gradient(shipped):
    """A metric declared linear in the outputs (frozen norms, clip_belief_metric) takes the readout's shortcut (the
    plain gradient); the full readout (one backward pass per output coordinate, the head evaluated exactly) gives
    the same scores on the same metric left undeclared, and AtP on heads is exact either way."""
    model, imgs, caps = shipped
    task = mirror_task(model, imgs, caps, norm="frozen", linearise="readout")
    assert task.linear_in_outputs() and not mirror_task(model, imgs, caps).linear_in_outputs()
    inner = task.metric
    undeclared = Task(model, task.clean, task.corrupted, lambda logits: inner(logits), norm="frozen")
    undeclared.linearise = "readout"
    assert not undeclared.linear_in_outputs()
    kinds = ["heads", "v", "terms"]
    fast, full = atp(task, kinds, check=0), atp(undeclared, kinds, check=0)
    assert torch.allclose(fast.scores, full.scores, atol=1e-4, rtol=1e-4)
    heads = exact_patching(task)
    assert _rel_err(atp(task, check=0), heads) < 1e-4 and _rel_err(atp(undeclared, check=0), heads) < 1e-4
    # EAP-IG integrates each tower on its own: the shortcut's gradients (a metric's, not a tower's) must split too
    from hooked_clip1d.analysis.circuits.edge_attribution import eap_ig

    fast_ig, full_ig = eap_ig(task, steps=2, check=0), eap_ig(undeclared, steps=2, check=0)
    assert torch.allclose(fast_ig.scores, full_ig.scores, atol=1e-4, rtol=1e-4)
