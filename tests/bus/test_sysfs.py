"""edgefd.bus.sysfs: every way an attribute file can be wrong gives None and a reason."""

from __future__ import annotations

import os
from pathlib import Path

from edgefd.bus import sysfs
from edgefd.bus.sysfs import AttrDir


def open_dir(path: Path) -> AttrDir:
    w: list[str] = []
    d = AttrDir.open(str(path), w)
    assert d is not None and w == []
    return d


def test_hex_normalisation(tmp_path: Path) -> None:
    f = tmp_path / "class"
    w: list[str] = []
    with open_dir(tmp_path) as d:
        f.write_text("0x030200\n")
        assert d.hex("class", w) == "030200"
        f.write_text("  1A6E \n")
        assert d.hex("class", w) == "1a6e"
        f.write_text("0x\n")
        assert d.hex("class", w) is None and "is not hex" in w[0]
        f.write_text("fe")
        assert d.hex("class", w, width=4) is None and "4 hex digits" in w[-1]


def test_missing_only_reported_when_required(tmp_path: Path) -> None:
    w: list[str] = []
    with open_dir(tmp_path) as d:
        assert d.text("serial", w) is None and w == []
        assert d.text("idVendor", w, required=True) is None
    assert w == [f"{tmp_path}/idVendor: missing"]


def test_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")  # must not block
    w: list[str] = []
    with open_dir(tmp_path) as d:
        assert d.text("d", w) is None
        assert d.text("fifo", w) is None
    assert all("not a regular file" in x for x in w) and len(w) == 2


def test_loops_and_dangling_links(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    os.symlink("nowhere", tmp_path / "c")
    w: list[str] = []
    with open_dir(tmp_path) as d:
        assert d.text("a", w) is None and "Too many levels" in w[0]
        assert d.text("c", w) is None and len(w) == 1  # dangling == missing
        # NFD's test for an optional attribute: neither a loop nor a dangling link is there
        assert not d.readable("a") and not d.readable("c") and not d.readable("none")


def test_bounded_and_garbage(tmp_path: Path) -> None:
    f = tmp_path / "big"
    w: list[str] = []
    with open_dir(tmp_path) as d:
        f.write_bytes(b"a" * (sysfs.MAX_ATTR_BYTES + 1))
        assert d.text("big", w) is None and "longer than" in w[0]
        f.write_bytes(b"ab\x00cd")
        assert d.text("big", w) is None and "NUL" in w[-1]
        f.write_bytes(b"Caf\xe9 Ltd\n")
        assert d.text("big", w) == "Caf\ufffd Ltd" and "not UTF-8" in w[-1]


def test_int_and_links(tmp_path: Path) -> None:
    w: list[str] = []
    (tmp_path / "numa_node").write_text("-1\n")
    (tmp_path / "busnum").write_text("one\n")
    os.symlink("../../bus/pci/drivers/apex", tmp_path / "driver")  # dangling is fine
    with open_dir(tmp_path) as d:
        assert d.int("numa_node", w) == -1
        assert d.int("busnum", w) is None and "not a decimal" in w[0]
        assert d.link_name("driver", w) == "apex"
        assert d.link_name("nolink", w) is None
        assert d.link_name("busnum", w) is None and "not a symlink" in w[-1]


def test_unlistable_directory_is_reported(tmp_path: Path) -> None:
    w: list[str] = []
    assert AttrDir.open(str(tmp_path / "nope"), w) is None
    assert w == [f"{tmp_path}/nope: does not exist (dangling symlink?)"]


def test_uevent() -> None:
    assert sysfs.parse_uevent("DEVNAME=bus/usb/001/004\nDEVTYPE=usb_device\njunk\n") == {
        "DEVNAME": "bus/usb/001/004",
        "DEVTYPE": "usb_device",
    }


def test_int_is_what_the_kernel_prints_and_nothing_else(tmp_path: Path) -> None:
    """int() alone would take `1_0`, `+3`, non-ASCII digits and numbers of any size."""
    f = tmp_path / "busnum"
    with open_dir(tmp_path) as d:
        for good, value in (("3\n", 3), ("-1\n", -1), ("0", 0), ("255\n", 255)):
            f.write_text(good)
            assert d.int("busnum", []) == value
        for bad in ("1_0", "+3", "\u0663", "1e3", "0x10", "nan", "", "9" * 40, "- 1"):
            w: list[str] = []
            f.write_text(bad + "\n")
            assert d.int("busnum", w) is None, bad
            assert len(w) == 1 and "is not a decimal number; ignored" in w[0], w


def test_readable_is_nfds_test_for_an_optional_attribute(tmp_path: Path) -> None:
    """nfd-worker labels .sriov.capable when sriov_totalvfs reads, whatever it holds
    (tests/scan/test_nfd_differential.py checks this against the real worker)."""
    (tmp_path / "empty").write_text("")
    (tmp_path / "garbage").write_text("many\n")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # NFD would block on it; here it is simply not readable
    os.symlink("empty", tmp_path / "link")
    with open_dir(tmp_path) as d:
        assert d.readable("empty") and d.readable("garbage") and d.readable("link")
        assert not d.readable("dir") and not d.readable("fifo")


def test_devname_outside_dev_is_refused(tmp_path: Path) -> None:
    """A uevent DEVNAME becomes a host path the device plugin gives the runtime."""
    (tmp_path / "uevent").write_text("DEVNAME=../etc/shadow\n")
    (tmp_path / "ok").write_text("DEVTYPE=usb_device\nDEVNAME=bus/usb/001/004\n")
    w: list[str] = []
    with open_dir(tmp_path) as d:
        assert d.devname("ok", w) == "/dev/bus/usb/001/004" and w == []
        assert d.devname("uevent", w) is None and "outside /dev" in w[0]
    assert sysfs.dev_path("a/../../x") is None and sysfs.dev_path("apex_0") == "/dev/apex_0"
