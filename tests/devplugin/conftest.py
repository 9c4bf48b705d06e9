"""Fixtures the devplugin suites share (the sample host most of them serve, `host`, is every
suite's: tests/conftest.py): a kubelet plugin directory (`plugin_dir`), and a short temporary
directory (`short_dir`) for trees that hold unix sockets, whose paths are limited to 107
bytes (pytest's tmp_path can be longer)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


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
