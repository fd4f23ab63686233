"""Figures a doctest made and did not close do not pile up across the package's doctests.

A pytest plugin (``-p tests.doctest_figures`` in pyproject's ``addopts``): the autouse ``_close_figures`` fixture of
``tests/conftest.py`` covers the tests under ``tests/`` only, and the package's doctests (``--doctest-modules``) show
their figure functions as ``fig = plot_...(...)`` without closing them; in one worker, more than 20 such figures
made matplotlib warn ("More than 20 figures have been opened") and held their memory. This closes every pyplot
figure after each doctest item.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    if isinstance(item, pytest.DoctestItem) and "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
