"""`make test` runs scripts/bootstrap before pytest, so by the time this runs everything is
installed: a second bootstrap must find that out by itself and do nothing (no pip, no apt)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bootstrap_with_everything_installed_is_a_quiet_no_op() -> None:
    import edgefd

    if Path(edgefd.__file__).resolve().parent != ROOT / "tools":
        pytest.skip("edgefd is installed from another checkout; bootstrap would reinstall it")
    stamps = list((ROOT / ".cache").glob("pip-*"))
    if not stamps:
        pytest.skip("not installed through scripts/bootstrap")
    p = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert "pip install" not in p.stderr and "apt-get" not in p.stderr, p.stderr
