"""Small helpers the commands share: JSON output and a progress bar over a list of items (torch-free)."""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> str:
    """JSON for the terminal: indented, floats to 7 significant digits (float32's precision, so 0.93 is not printed
    as 0.9300000071525574), tensors and numpy scalars as numbers."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, float):
            return float(f"{x:.7g}")
        return x

    return json.dumps(clean(json.loads(json.dumps(obj, default=float))), indent=2)


def progress(items: list[str], desc: str, disable: bool = False):
    from tqdm.auto import tqdm

    from hooked_clip1d.settings.progress import bar_disabled

    return tqdm(items, desc=desc, disable=bar_disabled(not disable))
