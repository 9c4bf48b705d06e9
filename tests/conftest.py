"""Test-suite wiring: the real-peer fixtures, one plugin module per peer (tests/peers/), and
the isolation of the one piece of process-wide state the tools keep."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The console scripts (dt-labeller, ..., lint-imports, ruff) live beside the interpreter running
# the tests (the project's .venv): subprocesses find them, and `python3`, there first.
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

pytest_plugins = [
    "tests.peers.apiserver",
    "tests.peers.kubelet",
    "tests.peers.nfd",
    "tests.summary",
]


@pytest.fixture(autouse=True)
def _logging_as_before() -> Iterator[None]:
    """A command run in process (click's CliRunner) configures edgefd's logging for the whole
    process, e.g. to warnings only; without this, a later test's `caplog` would see nothing
    depending on the order the tests ran in."""
    from edgefd.core import log

    saved = (log._verbosity, log._tool, log._configured, log._applied, log._service)
    yield
    log._verbosity, log._tool, log._configured, log._applied, log._service = saved


# The sample nodes every suite uses (tests/fixtures/nodes), built by tests.fixturegen, no
# devicetree. Read-only ones are built once per module; `host` is a test's own, to plug into.


@pytest.fixture(scope="module")
def rpi4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rpi4-coral node, read only."""
    from tests.fixturegen import build_host

    return build_host("rpi4-coral", tmp_path_factory.mktemp("rpi4"), devicetree=False)


@pytest.fixture(scope="module")
def x86(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The x86-server node, read only."""
    from tests.fixturegen import build_host

    return build_host("x86-server", tmp_path_factory.mktemp("x86"), devicetree=False)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """An rpi4-coral node of the test's own: devices may be plugged and unplugged in it."""
    from tests.fixturegen import build_host

    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)
