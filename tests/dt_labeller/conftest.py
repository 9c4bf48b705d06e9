"""Fixtures of dt-labeller's tests: the sample devicetrees compiled to blobs, once per module."""

from __future__ import annotations

import pytest

from tests.fixturegen.devicetree import compile_dts

from .command import JETSON_DTS, RPI4_DTS


@pytest.fixture(scope="module")
def rpi4_blob() -> bytes:
    return compile_dts(RPI4_DTS)


@pytest.fixture(scope="module")
def jetson_blob() -> bytes:
    return compile_dts(JETSON_DTS)
