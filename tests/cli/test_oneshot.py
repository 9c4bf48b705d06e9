"""A one-shot command ends with the collector's objects frozen (edgefd.cli.oneshot); a
long-running one (`--watch`) never asks for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from edgefd.cli import scanner

# The first atexit handler registered runs last: it sees what the tool's own handler did.
AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count(), file=sys.stderr))
from edgefd.{module}.cli import main
main()
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fixturegen import build_host

    return build_host("rpi4-coral", tmp_path_factory.mktemp("node"))


@pytest.mark.parametrize("module", ["dt_labeller", "usb_scan", "pci_scan"])
def test_a_one_shot_run_ends_frozen(module: str, node: Path) -> None:
    code = AT_EXIT.format(module=module)
    argv = [sys.executable, "-c", code, "--host-root", str(node), "--dry-run"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    frozen = [ln for ln in r.stderr.splitlines() if ln.startswith("frozen ")]
    assert frozen and int(frozen[-1].split()[1]) > 1000, r.stderr


@pytest.mark.parametrize(("args", "asked"), [([], True), (["--watch"], False)])
def test_only_a_run_without_watch_asks(
    args: list[str], asked: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(scanner, "freeze_at_exit", lambda: calls.append(True))

    def run(**_options: Any) -> int:
        return 0

    cmd = scanner.make_command("usb-scan", run, "help")
    r = CliRunner().invoke(cmd, [*args, "--host-root", str(tmp_path), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert bool(calls) is asked
