"""The ``train`` command's arguments and how they become the three configs (``CLIPConfig``, ``DataConfig``,
``TrainConfig``), with ``--recipe``, ``--init-from`` and ``--resume`` (which reads the run's own ``config.json``).

Like ``cli``, it imports torch only when a command runs: the defaults it shows come from ``settings``, which is
torch-free, so ``train --help`` answers at once.

Example:
    >>> import argparse
    >>> sub = argparse.ArgumentParser().add_subparsers()
    >>> t = add_train_parser(sub)
    >>> a = t.parse_args(["--out", "run", "--n-labels", "6", "--n2", "2", "--n-heldout", "2", "--epochs", "3"])
    >>> cfg, data_cfg, tc, init = train_configs(a)
    >>> cfg.n_labels, data_cfg.n2, tc.epochs, init is None
    (6, 2, 3, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d.settings import DEFAULT_RECIPE, RECIPES, DataConfig, Recipe, TrainConfig

if TYPE_CHECKING:
    from hooked_clip1d.model.clip import CLIP1D, CLIPConfig


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless it is None or its help already says it (no "(default: None)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or "default" in text or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def add_train_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand to ``sub`` (an ``add_subparsers()`` object), its defaults read from the configs."""
    t = sub.add_parser(
        "train",
        help="train one model with the paper's hyperparameters",
        formatter_class=_DefaultsFormatter,
    )
    _add_model_args(t)
    _add_data_args(t)
    tc = TrainConfig()
    g = t.add_argument_group("training")
    g.add_argument("--out", required=True, help="run directory (metrics.jsonl, checkpoints, model.safetensors)")
    g.add_argument("--epochs", type=int, default=tc.epochs, help="paper: 10000")
    g.add_argument("--lr", type=float, default=tc.lr, help="paper: 1e-4")
    g.add_argument("--batch-size", type=int, default=None, help="paper and default: 50 (left) / 100 (left_right)")
    g.add_argument("--seed", type=int, default=tc.seed, help="seeds the weights, data order and dropout")
    g.add_argument(
        "--recipe",
        default=None,
        choices=sorted(RECIPES),
        help="a named training recipe (settings.RECIPES: which parameters are decayed or frozen, the embedding init, "
        f"dropout placement, optimiser and schedule); default: {DEFAULT_RECIPE}; the flags below override it",
    )
    _add_recipe_args(g)
    g.add_argument("--eval-every", type=int, default=tc.eval_every, help="epochs between metric lines")
    g.add_argument("--checkpoint-every", type=int, default=tc.checkpoint_every, help="epochs between checkpoints")
    g.add_argument("--device", default="cpu", help="e.g. cuda")
    g.add_argument("--threads", type=int, default=None, help="torch threads")
    g.add_argument("--resume", action="store_true", help="continue the run in --out")
    g.add_argument(
        "--engine",
        default="standard",
        choices=["standard", "batched"],
        help="standard: the hooked model (Trainer); batched: the stacked fast engine (same trajectory, 3-6x faster)",
    )
    g.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the batched engine's step (dropout then draws from one group stream; "
        "pass it again with --resume)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print JSON")
    return t


def train_configs(a: argparse.Namespace) -> tuple[CLIPConfig, DataConfig, TrainConfig, CLIP1D | None]:
    """``(model config, data config, train config, starting model or None)`` for a parsed ``train`` command: from
    the flags, or on ``--resume`` from the run's own ``config.json`` (flags given must agree with it)."""
    if getattr(a, "compile", False) and getattr(a, "engine", "standard") != "batched":  # it was ignored
        raise ValueError("--compile compiles the batched engine's step: it needs --engine batched")
    if a.resume and (Path(a.out) / "config.json").exists():
        if a.init_from:
            raise ValueError("--init-from starts a new run; it cannot be combined with --resume")
        cfg, data_cfg, tc = _resume_configs(a)
        return cfg, data_cfg, tc, None
    return _new_configs(a)


def _new_configs(a: argparse.Namespace) -> tuple[CLIPConfig, DataConfig, TrainConfig, CLIP1D | None]:
    """The configs the flags give a new run (the recipe, then the flags given)."""
    fields = recipe_of(a).fields()
    tc = TrainConfig(
        lr=a.lr,
        epochs=a.epochs,
        batch_size=a.batch_size,
        seed=a.seed,
        eval_every=a.eval_every,
        checkpoint_every=a.checkpoint_every,
        device=a.device,
        threads=a.threads,
        **fields["train"],
    )
    init = _init_model(a)
    if init is not None and a.recipe is not None:  # the loaded model keeps its own dropout; a recipe's would be lost
        lost = [
            f"{f}={v!r} (the model's {t}: {getattr(getattr(init.cfg, t), f)!r})"
            for f, v in fields["model"].items()
            if f != "init_std"  # an init is not drawn for given weights
            for t in ("vision", "text")
            if getattr(getattr(init.cfg, t), f) != v
        ]
        if lost:
            raise ValueError(
                f"--init-from keeps the loaded model's architecture, but --recipe {a.recipe} sets "
                + ", ".join(lost)
                + ": pick a recipe that matches the model, or train a new model with this recipe"
            )
    cfg = _model_cfg(a, fields["model"]) if init is None else init.cfg
    return cfg, _data_cfg(a), tc, init


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--preset", default="simplified", help="preset of both towers: simplified | full")
    g.add_argument("--vision-preset", default=None, help="preset of the vision tower (default: --preset)")
    g.add_argument("--text-preset", default=None, help="preset of the text tower (default: --preset)")
    g.add_argument("--vision-layers", type=int, default=None, help="vision tower n_layers (default: the preset's)")
    g.add_argument("--text-layers", type=int, default=None, help="text tower n_layers (default: the preset's)")
    g.add_argument("--vision-heads", type=int, default=None, help="vision tower n_heads (default: the preset's)")
    g.add_argument(
        "--positional", default=None, choices=["learned", "rope", "none"], help="vision positions (default: learned)"
    )
    g.add_argument(
        "--text-positional", default=None, choices=["learned", "rope", "none"], help="text positions (default: learned)"
    )
    g.add_argument(
        "--prune-vision-heads",
        default=None,
        metavar="L:H,...",
        help="vision heads to prune (zeroed output), e.g. 0:1,0:3 keeps heads 0 and 2 of layer 0 (App. K)",
    )
    g.add_argument(
        "--ablate-vision-terms",
        default=None,
        metavar="T,...",
        help="layer-0 vision attention terms removed in every forward pass, training included, e.g. EP "
        "(training-time ablation, beyond the paper; standard engine only)",
    )
    g.add_argument("--dropout", type=float, default=None, help="dropout p (paper: 0.1; default: the preset's, 0.1)")
    g.add_argument(
        "--objective",
        default="contrastive",
        choices=["contrastive", "captioning"],
        help="what the text tower is trained to do: CLIP's contrastive loss (the paper) or, beyond the paper, "
        "autoregressive captioning of the image (model.captioning; standard engine only)",
    )
    g.add_argument(
        "--init-from",
        default=None,
        metavar="MODEL",
        help="start from these weights (pretrained name, model .safetensors or run dir) instead of a fresh init; "
        "the architecture is the loaded model's; with --prune-vision-heads: App. K's prune-and-retrain",
    )


def _add_data_args(p: argparse.ArgumentParser) -> None:
    d = DataConfig()
    g = p.add_argument_group("data")
    g.add_argument("--n-labels", type=int, default=d.n_labels, help="Ntot (paper Fig. 4: 20)")
    g.add_argument("--n-heldout", type=int, default=d.n_heldout, help="Nval held-out labels (paper: 5)")
    g.add_argument("--n1", type=int, default=d.n1, help="single-object images per label (paper: 5)")
    g.add_argument("--n2", type=int, default=d.n2, help="images per ordered training pair (paper Fig. 4: 10)")
    g.add_argument("--n-val", type=int, default=d.n_val, help="validation images per label / pair (paper: 5)")
    g.add_argument(
        "--caption-mode",
        default=d.caption_mode,
        choices=["left", "left_right"],
        help="captions 'X is on the left of Y' only, or also 'Y is on the right of X' (Fig. 8, App. J)",
    )
    g.add_argument("--data-seed", type=int, default=None, help="dataset seed (default: --seed)")


def parse_heads(spec: str) -> tuple[tuple[int, int], ...]:
    """``"0:1,0:3"`` -> ``((0, 1), (0, 3))``: (layer, head) pairs.

    Example:
        >>> parse_heads("0:1, 1:3")
        ((0, 1), (1, 3))
    """
    out = []
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(x.strip().isdigit() for x in parts):
            raise ValueError(f"bad head {item!r} in {spec!r}: expected LAYER:HEAD, e.g. 0:1,0:3")
        out.append((int(parts[0]), int(parts[1])))
    return tuple(out)


def _model_cfg(a: argparse.Namespace, recipe_fields: dict[str, Any] | None = None) -> CLIPConfig:
    from hooked_clip1d.model.clip import CLIPConfig

    v_over: dict[str, Any] = {}
    t_over: dict[str, Any] = {}
    if a.vision_layers is not None:  # 0 counted as "not given": the preset's layers trained without a word
        v_over["n_layers"] = a.vision_layers
    if a.text_layers is not None:
        t_over["n_layers"] = a.text_layers
    if a.vision_heads is not None:
        v_over["n_heads"] = a.vision_heads
    if a.positional:
        v_over["positional"] = a.positional
    if a.text_positional:
        t_over["positional"] = a.text_positional
    if a.prune_vision_heads:
        v_over["pruned_heads"] = parse_heads(a.prune_vision_heads)
    if a.ablate_vision_terms:
        v_over["ablated_terms"] = tuple(t.strip() for t in a.ablate_vision_terms.split(",") if t.strip())
    shared = dict(recipe_fields if recipe_fields is not None else recipe_of(a).fields()["model"])
    cfg = CLIPConfig.from_preset(
        a.vision_preset or a.preset,
        a.text_preset or a.preset,
        n_labels=a.n_labels,
        dropout=0.1 if a.dropout is None else a.dropout,
        **shared,
        vision_overrides=v_over,
        text_overrides=t_over,
    )
    return dataclasses.replace(cfg, objective=a.objective)


def _data_cfg(a: argparse.Namespace) -> DataConfig:

    return DataConfig(
        n_labels=a.n_labels,
        n_heldout=a.n_heldout,
        n1=a.n1,
        n2=a.n2,
        n_val=a.n_val,
        caption_mode=a.caption_mode,
        seed=a.seed if a.data_seed is None else a.data_seed,
    )


_SHAPE_FLAGS = (
    "vision_preset",
    "text_preset",
    "vision_layers",
    "text_layers",
    "vision_heads",
    "positional",
    "text_positional",
    "dropout",
    "ablate_vision_terms",
    *Recipe.MODEL_FIELDS,
)


def _init_model(a: argparse.Namespace) -> CLIP1D | None:
    """The ``--init-from`` model (a pretrained name, a model .safetensors or a run directory), pruned as asked."""
    if a.init_from is None:
        return None
    from hooked_clip1d.model.checkpoint import load_model_file
    from hooked_clip1d.pretrained import list_pretrained, load_model
    from hooked_clip1d.training.retrain import prune_heads

    given = [f"--{f.replace('_', '-')}" for f in _SHAPE_FLAGS if getattr(a, f) is not None]
    given += ["--objective"] if a.objective != "contrastive" else []  # the loaded model's objective is its own
    if given or a.preset != "simplified":
        raise ValueError(f"--init-from takes the architecture from the loaded model; drop {given or ['--preset']}")
    src = Path(a.init_from)
    if a.init_from in list_pretrained():
        model = load_model(a.init_from)
    elif src.is_dir():
        model = load_model_file(src / "model.safetensors")
    elif src.is_file():
        model = load_model_file(src)
    else:
        raise ValueError(f"--init-from {a.init_from!r} is neither a pretrained name ({list_pretrained()}) nor a file")
    if model.cfg.n_labels != a.n_labels:
        raise ValueError(f"--init-from model has n_labels={model.cfg.n_labels} but --n-labels is {a.n_labels}")
    if a.prune_vision_heads:
        model = prune_heads(model, vision=parse_heads(a.prune_vision_heads))
    return model


def _resume_configs(a: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``--resume``: the run's own configs from ``config.json``, with the flags given (those that differ from the
    parser's defaults; ``--recipe``: every field of the recipe) checked against them by ``RunConfig.resume_problems``,
    the comparison every resume uses (an error names the field and both values). Execution settings (epochs,
    eval/checkpoint every, device, threads) may change."""
    from hooked_clip1d.training.run_config import RunConfig

    saved = json.loads((Path(a.out) / "config.json").read_text())
    defaults = add_train_parser(argparse.ArgumentParser().add_subparsers()).parse_args(["--out", str(a.out)])
    asked, default = (RunConfig(*_new_configs(ns)[:3]) for ns in (a, defaults))
    fields = recipe_of(a).fields() if a.recipe is not None else {"train": {}, "model": {}}
    always = [f"train_config.{f}" for f in fields["train"]]
    always += [f"model_config.{tower}.{f}" for tower in ("vision", "text") for f in fields["model"]]
    run = RunConfig.resumed_with(saved, asked, default, always)
    problems = run.resume_problems(saved, saved_as="the run has", now_as="the flags say")
    if problems:
        raise ValueError(f"--resume {str(a.out)!r}: flags disagree with the run: " + "; ".join(problems))
    return run.model, run.data, dataclasses.replace(run.train, device=a.device, threads=a.threads)


def _add_recipe_args(g: Any) -> None:
    """One flag per ``Recipe`` field (``--no-decay``, ``--init-std``, ``--optimizer``, ...), default None: the
    recipe's value (a new recipe field gets its flag here without further code)."""
    hints = typing.get_type_hints(Recipe)
    for f in dataclasses.fields(Recipe):
        hint = hints[f.name]
        kw: dict[str, Any] = {"default": None, "help": f"{Recipe.HELP[f.name]} (default: the recipe's)"}
        if typing.get_origin(hint) is tuple:
            kw["metavar"] = "G,..."
        elif typing.get_origin(hint) is typing.Literal:
            kw["choices"] = list(typing.get_args(hint))
        else:  # a number, or an optional one (X | None: the flag gives an X)
            kw["type"] = next(t for t in (typing.get_args(hint) or (hint,)) if t is not type(None))
        g.add_argument("--" + f.name.replace("_", "-"), **kw)


def recipe_of(a: argparse.Namespace) -> Recipe:
    """The recipe a ``train`` command asks for: ``--recipe`` (default ``DEFAULT_RECIPE``) with every recipe flag
    given overriding its field.

    Example:
        >>> import argparse
        >>> t = add_train_parser(argparse.ArgumentParser().add_subparsers())
        >>> r = recipe_of(t.parse_args(["--out", "r", "--recipe", "all-decay", "--frozen", "qk_bias"]))
        >>> r.frozen, r.init_std
        (('qk_bias',), 1.0)
    """
    rec = RECIPES[a.recipe or DEFAULT_RECIPE]
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(Recipe):
        value = getattr(a, f.name, None)
        if value is None:
            continue
        if typing.get_origin(typing.get_type_hints(Recipe)[f.name]) is tuple:
            value = tuple(g.strip() for g in value.split(",") if g.strip())
        changes[f.name] = value
    return dataclasses.replace(rec, **changes)
