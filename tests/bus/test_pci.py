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
