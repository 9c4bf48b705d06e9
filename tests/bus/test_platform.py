"""edgefd.bus.platform: the platform (SoC) devices the catalogue names, as records: the RK3588
NPU's three cores under `rocket` as ONE record keyed at the driver's own device `rknn` with its
accel node; a core bound to another driver is not it; an unbound one is (without a node); only
catalogue matches cost more than their `compatible` read, on a SoC of 500 devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd.bus import platform
from edgefd.bus.catalogue import load_catalogue, parse_catalogue
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.hostroot import HostRoot
from tests.fixturegen import HostBuilder, build_host, load_description
from tests.fixturegen.platform import add_platform, remove_platform, synthetic_platform

CORE = "rockchip,rk3588-rknn-core"


def test_the_rk3588_npu_is_one_record_with_its_node(tmp_path: Path) -> None:
    root = build_host("rk3588-npu", tmp_path / "rk", devicetree=False)
    res = platform.scan(HostRoot.of(root))
    [npu] = res.devices
    assert npu.key == DeviceKey("platform", "rknn")
    assert npu.nodes == (DevNode("/dev/accel/accel0", "261:0"),)
    assert npu.parts == ("fdab0000.npu", "fdac0000.npu", "fdad0000.npu")
    assert npu.compatible == (CORE,) and npu.driver == "rocket"
    assert npu.sysfs_path == "/sys/devices/platform/rknn" and npu.id == ""
    assert res.warnings == () and res.bus_present
    match = load_catalogue().match(npu)
    assert match is not None and match.accelerator.id == "rockchip-npu"
    assert match.accelerator.kind == "npu" and match.key == npu.key


def test_compatible_is_nul_separated() -> None:
    raw = b"rockchip,rk3588-iommu\x00rockchip,rk3568-iommu\x00"
    assert platform.compatibles(raw) == ("rockchip,rk3588-iommu", "rockchip,rk3568-iommu")


def test_a_core_bound_to_another_driver_is_not_this_npu(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    add_platform(b, {"name": "fdab0000.npu", "compatible": [CORE], "driver": "rknpu"})
    [rec] = platform.scan(HostRoot.of(tmp_path)).devices
    assert rec.driver == "rknpu" and load_catalogue().match(rec) is None


def test_an_unbound_core_is_the_npu_without_a_node(tmp_path: Path) -> None:
    """rocket not loaded: the NPU is there (the devicetree says so), its node is not: the
    inventory shows it unhealthy ("is the driver loaded?"), keyed where it will be."""
    b = HostBuilder(tmp_path)
    add_platform(b, {"name": "fdab0000.npu", "compatible": [CORE]})
    [rec] = platform.scan(HostRoot.of(tmp_path)).devices
    assert rec.key == DeviceKey("platform", "rknn") and rec.nodes == () and rec.driver is None
    assert load_catalogue().match(rec) is not None


def test_a_rule_without_a_driver_device_keys_the_matched_device(tmp_path: Path) -> None:
    cat = parse_catalogue(
        {
            "accelerators": [
                {"id": "ethos", "kind": "npu", "name": "n",
                 "platform": [{"compatible": "arm,ethos-u65", "driver": "ethosu"}]}
            ]
        }
    )  # fmt: skip
    b = HostBuilder(tmp_path)
    add_platform(
        b,
        {"name": "4a900000.npu", "compatible": ["fsl,imx93-npu", "arm,ethos-u65"],
         "driver": "ethosu",
         "class_devices": [{"class": "accel", "name": "accel0", "devname": "accel/accel0"}]},
    )  # fmt: skip
    [rec] = platform.scan(HostRoot.of(tmp_path), cat).devices
    assert rec.key == DeviceKey("platform", "4a900000.npu") and rec.parts == ()
    assert rec.devnodes == ("/dev/accel/accel0",)
    assert platform.scan(HostRoot.of(tmp_path)).devices == ()  # not in the packaged one


def test_no_platform_bus_is_no_device(tmp_path: Path) -> None:
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    res = platform.scan(HostRoot.of(tmp_path))
    assert res.devices == () and not res.bus_present


def test_a_removed_npu_is_gone(tmp_path: Path) -> None:
    root = build_host("rk3588-npu", tmp_path / "rk", devicetree=False)
    b = HostBuilder(root)
    remove_platform(b, "rknn")
    [npu] = platform.scan(HostRoot.of(root)).devices
    assert npu.nodes == () and not (root / "dev/accel/accel0").exists()


def test_only_catalogue_matches_are_read_beyond_compatible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SoC of 511 platform devices: one directory opened (the NPU's `rknn`), not 500."""
    desc = load_description("rk3588-npu")
    desc["platform"] = desc["platform"] + synthetic_platform(500)
    root = build_host(desc, tmp_path / "soc", devicetree=False)
    assert len(list((root / "sys/bus/platform/devices").iterdir())) == 511
    opened: list[str] = []
    real_open = platform.AttrDir.open

    def counting(path: str, warnings: list[str]) -> object:
        opened.append(path)
        return real_open(path, warnings)

    monkeypatch.setattr(platform.AttrDir, "open", counting)
    [npu] = platform.scan(HostRoot.of(root)).devices
    assert npu.key.place == "rknn" and [Path(p).name for p in opened] == ["rknn"]
