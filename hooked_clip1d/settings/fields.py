"""How a config field is declared, once: ``knob`` (default, help, how the batched engine treats it, whether a
recipe may set it, its legacy value), and the readers of those declarations (``field_names``, ``legacy_values``).

Example:
    >>> from hooked_clip1d.settings import TrainConfig
    >>> "weight_decay" in field_names(TrainConfig, recipe=True)
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any

# How the batched engine (training.members.group_key, training.stacked_support) treats a config field; every field
# declares one, so a new field is either implemented by the engine or refused by it, never silently ignored:
BATCHED = {
    "member": "may differ between the members of a group",
    "shared": "must be equal across a group",
    "schedule": "may differ per member, but must be equal across a group when a learning-rate schedule is used",
    "batch": "the batch size: equal across a group once resolved against the data (50 or 100 by caption mode)",
    "shape": "a tower field that must be equal across a group (the stacked forward implements each value)",
    "hook": "read by hooks only (no effect on training)",
    "unsupported": "not implemented by the batched engine: a non-default value is refused there",
}
_UNSET: Any = dataclasses.MISSING


def knob(
    default: Any,
    text: str,
    *,
    batched: str,
    recipe: bool = False,
    results: bool = True,
    free: bool = False,
    legacy: Any = _UNSET,
) -> Any:
    """A config field declared once with everything the package derives from it (``dataclasses.field`` metadata):

    - ``text``: what it does (metadata ``help``) (the ``train`` command's flag help, docs);
    - ``batched``: how the batched engine treats it (a key of ``BATCHED``);
    - ``recipe``: a choice the paper leaves open, part of a ``Recipe`` (a ``train`` flag, a sweep grid key);
    - ``results``: False for execution settings that change no trained number (a resumed run may change them);
    - ``free``: how a model was initialised or trained, not what it is (a stand-in model of a figure may differ);
    - ``legacy``: the value a config saved before the field existed was trained with, and what a ``Recipe`` that does
      not name the field means (default: ``default``).

    Example:
        >>> from hooked_clip1d.settings import TrainConfig
        >>> [f.name for f in dataclasses.fields(TrainConfig) if f.metadata["batched"] == "shared"]
        ['betas', 'eps', 'device', 'optimizer', 'lr_schedule']
    """
    if batched not in BATCHED:
        raise ValueError(f"knob: batched must be one of {sorted(BATCHED)}, got {batched!r}")
    meta = {"help": text, "batched": batched, "recipe": recipe, "results": results, "free": free,
            "legacy": default if legacy is _UNSET else legacy}  # fmt: skip
    if isinstance(default, list | dict | set):
        raise TypeError("knob defaults must be immutable (a tuple, not a list)")
    return dataclasses.field(default=default, metadata=meta)


def field_names(cls: Any, **where: Any) -> tuple[str, ...]:
    """The names of ``cls``'s fields (declared with ``knob``) whose metadata matches every ``where`` item.

    Example:
        >>> from hooked_clip1d.settings import TrainConfig
        >>> field_names(TrainConfig, results=False)
        ('eval_every', 'checkpoint_every', 'device', 'threads', 'keep_snapshots', 'snapshot_epochs')
    """
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if "batched" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with settings.knob (no metadata)")
        if all(f.metadata[k] == v for k, v in where.items()):
            out.append(f.name)
    return tuple(out)


def legacy_values(cls: Any) -> dict[str, Any]:
    """``{field: legacy value}`` for ``cls``'s fields whose legacy value differs from the default: what a config saved
    before the field existed was trained with (``from_dict`` fills these in).

    Example:
        >>> from hooked_clip1d.settings import TrainConfig
        >>> legacy_values(TrainConfig)
        {'no_decay': (), 'negatives': 'all'}
    """
    return {f.name: f.metadata["legacy"] for f in dataclasses.fields(cls)
            if f.init and f.metadata.get("legacy", f.default) != f.default}  # fmt: skip
