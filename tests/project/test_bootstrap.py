"""scripts/bootstrap: a second run finds everything installed and does nothing; a first run, in a
fresh clone, installs into the project's virtualenv and nothing into the user's Python."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bootstrap_with_everything_installed_is_a_quiet_no_op() -> None:
    """`make test` runs scripts/bootstrap before pytest, so by the time this runs everything is
    installed: a second bootstrap must find that out by itself (no pip, no apt)."""
    import edgefd

    if Path(edgefd.__file__).resolve().parent != ROOT / "tools":
        pytest.skip("edgefd is installed from another checkout; bootstrap would reinstall it")
    stamps = list((ROOT / ".cache").glob("pip-*"))
    if not stamps:
        pytest.skip("not installed through scripts/bootstrap")
    p = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert "pip install" not in p.stderr and "apt-get" not in p.stderr, p.stderr


WRAPPER = """#!/bin/sh
printf '%s\\n' "$*" >>{log}
exec {python} "$@"
"""
REFUSE = """#!/bin/sh
printf 'GLOBAL %s %s\\n' "$0" "$*" >>{log}
exit 1
"""


def _copy_checkout(dest: Path) -> None:
    """The files a fresh clone has (tracked and new ones; not .venv, .cache or other ignored)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())


@pytest.mark.slow
def test_bootstrap_installs_nothing_into_the_global_python(tmp_path: Path) -> None:
    """From a fresh clone, the bootstrap runs the Python it finds on PATH only to check its
    version and to create .venv; pip runs as .venv's alone. The 'global' Python here is a
    stand-in with site-packages of its own (empty), every `python3*` on PATH logs how it is
    called, and a `pip`/`pip3` on PATH fails the run if called."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone, bin_dir, log = tmp_path / "clone", tmp_path / "bin", tmp_path / "calls.log"
    _copy_checkout(clone)
    global_py = tmp_path / "global"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", global_py], check=True)
    bin_dir.mkdir()
    for name in ("python3", "python3.11", "python3.12", "python3.13", "python"):
        (bin_dir / name).write_text(WRAPPER.format(log=log, python=global_py / "bin" / "python"))
        (bin_dir / name).chmod(0o755)
    for name in ("pip", "pip3", "pip3.11"):
        (bin_dir / name).write_text(REFUSE.format(log=log))
        (bin_dir / name).chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "EDGEFD_PYTHON")
    }
    env["PATH"] = f"{bin_dir}:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["PYTHONUSERBASE"] = str(tmp_path / "userbase")
    env["PIP_NO_COMPILE"] = "1"  # where things go is the question, not their bytecode
    p = subprocess.run(
        [clone / "scripts" / "bootstrap"], cwd="/", env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    calls = log.read_text().splitlines()
    assert not [c for c in calls if c.startswith("GLOBAL")], calls
    assert all(c.startswith("-c import sys") or c == f"-m venv {clone}/.venv" for c in calls), calls
    assert f"-m venv {clone}/.venv" in calls
    (site,) = global_py.glob("lib/python3*/site-packages")
    assert list(site.iterdir()) == [], "something was installed into the global Python"
    assert not (tmp_path / "userbase").exists(), "something was installed into the user site"
    venv_python = clone / ".venv" / "bin" / "python"
    where = subprocess.run(
        [venv_python, "-c", "import edgefd; print(edgefd.__file__)"],
        cwd="/", capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).parent == clone / "tools"
    cfg = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg


APT_LOG = """#!/bin/sh
printf '%s\\n' "$*" >>{log}
"""


@pytest.mark.slow
def test_make_demo_installs_only_what_the_demo_needs(tmp_path: Path) -> None:
    """Issue 32 item 10: `make demo` (scripts/bootstrap --demo) asks apt for dtc alone and pip
    for edgefd alone: no hypothesis, ruff, import-linter, grpcio-tools, umockdev or python3-gi;
    and the demo then runs on that install."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone, log = tmp_path / "clone", tmp_path / "apt.log"
    _copy_checkout(clone)
    assert "\t@scripts/bootstrap --demo\n" in (clone / "Makefile").read_text()
    apt = clone / "scripts" / "lib" / "apt-ensure"
    apt.write_text(APT_LOG.format(log=log))  # what is asked for is the question here
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["EDGEFD_PYTHON"] = sys._base_executable
    p = subprocess.run(
        [clone / "scripts" / "bootstrap", "--demo"], cwd="/", env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert log.read_text().splitlines() == ["device-tree-compiler"]
    venv_python = clone / ".venv" / "bin" / "python"
    probe = (
        "import importlib.util as u, edgefd; print(edgefd.__file__); print(*[m for m in "
        "('hypothesis', 'ruff', 'importlinter', 'grpc_tools', 'pytest', 'gi') if u.find_spec(m)])"
    )
    where, extra = subprocess.run(
        [venv_python, "-c", probe], cwd="/", capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert Path(where).parent == clone / "tools" and extra == ""
    demo = subprocess.run(
        [clone / "scripts" / "demo"], cwd=clone, capture_output=True, text=True, timeout=300
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
