"""Fixtures of the inventory's tests: the rpi4-coral fixture host (a Coral in its boot state
at port 2-1, an NCS2, a webcam and hubs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixturegen import build_host


@pytest.fixture
def rpi(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "rpi", devicetree=False)
