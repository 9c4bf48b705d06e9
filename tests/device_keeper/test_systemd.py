"""A grant under the systemd cgroup driver, against a real systemd (the distribution's, booted
as the init of a sandboxed node: tests/system/systemd.py) and the kernel's device controller.

The container is a transient scope as runc asks systemd for one (`DevicePolicy=strict`, one
`DeviceAllow=` per node it was given) in the pod's slice. What must hold: `device-keeper grant`
(run in the node, as the keeper's pod is: in a PID namespace below systemd's) allows the new
node in the cgroup *and* in the scope's `DeviceAllow=`, so that neither a `daemon-reload` nor
a property change of the scope (what the kubelet's CPU manager does) takes it back; a revoked
node stays revoked through both. The contrast is measured in the same run: a node written only
into the cgroup (what a keeper without systemd would do) is gone after the reload.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers.processes import REPO_ROOT
from tests.system.cgroups import CgroupRoot
from tests.system.mountns import MountNamespace, tmp_dirs
from tests.system.systemd import SYSTEMD, NodeInit

from .conftest import _need
from .probe import probe

pytestmark = [pytest.mark.root, pytest.mark.slow]

SLICE = "kubepods-besteffort-pod0e1f.slice"
UNIT = "cri-containerd-c0ffee.scope"
SLICES = "kubepods.slice/kubepods-besteffort.slice/" + SLICE
KEEPER = str(Path(sys.executable).with_name("device-keeper"))
CORAL_OLD, CORAL_NEW, ELSE = ("c", 189, 4, "r"), ("c", 189, 5, "r"), ("c", 189, 7, "r")


class Node:
    """The sandboxed node: its systemd, the scope of a stand-in container and the scope's
    device cgroup (v1 on these hybrid machines; v2's when that is the layout)."""

    def __init__(self, init: NodeInit, root: CgroupRoot) -> None:
        self.init = init
        self.root = root

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(self.init.argv(list(argv)), capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr}")
        return r

    def keeper(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`device-keeper grant` in the node on the scope (its path in the node's own
        cgroup mount, as the keeper's pod sees the host's)."""
        return self.run(KEEPER, "grant", "--cgroup", self.inside, *args, check=check)

    @property
    def inside(self) -> str:
        sub = "devices" if self._v1 else ""
        return os.path.join("/sys/fs/cgroup", sub, SLICES, UNIT)

    @property
    def _v1(self) -> bool:
        return (self.root.fs / "devices" / "devices.list").exists()

    def probe(self) -> dict[tuple[str, int, int, str], bool]:
        """What a process in the scope may open, asked of the kernel (from the machine)."""
        h = self.root.fs / ("devices" if self._v1 else "unified")
        if not self._v1 and not (h / "cgroup.controllers").exists():
            h = self.root.fs
        d = h / self.root.name / SLICES / UNIT
        return probe([str(d / "cgroup.procs")], [CORAL_OLD, CORAL_NEW, ELSE])

    def device_allow(self) -> str:
        return self.run("systemctl", "show", "-p", "DeviceAllow", "--value", UNIT).stdout.strip()


@pytest.fixture
def node(as_root: None, tmp_path: Path) -> Iterator[Node]:
    for tool in (SYSTEMD, shutil.which("systemd-run") or "/usr/bin/systemd-run"):
        if not os.path.exists(tool):
            _need(f"no {tool}: the systemd package (scripts/lib/packages installs it)")
    root = CgroupRoot(f"edgefd-keeper-systemd-{os.getpid()}", unified=True).create()
    ns = MountNamespace(tmp_path / "ns").start()
    init = NodeInit(tmp_path, ns.argv([]), root.dirs(), keep=tmp_dirs(tmp_path, REPO_ROOT))
    try:
        init.start()
        n = Node(init, root)
        # the stand-in container: a scope as runc asks for one, with the boot node 189:4
        run = ["systemd-run", "--scope", "--quiet", f"--unit={UNIT}", f"--slice={SLICE}"]
        props = ["-p", "DevicePolicy=strict", "-p", "DeviceAllow=/dev/char/189:4 rw"]
        scope = subprocess.Popen(
            init.argv([*run, *props, "sleep", "600"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while n.run("systemctl", "is-active", UNIT, check=False).stdout.strip() != "active":
            assert scope.poll() is None and time.monotonic() < deadline, "the scope never ran"
            time.sleep(0.1)
        yield n
    finally:
        init.stop()
        ns.stop()
        root.kill_all()
        assert root.remove() == []


def test_a_grant_survives_daemon_reload_and_property_changes(node: Node) -> None:
    assert node.probe() == {CORAL_OLD: True, CORAL_NEW: False, ELSE: False}

    out = json.loads(node.keeper("--allow", "c:189:5", "--revoke", "c:189:4", "-o", "json").stdout)
    assert out["systemd"]["unit"] == UNIT
    assert "/dev/char/189:5 rw" in out["systemd"]["device_allow"]
    assert "/dev/char/189:5 rw" in node.device_allow()
    assert "189:4" not in node.device_allow()
    assert node.probe() == {CORAL_OLD: False, CORAL_NEW: True, ELSE: False}

    # the contrast: a node written only into the cgroup, as a keeper without systemd would
    if node._v1:
        allow = node.root.fs / "devices" / node.root.name / SLICES / UNIT / "devices.allow"
        allow.write_text("c 189:7 r")
        assert node.probe()[ELSE] is True

    node.run("systemctl", "daemon-reload")
    assert node.probe() == {CORAL_OLD: False, CORAL_NEW: True, ELSE: False}

    node.run("systemctl", "set-property", "--runtime", UNIT, "CPUWeight=50")
    assert node.probe() == {CORAL_OLD: False, CORAL_NEW: True, ELSE: False}

    # the device moves on again: 189:5 revoked through both, 189:6 given
    node.keeper("--allow", "c:189:6", "--revoke", "c:189:5")
    node.run("systemctl", "daemon-reload")
    assert node.probe()[CORAL_NEW] is False
    assert "189:5" not in node.device_allow() and "/dev/char/189:6 rw" in node.device_allow()


def test_the_same_grant_twice_changes_nothing(node: Node) -> None:
    node.keeper("--allow", "c:189:5")
    before = node.device_allow()
    again = json.loads(node.keeper("--allow", "c:189:5", "-o", "json").stdout)
    assert again["changed"] is False
    assert node.device_allow() == before


def test_the_dry_run_says_the_scope_and_changes_nothing(node: Node) -> None:
    out = node.keeper("--allow", "c:189:5", "--revoke", "c:189:4", "--dry-run").stdout
    assert [line for line in out.splitlines() if line.startswith(UNIT)] == [
        f"{UNIT}: DeviceAllow=/dev/char/189:5 rw"
    ]
    assert node.device_allow() == "/dev/char/189:4 rw"
    assert node.probe() == {CORAL_OLD: True, CORAL_NEW: False, ELSE: False}


@pytest.mark.parametrize("socket", ["", "/run/systemd/nowhere"])
def test_without_systemd_the_scope_is_refused_saying_why(node: Node, socket: str) -> None:
    r = node.keeper("--allow", "c:189:5", "--systemd-socket", socket, check=False)
    assert r.returncode == 1, r.stderr
    assert "daemon-reload" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert node.probe() == {CORAL_OLD: True, CORAL_NEW: False, ELSE: False}
