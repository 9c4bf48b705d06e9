"""The claim status writer's own logic over a stand-in API: what it writes and when (the API
interaction itself, and the admission policy, are tested against the real API server in
tests/k8s/test_dra_claim_status.py)."""

from __future__ import annotations

import copy
import time
from typing import Any

from edgefd.devplugin.dra.checkpoint import PreparedClaim, PreparedDevice
from edgefd.devplugin.dra.claimstatus import ClaimStatusWriter, desired
from edgefd.kube.errors import ApiUnreachable
from tests.devplugin.devices import CORAL, NODE, PCIE, apex, coral, table
from tests.helpers import wait_until

UID = "0b5e8f1c-1111-4222-8333-944455556666"


class Api:
    def __init__(self, status: list[dict[str, Any]] | None = None) -> None:
        self.status = status or []
        self.applied: list[list[dict[str, Any]]] = []
        self.gets = 0
        self.failures = 0  # the next N applies fail

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        return {"metadata": {"uid": UID}, "status": {"devices": copy.deepcopy(self.status)}}

    def apply_claim_status(self, namespace, name, devices, manager) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise ApiUnreachable("connection refused")
        self.applied.append(copy.deepcopy(devices))
        self.status = copy.deepcopy(devices)
        return {"metadata": {"uid": UID}, "status": {"devices": copy.deepcopy(devices)}}


def claim(*devices: str) -> dict[str, PreparedClaim]:
    devs = tuple(PreparedDevice("tpu", NODE, d, d, CORAL.name, ()) for d in devices)
    return {UID: PreparedClaim(UID, "default", "c1", devs)}


def test_desired_says_where_and_why() -> None:
    gone = coral(present=False, reason="unplugged from port 2-1")
    [entry] = desired(claim("coral-usb-2-1")[UID], table((gone, CORAL))).values()
    assert entry["data"]["state"] == "absent" and entry["data"]["port"] == "2-1"
    assert entry["conditions"] == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Absent",
            "message": "unplugged from port 2-1",
        }
    ]
    [pci] = desired(claim("coral-pcie-0000-02-00-0")[UID], table((apex(), PCIE))).values()
    assert pci["data"]["pciAddress"] == "0000:02:00.0" and "port" not in pci["data"]
    assert pci["data"]["devicePaths"] == ["/dev/apex_0"]
    [lost] = desired(claim("coral-usb-9-9")[UID], {}).values()
    assert lost["conditions"][0]["reason"] == "NotOnNode"


def test_written_on_change_only_with_stable_transition_times() -> None:
    api = Api()
    w = ClaimStatusWriter(api, clock=lambda: 1_700_000_000.0).start()
    try:
        w.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
        wait_until(lambda: len(api.applied) == 1)
        w.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
        w.set(claim("coral-usb-2-1"), table((coral(last_seen=5.0), CORAL)))  # not a change
        time.sleep(0.3)
        assert len(api.applied) == 1 and api.gets == 1  # read once (nothing known), then not
        first = api.applied[0][0]["conditions"][0]["lastTransitionTime"]
        assert first == "2023-11-14T22:13:20Z"
        w.clock = lambda: 1_700_000_100.0
        gone = coral(present=False, reason="unplugged from port 2-1")
        w.set(claim("coral-usb-2-1"), table((gone, CORAL)))
        wait_until(lambda: len(api.applied) == 2)
        cond = api.applied[1][0]["conditions"][0]
        assert cond["status"] == "False" and cond["lastTransitionTime"] == "2023-11-14T22:15:00Z"
        # the message changes (re-enumerating -> unplugged), the status does not: time kept
        w.clock = lambda: 1_700_000_200.0
        other = coral(present=False, reason="re-enumerating at port 2-1")
        w.set(claim("coral-usb-2-1"), table((other, CORAL)))
        wait_until(lambda: len(api.applied) == 3)
        assert (
            api.applied[2][0]["conditions"][0]["lastTransitionTime"] == cond["lastTransitionTime"]
        )
    finally:
        w.stop()


def test_a_restart_that_finds_the_status_written_writes_nothing() -> None:
    api = Api()
    w = ClaimStatusWriter(api).start()
    w.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
    wait_until(lambda: len(api.applied) == 1)
    w.stop()
    again = ClaimStatusWriter(api, clock=lambda: 2e9).start()
    try:
        again.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
        wait_until(lambda: api.gets == 2)
        time.sleep(0.3)
        assert len(api.applied) == 1 and not again.pending()
    finally:
        again.stop()


def test_a_failing_write_is_retried_with_backoff() -> None:
    api = Api()
    api.failures = 2
    results: list[bool] = []
    w = ClaimStatusWriter(api, on_write=results.append).start()
    try:
        w.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
        wait_until(lambda: len(api.applied) == 1, timeout=10)
        assert results == [False, False, True]
    finally:
        w.stop()


def test_an_unprepared_claim_is_forgotten() -> None:
    api = Api()
    w = ClaimStatusWriter(api).start()
    try:
        w.set(claim("coral-usb-2-1"), table((coral(), CORAL)))
        wait_until(lambda: len(api.applied) == 1)
        w.set({}, table((coral(), CORAL)))
        w.set({}, table((coral(present=False, reason="unplugged"), CORAL)))
        time.sleep(0.3)
        assert len(api.applied) == 1 and not w.pending()
    finally:
        w.stop()


def test_a_platform_device_says_its_platform_device() -> None:
    """Issue 31: an RK3588 NPU in a claim's status is found by its platform device name."""
    from edgefd.bus.key import DeviceKey, DevNode
    from edgefd.devplugin.resources import default_config
    from edgefd.inventory.device import Device

    npu = Device(
        "rockchip-npu-rknn", DeviceKey("platform", "rknn"), "rockchip-npu", "npu",
        nodes=(DevNode("/dev/accel/accel0", "261:0"),),
    )  # fmt: skip
    res = default_config().by_name()["edgefd.io/rockchip-npu"]
    [entry] = desired(claim("rockchip-npu-rknn")[UID], table((npu, res))).values()
    data = entry["data"]
    assert data["bus"] == "platform" and data["platformDevice"] == "rknn" and "port" not in data
    assert "vendorID" not in data and data["devicePaths"] == ["/dev/accel/accel0"]
