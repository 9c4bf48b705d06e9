"""The command-line behaviour every tool shares (edgefd.cli): each expected failure is one stderr
line and its documented exit code, a bug's traceback shows only with -v, and click's own usage
errors are one line naming the tool too, for every tool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from edgefd.cli import Duration

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import errno, sys, click
from edgefd import cli
from edgefd.core import errors

def body():
    kind = sys.argv[1]
    if kind == "ok":
        return 0
    if kind == "none":
        return None
    if kind == "code":
        return 1
    if kind == "bad":
        raise errors.BadInput("input.dtb: bad magic")
    if kind == "out":
        raise errors.OutputError("cannot write /x")
    if kind == "unreach":
        raise errors.Unreachable("api server down")
    if kind == "custom":
        raise errors.EdgefdError("weird", 2)
    if kind == "plain":
        raise errors.EdgefdError("failed")
    if kind == "oserror":
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nope")
    if kind == "click":
        raise click.BadParameter("must be positive", param_hint="'--n'")
    if kind == "bug":
        {}["missing"]
    if kind == "pipe":
        raise BrokenPipeError()

verbosity = int(sys.argv[2]) if len(sys.argv) > 2 else 0
cli.setup_logging(verbosity, "t")
cli.run_guarded("t", body, verbosity)
"""


def run(kind: str, verbosity: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, kind, str(verbosity)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("kind", "code", "stderr"),
    [
        ("ok", 0, ""),
        ("none", 0, ""),
        ("code", 1, ""),
        ("bad", 3, "t: error: input.dtb: bad magic\n"),
        ("out", 4, "t: error: cannot write /x\n"),
        ("unreach", 5, "t: error: api server down\n"),
        ("custom", 2, "t: error: weird\n"),
        ("plain", 1, "t: error: failed\n"),
        ("oserror", 1, "t: error: No such file or directory: /nope\n"),
        ("click", 2, "t: error: Invalid value for '--n': must be positive\n"),
        ("bug", 70, "t: internal error: KeyError: 'missing' (run with -v for details)\n"),
        ("pipe", 0, ""),
    ],
)
def test_exit_codes_and_one_line(kind: str, code: int, stderr: str) -> None:
    p = run(kind)
    assert p.returncode == code
    assert p.stderr == stderr
    assert p.stdout == ""


def test_bug_shows_traceback_only_with_verbose() -> None:
    p = run("bug", 1)
    assert p.returncode == 1  # the uncaught exception's own exit status
    assert "Traceback" in p.stderr and "KeyError" in p.stderr


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("dt_labeller", ["--no-such-option"]),
        ("usb_scan", ["--hold", "inf"]),
        ("pci_scan", ["--poll-interval", "nan"]),
        ("feature_sink", ["--api-timeout", "0"]),
        ("devplugin", ["--rescan-interval", "-1"]),
    ],
)
def test_usage_errors_are_one_line_exit_2(tool: str, args: list[str]) -> None:
    """Click's own usage errors too: one line naming the tool, no usage block, exit 2."""
    p = subprocess.run(
        [sys.executable, "-m", f"edgefd.{tool}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    name = tool.replace("_", "-")
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"{name}: error: "), p.stderr
    assert f"(see {name} --help)" in p.stderr and p.stdout == ""


def test_duration_option_takes_units_and_refuses_what_is_not_a_time():
    assert Duration().convert("250ms", None, None) == pytest.approx(0.25)
    assert Duration().convert("10m", None, None) == 600
    assert Duration().convert("30", None, None) == 30
    for bad in ("nan", "inf", "-1", "1e9", "30x", float("nan"), float("inf")):
        with pytest.raises(click.BadParameter):
            Duration().convert(bad, None, None)
