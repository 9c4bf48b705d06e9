"""Fixtures of the keeper's tests. For the kernel tests: fresh cgroups (v2 and the v1 devices
controller) as root, runc's own device filter on them (the harness's runc-devices, built from
github.com/opencontainers/cgroups) and stand-in containers. Without root or a cgroup hierarchy
these tests skip, and fail under CI: they are what shows the grant works. For the clients: gRPC
servers on unix sockets (the kubelet's and the runtime's stand-ins); for the inventory
source: the rpi4-coral fixture host."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.peers.processes import REPO_ROOT, harness_binary

from .cgroups import CGROUP_FS, RUNC_RULES, v2_root

_n = itertools.count()


def _need(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        _need("needs root (cgroups, bpf(2), mknod)")


def _cleanup(d: Path) -> None:
    """Remove a cgroup the test made: whatever still runs in it (a stand-in, a probe child)
    killed first, for up to 10 s; one left behind fails the test that made it."""
    deadline = time.monotonic() + 10
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
        try:
            for pid in (d / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)


@pytest.fixture
def v2_cgroups(as_root: None) -> Iterator[Callable[[], Path]]:
    """Make fresh v2 cgroups (removed at the end, once their processes are gone)."""
    root = v2_root()
    if root is None:
        _need("no cgroup v2 hierarchy mounted (mount -t cgroup2)")
    made: list[Path] = []

    def make() -> Path:
        d = root / f"edgefd-keeper-test-{os.getpid()}-{next(_n)}"
        d.mkdir()
        made.append(d)
        return d

    yield make
    for d in reversed(made):
        _cleanup(d)


@pytest.fixture
def v2_cgroup(v2_cgroups: Callable[[], Path]) -> Path:
    return v2_cgroups()


@pytest.fixture
def v1_devices(as_root: None) -> Iterator[Path]:
    base = CGROUP_FS / "devices"
    if not (base / "devices.list").exists():
        _need("no cgroup v1 devices controller at /sys/fs/cgroup/devices")
    d = base / f"edgefd-keeper-test-{os.getpid()}-{next(_n)}"
    d.mkdir()
    yield d
    _cleanup(d)


@pytest.fixture
def runc_filter() -> Callable[..., None]:
    """runc-devices: put runc's own device rules on a cgroup (v2 program, or v1 files)."""
    binary = harness_binary("runc-devices")

    def attach(cgroup: Path, rules: list[dict] = RUNC_RULES, v1: bool = False) -> None:
        argv = [str(binary), "-cgroup", str(cgroup), *(["-v1"] if v1 else [])]
        subprocess.run(argv, input=json.dumps(rules), text=True, check=True, timeout=30)

    return attach


@pytest.fixture
def standin(as_root: None, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start stand-in containers (standin.py); each is killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(
        name: str, node: str, uid: int = 0, cgroups: list[Path] = (), path: str = ""
    ) -> subprocess.Popen:
        root = tmp_path / f"root{len(procs)}"
        root.mkdir()
        argv = ["python3", "-m", "tests.device_keeper.standin", str(root), name, node]
        argv += ["--uid", str(uid), "--path", path]
        for cg in cgroups:
            argv += ["--cgroup-procs", str(cg / "cgroup.procs")]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=REPO_ROOT)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start in-process gRPC servers on unix sockets (`serve(add, servicer)` gives the
    socket's path); each is stopped at the end."""
    servers = []

    def start(add, servicer) -> str:
        sock = tmp_path / f"s{len(servers)}.sock"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add(servicer, server)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
        return str(sock)

    yield start
    for s in servers:
        s.stop(0)
