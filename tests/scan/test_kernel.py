"""The kernel's page size (kernel.py): read from the tree's /proc/self/smaps, else this
process's when the tree's /sys is the live sysfs (a container shares its host's kernel), else
nothing: a generated tree must never be given the test machine's page size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.scan import kernel
from tests.fixturegen import build_host


def test_a_tree_says_its_page_size_in_its_smaps(tmp_path: Path) -> None:
    host = HostRoot.of(build_host("rpi5-hailo8l", tmp_path, devicetree=False))
    assert kernel.page_size(host) == 16384
    assert kernel.host_labels(host) == {"edgefd.io/kernel.page-size": "16384"}


def test_a_tree_without_one_says_nothing(tmp_path: Path) -> None:
    host = HostRoot.of(build_host("x86-coral-pcie", tmp_path, devicetree=False))
    assert kernel.page_size(host) is None and kernel.host_labels(host) == {}


@pytest.mark.skipif(not os.path.ismount("/sys"), reason="no sysfs at /sys here")
def test_a_live_sysfs_is_the_running_kernels(tmp_path: Path) -> None:
    # a pod's /host/sys is the host's sysfs: no /proc there, the kernel is shared
    (tmp_path / "sys").symlink_to("/sys")
    assert kernel.page_size(HostRoot.of(tmp_path)) == os.sysconf("SC_PAGE_SIZE")
    assert kernel.page_size(HostRoot.of("/")) == os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("text", ["KernelPageSize:        3 kB\n", "Size: 4 kB\n", ""])
def test_what_is_no_page_size_is_none(tmp_path: Path, text: str) -> None:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "smaps").write_text(text)
    assert kernel.page_size(HostRoot.of(tmp_path)) is None


def test_the_mount_a_path_is_on(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "30 22 0:21 / /host/sys ro - sysfs sysfs ro\n"
        "31 22 0:40 / /a\\040b rw - tmpfs tmpfs rw\n"
    )
    assert kernel.fs_type("/host/sys/firmware", str(info)) == "sysfs"
    assert kernel.fs_type("/host/system", str(info)) == "ext4"
    assert kernel.fs_type("/a b/c", str(info)) == "tmpfs"
    assert kernel.fs_type("/x", str(tmp_path / "none")) is None


def test_one_producer_owns_the_label() -> None:
    from edgefd.pci_scan.labels import SPEC as PCI
    from edgefd.usb_scan.labels import SPEC as USB

    assert PCI.host_labels is kernel.host_labels and USB.host_labels is None
