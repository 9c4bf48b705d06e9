"""The log options every command takes (edgefd.cli.logs): `-v`, `--log-level` and
`--log-format text|json` on every tool and subcommand; a failed command's line and a warning
found while parsing follow the format the command line asks for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[2]


def _leaf_commands() -> list[tuple[str, click.Command]]:
    from tests.cli.test_envvars import _commands

    return [(t, c) for t, c in _commands() if not isinstance(c, click.Group)]


@pytest.mark.parametrize(("tool", "cmd"), _leaf_commands(), ids=[t for t, _ in _leaf_commands()])
def test_every_command_takes_log_format_and_log_level(tool: str, cmd: click.Command) -> None:
    """Issue 32 item 2: the log could not be parsed and its level was only `-v` counts.
    Every tool and subcommand takes `--log-format text|json` and `--log-level`."""
    opts = {o: p for p in cmd.params for o in p.opts}
    assert "-v" in opts, tool
    fmt, level = opts["--log-format"], opts["--log-level"]
    assert isinstance(fmt.type, click.Choice) and list(fmt.type.choices) == ["text", "json"]
    assert isinstance(level.type, click.Choice)
    assert list(level.type.choices) == ["debug", "info", "warning", "error"]


def test_a_failure_with_log_format_json_is_a_json_line(tmp_path: Path) -> None:
    """The failed command's one line follows `--log-format json` too, so a json log stays
    parseable to its last line; text keeps the documented `tool: error: ...` line."""
    missing = tmp_path / "nope"
    args = [sys.executable, "-m", "edgefd.usb_scan", "--dry-run", "--host-root", str(missing)]
    p = subprocess.run([*args, "--log-format", "json"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 3 and p.stdout == "", p.stderr
    [line] = p.stderr.splitlines()
    obj = json.loads(line)
    assert (obj["level"], obj["tool"]) == ("error", "usb-scan") and str(missing) in obj["msg"]
    p = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 3 and p.stderr.startswith("usb-scan: error: cannot read "), p.stderr


def test_a_warning_found_while_parsing_follows_the_log_format(tmp_path: Path) -> None:
    """A deprecated flag's warning was echoed by click before the log was set up: no time,
    and not json under `--log-format json`; now it is logged like any other warning."""
    args = [sys.executable, "-m", "edgefd.dt_labeller", "--dry-run", "--host-root", str(tmp_path)]
    args += ["--node-name", "/", "--log-format", "json"]
    p = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    objs = [json.loads(ln) for ln in p.stderr.splitlines()]
    assert objs[0]["level"] == "warning" and objs[0]["tool"] == "dt-labeller", p.stderr
    assert objs[0]["msg"].startswith("--node-name is deprecated"), p.stderr
    p = subprocess.run([*args[:-2], "--log-level", "error"], cwd=REPO, capture_output=True)
    assert b"deprecated" not in p.stderr
