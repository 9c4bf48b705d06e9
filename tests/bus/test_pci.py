"""edgefd.bus.pci: the functions under /sys/bus/pci/devices as records, on the x86 sample node:
class, driver, device nodes from the class directories, IOMMU group, NUMA node (none for
-1), SR-IOV, and the required attributes a function lacks."""

from __future__ import annotations

from pathlib import Path

from edgefd.bus import pci
from edgefd.core.hostroot import HostRoot


def test_discovery_records(x86: Path) -> None:
    res = pci.scan(HostRoot.of(x86))
    by = {d.address: d for d in res.devices}
    coral = by["0000:02:00.0"]
    assert coral.class_code == "088000" and coral.driver == "apex"
    assert coral.devnodes == ("/dev/apex_0",)
    assert coral.sysfs_path == "/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0"
    assert coral.iommu_group == "5" and coral.numa_node == 0
    assert by["0000:00:02.0"].devnodes == ("/dev/dri/card0", "/dev/dri/renderD128")
    assert by["0000:5e:00.0"].sriov_totalvfs == 64 and by["0000:5e:02.0"].sriov_totalvfs is None
    assert by["0000:00:00.0"].numa_node is None  # -1 in sysfs: no NUMA affinity
    assert by["0000:00:1f.6"].missing == ("subsystem_vendor",)
    assert (x86 / "dev/apex_0").is_file()


def test_hailo10h_nodes_under_either_class(tmp_path: Path) -> None:
    """hailort-drivers up to 5.2: hailo_chardev/hailo0; from 5.3.0: hailo1x/h1x-0. Both are
    the function's own class children."""
    from tests.fixturegen import build_host

    for node, want in (("rpi5-hailo10h", "/dev/hailo0"), ("rpi5-hailo10h-h1x", "/dev/h1x-0")):
        root = build_host(node, tmp_path / node, devicetree=False)
        by = {d.address: d for d in pci.scan(HostRoot.of(root)).devices}
        hailo = by["0001:01:00.0"]
        assert (hailo.id, hailo.driver, hailo.devnodes) == ("1e60:45c4", "hailo1x", (want,))
        assert hailo.nodes[0].dev == "510:0"


def test_an_accel_node_belongs_to_its_own_function(tmp_path: Path) -> None:
    """The Intel NPU's accel0 and the Qualcomm card's accel1 share /dev/accel: each is read
    under its own PCI function, never by a glob."""
    from tests.fixturegen import build_host

    root = build_host("x86-intel-npu", tmp_path / "x86", devicetree=False)
    by = {d.address: d for d in pci.scan(HostRoot.of(root)).devices}
    assert by["0000:00:0b.0"].devnodes == ("/dev/accel/accel0",)
    assert by["0000:01:00.0"].devnodes == ("/dev/accel/accel1",)
