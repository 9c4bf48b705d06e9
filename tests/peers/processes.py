"""Processes of the real peers: where the harness binaries are, starting them so that they die
with the test run, stopping them, and waiting for a stopped one's port to be free again (the
ports themselves come from tests.helpers, as for every suite).

The binaries are built from the official Go modules by ``scripts/build-harness`` into
``.cache/harness/bin`` (``EDGEFD_HARNESS_BIN`` overrides). When one is missing the fixtures skip,
except when ``CI`` is set, where they fail: integration tests must never silently skip in CI.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN_DIR = REPO_ROOT / ".cache" / "harness" / "bin"


def harness_bin_dir() -> Path:
    return Path(os.environ.get("EDGEFD_HARNESS_BIN") or DEFAULT_BIN_DIR)


BUILD_LOCK = REPO_ROOT / ".cache" / "harness" / ".lock"
BUILD_WAIT = 1800.0  # seconds: a cold build of the largest group on 2 busy cores, with room


def wait_for_build(lock: Path = BUILD_LOCK, timeout: float = BUILD_WAIT) -> bool:
    """Wait while scripts/build-harness holds its lock (a build in progress: scripts/bootstrap
    leaves the node's runtime and helm building in the background while the first tests run).
    True when a build was waited for; False when none was running."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        deadline, waited = time.monotonic() + timeout, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{lock} still held after {timeout:.0f} s") from None
                waited = True
                time.sleep(0.5)
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            return waited
    finally:
        os.close(fd)


def harness_binary(name: str, executable: bool = True) -> Path:
    """Path of a harness binary (or, not `executable`, a file the harness copied from a
    module it pins); skip (or fail under CI) when it is missing. A binary whose build is in
    progress is waited for (scripts/build-harness moves a binary into place only once built)."""
    path = harness_bin_dir() / name

    def present() -> bool:
        return path.is_file() and (not executable or os.access(path, os.X_OK))

    if present() or (harness_bin_dir() == DEFAULT_BIN_DIR and wait_for_build() and present()):
        return path
    msg = (
        f"harness not built: {path} missing; run scripts/build-harness"
        " (a background build logs to .cache/harness/later.log)"
    )
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")  # pragma: no cover


_live_procs: list[subprocess.Popen] = []
_live_lock = threading.Lock()


def _load_prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # resolved here: the child after fork() should not dlopen


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """SIGKILL the child if pytest dies without running its finalizers (PR_SET_PDEATHSIG).

    SIGKILL, not SIGTERM: kube-apiserver may hang in graceful shutdown once etcd is gone."""
    if _prctl is not None:
        _prctl(1, int(signal.SIGKILL))


def spawn(argv: list[str], log_path: Path, **kw: Any) -> subprocess.Popen:
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the process lifetime
    try:
        proc = subprocess.Popen(
            argv,
            stdout=kw.pop("stdout", log),
            stderr=log,
            stdin=kw.pop("stdin", subprocess.DEVNULL),
            start_new_session=True,  # own process group: killpg takes children too
            preexec_fn=_die_with_parent,
            **kw,
        )
    finally:
        log.close()
    with _live_lock:
        _live_procs.append(proc)
    return proc


def kill(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # The leader exited; make sure nothing it started lingers.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with _live_lock:
        if proc in _live_procs:
            _live_procs.remove(proc)


@atexit.register
def _kill_all() -> None:
    with _live_lock:
        procs = list(_live_procs)
    for p in procs:
        kill(p, grace=3.0)


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def wait_port_free(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.1)
    raise RuntimeError(f"port {port} still busy after {timeout}s")


def wait_ready(
    check: Callable[[], bool], proc: subprocess.Popen, log: Path, what: str, timeout: float
) -> None:
    """Wait for ``check()``; fail early with the log's tail if the process exits."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail(log)}")
        return check()

    try:
        wait_until(ready, timeout, 0.25, what, errors=())
    except AssertionError:
        kill(proc)
        raise RuntimeError(f"{what} not ready after {timeout}s:\n{tail(log)}") from None
