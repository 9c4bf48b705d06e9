"""The click command of a bus scanner (edgefd.cli.scanner): the options both scanners take reach
the tool's `run` as keywords, parsed (durations in seconds, lists repeated, the listen address);
`--help`, `--version` and a usage error never call it, and its exit code is the command's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from edgefd.cli.scanner import make_command


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    return []


def scanner(calls: list[dict[str, Any]], code: int = 0) -> Any:
    def run(**options: Any) -> int:
        calls.append(options)
        return code

    return make_command("test-scan", run, "Label a node with its test devices.")


def test_the_options_reach_run_parsed(calls: list[dict[str, Any]], tmp_path: Path) -> None:
    argv = ["--host-root", str(tmp_path), "--dry-run", "--watch", "--hold", "1m",
            "--poll-interval", "250ms", "--class-whitelist", "fe,ff", "--class-whitelist", "0e",
            "--also", "pci-scan", "--listen", "127.0.0.1:9100", "--explain", "-vv"]  # fmt: skip
    res = CliRunner().invoke(scanner(calls), argv)
    assert res.exit_code == 0, res.output
    [o] = calls
    assert (o["host_root"], o["dry_run"], o["watch"], o["explain"]) == (
        str(tmp_path),
        True,
        True,
        True,
    )
    assert (o["hold"], o["poll_interval"], o["rescan_interval"]) == (60.0, 0.25, 10.0)
    assert o["class_whitelist"] == ("fe,ff", "0e") and o["also"] == ("pci-scan",)
    assert o["listen"] == ("127.0.0.1", 9100) and o["verbose"] == 2
    assert o["config_path"] is None and o["catalogue_path"] is None
    assert not o["no_capabilities"]


def test_help_version_and_usage_errors_never_run(calls: list[dict[str, Any]]) -> None:
    cmd = scanner(calls)
    helped = CliRunner().invoke(cmd, ["--help"])
    assert helped.exit_code == 0 and "Label a node with its test devices." in helped.output
    assert "--hold" in helped.output and "Exit codes:" in helped.output
    assert CliRunner().invoke(cmd, ["--version"]).output.startswith("test-scan ")
    bad = CliRunner().invoke(cmd, ["--hold", "2m"])  # more than a minute
    assert bad.exit_code == 2 and "Invalid value for '--hold'" in bad.output
    assert calls == []


def test_the_command_exits_with_runs_code(calls: list[dict[str, Any]]) -> None:
    assert CliRunner().invoke(scanner(calls, code=3), ["--dry-run"]).exit_code == 3
