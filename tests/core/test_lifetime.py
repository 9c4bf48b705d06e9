"""A command's process (edgefd.core.lifetime): collection deferred by every command's entry
point before anything is imported, and back on, with start-up's objects frozen, once a
long-running tool serves; the end: the command's status, its whole output, the atexit
handlers, without the interpreter's teardown."""

from __future__ import annotations

import configparser
import gc
import subprocess
import sys
from pathlib import Path

import pytest

from edgefd.core import lifetime

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
def test_each_command_and_its_module_run_defer_collection_before_any_import(tool: str) -> None:
    """The console script names the tool's `__main__` (as `python -m` runs it), which defers
    collection before it imports the tool's command (and click with it)."""
    assert _console_scripts()[tool.replace("_", "-")] == f"edgefd.{tool}.__main__:main"
    code = (
        f"import sys, gc, edgefd.{tool}.__main__ as m\n"
        "print(gc.isenabled(), 'click' in sys.modules)\n"
        "sys.argv = ['x', '--version']\n"
        "m.main()"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["False", "False"]
    assert tool.replace("_", "-") in proc.stdout  # its command ran: the version line


def test_started_freezes_what_start_up_made_and_turns_collection_on() -> None:
    frozen = gc.get_freeze_count()
    try:
        lifetime.begin()
        assert not gc.isenabled()
        lifetime.started()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen
    finally:
        gc.enable()
        gc.unfreeze()


def test_started_leaves_a_process_that_did_not_begin_as_it_is() -> None:
    """A test (or a library user) calling the runner: its collector is not frozen."""
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    lifetime.started()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_long_running_tool_collects_again_once_it_serves() -> None:
    """The runner calls `started()` once its components run and the probes serve."""
    code = """
import gc, threading
from edgefd.core import lifetime
lifetime.begin()
from edgefd.runtime.runner import run

class Once:
    def start(self): pass
    def stop(self): pass
    def ready(self): return True, "ok"

def build(lifeline):
    threading.Timer(0.2, lifeline.done).start()
    return [Once()]

print(run(build, startup_line="t"), gc.isenabled(), gc.get_freeze_count() > 0)
"""
    proc = _python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True", "True"]


COMMAND = """
import atexit, sys, threading
from edgefd.core import lifetime
lifetime.begin()
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
