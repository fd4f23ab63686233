"""A figure's models substituted, and its null control: the same checks on untrained models.

``substitute(zoo_name, spec)`` gives the model that replaces a figure's zoo model: a training run directory, a model
file (a snapshot too), another zoo name, a ``CLIP1D``, or ``untrained:SEED[:INIT_STD]`` (the zoo model's own config,
freshly initialised with that seed and embedding init std). A substitute must have the zoo model's configuration
(every shape and the dataset; the init, dropout and seeds may differ) or it is refused naming the field. It carries
what the figures read from a zoo model: ``data_config`` and a ``manifest`` (``metrics`` on its dataset, ``history``
from its run's ``metrics.jsonl`` where there is one, ``epochs``).

``null_control(spec)`` runs a figure's checks on untrained models of its configs (init seeds ``NULL_SEEDS``, ten
distinct draws, at the models' own embedding init) by the same code path, and ``counted_checks`` applies the
pre-registered rule (docs/fidelity.md): a check counts toward a verdict only if it fails on every untrained model, or,
where the figure states the check's value (``Outcome.values``), if the trained value lies beyond the most extreme
untrained value in the direction the paper claims. An *absence* check (``Outcome.absence``: the claim is that training
does not produce something) that an untrained model passes counts only where the trained model fails it.

Example:
    >>> m = substitute("simplified-ntot20-n2-10", "untrained:3")
    >>> m.cfg.vision.init_seed, m.manifest["epochs"], m.manifest["name"]
    (3, 0, 'untrained:3:0.02')
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.model.config import EncoderConfig
from hooked_clip1d.reproduce.core import FigureSpec, Outcome
from hooked_clip1d.reproduce.records import Check
from hooked_clip1d.settings import field_names

UNTRAINED = "untrained"
# ten distinct draws (issue 42): init seeds 0-9 at the figure's model's own embedding init. (Until 2026-11-26 the
# null was seeds 0-4 x N(0, 0.02) and N(0, 1): one draw at two scales, which every scale-invariant check reads
# as the same model, so "10 untrained models" were 5.)
NULL_SEEDS = tuple(range(10))
NULL_ATTEMPTS = 2 * len(NULL_SEEDS)  # init seeds tried at most: a draw that raises is re-drawn with the next
# model-config fields a substitute may change (how it was initialised or trained), everything else must be equal
_FREE_FIELDS = set(field_names(EncoderConfig, free=True))  # declared with settings.knob(..., free=True)


def _model_differences(a: CLIPConfig, b: CLIPConfig) -> list[str]:
    da, db = a.to_dict(), b.to_dict()
    out = []
    for key in sorted(set(da) | set(db)):
        if key in ("vision", "text"):
            for f in sorted(set(da[key]) | set(db[key])):
                if f not in _FREE_FIELDS and da[key].get(f) != db[key].get(f):
                    out.append(f"model {key}.{f}: {db[key].get(f)!r} (the figure's model has {da[key].get(f)!r})")
        elif da.get(key) != db.get(key) and key not in ("init_logit_scale",):
            out.append(f"model {key}: {db.get(key)!r} (the figure's model has {da.get(key)!r})")
    return out


def _untrained(zoo_model: CLIP1D, text: str) -> CLIP1D:
    parts = text.split(":")
    try:
        seed = int(parts[1])
        std = float(parts[2]) if len(parts) > 2 else zoo_model.cfg.vision.init_std
        if len(parts) > 3 or seed < 0 or not (std > 0 and math.isfinite(std)):
            raise ValueError
    except (ValueError, IndexError):
        raise ValueError(
            f"{text!r}: an untrained substitute is 'untrained:SEED' or 'untrained:SEED:INIT_STD' (SEED >= 0, "
            "INIT_STD a finite number > 0), e.g. 'untrained:3' or 'untrained:3:1.0'"
        ) from None
    return untrained_like(zoo_model, seed, init_std=std, manifest={"name": f"{UNTRAINED}:{seed}:{std:g}", "epochs": 0})


def untrained_like(
    model: CLIP1D, seed: int, *, init_std: float | None = None, manifest: Mapping[str, Any] | None = None
) -> CLIP1D:
    """An untrained draw (init ``seed``) of ``model``'s architecture, in eval mode, with its data config and (unless
    ``manifest`` is given) a copy of its manifest; ``init_std`` replaces both towers' init scale. The one builder of
    the null control's substitutes (``untrained:SEED[:INIT_STD]``) and of the invariance audit's blind draws.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> u = untrained_like(m, 3, init_std=1.0, manifest={"epochs": 0})
        >>> u.cfg.vision.init_std, u.manifest, u.training
        (1.0, {'epochs': 0}, False)
    """
    cfg = model.cfg
    if init_std is not None:
        cfg = dataclasses.replace(
            cfg, vision=cfg.vision.replace(init_std=init_std), text=cfg.text.replace(init_std=init_std)
        )
    copy = CLIP1D(cfg, seed=seed).eval()
    copy.data_config = getattr(model, "data_config", None)
    copy.manifest = dict(manifest if manifest is not None else (getattr(model, "manifest", {}) or {}))
    return copy


def _history_of(path: Path, epoch: int | None) -> dict[str, list[Any]] | None:
    """The training curve of the run a model file belongs to (its folder, or the run above ``snapshots/``)."""
    from hooked_clip1d.pretrained import read_history

    run = path.parent.parent if path.parent.name == "snapshots" else path.parent
    metrics = run / "metrics.jsonl"
    return read_history(metrics, max_epoch=epoch) if metrics.exists() else None


def substitute(zoo_name: str, spec: str | Path | CLIP1D) -> CLIP1D:
    """The model that replaces zoo model ``zoo_name`` in a figure (module docstring), in eval mode."""
    from hooked_clip1d.model.checkpoint import load_model_file
    from hooked_clip1d.pretrained import list_pretrained, load_model, resolve_model

    if zoo_name not in list_pretrained():
        raise ValueError(f"{zoo_name!r} is not a zoo model; known: {list_pretrained()}")
    zoo = load_model(zoo_name)
    if isinstance(spec, str) and spec.startswith(f"{UNTRAINED}:"):
        model, path, name = _untrained(zoo, spec), None, spec
    else:
        if isinstance(spec, CLIP1D):  # a copy: the caller's model keeps its mode and attributes
            model, path = copy.deepcopy(spec), None
        else:
            p = Path(spec)
            if p.is_dir() and not (p / "model.safetensors").exists() and not (p / "checkpoint.safetensors").exists():
                raise ValueError(f"{str(p)!r} is a folder without model.safetensors or checkpoint.safetensors")
            if not p.exists() and str(spec) not in list_pretrained():
                raise ValueError(
                    f"{str(spec)!r} is not a run folder, a model file, a zoo model or 'untrained:SEED[:INIT_STD]'; "
                    f"zoo models: {list_pretrained()}"
                )
            path = (p / "model.safetensors" if (p / "model.safetensors").exists() else p) if p.is_dir() else p
            model = resolve_model(spec) if str(spec) in list_pretrained() else load_model_file(path)
        if getattr(model, "data_config", None) is None:
            raise ValueError(f"substitute {spec!r} has no data_config (load it from a training run or a model file)")
        diffs = _model_differences(zoo.cfg, model.cfg)
        data_a, data_b = zoo.data_config.to_dict(), model.data_config.to_dict()
        diffs += [
            f"data {k}: {data_b[k]!r} (the figure's model has {data_a[k]!r})"
            for k in data_a
            if k not in ("seed", "caption_order") and data_a[k] != data_b.get(k)
        ]
        if diffs:
            raise ValueError(f"{spec!r} cannot stand in for {zoo_name!r}: " + "; ".join(diffs))
        name = "a CLIP1D given in Python" if isinstance(spec, CLIP1D) else str(path)
    return with_metrics(with_manifest(model, path, name))


def with_manifest(model: CLIP1D, path: Path | None, name: str) -> CLIP1D:
    """``model`` in eval mode with a manifest: its own, or one made from its file and run folder (``name``, the
    epoch it was saved at and the run's training history, from ``metrics.jsonl`` where there is one). A sweep's run
    loaded with ``load_model_file`` has none; a figure reading a history needs one (a trained control's other seeds).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = with_manifest(CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6), seed=0), None, "mine")
        >>> m.manifest, m.training
        ({'name': 'mine', 'epochs': None, 'history': None}, False)
    """
    model = model.eval()
    if getattr(model, "manifest", None) is None:
        epoch = getattr(model, "epoch", None)
        if path is not None and epoch is None:
            from hooked_clip1d.model.checkpoint import read_tensors

            meta = read_tensors(path)[1] if path.suffix == ".safetensors" else {}
            epoch = meta.get("epoch", meta.get("train_state", {}).get("epoch"))
        history = _history_of(path, epoch) if path is not None else None
        epochs = epoch if epoch is not None else (history["epoch"][-1] if history and history["epoch"] else None)
        model.manifest = {"name": name, "epochs": epochs, "history": history}
        planned = _planned_epochs(path) if path is not None else None
        if planned is not None:  # a snapshot, or a run stopped early, is read as the partial run it is
            model.manifest["epochs_planned"] = planned
    return model


def _planned_epochs(path: Path) -> int | None:
    """The epochs the run that wrote model file ``path`` planned (its ``config.json``), or None."""
    run = path.parent.parent if path.parent.name == "snapshots" else path.parent
    try:
        return int(json.loads((run / "config.json").read_text())["train_config"]["epochs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def with_metrics(model: CLIP1D) -> CLIP1D:
    """``model`` with its metrics measured now (a new manifest dict: a given one is not written to) and, where it
    has no training history, a one-row history of them.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4), seed=0)
        >>> m.data_config = DataConfig(n_labels=6, n_heldout=2, n2=2)
        >>> m = with_metrics(with_manifest(m, None, "mine"))
        >>> sorted(m.manifest["history"]), m.manifest["history"]["epoch"]
        (['epoch', 'loss', 'seen', 'single', 'step', 'unseen', 'unseen_label_set'], [0])
    """
    ds = build_dataset(model.data_config)
    model.manifest = {**model.manifest, "metrics": evaluate(model, ds)}
    if not model.manifest.get("history"):
        m = model.manifest["metrics"]
        model.manifest["history"] = {
            "epoch": [model.manifest.get("epochs") or 0],
            "step": [0],
            "loss": [None],
            "single": [m["val_single"]["acc"]],
            "seen": [m["val_seen"]["acc"]],
            "unseen": [m["val_unseen"]["acc"]],
            "unseen_label_set": [m["val_unseen"]["label_set"]],
        }
    return model


def substitutes(spec: FigureSpec, given: Mapping[str, str | CLIP1D] | str | CLIP1D) -> dict[str, CLIP1D]:
    """Every model of figure ``spec``: the ``given`` substitutes (zoo name -> spec; a lone spec stands in for a
    figure with one model, or for every model when it is ``untrained:...``) and the zoo's for the rest."""
    from hooked_clip1d.pretrained import load_model

    if spec.sweep is not None or not spec.models:
        raise ValueError(f"{spec.key} reads a sweep's runs, not zoo models: it has no model to substitute")
    if not isinstance(given, Mapping):
        if len(spec.models) > 1 and not (isinstance(given, str) and given.startswith(f"{UNTRAINED}:")):
            raise ValueError(
                f"{spec.key} uses {len(spec.models)} models {list(spec.models)}: name the one to substitute "
                "(--model NAME=SPEC)"
            )
        given = dict.fromkeys(spec.models, given)
    unknown = sorted(set(given) - set(spec.models))
    if unknown:
        raise ValueError(f"{spec.key} does not use {unknown}; its models: {list(spec.models)}")
    return {m: substitute(m, given[m]) if m in given else load_model(m) for m in spec.models}


def run_closed(run: Callable[[Any], Outcome], arg: Any) -> Outcome:
    """``run(arg)`` (a figure function) with its matplotlib figures closed and dropped: for the controls, which read
    the checks and numbers only.

    Example:
        >>> run_closed(lambda x: Outcome({"x": x}, "", [("x > 0", x > 0)], {}), 3).checks
        [('x > 0', True)]
    """
    out = run(arg).validate()  # a check without a truth value: an error (a null draw's: a failed control run)
    for fig in out.figures.values():
        plt.close(fig)
    out.figures = {}
    return out


def null_rows(spec_path: Path, seed: int, init_std: float | None, workdir: Path) -> list[dict[str, Any]]:
    """A sweep's ``results_table`` rows as its runs would give untrained: each run's model at init (``seed``,
    ``init_std``; None: the run's own) evaluated on its dataset, saved as ``<workdir>/<run>/model.safetensors``
    (rows' ``path``)."""
    from hooked_clip1d.data.dataset import SPLITS
    from hooked_clip1d.model.checkpoint import save_model
    from hooked_clip1d.sweeps.runner import load_spec

    rows = []
    for r in load_spec(spec_path).runs:
        std = {} if init_std is None else {"init_std": init_std}
        cfg = dataclasses.replace(
            r.model_cfg, vision=r.model_cfg.vision.replace(**std), text=r.model_cfg.text.replace(**std)
        )
        model = CLIP1D(cfg, seed=seed).eval()
        model.data_config = r.data_cfg
        metrics = evaluate(model, build_dataset(r.data_cfg))
        d = workdir / r.name
        d.mkdir(parents=True, exist_ok=True)
        save_model(model, d / "model.safetensors", r.data_cfg, extra={"train_config": r.train_cfg.to_dict()})
        save_model(model, d / "snapshots" / "epoch_00000.safetensors", r.data_cfg, extra={"epoch": 0})
        configs = {
            "model_config": cfg.to_dict(),
            "data_config": r.data_cfg.to_dict(),
            "train_config": r.train_cfg.to_dict(),
        }
        (d / "config.json").write_text(json.dumps(configs))
        (d / "metrics.jsonl").write_text(json.dumps({"epoch": 0, "step": 0, "loss": None, "eval": metrics}) + "\n")
        (d / "summary.json").write_text(json.dumps({"epochs": 0, "steps": 0, "final_metrics": metrics}))
        row: dict[str, Any] = {
            "run": r.name,
            **r.params,
            "n_labels": r.model_cfg.n_labels,
            "n2": r.data_cfg.n2,
            "seed": r.train_cfg.seed,
            "epochs": 0,
            "steps": 0,
            "train_seconds": 0.0,
            "final_loss": None,
            "path": str(d),
        }
        for split in SPLITS:
            for metric in ("acc", "relaxed", "label_set"):
                row[f"{split}.{metric}"] = metrics.get(split, {}).get(metric)
        rows.append(row)
    return rows


def judge_on_fresh_runs(ordered: Sequence[bool], shuffled: Sequence[bool], untrained: Sequence[bool]) -> str:
    """The verdict of a check restated after its controls were read (Fig. 4c', 5d'; docs/fidelity.md, 2026-11-29),
    judged only on runs no one read: its outcome on the 3 fresh runs on ordered captions, the 3 fresh order-blind
    runs (shuffled captions) and the 10 untrained draws. Reproduced if >= 2 ordered runs hold and every shuffled
    run and draw fails; inconclusive if >= 2 ordered runs hold and a shuffled run or a draw passes; not reproduced
    if < 2 ordered runs hold. Fewer runs than that is an error (a missing run is never a pass or a fail).

    Example:
        >>> judge_on_fresh_runs([True, True, False], [False] * 3, [False] * 10)
        'reproduced'
        >>> judge_on_fresh_runs([True, True, True], [False, True, False], [False] * 10)
        'inconclusive'
        >>> judge_on_fresh_runs([True, False, False], [False] * 3, [False] * 10)
        'not reproduced'
        >>> judge_on_fresh_runs([True, True], [False] * 3, [False] * 10)
        Traceback (most recent call last):
        ValueError: judged on 3 ordered, 3 shuffled and 10 untrained runs; got 2, 3 and 10
    """
    if (len(ordered), len(shuffled), len(untrained)) != (3, 3, len(NULL_SEEDS)):
        raise ValueError(
            f"judged on 3 ordered, 3 shuffled and {len(NULL_SEEDS)} untrained runs; "
            f"got {len(ordered)}, {len(shuffled)} and {len(untrained)}"
        )
    if sum(bool(x) for x in ordered) < 2:
        return "not reproduced"
    return "inconclusive" if any(shuffled) or any(untrained) else "reproduced"


def null_control(spec: FigureSpec, sweeps_dir: Path | None = None) -> dict[str, Any]:
    """The figure's checks on untrained models (``len(NULL_SEEDS)`` distinct init draws at the models' own init): per
    check, how many pass and the values the figure states for it (``Outcome.values``); the models' names. A draw
    whose run raises is a failed control run: reported in ``failed`` (model and error) and re-drawn with the next
    init seed, at most ``NULL_ATTEMPTS`` seeds in all; it never stands for a pass or a fail. ``complete`` is False
    when fewer than ``len(NULL_SEEDS)`` draws ran (``counted_checks`` then counts no check). Also the figure's
    ``absence`` checks and ``secondary`` ones (``Outcome``), as its code marks them."""
    import hooked_clip1d.reproduce.core as core

    variants: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    marks: dict[str, Any] = {"absence": [], "secondary": {}}  # how the figure's code marks its checks
    for seed in range(NULL_ATTEMPTS):
        if len(variants) == len(NULL_SEEDS):
            break
        name = f"{UNTRAINED}:{seed}"
        try:
            if spec.sweep is not None:
                with tempfile.TemporaryDirectory() as tmp:
                    rows = null_rows(core.SWEEPS_DIR / f"{spec.sweep}.toml", seed, None, Path(tmp))
                    out = run_closed(spec.run, rows)  # type: ignore[arg-type]
            else:
                out = run_closed(spec.run, substitutes(spec, name))
        except Exception as e:  # noqa: BLE001 - a failed control run: reported and re-drawn
            failed.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            continue
        bad = {k: v[0] for k, v in out.values.items() if not math.isfinite(v[0])}
        if bad:  # a stated value that is not a number: a failed control run too (never a fail that lets ours count)
            failed.append({"model": name, "error": f"ValueError: stated values not finite: {bad}"})
            continue
        marks = {"absence": list(out.absence), "secondary": dict(out.secondary)}
        variants.append(
            {
                "model": name,
                "checks": dict(out.checks),
                "values": {k: float(v[0]) for k, v in out.values.items()},
                "ids": {c: out.id_of(c) for c, _ in out.checks},  # each check's stable id (records key by it)
            }
        )
    return {"variants": variants, "failed": failed, "complete": len(variants) == len(NULL_SEEDS), **marks}


def audit_invariance(spec: FigureSpec, models: Mapping[str, CLIP1D], outcome: Outcome) -> dict[str, Any]:
    """Issue 42's invariance audit: the figure rerun with its models reparametrised by each output-preserving move
    of ``analysis.mechanism.reparametrize`` (every model whose tower admits it and whose outputs it preserves; the
    others as they are). Returns ``{"applied": [names], "moved": {check: [reparametrisations under which its outcome
    or stated value moved]}, "skipped": {name: [why, per model]}, "not_auditable": [checks]}``; a check that moves
    reads a choice of coordinates, not the function the model computes, and does not count. ``not_auditable`` lists
    the checks the audit cannot see (``_blind_checks``: unchanged when the weights are replaced by untrained ones,
    e.g. a check on the zoo's stored metrics or trajectory): they are shown as such, never as invariant.

    A move is applied to a model only after it is shown to preserve that model's outputs (``logit_change`` below
    ``PRESERVING_TOL`` on a fixed probe batch): a model whose forward ablates a score term computes another function
    after some moves, and such a move is skipped for it, with a line in ``skipped``. A check that the rerun no longer
    reports, or whose stated value vanishes or is not finite, counts as moved (never as invariant). ``applied`` is
    empty where no model admits the moves: the audit then says nothing, and ``skipped`` says why for each move (a
    tower that does not admit it, e.g. RoPE or two layers). Where the figure cannot run on untrained weights,
    ``blind_unknown`` holds the error and ``not_auditable`` is empty: which checks the audit cannot see is unknown.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, init_std=1.0), seed=0).eval()
        >>> def run(models):  # one check reads the function, one a coordinate (W_E[CLS]'s norm)
        ...     v = models["m"].vision
        ...     out = v(v.to_tokens("C 1 . 2 . . . . . . ."))
        ...     return Outcome({}, "", [("output", bool(out.norm() > 0)), ("W_E[CLS] > 1", bool(
        ...         v.W_E[v.cfg.vocab.cls].norm() > 1))], {}, values={"output": (out.norm().item(), ">")})
        >>> spec = FigureSpec("t", "t", "t", ("m",), run)
        >>> audit = audit_invariance(spec, {"m": m}, run({"m": m}))
        >>> len(audit["applied"]), audit["moved"], audit["skipped"], audit["not_auditable"]
        (5, {'W_E[CLS] > 1': ['cls into W_pos']}, {}, [])
    """
    from hooked_clip1d.analysis.mechanism.reparametrize import PRESERVING_TOL, REPARAMETRISATIONS, logit_change

    for key, model in models.items():
        if not isinstance(model, CLIP1D):
            raise TypeError(f"audit_invariance: models[{key!r}] is a {type(model).__name__}, expected a CLIP1D")
    moved: dict[str, list[str]] = {}
    skipped: dict[str, list[str]] = {}
    applied = []
    ref = dict(outcome.checks)
    for name, move in REPARAMETRISATIONS.items():
        copies, any_moved = {}, False
        for key, model in models.items():
            try:
                copy = move(model).eval()
            except ValueError as e:  # this tower does not admit the move: unchanged, and said so
                skipped.setdefault(name, []).append(f"{key}: not admitted ({e})")
                copies[key] = model
                continue
            change = logit_change(model, copy)
            if not change <= PRESERVING_TOL:  # NaN too: not shown to preserve the outputs
                skipped.setdefault(name, []).append(f"{key}: logits move by {change:.3g} of the largest")
                copies[key] = model
                continue
            copies[key] = copy
            any_moved = True
        if not any_moved:
            continue
        applied.append(name)
        out = run_closed(spec.run, copies)
        got = dict(out.checks)
        for check in [*ref, *(c for c in got if c not in ref)]:
            if check not in got or check not in ref:  # vanished from the rerun, or new in it: not shown invariant
                moved.setdefault(check, []).append(name)
                continue
            value, ref_value = out.values.get(check), outcome.values.get(check)
            drift = (value is None) != (ref_value is None) or (
                value is not None
                and ref_value is not None
                and not abs(value[0] - ref_value[0]) <= 1e-3 * (1 + abs(ref_value[0]))  # NaN drifts
            )
            if bool(got[check]) != bool(ref[check]) or drift:
                moved.setdefault(check, []).append(name)
    return {"applied": applied, "moved": moved, "skipped": skipped, **_blindness(spec, models, outcome, moved)}


def _blindness(spec: FigureSpec, models: Mapping[str, CLIP1D], outcome: Outcome, moved: Mapping) -> dict[str, Any]:
    """``audit_invariance``'s ``not_auditable`` (``_blind_checks``, less the checks a move was seen to change), or,
    where the figure cannot run on untrained weights, ``not_auditable: []`` and ``blind_unknown`` (the error)."""
    try:
        blind = _blind_checks(spec, models, outcome)
    except Exception as e:  # noqa: BLE001 - the figure cannot run on other weights: which checks are blind is unknown
        return {"not_auditable": [], "blind_unknown": f"{type(e).__name__}: {e}"}
    return {"not_auditable": [c for c in blind if c not in moved]}  # a move the audit saw: auditable


#: the init seeds of the weights ``_blind_checks`` swaps in (any models other than the trained one will do; two, so
#: that a check on the weights rarely keeps its outcome by chance)
BLIND_SEEDS = (9_998, 9_999)


def _blind_checks(spec: FigureSpec, models: Mapping[str, CLIP1D], outcome: Outcome) -> list[str]:
    """The checks of ``outcome`` the invariance audit cannot see: rerun with every model's weights replaced by an
    untrained draw (its config, each of ``BLIND_SEEDS``; manifest and data kept), a check whose outcome and stated
    value are unchanged under both draws does not read the weights it is given (e.g. it reads the zoo's stored
    metrics or trajectory), so a reparametrised copy cannot move it and "invariant" says nothing about it. A check
    without a stated value that holds on any weights is listed too: the audit cannot see it move either. A rerun that
    errors raises: which checks are blind is then unknown (``audit_invariance`` records ``blind_unknown``), never
    taken as "none".

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> m.manifest = {"metrics": {"acc": 0.97}}
        >>> def run(models):  # a stored number and a weight
        ...     mm = models["m"]
        ...     w = mm.vision.W_E[0, 0].item()
        ...     return Outcome({}, "", [("stored", mm.manifest["metrics"]["acc"] > 0.9), ("weight", w > 0)], {},
        ...                    values={"weight": (w, ">")})
        >>> _blind_checks(FigureSpec("t", "t", "t", ("m",), run), {"m": m}, run({"m": m}))
        ['stored']
    """
    got = []
    for seed in BLIND_SEEDS:  # a figure that cannot run on other weights raises (the audit says so)
        blind = {key: untrained_like(model, seed) for key, model in models.items()}
        got.append(run_closed(spec.run, blind))
    same = []
    for check, ok in outcome.checks:
        ref_value = outcome.values.get(check)
        if all(
            bool(dict(out.checks).get(check, not ok)) == bool(ok)
            and (out.values.get(check) is None) == (ref_value is None)
            and (ref_value is None or out.values[check][0] == ref_value[0])
            for out in got
        ):
            same.append(check)
    return same


def counted_checks(outcome: Outcome, null: dict[str, Any], audit: dict[str, Any] | None = None) -> list[Check]:
    """Each check of ``outcome`` as a ``records.Check`` with its null control: ``null_passes`` (of ``null_n``
    untrained models), ``counted`` by the pre-registered rule (module docstring), and the null's extreme value where
    one is stated. With an ``audit`` (``audit_invariance``), a check whose outcome moves under an output-preserving
    reparametrisation does not count (``coordinate_dependent``: the moves that changed it).

    Example:
        >>> out = Outcome({}, "", [("a", True), ("b", True), ("c", True)], {}, values={"c": (0.9, ">")})
        >>> null = {"variants": [{"model": "u", "checks": {"a": False, "b": True, "c": True}, "values": {"c": 0.6}}]}
        >>> [(c.text, c.counted, c.counted_holds) for c in counted_checks(out, null)]
        [('a', True, True), ('b', False, None), ('c', True, True)]
        >>> out = Outcome({}, "", [("low", True), ("low too", False)], {}, absence=("low", "low too"))
        >>> null = {"variants": [{"model": "u", "checks": {"low": True, "low too": True}, "values": {}}]}
        >>> [(c.text, c.counted, c.counted_holds) for c in counted_checks(out, null)]
        [('low', False, None), ('low too', True, False)]
    """
    ran = [v for v in null.get("variants", []) if "error" not in v]  # records made before re-drawing kept errors
    variants = ran
    complete = bool(ran) and len(ran) == len(null.get("variants", [])) and null.get("complete", True)
    rows = []
    outcome.validate()  # a trained check without a truth value: an error
    for name, ok in outcome.checks:
        lacking = [v.get("model", "?") for v in variants if name not in v["checks"]]
        if lacking:  # a check that vanished on an untrained draw: an error, never a fail that lets it count
            raise ValueError(f"the null control's draws {lacking} do not report the check {name!r}")
        unread = [
            v.get("model", "?") for v in variants if v["checks"][name] is None or v["checks"][name] != v["checks"][name]
        ]
        if unread:  # a draw that could not read the check: an error, never a fail that lets ours count
            raise ValueError(f"the null control's draws {unread} have no truth value for the check {name!r}")
        if name in outcome.values:  # a NaN has no order: an error, never a pass or a fail
            stated = [outcome.values[name][0], *(v["values"][name] for v in variants if name in v.get("values", {}))]
            if not all(math.isfinite(x) for x in stated):
                raise ValueError(
                    f"check {name!r}: a stated value is not a finite number (ours, then the null: {stated})"
                )
        if name in outcome.permutation and not 0 <= outcome.permutation[name] <= 1:  # NaN too
            raise ValueError(f"check {name!r}: its permutation p-value is {outcome.permutation[name]!r}, not in [0, 1]")
        passes = sum(1 for v in variants if v["checks"][name])
        row = Check(id=outcome.id_of(name), text=name, holds=bool(ok), null_passes=passes, null_n=len(variants))
        counted, holds = passes == 0 and complete, bool(ok)
        if not complete:  # a null control that did not run in full shows nothing either way
            row.null_incomplete = f"{len(ran)} untrained draws ran of {len(NULL_SEEDS)} needed"
        elif name in outcome.absence and passes:  # an upper bound untrained models meet: only a trained fail says much
            row.absence = True
            counted, holds = not ok, False
        elif name in outcome.values and passes:
            value, direction = outcome.values[name]
            nulls = [v["values"][name] for v in variants if name in v.get("values", {})]
            if len(nulls) == len(variants):  # restated: beyond the most extreme untrained value
                extreme = max(nulls) if direction == ">" else min(nulls)
                beyond = value > extreme if direction == ">" else value < extreme
                row.value, row.direction, row.null_extreme, row.beyond_null = value, direction, extreme, beyond
                counted, holds = True, bool(ok) and beyond
        if name in outcome.permutation:  # its own null: a permutation over the trained runs (sweep figures)
            row.permutation_p = outcome.permutation[name]
            counted, holds = True, bool(ok)
        if name in outcome.secondary:
            counted = False
            row.secondary = outcome.secondary[name]
        if audit is not None and name in audit["moved"]:  # a choice of coordinates, not the model's function
            counted = False
            row.coordinate_dependent = list(audit["moved"][name])
        elif audit is not None and name in audit.get("not_auditable", ()):  # the audit cannot see it (counts as is)
            row.not_auditable = True
        row.counted = counted
        row.counted_holds = holds if counted else None
        rows.append(row)
    return rows
