"""How a command's process ends (edgefd.core.lifetime): the command's status, its whole
output, the atexit handlers, without the interpreter's teardown; every command's entry point
ends that way."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("dt_labeller", "usb_scan", "pci_scan", "feature_sink", "devplugin", "device_keeper")


def _console_scripts() -> dict[str, str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in lines)}


def _python(code: str, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd="/", **kw
    )


@pytest.mark.parametrize("tool", TOOLS)
def test_each_command_and_its_module_run_end_through_lifetime(tool: str) -> None:
    """The console script names the tool's `__main__` (as `python -m` runs it), whose `main`
    imports the tool's command only when called, runs it and ends the process."""
    assert _console_scripts()[tool.replace("_", "-")] == f"edgefd.{tool}.__main__:main"
    code = (
        "import atexit, sys\n"
        f"import edgefd.{tool}.__main__ as m\n"
        "print('click' in sys.modules)\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.argv = ['x', '--version']\n"
        "m.main()\n"
        "print('not reached')"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "False"
    assert tool.replace("_", "-") in proc.stdout  # its command ran: the version line
    assert proc.stdout.rstrip().endswith("atexit ran") and "not reached" not in proc.stdout


COMMAND = """
import atexit, sys, threading
from edgefd.core import lifetime
what, *rest = sys.argv[1:]
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
if what == "thread":  # still running when the command returns
    threading.Thread(target=lambda: __import__("time").sleep(0.3)).start()

def command():
    sys.stdout.write("x" * 100_000 + "\\n")  # more than a buffer: part is written at exit
    if what == "message":
        sys.exit("command: failed")
    if what == "none":
        return
    sys.exit(int(rest[0]) if rest else 0)

lifetime.run(command)
"""


@pytest.mark.parametrize(
    ("what", "args", "status"),
    [("code", ["0"], 0), ("code", ["3"], 3), ("none", [], 0), ("message", [], 1),
     ("thread", ["4"], 4)],
)  # fmt: skip
def test_the_process_ends_with_the_commands_status_its_output_and_atexit(
    what: str, args: list[str], status: int
) -> None:
    proc = _python(COMMAND, what, *args, timeout=30)
    assert proc.returncode == status, proc.stderr
    assert proc.stdout == "x" * 100_000 + "\n"  # nothing lost in the buffer
    assert "atexit ran" in proc.stderr
    if what == "message":
        assert "command: failed" in proc.stderr


def test_a_reader_that_went_away_is_not_a_failure(tmp_path: Path) -> None:
    """`usb-scan --dry-run | head -1`: the rest of the output cannot be written."""
    script = tmp_path / "command.py"
    script.write_text(COMMAND.replace('"x" * 100_000 + "\\n"', '"line\\n" * 100_000'))
    proc = subprocess.Popen(
        [sys.executable, str(script), "code", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "line\n"
    proc.stdout.close()  # as `head -1` does once it has its line
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_a_one_shot_tool_ends_as_before(tmp_path: Path) -> None:
    """A producer's dry run through its module: the labels on stdout, status 0; a host
    root that does not exist: its documented status and one line on stderr."""
    from tests.fixturegen import build_host

    host = build_host("rpi4-coral", tmp_path / "host")
    ok = _python("import runpy; runpy.run_module('edgefd.usb_scan', run_name='__main__')",
                 "--dry-run", "--host-root", str(host))  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "edgefd.usb_scan", "--dry-run", "--host-root", "/nonexistent"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode not in (0, 1), bad
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
