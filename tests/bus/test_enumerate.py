"""edgefd.bus.enumerate: the entries of a sysfs bus, each device once, or "cannot read"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgefd.bus import pci, usb
from edgefd.bus.enumerate import bus_entries
from edgefd.core.errors import HostUnreadable
from edgefd.core.hostroot import HostRoot
from edgefd.usb_scan.cli import main as usb_scan
from tests.fixturegen import HostBuilder

from .hosts import two_corals


@pytest.mark.parametrize("alias", ["same-target", "absolute", "link-to-entry", "alias-first"])
def test_a_device_listed_twice_counts_once(tmp_path: Path, alias: str) -> None:
    """Issue 11 item 10: two bus entries for one device made edgetpu.count=3 for 2 devices."""
    bus = two_corals(tmp_path)
    target = os.readlink(bus / "2-1")
    if alias == "same-target":
        os.symlink(target, bus / "9-9")  # the same relative link text under another name
    elif alias == "absolute":
        real = os.path.realpath(bus / "2-1")
        os.symlink("/" + os.path.relpath(real, tmp_path), bus / "9-9")  # re-rooted
    elif alias == "link-to-entry":
        os.symlink("2-1", bus / "9-9")  # a link to the kernel's own link
    else:
        os.symlink("2-1", bus / "0-9")  # sorts before the real entry
    res = usb.scan(HostRoot.of(tmp_path))
    names = [d.name for d in res.devices]
    assert names == ["1-1", "2-1", "usb1", "usb2"], names  # the kernel's name wins, in order
    assert any("counted once" in w for w in res.warnings), res.warnings
    out = CliRunner().invoke(usb_scan, ["--host-root", str(tmp_path), "--dry-run"])
    assert out.exit_code == 0, out.stderr
    assert "edgefd.io/edgetpu.count=2\n" in out.stdout


def test_a_pci_function_listed_twice_counts_once(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    (tmp_path / "sys/bus/usb/devices").mkdir(parents=True)
    b.add_pci({"address": "0000:02:00.0", "class": "088000", "vendor": "1ac1", "device": "089a"})
    b.add_pci({"address": "0000:03:00.0", "class": "088000", "vendor": "1ac1", "device": "089a"})
    bus = tmp_path / "sys/bus/pci/devices"
    os.symlink(os.readlink(bus / "0000:03:00.0"), bus / "0000:09:00.0")
    res = pci.scan(HostRoot.of(tmp_path))
    assert [d.address for d in res.devices] == ["0000:02:00.0", "0000:03:00.0"]


def test_distinct_devices_are_never_merged(tmp_path: Path) -> None:
    bus = two_corals(tmp_path)
    warnings: list[str] = []
    entries, present = bus_entries(HostRoot.of(tmp_path), usb.BUS_DIR, warnings, "usb")
    assert present and warnings == []
    assert [n for n, _ in entries] == sorted(os.listdir(bus))


def test_dangling_and_looping_entries_are_kept_for_the_scan_to_report(tmp_path: Path) -> None:
    bus = two_corals(tmp_path)
    os.symlink("../../../devices/gone/3-1", bus / "3-1")
    os.symlink("3-3", bus / "3-2")
    os.symlink("3-2", bus / "3-3")
    warnings: list[str] = []
    entries, _ = bus_entries(HostRoot.of(tmp_path), usb.BUS_DIR, warnings, "usb")
    assert {"3-1", "3-2", "3-3"} <= {n for n, _ in entries}
    res = usb.scan(HostRoot.of(tmp_path))
    assert {d.name for d in res.devices} == {"1-1", "2-1", "usb1", "usb2"}


@pytest.mark.parametrize("broken", ["no-sys-bus", "sys-bus-is-a-file", "devices-is-a-file"])
def test_what_cannot_be_listed_is_host_unreadable(tmp_path: Path, broken: str) -> None:
    if broken == "sys-bus-is-a-file":
        (tmp_path / "sys").mkdir()
        (tmp_path / "sys/bus").write_text("")
    elif broken == "devices-is-a-file":
        (tmp_path / "sys/bus/usb").mkdir(parents=True)
        (tmp_path / "sys/bus/usb/devices").write_text("")
    with pytest.raises(HostUnreadable, match=r"^cannot "):
        bus_entries(HostRoot.of(tmp_path), usb.BUS_DIR, [], "usb")


def test_a_missing_bus_is_no_devices(tmp_path: Path) -> None:
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    warnings: list[str] = []
    assert bus_entries(HostRoot.of(tmp_path), usb.BUS_DIR, warnings, "usb") == ([], False)
    assert warnings == [
        "usb: /sys/bus/usb/devices does not exist (no usb bus on this host); no devices"
    ]
