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
from edgefd.device_keeper.holders import DeviceRef, Holder
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Keeper, Move, Worker

from .cgroups import RUNC_RULES, v2_root
from .pods import PODS
from .probe import probe

pytestmark = pytest.mark.root

CORAL = DeviceRef("coral-usb-1-1-3", plugin=frozenset({("edgefd.io/coral-usb", "usb-1-1.3")}))
MOVE = Move(CORAL, DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5))
PATH = "/dev/edgefd/coral-usb-1-1-3"
NOT_GIVEN = [r for r in RUNC_RULES if r.get("major") != 189]


class Pods:
    def list(self):
        return PODS


class Runtime:
    def __init__(self, by_pod):
        self.by_pod = by_pod

    def containers(self, holder):
        c = self.by_pod.get(holder.pod)
        return [] if c is None else [Container(holder, *c)]


def _two_pods(v2_cgroups, runc_filter, standin, *pods):
    """For each (pod, node its path names, runc rules or None: the holder's): a fresh v2
    cgroup with runc's filter and a stand-in container in it; and the runtime finding them."""
    made, by_pod = [], {}
    for (pod, node, rules), cid in zip(pods, ("c0ffee", "decaf"), strict=True):
        cg = v2_cgroups()
        runc_filter(cg, rules) if rules is not None else runc_filter(cg)
        p = standin("coral-usb-1-1-3", node, cgroups=[cg])
        by_pod[pod] = (cid, p.pid, f"/{cg.name}")
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
    runtime = Runtime({"detector": ("c0ffee", p.pid, f"/{v2_cgroup.name}")})
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), dry_run=True)
    done = keeper.handle(MOVE)
    assert done[0].node == "would name c 189:5"
    assert _probe(v2_cgroup)[("c", 189, 5, "r")] is False
    assert os.minor(os.stat(f"/proc/{p.pid}/root{PATH}").st_rdev) == 4


def test_systemd_driver_is_refused_with_one_line_and_a_metric(caplog):
    runtime = Runtime({"detector": ("c0ffee", 1, "kubepods-pod1.slice:cri-containerd:c0ffee")})
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, str(v2_root() or "/sys/fs/cgroup"), "/proc", metrics)
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        done = keeper.handle(MOVE)
    assert done[0].refused == "systemd cgroup driver"
    assert metrics.value("edgefd_device_keeper_refused_total", reason="systemd") == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "daemon-reload" in lines[0]


def test_nobody_holds_it():
    keeper = Keeper(Pods(), Runtime({}), "/sys/fs/cgroup", "/proc", KeeperMetrics())
    other = Move(DeviceRef("ncs2-1-2"), DeviceNumber("c", 189, 7), DeviceNumber("c", 189, 8))
    assert keeper.handle(other) == []


def test_holder_listed_but_runtime_unreachable():
    from edgefd.core.errors import Unreachable

    class Down:
        def containers(self, holder):
            raise Unreachable("CRI ListContainers: UNAVAILABLE: connection refused")

    metrics = KeeperMetrics()
    done = Keeper(Pods(), Down(), "/sys/fs/cgroup", "/proc", metrics).handle(MOVE)
    assert {d.holder for d in done} >= {Holder("ns", "detector", "app", "device-plugin")}
    assert metrics.value("edgefd_device_keeper_errors_total", stage="runtime") == 2


def test_a_catch_up_grants_only_holders_whose_path_names_another_node(
    v2_cgroups, runc_filter, standin, caplog
):
    """The keeper's first look (old None): a holder whose /dev/edgefd/<name> still names the
    boot node 189:4 missed the move while the keeper was away and gets 189:5 now; a holder
    whose path already names 189:5 is left exactly as it is (no grant, no revoke)."""
    (missed_cg, missed), (current_cg, _), runtime = _two_pods(
        v2_cgroups, runc_filter, standin, ("detector", "189:4", None), ("shared", "189:5", None)
    )
    metrics = KeeperMetrics()
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", metrics)
    with caplog.at_level(logging.INFO, logger="device-keeper"):
        done = keeper.handle(Move(CORAL, None, DeviceNumber("c", 189, 5)))

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
            return [cls(holder, f"id-{holder.pod}", 1, "/nonexistent-cgroup")]

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
