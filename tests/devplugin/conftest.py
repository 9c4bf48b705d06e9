"""Fixtures the devplugin suites share: the sample host most of them serve (`host`: the
rpi4-coral fixture host, a Coral USB in its boot state at port 2-1 and an NCS2 at port 1-1.1,
tests/fixtures/nodes), a kubelet plugin directory (`plugin_dir`), and a short temporary
directory (`short_dir`) for trees that hold unix sockets, whose paths are limited to 107
bytes (pytest's tmp_path can be longer)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixturegen import build_host


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "dp"
    d.mkdir()
    return d


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="one-"))  # unix socket paths are limited to 107 bytes
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
