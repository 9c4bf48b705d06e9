"""What `devplugin --api dra --dry-run` prints (dryrun.py), through the command: the
ResourceSlice a first publish would write for the host, from one scan, touching neither the
API server, the kubelet nor any file (no socket made)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.devplugin.dra.hardware import expected_devices
from tests.devplugin.running import Running
from tests.fixturegen import build_host

ROOT = Path(__file__).resolve().parents[3]


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


def test_the_dry_run_slice_is_what_the_live_front_end_publishes(short_dir: Path) -> None:
    """Issue 32 item 8, the DRA side: the dry run takes the front-end's table, taints and
    slicing, so its devices are the ones the live plugin publishes for the same host."""
    from edgefd.core.hostroot import HostRoot
    from edgefd.core.service import WatchSettings
    from edgefd.devplugin.app import Options, make_inventory
    from edgefd.devplugin.dra.dryrun import slices
    from edgefd.devplugin.dra.frontend import DraFrontend, DraOptions
    from edgefd.devplugin.resources import default_config
    from tests.devplugin.dra.fakeapi import FakeSliceApi
    from tests.helpers import wait_until

    host = build_host("x86-server", short_dir / "host", devicetree=False)
    opts = Options(
        plugin_dir=str(short_dir / "dp"),
        host=HostRoot.of(host),
        links_dir=str(short_dir / "links"),
        api="dra",
        settings=WatchSettings(rescan_interval=3600),
    )
    [dry] = slices(default_config(), make_inventory(opts.scratch(), default_config()), "n1")
    api = FakeSliceApi()
    dra = DraOptions(node="n1", kubelet_dir=str(short_dir / "k"), cdi_dir=str(short_dir / "c"))
    app = Running(
        opts,
        default_config(),
        lambda cfg, links, m, inv, dirs: DraFrontend(dra, cfg, links, api, m, inv, dirs),
    )
    try:
        app.start()
        wait_until(lambda: api.devices(), timeout=10)
        [live] = list(api.objects.values())
    finally:
        app.stop()
    assert dry["spec"]["devices"] == live["spec"]["devices"]
    assert dry["metadata"]["name"] == live["metadata"]["name"]


def test_issue_31_devices_in_the_slice(tmp_path: Path) -> None:
    """The DRA side of issue 31: each fixture's accelerator is one device of the slice, with
    the attributes a claim selects it by (a platform device: its name and compatible), no
    taint (healthy)."""
    want = {
        "rpi5-hailo10h": ("hailo10h-0001-01-00-0", {"kind": "hailo", "pciAddress": "0001:01:00.0",
                                                     "driver": "hailo1x", "vendorID": "1e60"}),
        "rpi5-hailo10h-h1x": ("hailo10h-0001-01-00-0", {"model": "hailo10h", "bus": "pci"}),
        "x86-intel-npu": ("intel-npu-0000-00-0b-0", {"kind": "npu", "model": "intel-npu",
                                                     "productID": "7d1d", "driver": "intel_vpu"}),
        "rk3588-npu": ("rockchip-npu-rknn", {"kind": "npu", "model": "rockchip-npu",
                                             "bus": "platform", "platformDevice": "rknn",
                                             "compatible": "rockchip,rk3588-rknn-core",
                                             "driver": "rocket"}),
    }  # fmt: skip
    for node, (name, attrs) in want.items():
        host = build_host(node, tmp_path / node, devicetree=False)
        out = subprocess.run(
            [sys.executable, "-m", "edgefd.devplugin", "--api", "dra", "--dry-run",
             f"--host-root={host}", "--node-name=edge-1"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        [dev] = json.loads(out.stdout)["spec"]["devices"]
        assert dev["name"] == name, node
        got = {k: next(iter(v.values())) for k, v in dev["attributes"].items()}
        assert attrs.items() <= got.items(), (node, got)
        assert not dev.get("taints"), node
        if node == "rk3588-npu":
            assert "vendorID" not in got and "productID" not in got
