"""Fixtures of the scan engine's tests: a fresh rpi4-coral host (the tests plug and unplug
devices on it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixturegen import build_host


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)
