"""``RunConfig``: everything one training run is — the model, data and training configs — built from a recipe once,
validated in one place, and compared in one place when a run is resumed (by ``Trainer``, the batched engine and the
``train`` command alike).

Example:
    >>> from hooked_clip1d.model.clip import CLIPConfig
    >>> from hooked_clip1d.settings import DataConfig, TrainConfig
    >>> rc = RunConfig.from_recipe(
    ...     "cls-exempt-init002-cosine", CLIPConfig.from_preset("simplified", n_labels=6),
    ...     DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig(epochs=600))
    >>> rc.train.lr_schedule, rc.train.frozen, rc.model.vision.init_std
    ('warmup_cosine', (), 0.02)
    >>> RunConfig(rc.model, DataConfig(n_labels=7, n_heldout=2, n2=2), rc.train)
    Traceback (most recent call last):
    ...
    ValueError: model n_labels=6 but data n_labels=7; they must match
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hooked_clip1d.model.checkpoint import canonical_config
from hooked_clip1d.model.clip import CLIPConfig
from hooked_clip1d.settings import RECIPES, DataConfig, Recipe, TrainConfig, field_names

# TrainConfig fields that say how a run executes, not what it trains (a resumed run may change them)
EXECUTION_FIELDS = field_names(TrainConfig, results=False)  # declared with settings.knob(..., results=False)


def comparable_train_config(d: dict[str, Any]) -> dict[str, Any]:
    """A saved ``train_config`` dict with fields added since filled in (defaults, or for ``no_decay`` / ``frozen`` /
    ``negatives`` the recipe runs saved before them were trained with: ``settings.legacy_values(TrainConfig)``) and
    the execution settings (``EXECUTION_FIELDS``) removed: two runs whose dicts compare equal here trained the same
    way.

    Example:
        >>> old = comparable_train_config({"lr": 1e-4})  # saved before no_decay / frozen / negatives existed
        >>> old == comparable_train_config(TrainConfig(threads=2, no_decay=(), frozen=(), negatives="all").to_dict())
        True
        >>> old == comparable_train_config(TrainConfig().to_dict())  # today's default recipe differs
        False
    """
    out = TrainConfig.from_dict(d).to_dict()
    for k in EXECUTION_FIELDS:
        out.pop(k, None)
    return out


def resume_differences(saved: dict[str, Any], now: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two ``train_config`` dicts as they must agree for ``now`` to resume ``saved`` (``comparable_train_config``
    of each, without ``epochs``, which may grow, unless a learning-rate schedule depends on it)."""
    old_t, new_t = comparable_train_config(saved), comparable_train_config(now)
    if old_t.get("lr_schedule", "constant") == "constant":
        old_t.pop("epochs", None)
        new_t.pop("epochs", None)
    return old_t, new_t


@dataclass(frozen=True)
class RunConfig:
    """One run's configs; construction checks that they fit together (label count, image size). The object the
    trainers take (``train(run, out_dir)``, ``Trainer(run, out_dir)``, ``train_fast(run, out_dir)``,
    ``Member.from_run(run)``) and the one place a resume is compared (``resume_problems``)."""

    model: CLIPConfig
    data: DataConfig
    train: TrainConfig

    def __post_init__(self) -> None:
        for name, cls in (("model", CLIPConfig), ("data", DataConfig), ("train", TrainConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"RunConfig.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        if self.model.n_labels != self.data.n_labels:
            raise ValueError(
                f"model n_labels={self.model.n_labels} but data n_labels={self.data.n_labels}; they must match"
            )
        if self.model.vision.d_image != self.data.d_image:
            raise ValueError(f"model d_image={self.model.vision.d_image} but data d_image={self.data.d_image}")
        temp = self.train.fixed_temperature
        if temp is not None and self.model.objective != "contrastive":  # held on a parameter nothing reads
            raise ValueError(
                f"TrainConfig.fixed_temperature={temp}: a {self.model.objective} model has no temperature "
                "(model.captioning); leave it None"
            )
        if temp is not None and math.log(temp) > self.model.max_logit_scale + 1e-9:
            raise ValueError(
                f"TrainConfig.fixed_temperature={temp} is above the model's clamp exp(max_logit_scale) = "
                f"{math.exp(self.model.max_logit_scale):.4g}: the forward would clamp it"
            )

    @classmethod
    def from_recipe(
        cls, recipe: str | Recipe, model: CLIPConfig, data: DataConfig, train: TrainConfig | None = None
    ) -> RunConfig:
        """``model`` and ``train`` with every field of ``recipe`` (a name of ``settings.RECIPES`` or a ``Recipe``)
        set: its training fields on ``train`` (default ``TrainConfig()``), its model fields on both towers."""
        if isinstance(recipe, str):
            if recipe not in RECIPES:
                raise ValueError(f"unknown recipe {recipe!r}; known: {sorted(RECIPES)}")
            recipe = RECIPES[recipe]
        fields = recipe.fields()
        train = dataclasses.replace(train if train is not None else TrainConfig(), **fields["train"])
        model = dataclasses.replace(
            model, vision=model.vision.replace(**fields["model"]), text=model.text.replace(**fields["model"])
        )
        return cls(model, data, train)

    def to_dict(self) -> dict[str, Any]:
        """The three configs as a run's ``config.json`` holds them."""
        return {
            "model_config": self.model.to_dict(),
            "data_config": self.data.to_dict(),
            "train_config": self.train.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """Inverse of ``to_dict`` (a run's ``config.json``, or a checkpoint's metadata)."""
        return cls(
            CLIPConfig.from_dict(d["model_config"]),
            DataConfig.from_dict(d["data_config"]),
            TrainConfig.from_dict(d["train_config"]),
        )

    def resume_problems(self, saved: Mapping[str, Any], saved_as: str = "saved", now_as: str = "now") -> list[str]:
        """Why this run cannot continue the one saved as ``saved`` (a ``to_dict``-shaped dict: a checkpoint's
        metadata or ``config.json``): each config that differs, by field, as ``"<field>: <saved_as> <value>, <now_as>
        <value>"``. Empty when it can. The one comparison every resume uses (``Trainer``, the batched engine's group
        and member checkpoints, the ``train --resume`` command through ``resumed_with``).

        Example:
            >>> rc = RunConfig(CLIPConfig.from_preset("simplified", n_labels=6), DataConfig(n_labels=6, n_heldout=2,
            ...                n2=2), TrainConfig(epochs=10))
            >>> rc.resume_problems(dataclasses.replace(rc, train=TrainConfig(epochs=20, lr=1e-3)).to_dict())
            ['train_config.lr: saved 0.001, now 0.0001']
        """
        now = self.to_dict()
        out = []
        for key in ("model_config", "data_config"):
            old = canonical_config(key, saved.get(key))
            if old != now[key]:
                if isinstance(old, dict):
                    fields = _diff(old, now[key])
                    out += [f"{key}.{f}: {saved_as} {x!r}, {now_as} {y!r}" for f, x, y in fields] or [f"{key} differs"]
                else:
                    out.append(f"{key} is unreadable")
        old_t, new_t = resume_differences(saved.get("train_config") or {}, now["train_config"])
        out += [f"train_config.{f}: {saved_as} {x!r}, {now_as} {y!r}" for f, x, y in _diff(old_t, new_t)]
        return out

    @classmethod
    def resumed_with(
        cls, saved: Mapping[str, Any], asked: RunConfig, default: RunConfig, always: Iterable[str] = ()
    ) -> RunConfig:
        """The run a resume asks for: the ``saved`` run (``to_dict``-shaped: its ``config.json``) with every field
        in which ``asked`` (the run the given settings describe, e.g. a command line's flags) differs from
        ``default`` (the run of no settings) taken from ``asked``, and the fields named in ``always`` (dotted
        paths: ``"train_config.no_decay"``, ``"model_config.vision.init_std"``) taken from ``asked`` whatever they
        are. ``resume_problems(saved)`` of it names every given setting the saved run disagrees with; settings not
        given keep the saved run's values.

        Example:
            >>> saved = RunConfig(CLIPConfig.from_preset("simplified", n_labels=6), DataConfig(n_labels=6,
            ...                   n_heldout=2, n2=2), TrainConfig(lr=3e-4)).to_dict()
            >>> default = RunConfig(CLIPConfig.from_preset("simplified"), DataConfig(), TrainConfig())
            >>> asked = dataclasses.replace(default, train=TrainConfig(lr=1e-3, epochs=50))  # --lr 1e-3 --epochs 50
            >>> run = RunConfig.resumed_with(saved, asked, default)
            >>> run.data.n_labels, run.train.epochs, run.resume_problems(saved, "the run has", "the flags say")
            (6, 50, ['train_config.lr: the run has 0.0003, the flags say 0.001'])
        """
        base = {key: canonical_config(key, saved.get(key)) for key in ("model_config", "data_config")}
        base["train_config"] = TrainConfig.from_dict(saved.get("train_config") or {}).to_dict()
        want, dflt = asked.to_dict(), default.to_dict()
        _merge_changes(base, want, dflt, "", set(always))
        return cls.from_dict(base)


def check_init_model(init_model: Any, model_cfg: CLIPConfig, where: str = "init_model") -> None:
    """Refuse starting weights whose config is not the run's (the towers' ``init_seed`` aside: given weights are not
    drawn). The run is recorded, resumed and reloaded under its model config, so a model of another width, or without
    the dropout a recipe sets, would train as one thing and be recorded as another.

    Example:
        >>> from hooked_clip1d.model.clip import CLIP1D
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6)
        >>> check_init_model(CLIP1D(cfg, seed=3), cfg)  # the same config, seeded: accepted
        >>> check_init_model(CLIP1D(cfg), dataclasses.replace(cfg, vision=cfg.vision.replace(attn_dropout=0.1)))
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: init_model's config is not the run's (model config vision.attn_dropout: the model has 0.0, ...
    """
    from hooked_clip1d.model.clip import CLIP1D

    if not isinstance(init_model, CLIP1D):
        raise TypeError(f"{where} must be a CLIP1D (the starting weights), got {type(init_model).__name__}")

    def unseeded(cfg: CLIPConfig) -> dict[str, Any]:
        towers = {"vision": cfg.vision.replace(init_seed=None), "text": cfg.text.replace(init_seed=None)}
        return dataclasses.replace(cfg, **towers).to_dict()

    diff = _diff(unseeded(init_model.cfg), unseeded(model_cfg))
    if diff:
        said = "; ".join(f"{k}: the model has {a!r}, the run {b!r}" for k, a, b in diff[:4])
        more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
        raise ValueError(
            f"{where}'s config is not the run's (model config {said}{more}): build the run from {where}.cfg "
            f"(RunConfig({where}.cfg, ...)) or start from a model of the run's config"
        )


def _diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted field, value in ``a``, value in ``b``) of every leaf where two nested dicts differ, sorted."""
    out = []
    for k in sorted(set(a) | set(b)):
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += _diff(a[k], b[k], f"{prefix}{k}.")
        elif a.get(k) != b.get(k):
            out.append((f"{prefix}{k}", a.get(k), b.get(k)))
    return out


def _merge_changes(
    base: dict[str, Any], want: dict[str, Any], default: dict[str, Any], prefix: str, always: set[str]
) -> None:
    """Set in ``base`` (in place) every leaf where ``want`` differs from ``default``, or whose dotted path (under
    ``prefix``) is in ``always``."""
    for k, v in want.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge_changes(base[k], v, default.get(k) or {}, f"{path}.", always)
        elif path in always or v != default.get(k):
            base[k] = v


def run_args(first: Any, rest: Sequence[Any], where: str, names: Sequence[str]) -> tuple[RunConfig, dict[str, Any]]:
    """The run and the other positional arguments (by name: ``names``, in order) of an entry point that takes
    ``(run, *names)``, also when called the older way, ``(model_cfg, data_cfg, train_cfg, *names)`` (deprecated:
    a ``DeprecationWarning`` names the one signature); ``where`` names the entry point in errors.

    Example:
        >>> run = RunConfig(CLIPConfig.from_preset("simplified", n_labels=6), DataConfig(n_labels=6, n_heldout=2,
        ...                 n2=2), TrainConfig())
        >>> run_args(run, ["out"], "train", ("out_dir", "resume"))[1]
        {'out_dir': 'out'}
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:  # the older form: deprecated, still read
        ...     warnings.simplefilter("always")
        ...     got = run_args(run.model, [run.data, run.train, "out", True], "train", ("out_dir", "resume"))
        >>> got == (run, {"out_dir": "out", "resume": True}), caught[0].category.__name__
        (True, 'DeprecationWarning')
    """
    if isinstance(first, CLIPConfig) and len(rest) >= 2:
        warnings.warn(
            f"{where}(model_cfg, data_cfg, train_cfg, ...) is deprecated (issue 52: one entry signature): pass "
            f"{where}(RunConfig(model_cfg, data_cfg, train_cfg), ...)",
            DeprecationWarning,
            stacklevel=3,
        )
        first, rest = RunConfig(first, rest[0], rest[1]), rest[2:]
    if not isinstance(first, RunConfig):
        raise TypeError(
            f"{where} takes a RunConfig (or a CLIPConfig, DataConfig and TrainConfig) first, got {type(first).__name__}"
        )
    if len(rest) > len(names):
        raise TypeError(f"{where} takes at most {len(names)} positional arguments after the run ({', '.join(names)})")
    return first, dict(zip(names, rest, strict=False))
