"""What the keeper takes as proof beside its ledger (proof.py), against real cgroups v1 and v2
with runc's own filter: a container the runtime did not give the device gets nothing, and a
restart whose ledger is lost keeps no grant it cannot prove."""

from __future__ import annotations

import logging
import os

import pytest

from edgefd.device_keeper.grant import grant
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.rules import DeviceNumber
from edgefd.device_keeper.service import Keeper

from .pods import PATH, handout
from .probe import probe
from .test_service import MOVE, NOT_GIVEN, Pods, Runtime, _path, _probe, _spec, move

pytestmark = pytest.mark.root


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_restart_with_a_lost_ledger_keeps_no_grant_it_cannot_prove(
    version, v2_cgroups, request, runc_filter, standin, tmp_path, caplog
):
    """Issue 46 item 5: the keeper granted 189:5 and its ledger is then corrupted; the device
    moves to 189:6 while it is away. The next process cannot prove 189:5 was its grant, so its
    catch-up revokes it with the runtime's 189:4 (it kept 189:5 before); a number the runtime
    gave at another path (189:9) and one of a device the container holds now are kept."""
    from edgefd.device_keeper.ledger import Ledger

    cg = v2_cgroups() if version == "v2" else request.getfixturevalue("v1_devices")
    runc_filter(cg, v1=version == "v1")
    p = standin("coral-usb-1-1-3", "189:4", cgroups=[cg])
    spec = (*_spec("189:4"), ("/dev/bus/usb/001/009", DeviceNumber("c", 189, 9)))
    runtime = Runtime({"detector": ("c0ffee", p.pid, f"/{cg.name}", spec)})
    state = tmp_path / "keeper" / "granted.json"
    first = Keeper(
        Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), ledger=Ledger(state)
    )
    first.handle(MOVE)
    grant(str(cg), {DeviceNumber("c", 189, 9): "rw"}, set())  # as the runtime gave it
    state.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        later = Keeper(
            Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics(), ledger=Ledger(state)
        )
        at6 = handout(number="c:189:6")
        [done] = [
            d for d in later.handle(move(at6, None, DeviceNumber("c", 189, 6))) if d.container
        ]
    assert "earlier grants it cannot prove are revoked at catch-up" in caplog.text
    assert done.revoked == ["c 189:4", "c 189:5"] and done.allowed == "c 189:6"
    nodes = [("c", 189, m, "r") for m in (4, 5, 6, 9)]
    assert probe([str(cg / "cgroup.procs")], nodes) == dict(
        zip(nodes, [False, False, True, True], strict=True)
    )


def test_a_container_the_runtime_did_not_give_the_device_gets_nothing(
    v2_cgroups, runc_filter, standin, caplog
):
    """Issue 46 item 6: the kubelet's names pointed at a container whose spec has no node at
    the device's paths (a force-deleted pod's of the same name, never given it): the keeper
    trusts the runtime's spec, so it is neither granted nor written into, and says so."""
    cg = v2_cgroups()
    runc_filter(cg, NOT_GIVEN)
    p = standin("coral-usb-1-1-3", "189:4", cgroups=[cg])
    elsewhere = (("/dev/ttyUSB0", DeviceNumber("c", 188, 0)),)
    runtime = Runtime({"detector": ("c0ffee", p.pid, f"/{cg.name}", elsewhere)})
    keeper = Keeper(Pods(), runtime, "/sys/fs/cgroup", "/proc", KeeperMetrics())
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        assert [d for d in keeper.handle(MOVE) if d.container] == []
    assert _probe(cg) == {("c", 189, 4, "r"): False, ("c", 189, 5, "r"): False}
    assert os.stat(_path(p)).st_rdev == os.makedev(189, 4)
    assert f"its spec has no node at {PATH}: the runtime did not give it coral-usb-1-1-3" in (
        caplog.text
    )
