"""Sweeps (Fig. 3, 4a, 10, 21): a TOML grid of runs (``spec``), its plan, results and resumption (``runner``),
training the groups in turn, in worker processes or on Ray (``pool``), how far a sweep has come (``status``), and
carrying finished runs between machines (``transfer``). The sweeps behind the paper's figures are this folder's
``*.toml`` files.

Example:
    >>> from hooked_clip1d.sweeps import load_spec
    >>> len(load_spec(text='[grid]\\nseed = [0, 1]').runs)
    2
"""

from hooked_clip1d.lazy import lazy_exports

# public names and their modules, imported on first use (PEP 562): importing one module of this folder
# (e.g. a torch-free one) does not import the others
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "load_spec": "hooked_clip1d.sweeps.runner",
        "run_sweep": "hooked_clip1d.sweeps.runner",
    },
)


__all__ = ["load_spec", "run_sweep"]
