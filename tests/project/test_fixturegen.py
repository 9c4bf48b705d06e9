"""The fixture generator writes trees laid out like the kernel's sysfs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixturegen import NODES_DIR, build_host, load_description


def test_usb_layout_like_the_kernel(tmp_path: Path) -> None:
    root = build_host("rpi4-coral", tmp_path, devicetree=False)
    link = root / "sys/bus/usb/devices/1-1.3"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    real = Path(os.path.realpath(link))
    assert str(real).endswith("/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.3")
    assert (real / "idVendor").read_text() == "046d\n"
    assert (real / "bDeviceClass").read_text() == "ef\n"
    assert (real / "devpath").read_text() == "1.3\n"
    assert os.path.basename(os.readlink(real / "1-1.3:1.0" / "driver")) == "uvcvideo"
    uevent = (root / "sys/bus/usb/devices/2-1/uevent").read_text()
    assert "DEVNAME=bus/usb/002/002" in uevent and "PRODUCT=1a6e/89a/100" in uevent
    assert "DEVTYPE=usb_device" in uevent and "TYPE=0/0/0" in uevent
    assert (root / "dev/bus/usb/002/002").is_file()  # plain file: mknod needs privileges


def test_pci_layout(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path, devicetree=False)
    real = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:01:00.0"))
    assert str(real).endswith("/sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0")
    assert (real / "class").read_text() == "0x030200\n"
    assert (real / "vendor").read_text() == "0x10de\n"
    assert os.readlink(real / "iommu_group").endswith("kernel/iommu_groups/4")
    pf = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:5e:00.0"))
    assert (pf / "sriov_totalvfs").read_text() == "64\n"
    assert os.path.realpath(pf / "virtfn1") == os.path.realpath(
        root / "sys/bus/pci/devices/0000:5e:02.1"
    )
    assert not (root / "sys/bus/pci/devices/0000:00:1f.6/subsystem_vendor").exists()
    assert (root / "dev/apex_0").exists() and (root / "dev/dri/renderD128").exists()


def test_class_device_attributes_and_class_link(tmp_path: Path) -> None:
    root = build_host("x86-coral-pcie", tmp_path, devicetree=False)
    cls = root / "sys/class/apex/apex_0"
    assert cls.is_symlink() and not os.readlink(cls).startswith("/")
    real = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:02:00.0"))
    assert Path(os.path.realpath(cls)) == real / "apex" / "apex_0"
    assert (cls / "temp").read_text() == "45300\n"
    assert (cls / "trip_point0_temp").read_text() == "84800\n"


def test_every_node_description_builds(tmp_path: Path) -> None:
    for i, node in enumerate(sorted(NODES_DIR.glob("*.yaml"))):
        desc = load_description(node)
        assert desc["name"] == node.stem
        build_host(node, tmp_path / str(i), devicetree=False)


def test_devicetree_part(tmp_path: Path) -> None:
    # dtc comes with scripts/bootstrap: a build that fails here is a failure, never a skip
    root = build_host("rpi4-coral", tmp_path)
    assert (root / "sys/firmware/fdt").read_bytes()[:4] == b"\xd0\x0d\xfe\xed"
    assert (root / "proc/device-tree").resolve() == (
        root / "sys/firmware/devicetree/base"
    ).resolve()
    assert (root / "sys/firmware/devicetree/base/compatible").exists()


def test_module_cli(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tests.fixturegen", "x86-server", str(tmp_path / "h"),
         "--no-devicetree"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "h/sys/bus/pci/devices/0000:02:00.0").is_symlink()
