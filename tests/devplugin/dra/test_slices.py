"""The ResourceSlice, pure parts: attributes (against the sample nodes' hardware), taints of
devices that cannot be used, how a pool is cut into slices, and what
`devplugin --api dra --dry-run` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.hostroot import HostRoot
from edgefd.devplugin.app import Options, make_inventory
from edgefd.devplugin.dra import slices
from edgefd.devplugin.dra.dryrun import slices as dry_slices
from edgefd.inventory import device as facts
from edgefd.inventory.device import Device
from edgefd.inventory.resources import default_config
from tests.devplugin.dra.hardware import expected_devices
from tests.fixturegen import build_host

ROOT = Path(__file__).resolve().parents[3]
NODES = ("rpi4-coral", "rpi4-coral-runtime", "x86-server")


@pytest.mark.parametrize(
    ("raw", "version"),
    [("1.2", "1.2.0"), ("4.17.0", "4.17.0"), ("v2", "2.0.0"), ("1.0.0-rc1", "1.0.0-rc1")],
)
def test_versions_become_semver(raw: str, version: str) -> None:
    assert facts.semver(raw) == version


@pytest.mark.parametrize("raw", ["", "1.2.3.4", "abc", "01.2.3", None])
def test_what_is_not_semver_is_left_out(raw: str | None) -> None:
    assert facts.semver(raw) is None


def test_usb_bcd_device() -> None:
    assert facts.bcd_version("0421") == "4.2.1"
    assert facts.bcd_version("0100") == "1.0.0"
    assert facts.bcd_version("zz12") is None


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


def test_dry_run_prints_the_slice(tmp_path: Path) -> None:
    host = build_host("x86-server", tmp_path / "host", devicetree=False)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgefd.devplugin",
            "--api",
            "dra",
            "--dry-run",
            f"--host-root={host}",
            "--node-name=edge-1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["kind"] == "ResourceSlice" and obj["spec"]["nodeName"] == "edge-1"
    assert {d["name"] for d in obj["spec"]["devices"]} == set(expected_devices("x86-server"))
    assert not list(tmp_path.glob("**/*.sock"))


def test_dra_mode_without_a_node_name_is_a_usage_error(tmp_path: Path) -> None:
    """Serving needs the pool's node; only a dry run may assume this host's name."""
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", "--api", "dra", "--plugin-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "devplugin: error: --api dra needs --node-name (or $NODE_NAME): the pool's node"
    )


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


def test_dra_dry_run_without_a_node_name_uses_the_host_name(tmp_path: Path) -> None:
    """Issue 25 item 8: as `feature-sink --dry-run` does, the README's
    `devplugin --api dra --dry-run` falls back to this host's name (it exited 2)."""
    root = build_host("x86-server", tmp_path / "host", devicetree=False)
    args = ["--api", "dra", "--dry-run", "-o", "json", "--host-root", str(root)]
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--plugin-dir", str(tmp_path / "p")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    node = os.uname().nodename
    assert json.loads(out.stdout)["spec"]["nodeName"] == node
    assert out.stderr == (
        f"devplugin: WARNING: no --node-name; the dry-run uses this host's name {node!r}\n"
    )
