"""The service on one move: exactly the holders' running containers get the new node, in
their cgroups and at their own path; a container that was not given the device gets neither
node; a systemd-managed one is refused, logged and counted. Kernel and stand-in containers
are real (root); the kubelet's and the runtime's answers are given (the real ones: the e2e
node's check 6k, tests/system/checks_keeper.py)."""

from __future__ import annotations

import logging
import os

import pytest

from edgefd.device_keeper.containers import Container
from edgefd.device_keeper.holders import Holder
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.moves import Move
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Keeper, Worker
from edgefd.inventory.decisions import Decisions, Handout

from .cgroups import RUNC_RULES
from .conftest import _cleanup
from .pods import CORAL, PATH, PODS, handout
from .probe import probe

pytestmark = pytest.mark.root

OLD, NEW = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)
NOT_GIVEN = [r for r in RUNC_RULES if r.get("major") != 189]


def move(
    h: Handout = CORAL,
    old: DeviceNumber | None = OLD,
    new: DeviceNumber = NEW,
    old_path: str = PATH,
    *others: Handout,
) -> Move:
    """A move of `h`'s node as the keeper's tracker makes it, of decisions listing `h` (at
    `new`) and `others`; `old` None: a catch-up."""
    decisions = Decisions(0.0, (h, *others))
    node = h.nodes[0]
    was = tuple((p, DeviceNumber("c", *map(int, n.split(":")[1:]))) for p, n in node.was)
    if old is None:
        return Move(h, new, node.path, was=was, decisions=decisions)
    return Move(h, new, node.path, old=old, old_path=old_path, was=was, decisions=decisions)


MOVE = move()


class Pods:
    def list(self):
        return PODS


class Runtime:
    def __init__(self, by_pod):
        self.by_pod = by_pod

    def containers(self, holder):
        c = self.by_pod.get(holder.pod)
        return [] if c is None else [Container(holder, *c)]


def _spec(node):
    """The runtime spec's linux.devices of a container given `node` ("189:4") at PATH."""
    major, minor = (int(x) for x in node.split(":"))
    return ((PATH, DeviceNumber("c", major, minor)),)


def _two_pods(v2_cgroups, runc_filter, standin, *pods):
    """For each (pod, node its path names, runc rules or None: the holder's): a fresh v2
    cgroup with runc's filter and a stand-in container in it; and the runtime finding them
    (its spec: that node at the path)."""
    made, by_pod = [], {}
    for (pod, node, rules), cid in zip(pods, ("c0ffee", "decaf"), strict=True):
        cg = v2_cgroups()
        runc_filter(cg, rules) if rules is not None else runc_filter(cg)
        p = standin("coral-usb-1-1-3", node, cgroups=[cg])
        by_pod[pod] = (cid, p.pid, f"/{cg.name}", _spec(node))
        made.append((cg, p))
    return (*made, Runtime(by_pod))


def _probe(cg):
    return probe([str(cg / "cgroup.procs")], [("c", 189, 4, "r"), ("c", 189, 5, "r")])


def test_only_the_holder_gets_the_new_node(v2_cgroups, runc_filter, standin, caplog):
    (holder_cg, holder), (other_cg, other), runtime = _two_pods(
        v2_cgroups,
        runc_filter,
        standin,
        ("detector", "189:4", None),
        ("other-port", "189:4", NOT_GIVEN),
    )
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics)
    with caplog.at_level(logging.INFO, logger="device-keeper"):
        done = keeper.handle(MOVE)

    assert [(d.holder.pod, d.node) for d in done] == [("detector", "replaced")]
    assert _probe(holder_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True}
    assert _probe(other_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): False}
    assert os.minor(os.stat(f"/proc/{holder.pid}/root{PATH}").st_rdev) == 5
    assert os.minor(os.stat(f"/proc/{other.pid}/root{PATH}").st_rdev) == 4
    assert metrics.value("edgefd_device_keeper_grants_total", cgroup="v2") == 1
    assert metrics.value("edgefd_device_keeper_revokes_total", cgroup="v2") == 1
    assert metrics.value("edgefd_device_keeper_node_replacements_total", result="replaced") == 1
    assert (
        "ns/detector/app (container c0ffee, via device-plugin): allowed c 189:5, revoked c 189:4"
        in caplog.text
    )


def test_dry_run_changes_nothing(v2_cgroup, runc_filter, standin):
    runc_filter(v2_cgroup)
    p = standin("coral-usb-1-1-3", "189:4", cgroups=[v2_cgroup])
    runtime = Runtime({"detector": ("c0ffee", p.pid, f"/{v2_cgroup.name}", _spec("189:4"))})
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), dry_run=True)
    done = keeper.handle(MOVE)
    assert done[0].node == "would name c 189:5"
    assert _probe(v2_cgroup)[("c", 189, 5, "r")] is False
    assert os.minor(os.stat(f"/proc/{p.pid}/root{PATH}").st_rdev) == 4


@pytest.mark.parametrize("systemd", [None, "/run/edgefd-test/no-systemd"])
def test_systemd_scope_without_systemd_is_refused_with_one_line_and_a_metric(
    caplog, v2_cgroup, runc_filter, systemd
):
    """A container under the systemd driver, and no systemd reached (none given, or its
    socket not there): refused, said once, counted (the grant with a real systemd:
    test_systemd.py)."""
    from edgefd.device_keeper.systemd import Systemd

    scope = v2_cgroup / "kubepods.slice/kubepods-pod1.slice/cri-containerd-c0ffee.scope"
    scope.mkdir(parents=True)
    try:
        runc_filter(scope)
        path = "kubepods-pod1.slice:cri-containerd:c0ffee"
        runtime = Runtime({"detector": ("c0ffee", 1, path, _spec("189:4"))})
        metrics = KeeperMetrics()
        sd = Systemd(systemd) if systemd else None
        keeper = Keeper(Pods(), runtime, str(v2_cgroup), "/proc", metrics, systemd=sd)
        with caplog.at_level(logging.WARNING, logger="device-keeper"):
            done = keeper.handle(MOVE)
        assert "daemon-reload" in done[0].refused and done[0].node == "skipped: no grant"
        assert (systemd or "no systemd") in done[0].refused
        assert metrics.value("edgefd_device_keeper_refused_total", reason="systemd") == 1
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "daemon-reload" in lines[0]
        assert _probe(scope)[("c", 189, 5, "r")] is False
    finally:
        for d in (scope, scope.parent, scope.parent.parent):
            _cleanup(d)


def test_nobody_holds_it():
    keeper = Keeper(Pods(), Runtime({}), "/sys/fs/cgroup", "/proc", KeeperMetrics())
    ncs2 = handout("ncs2-1-2", "c:189:8", plugin=(("edgefd.io/ncs2", ("ncs2-1-2",)),), dra=())
    assert keeper.handle(move(ncs2, DeviceNumber("c", 189, 7), DeviceNumber("c", 189, 8))) == []


def test_holder_listed_but_runtime_unreachable():
    from edgefd.core.errors import Unreachable

    class Down:
        def containers(self, holder):
            raise Unreachable("CRI ListContainers: UNAVAILABLE: connection refused")

    metrics = KeeperMetrics()
    done = Keeper(Pods(), Down(), "/sys/fs/cgroup", "/proc", metrics).handle(MOVE)
    assert {d.holder for d in done} >= {Holder("ns", "detector", "app", "device-plugin")}
    assert metrics.value("edgefd_device_keeper_errors_total", stage="runtime") == 3


def test_a_catch_up_grants_only_holders_whose_path_names_another_node(
    v2_cgroups, runc_filter, standin, caplog
):
    """The keeper's first look (old None): a holder the runtime gave the boot node 189:4
    missed the move while the keeper was away and gets 189:5 now; a holder created with
    189:5 is left exactly as it is (no grant, no revoke)."""
    (missed_cg, missed), (current_cg, _), runtime = _two_pods(
        v2_cgroups, runc_filter, standin, ("detector", "189:4", None), ("shared", "189:5", None)
    )
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics)
    with caplog.at_level(logging.INFO, logger="device-keeper"):
        done = keeper.handle(move(old=None))

    assert sorted((d.holder.pod, d.node) for d in done) == [
        ("detector", "replaced"),
        ("shared", "current"),
    ]
    assert _probe(missed_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True}
    assert _probe(current_cg) == {("c", 189, 4, "r"): True, ("c", 189, 5, "r"): False}
    assert os.minor(os.stat(f"/proc/{missed.pid}/root{PATH}").st_rdev) == 5
    assert metrics.value("edgefd_device_keeper_moves_total") == 0  # a catch-up is no move
    assert metrics.value("edgefd_device_keeper_grants_total", cgroup="v2") == 1
    assert "a move missed while the keeper was not running" in caplog.text


NEW = DeviceNumber("c", 189, 5)
FULL = ("c", 1, 7, "r")


def _holder(cg, runc_filter, standin, v1=False):
    """One holder, given 189:4 by the runtime (spec and runc's rules), in cgroup `cg`."""
    runc_filter(cg, v1=v1)
    p = standin("coral-usb-1-1-3", "189:4", cgroups=[cg])
    return p, Runtime({"detector": ("c0ffee", p.pid, f"/{cg.name}", _spec("189:4"))})


def _path(p, name=PATH):
    return f"/proc/{p.pid}/root{name}"


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_path_hard_linked_to_dev_full_does_not_choose_the_revoke(
    version, v2_cgroups, request, runc_filter, standin, tmp_path
):
    """Issue 30 item 1: a root process in the container links /dev/full over its path; the
    keeper restarts and catches the device up: the boot minor the runtime allowed is revoked
    (never c 1:7, which the path names), and the path is left alone."""
    cg = v2_cgroups() if version == "v2" else request.getfixturevalue("v1_devices")
    p, runtime = _holder(cg, runc_filter, standin, v1=version == "v1")
    os.mknod(_path(p, "/dev/full"), 0o20666, os.makedev(1, 7))
    os.unlink(_path(p))
    os.link(_path(p, "/dev/full"), _path(p))
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    [done] = [d for d in keeper.handle(move(old=None)) if d.holder.pod == "detector"]
    after = probe([str(cg / "cgroup.procs")], [("c", 189, 4, "r"), ("c", 189, 5, "r"), FULL])
    assert after == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True, FULL: True}
    assert done.node.startswith("failed:")
    assert done.node.endswith("names c 1:7, not the old node c 189:4; left alone")
    assert os.stat(_path(p)).st_rdev == os.makedev(1, 7)
    if version == "v1":
        listed = (cg / "devices.list").read_text().split("\n")
        assert "c 189:5 rw" in listed and not any(x.startswith("c 189:4 ") for x in listed)


def test_grants_are_remembered_across_a_restart_and_a_removed_path(
    v2_cgroup, runc_filter, standin, tmp_path, caplog
):
    """Issue 30 item 6: the keeper grants 189:5, restarts; the device moves to 189:6 while it
    is away and the container removed its path: the next process still revokes the runtime's
    189:4 and its own earlier 189:5 (its ledger), and makes the path again."""
    from edgefd.device_keeper.ledger import Ledger

    p, runtime = _holder(v2_cgroup, runc_filter, standin)
    state = tmp_path / "keeper" / "granted.json"
    first = Keeper(
        Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), ledger=Ledger(state)
    )
    first.handle(MOVE)
    assert state.is_file()
    again = Keeper(
        Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), ledger=Ledger(state)
    )
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        [same] = [d for d in again.handle(move(old=None)) if d.container]
    assert same.node == "unchanged" and "a move missed" not in caplog.text  # nothing missed
    os.unlink(_path(p))
    later = Keeper(
        Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), ledger=Ledger(state)
    )
    nodes = [("c", 189, m, "r") for m in (4, 5, 6)]
    at6 = handout(number="c:189:6")
    [done] = [d for d in later.handle(move(at6, None, DeviceNumber("c", 189, 6))) if d.container]
    assert probe([str(v2_cgroup / "cgroup.procs")], nodes) == dict(
        zip(nodes, [False, False, True], strict=True)
    )
    assert done.node == "replaced" and os.stat(_path(p)).st_rdev == os.makedev(189, 6)


def test_a_ledger_that_cannot_be_saved_allows_nothing_new(
    v2_cgroup, runc_filter, standin, tmp_path, caplog
):
    """Issue 46 item 5: with the ledger's disk refusing writes, a move revokes the old number
    but allows nothing (a grant the next process could not prove is not made), leaves the
    path, counts the refusal; once the ledger saves again the next move is granted."""
    from edgefd.device_keeper.ledger import Ledger

    p, runtime = _holder(v2_cgroup, runc_filter, standin)
    (tmp_path / "state").write_text("")  # the state dir is a file: no save can succeed
    metrics = KeeperMetrics()
    led = Ledger(tmp_path / "state" / "granted.json")
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics, ledger=led)
    with caplog.at_level(logging.ERROR, logger="device-keeper"):
        [done] = [d for d in keeper.handle(MOVE) if d.container]
    assert (done.allowed, done.revoked, done.node) == ("", ["c 189:4"], "skipped: not granted")
    assert "c 189:5 not allowed" in done.refused and "cannot save the grants" in done.refused
    assert _probe(v2_cgroup) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): False}
    assert os.stat(_path(p)).st_rdev == os.makedev(189, 4)
    assert metrics.value("edgefd_device_keeper_refused_total", reason="ledger") == 1
    assert led.unsaved
    (tmp_path / "state").unlink()
    (tmp_path / "state").mkdir()
    [done] = [d for d in keeper.handle(move(old=None)) if d.container]
    assert (done.allowed, done.node) == ("c 189:5", "replaced") and not led.unsaved
    assert _probe(v2_cgroup) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True}
    assert Ledger(tmp_path / "state" / "granted.json").granted("c0ffee", PATH) == {NEW}


def test_a_pid_of_another_container_is_never_written_into(v2_cgroups, runc_filter, standin, caplog):
    """Issue 30 item 9: the runtime's pid for the holder is now a process of another container
    (reused): the holder's cgroup is granted, but nothing is written into the other's /dev."""
    holder_cg, other_cg = v2_cgroups(), v2_cgroups()
    runc_filter(holder_cg)
    runc_filter(other_cg)
    other = standin("coral-usb-1-1-3", "189:4", cgroups=[other_cg])
    runtime = Runtime({"detector": ("c0ffee", other.pid, f"/{holder_cg.name}", _spec("189:4"))})
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    with caplog.at_level(logging.ERROR, logger="device-keeper"):
        [done] = [d for d in keeper.handle(MOVE) if d.container]
    assert done.node.startswith("skipped:") and "not in the container's cgroup" in done.node
    assert os.stat(_path(other)).st_rdev == os.makedev(189, 4)
    assert "its path not written" in caplog.text


def test_a_pid_reused_between_the_check_and_the_write_is_not_written_into(
    v2_cgroup, runc_filter, standin, monkeypatch
):
    """The pid was the container's when checked, and is another process (another start time)
    once its root is open: nothing is written."""
    from edgefd.device_keeper import containers

    p, runtime = _holder(v2_cgroup, runc_filter, standin)
    real, calls = containers.process_start, []

    def start(proc, pid):
        calls.append(pid)
        return real(proc, pid) + (1 if len(calls) > 2 else 0)  # 2: identify's own two reads

    monkeypatch.setattr(containers, "process_start", start)
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    [done] = [d for d in keeper.handle(MOVE) if d.container]
    assert done.node.startswith("skipped:") and "pid reused" in done.node
    assert os.stat(_path(p)).st_rdev == os.makedev(189, 4)


def test_a_number_the_container_holds_through_another_device_is_not_revoked(
    v2_cgroup, runc_filter, standin
):
    """Two Corals in one container: the second was given the first's boot minor 189:4 when it
    re-enumerated (the kernel hands a freed minor to the next device); the first moving on
    revokes its own 189:5, never 189:4, which devplugin's decisions say is the second's now."""
    from .pods import plugin, pod

    _, runtime = _holder(v2_cgroup, runc_filter, standin)
    second = handout(
        "coral-usb-1-1-4", "c:189:4", plugin=(("edgefd.io/coral-usb", ("coral-usb-1-1-4",)),)
    )

    class Both:
        def list(self):
            ids = ("coral-usb-1-1-3", "coral-usb-1-1-4")
            return [pod("ns", "detector", [plugin("app", "edgefd.io/coral-usb", *ids)])]

    keeper = Keeper(Both(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    at7 = handout(number="c:189:7")
    keeper.handle(move(at7, OLD, DeviceNumber("c", 189, 7), PATH, second))
    nodes = [("c", 189, m, "r") for m in (4, 5, 7)]
    assert probe([str(v2_cgroup / "cgroup.procs")], nodes) == dict(
        zip(nodes, [True, False, True], strict=True)
    )


BUS_OLD, BUS_NEW = "/dev/bus/usb/002/005", "/dev/bus/usb/002/006"


def _bus_holder(cg, runc_filter, standin, node="189:132", path=BUS_OLD):
    """A holder given the Coral without the bus mount: its node at its bus path."""
    runc_filter(cg, [*NOT_GIVEN, {"type": "c", "major": 189, "minor": int(node.split(":")[1]),
                                  "access": "rw", "allow": True}])  # fmt: skip
    p = standin("coral-usb-1-1-3", node, cgroups=[cg], uid=0, path=path)
    major, minor = (int(x) for x in node.split(":"))
    spec = ((path, DeviceNumber("c", major, minor)),)
    return p, Runtime({"detector": ("c0ffee", p.pid, f"/{cg.name}", spec)})


def test_without_the_bus_mount_the_node_moves_to_its_new_bus_path(v2_cgroup, runc_filter, standin):
    """`usb_bus_mount: false`: devplugin gave the node at its bus path; the device comes back
    with the next devnum, so the path moves with the number. The holder is allowed the new
    number, denied the old, finds the node at the new bus path (with the old one's mode and
    owner), and the stale node is gone."""
    p, runtime = _bus_holder(v2_cgroup, runc_filter, standin)
    os.chown(_path(p, BUS_OLD), 0, 46)
    h = handout(number="c:189:133", path=BUS_NEW, was=((BUS_OLD, "c:189:132"),))
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    bus_move = move(h, DeviceNumber("c", 189, 132), DeviceNumber("c", 189, 133), BUS_OLD)
    [done] = [d for d in keeper.handle(bus_move) if d.container]
    assert done.node == "replaced"
    nodes = [("c", 189, 132, "r"), ("c", 189, 133, "r")]
    assert probe([str(v2_cgroup / "cgroup.procs")], nodes) == {nodes[0]: False, nodes[1]: True}
    st = os.stat(_path(p, BUS_NEW))
    assert (st.st_rdev, st.st_gid, st.st_mode & 0o777) == (os.makedev(189, 133), 46, 0o660)
    assert not os.path.exists(_path(p, BUS_OLD)) and not os.path.exists(_path(p))


def test_a_catch_up_at_a_bus_path_finds_the_runtimes_node_by_what_it_was_given(
    v2_cgroup, runc_filter, standin
):
    """The keeper was away while the device moved twice: the container was created with
    (/dev/bus/usb/002/005, 189:132); the device is at 002/007 now, and devplugin's decisions
    say the node was given at 002/006 and 002/005 before. The first look revokes the runtime's
    node, grants the new one at its path and removes the stale one."""
    p, runtime = _bus_holder(v2_cgroup, runc_filter, standin)
    new_path = "/dev/bus/usb/002/007"
    h = handout(number="c:189:134", path=new_path,
                was=((BUS_NEW, "c:189:133"), (BUS_OLD, "c:189:132")))  # fmt: skip
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    [done] = [d for d in keeper.handle(move(h, None, DeviceNumber("c", 189, 134))) if d.container]
    assert done.node == "replaced" and done.revoked == ["c 189:132"]
    nodes = [("c", 189, 132, "r"), ("c", 189, 134, "r")]
    assert probe([str(v2_cgroup / "cgroup.procs")], nodes) == {nodes[0]: False, nodes[1]: True}
    assert os.stat(_path(p, new_path)).st_rdev == os.makedev(189, 134)
    assert not os.path.exists(_path(p, BUS_OLD))


def test_a_catch_up_leaves_a_container_made_with_the_node_as_it_is_now(
    v2_cgroup, runc_filter, standin
):
    """Created after the move (its spec names the node devplugin gives now): nothing to do,
    whatever the node was given as before."""
    _, runtime = _bus_holder(v2_cgroup, runc_filter, standin, "189:133", BUS_NEW)
    h = handout(number="c:189:133", path=BUS_NEW, was=((BUS_OLD, "c:189:132"),))
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    [done] = [d for d in keeper.handle(move(h, None, DeviceNumber("c", 189, 133))) if d.container]
    assert done.node == "current" and done.cgroups == []


def test_a_pci_device_keeps_its_path_and_gets_its_new_number(v2_cgroup, runc_filter, standin):
    """A Coral PCIe at /dev/apex_0 whose driver came back with another minor: the holder's
    /dev/apex_0 names the new number, allowed, and the old one is denied."""
    runc_filter(v2_cgroup, [*NOT_GIVEN, {"type": "c", "major": 509, "minor": 0, "access": "rw",
                                          "allow": True}])  # fmt: skip
    p = standin("coral-pcie-0000-02-00-0", "509:0", cgroups=[v2_cgroup], path="/dev/apex_0")
    spec = (("/dev/apex_0", DeviceNumber("c", 509, 0)),)
    runtime = Runtime({"detector": ("c0ffee", p.pid, f"/{v2_cgroup.name}", spec)})
    name = "coral-pcie-0000-02-00-0"
    h = handout(name, "c:509:1", "/dev/apex_0", plugin=(("edgefd.io/coral-pcie", (name,)),))

    class Held:
        def list(self):
            from .pods import plugin, pod

            return [pod("ns", "detector", [plugin("app", "edgefd.io/coral-pcie", name)])]

    keeper = Keeper(Held(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    [done] = keeper.handle(
        move(h, DeviceNumber("c", 509, 0), DeviceNumber("c", 509, 1), "/dev/apex_0")
    )
    assert done.node == "replaced"
    nodes = [("c", 509, 0, "r"), ("c", 509, 1, "r")]
    assert probe([str(v2_cgroup / "cgroup.procs")], nodes) == {nodes[0]: False, nodes[1]: True}
    assert os.stat(_path(p, "/dev/apex_0")).st_rdev == os.makedev(509, 1)


def test_what_one_container_did_to_its_dev_stops_neither_the_others_nor_the_worker(
    v2_cgroups, runc_filter, standin, caplog
):
    """issue 30 (2): a holder that put a directory at the keeper's temporary name (or any
    failure of one container) killed the worker, and with it every other pod's grant on the
    node. Now its path is left alone and said, the other holder is granted, and the worker
    goes on with the next move."""
    (_, planted), (other_cg, other), runtime = _two_pods(
        v2_cgroups, runc_filter, standin, ("detector", "189:4", None), ("shared", "189:4", None)
    )
    os.mkdir(f"/proc/{planted.pid}/root/dev/edgefd/.coral-usb-1-1-3.edgefd-keeper")
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics)
    reported = []
    with caplog.at_level(logging.INFO, logger="device-keeper"):
        keeper.run([MOVE, MOVE], lambda move, done: reported.append(done))

    first = {d.holder.pod: d.node for d in reported[0]}
    assert first["shared"] == "replaced" and first["detector"].startswith("failed: ")
    assert "temporary name" in first["detector"]
    assert len(reported) == 2  # the next move was handled too
    assert os.minor(os.stat(f"/proc/{other.pid}/root{PATH}").st_rdev) == 5
    assert os.minor(os.stat(f"/proc/{planted.pid}/root{PATH}").st_rdev) == 4
    assert _probe(other_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True}
    assert metrics.value("edgefd_device_keeper_node_replacements_total", result="failed") == 2


def test_an_unexpected_failure_of_one_container_is_its_own(caplog):
    """A failure the keeper did not foresee in one container (here its cgroup lookup) is
    logged with its traceback and counted, and the next holder is still handled."""

    class Odd(Container):
        def cgroup_dirs(self, cgroup_fs):
            raise RuntimeError("something no test foresaw")

    class Both:
        def containers(self, holder):
            cls = Odd if holder.pod == "detector" else Container
            return [cls(holder, f"id-{holder.pod}", 1, "/nonexistent-cgroup", _spec("189:4"))]

    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), Both(), "/nonexistent", "/proc", metrics)
    with caplog.at_level(logging.ERROR, logger="device-keeper"):
        done = keeper.handle(MOVE)
    by_pod = {d.holder.pod: d for d in done}
    assert by_pod["detector"].refused == "RuntimeError: something no test foresaw"
    assert by_pod["shared"].node == "skipped: no grant"  # handled after the failure
    assert metrics.value("edgefd_device_keeper_errors_total", stage="container") == 1
    assert "the other holders go on" in caplog.text and "Traceback" in caplog.text


def test_a_worker_that_cannot_start_ends_the_process():
    """A failure before the first move (its preparation) ended the thread silently: the
    process ran on with nobody granting anything."""
    from edgefd.runtime.runner import Lifeline

    class Unprepared(Worker):
        def prepare(self):
            raise ImportError("no gRPC stubs")

    lifeline = Lifeline()
    keeper = Keeper(Pods(), Runtime({}), "/nonexistent", "/proc", KeeperMetrics())
    worker = Unprepared(keeper, lambda m, d: None, lifeline, "grants")
    worker.start([])
    worker.join(10)
    assert isinstance(lifeline.failure, ImportError)


def test_a_program_beside_runcs_blocks_that_holder_only(v2_cgroups, runc_filter, standin, caplog):
    """issue 30 (9): on a holder whose cgroup also carries a security agent's deny-all, the
    agent's program is left as it is and the grant is said to be blocked (no "allowed" line,
    its path left naming the old node); the other holder is granted as ever."""
    from .foreign_programs import DENY_ALL, attach_other

    (agent_cg, agent), (other_cg, other), runtime = _two_pods(
        v2_cgroups, runc_filter, standin, ("detector", "189:4", None), ("shared", "189:4", None)
    )
    attach_other(agent_cg, DENY_ALL, "agent_deny")
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics)
    with caplog.at_level(logging.INFO, logger="device-keeper"):
        done = {d.holder.pod: d for d in keeper.handle(MOVE)}
    assert "not granted c 189:5: program " in done["detector"].refused
    assert done["detector"].node == "skipped: no grant" and done["shared"].node == "replaced"
    assert _probe(agent_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): False}
    assert _probe(other_cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): True}
    assert os.minor(os.stat(f"/proc/{agent.pid}/root{PATH}").st_rdev) == 4
    assert os.minor(os.stat(f"/proc/{other.pid}/root{PATH}").st_rdev) == 5
    assert metrics.value("edgefd_device_keeper_refused_total", reason="program") == 1
    assert "ns/detector/app (container c0ffee" not in caplog.text  # never "allowed"
