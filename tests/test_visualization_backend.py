"""Importing the package's figures must not switch matplotlib's backend (it broke inline plots in Jupyter)."""

import subprocess
import sys

import pytest


@pytest.mark.heavy
def test_import_keeps_the_users_backend():
    code = (
        "import matplotlib; matplotlib.use('svg'); import hooked_clip1d.visualization, hooked_clip1d.cli.analyze, "
        "hooked_clip1d.reproduce; print(matplotlib.get_backend())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "svg"
