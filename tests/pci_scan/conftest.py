"""Fixtures of pci-scan's tests: the x86-server sample node, built once per module (the tests
only read it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixturegen import build_host


@pytest.fixture(scope="module")
def x86(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host("x86-server", tmp_path_factory.mktemp("x86"), devicetree=False)
