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


@pytest.mark.parametrize(
    ("tool", "option", "args"),
    [
        ("usb-scan", "--config", ["--dry-run"]),
        ("usb-scan", "--catalogue", ["--dry-run"]),
        ("pci-scan", "--config", ["--dry-run"]),
        ("devplugin", "--config", ["--dry-run"]),
        # device-keeper reads no file at its start: devplugin's decisions may come later
        ("dt-labeller", "--dtb", ["--dry-run"]),
    ],
)
@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_a_file_input_that_is_no_file_is_bad_input_at_once(
    tool: str, option: str, args: list[str], kind: str, tmp_path: Path
) -> None:
    """Issue 32 items 6 and 9: a FIFO never blocks a start (hung usb-scan and devplugin), and a
    directory is bad input like a missing file (exit 3), not a usage error (was exit 2)."""
    import os

    path = tmp_path / "input"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    host = ["--host-root", str(tmp_path)]
    argv = [*args[:1], option, str(path), *host, *args[1:]]
    if tool == "devplugin":
        argv += ["--plugin-dir", str(tmp_path / "dp")]
    p = subprocess.run([tool, *argv], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"{tool}: error: "), p.stderr
    assert str(path) in p.stderr


def test_every_option_help_is_a_sentence():
    """Issue 32 item 9: help texts start with a capital letter in every tool (feature-sink's
    did not), unless they start with one of the option's own values (`--mode node: ...`) or
    a tool's name."""
    import importlib

    tools = ("usb_scan", "pci_scan", "dt_labeller", "feature_sink", "devplugin", "device_keeper")
    names = {t.replace("_", "-") for t in tools}
    for tool in tools:
        main = importlib.import_module(f"edgefd.{tool}.cli").main
        commands = [main, *getattr(main, "commands", {}).values()]
        for cmd in commands:
            for param in cmd.params:
                text = getattr(param, "help", None) or ""
                word = text.split(":")[0].split("'")[0]
                choices = getattr(param.type, "choices", ())
                ok = not text or text[0].isupper() or word in choices or word in names
                assert ok, f"{tool} {cmd.name} {param.opts}: {text!r}"


def test_the_two_poll_intervals_say_what_each_compares():
    """Issue 32 item 9: one flag name, two periods (500ms in the sink, 250ms in the scanners):
    each help text says what it polls and that the other is another thing."""
    from click.testing import CliRunner

    from edgefd.feature_sink.cli import main as sink
    from edgefd.usb_scan.cli import main as scan

    def poll_help(cmd: click.Command) -> str:
        out = CliRunner().invoke(cmd, ["--help"], terminal_width=400).output
        return " ".join(next(ln for ln in out.splitlines() if "--poll-interval" in ln).split())

    assert "features.d's files" in poll_help(sink) and "default: 500ms" in poll_help(sink)
    assert "the host's bus listing" in poll_help(sink)
    assert "the host's bus listing" in poll_help(scan) and "default: 250ms" in poll_help(scan)
    assert "Not feature-sink's --poll-interval, which compares features.d's" in poll_help(scan)
