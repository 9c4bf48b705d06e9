"""The ResourceSlice, pure parts (slices.py): attributes (against the sample nodes' hardware,
and within the API's 64 bytes), taints of devices that cannot be used (NoExecute once an
eviction deadline has passed; a time the API server takes or none), how a pool is cut into
slices, their names and generation. What `devplugin --api dra --dry-run` prints is
dra/test_dryrun.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.hostroot import HostRoot
from edgefd.devplugin.app import Options, make_inventory
from edgefd.devplugin.dra import slices
from edgefd.devplugin.dra.dryrun import slices as dry_slices
from edgefd.devplugin.dra.eviction import Eviction
from edgefd.devplugin.resources import default_config
from edgefd.inventory import device as facts
from edgefd.inventory.device import Device
from tests.devplugin.devices import coral
from tests.devplugin.dra.hardware import expected_devices
from tests.fixturegen import build_host

NODES = ("rpi4-coral", "rpi4-coral-runtime", "x86-server")


@pytest.mark.parametrize("node", NODES)
def test_sample_nodes_attribute_for_attribute(node: str, tmp_path: Path) -> None:
    host = build_host(node, tmp_path / "host", devicetree=False)
    cfg = default_config()
    objs = dry_slices(cfg, make_inventory(Options("/nonexistent", HostRoot.of(host)), cfg), "n1")
    assert len(objs) == 1
    spec = objs[0]["spec"]
    assert spec["driver"] == "edgefd.io" and spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    got = {d["name"]: d["attributes"] for d in spec["devices"]}
    assert got == expected_devices(node)
    assert all("taints" not in d for d in spec["devices"])


def _dev(**kw) -> Device:
    node = DevNode("/dev/bus/usb/002/003", "189:130")
    base = Device("coral-usb-2-1", DeviceKey("usb", "2-1"), "coral-usb", "edgetpu", nodes=(node,))
    return base._replace(**kw)


def test_an_unplugged_device_stays_tainted_with_a_stable_time() -> None:
    gone = _dev(present=False, reason="unplugged", last_seen=1_700_000_000.0)
    [taint] = slices.taints(gone)
    assert taint == {
        "key": "edgefd.io/unhealthy",
        "value": "unplugged",
        "effect": "NoSchedule",
        "timeAdded": "2023-11-14T22:13:20Z",
    }
    # a rescan of the absent device gives the same bytes: no write
    assert slices.taints(gone) == slices.taints(gone._replace())


def test_a_present_device_without_a_node_is_tainted_without_time() -> None:
    [taint] = slices.taints(_dev(reason="device node /dev/apex_0 is missing"))
    assert taint == {
        "key": "edgefd.io/unhealthy",
        "value": "no-device-node",
        "effect": "NoSchedule",
    }
    assert slices.taints(_dev()) == []


def test_a_hot_coral_pcie_is_tainted_overheating_until_it_cools(tmp_path: Path) -> None:
    host = build_host("x86-coral-pcie", tmp_path / "host", devicetree=False)
    temp = host / "sys/class/apex/apex_0/temp"
    cfg = default_config()
    inventory = make_inventory(Options("/nonexistent", HostRoot.of(host)), cfg)

    def taints() -> list[object]:
        [obj] = dry_slices(cfg, inventory, "n1")
        return [d.get("taints") for d in obj["spec"]["devices"]]

    assert taints() == [None]
    temp.write_text("90000\n")
    hot = {"key": "edgefd.io/unhealthy", "value": "overheating", "effect": "NoSchedule"}
    assert taints() == [[hot]]
    temp.write_text("80000\n")  # below the limit (84.8), not below it minus 5 °C
    assert taints() == [[hot]]
    temp.write_text("79000\n")
    assert taints() == [None]


def test_pool_is_cut_into_slices_of_64() -> None:
    devs = [{"name": f"dev-{i:03d}"} for i in range(130)]
    out = slices.pool_slices("n1", reversed(devs))
    assert [n for n, _ in out] == ["n1-edgefd.io-0", "n1-edgefd.io-1", "n1-edgefd.io-2"]
    assert [len(s["devices"]) for _, s in out] == [64, 64, 2]
    assert all(s["pool"] == {"name": "n1", "resourceSliceCount": 3} for _, s in out)
    assert out[0][1]["devices"][0]["name"] == "dev-000"


def test_a_node_without_devices_publishes_one_empty_slice() -> None:
    [(name, spec)] = slices.pool_slices("n1", [])
    assert name == "n1-edgefd.io-0" and "devices" not in spec


def test_generation_is_added_and_removed() -> None:
    [(_, spec)] = slices.pool_slices("n1", [])
    with_gen = slices.with_generation(spec, 7)
    assert with_gen["pool"]["generation"] == 7
    assert slices.without_generation(with_gen) == spec


def test_long_node_names_still_make_valid_slice_names() -> None:
    name = slices.slice_name("n" * 250, 3)
    assert len(name) <= 253 and name.endswith("-edgefd.io-3")


@pytest.mark.parametrize("t", [1e300, 4e11, float("inf"), float("nan"), -5.0, 0.0, 253402300800.0])
def test_an_absurd_last_seen_time_never_fails_a_scan_or_the_api(t: float) -> None:
    """Issue 22 item 6: no OverflowError, no five-digit year the API server refuses; the
    server sets timeAdded itself (publisher.py ignores what it adds)."""
    [taint] = slices.taints(_dev(present=False, reason="unplugged", last_seen=t))
    assert "timeAdded" not in taint and taint["value"] == "unplugged"
    edge = _dev(present=False, reason="unplugged", last_seen=253402300799.0)
    assert slices.taints(edge)[0]["timeAdded"] == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize(
    ("serial", "kept"),
    [
        ("ü" * 32, True),  # 32 characters, 64 bytes: the limit
        ("é" * 40, False),  # 40 characters (under 64), 80 bytes: the API refuses it
        ("\ufffd" * 30, False),  # 30 undecodable sysfs bytes, replaced: 90 bytes
        ("a" * 64, True),
        ("a" * 65, False),
        ("\udcff" * 3, False),  # a lone surrogate: not storable text
    ],
)
def test_attribute_values_are_limited_to_64_bytes_not_characters(
    serial: str, kept: bool, caplog: pytest.LogCaptureFixture
) -> None:
    slices._said_too_long.clear()  # said once per device and attribute
    attrs = slices.attributes(_dev(facts=facts.Facts(serial=serial, driver="usbfs")))
    assert ("serial" in attrs) is kept
    assert attrs["driver"] == {"string": "usbfs"}  # the rest of the device is kept
    assert ("left out of the slice" in caplog.text) is not kept


# last seen at 1000, found missing by the scan at 1010
GONE = coral(
    present=False,
    reason="unplugged from port 2-1",
    last_seen=1000.0,
    missing_since=1010.0,
    missed_since=1010.0,
)


def test_the_taint_turns_noexecute_with_its_deadline_as_time() -> None:
    ev = Eviction(after=2.0, hold=3.0)
    [before] = slices.taints(GONE, ev, 1014.0)
    assert before["effect"] == "NoSchedule"
    [after] = slices.taints(GONE, ev, 1015.5)
    assert after == {
        "key": "edgefd.io/unhealthy",
        "value": "unplugged",
        "effect": "NoExecute",
        "timeAdded": "1970-01-01T00:16:55Z",  # the deadline, so tolerationSeconds count from it
    }
    assert slices.taints(GONE, ev, 1015.5) == slices.taints(GONE, ev, 9999.0)
    present_unusable = coral(reason="device node /dev/bus/usb/002/003 is missing")
    assert slices.taints(present_unusable, ev, 1e12)[0]["effect"] == "NoSchedule"


@pytest.mark.parametrize(
    ("module", "semver", "text"),
    [("1.2", "1.2.0", "1.2"), ("4.20.0", "4.20.0", "4.20.0"), ("2.3.1.4", None, "2.3.1.4")],
)
def test_the_driver_version_is_always_a_version_and_its_text_always_a_string(
    module: str, semver: str | None, text: str
) -> None:
    pci = DeviceKey("pci", "0000:01:00.0")
    got = facts.facts_of(
        type("R", (), {"key": pci, "driver": "hailo_pci", "driver_version": module,
                       "pcie_root": "pci0000:00"})()
    )  # fmt: skip
    attrs = slices.attributes(_dev(key=pci, facts=got))
    assert attrs.get("driverVersion") == ({"version": semver} if semver else None)
    assert attrs["driverModuleVersion"] == {"string": text}
