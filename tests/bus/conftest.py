"""Fixtures of the bus tests: the rpi4-coral and x86-server sample nodes, built once per module
(the tests only read them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixturegen import build_host


@pytest.fixture(scope="module")
def rpi4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host("rpi4-coral", tmp_path_factory.mktemp("rpi4"), devicetree=False)


@pytest.fixture(scope="module")
def x86(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host("x86-server", tmp_path_factory.mktemp("x86"), devicetree=False)
