"""The hold rule, on its own: a vanished device counts for `seconds` from when it was first
found missing; a device at the same place replaces it at once."""

from __future__ import annotations

from typing import Any, NamedTuple

from edgefd.bus.enumerate import BusReader, ScanResult
from edgefd.bus.key import DeviceKey
from edgefd.scan.hold import Hold


class Rec(NamedTuple):
    key: DeviceKey
    id: str


def reader(bus: str = "usb") -> BusReader[Any]:
    return BusReader(bus, lambda host: ScanResult(()))


def scan(*devices: Rec) -> dict[str, ScanResult[Any]]:
    return {"usb": ScanResult(tuple(devices))}


BOOT = Rec(DeviceKey("usb", "2-1"), "1a6e:089a")
RUNTIME = Rec(DeviceKey("usb", "2-1"), "18d1:9302")
OTHER = Rec(DeviceKey("usb", "1-1.1"), "03e7:2485")


def ids(scans: dict[str, ScanResult[Any]]) -> list[str]:
    return [d.id for d in scans["usb"].devices]


def test_vanished_device_is_held_from_when_it_was_missed() -> None:
    h, r = Hold(3.0), [reader()]
    assert ids(h.apply(scan(BOOT, OTHER), r, 0.0)) == ["1a6e:089a", "03e7:2485"]
    # found missing at t=100 (no scan in between): held until 103, not 3 s after t=0
    assert ids(h.apply(scan(OTHER), r, 100.0)) == ["03e7:2485", "1a6e:089a"]
    assert h.held == 1 and h.next_expiry() == 103.0
    assert ids(h.apply(scan(OTHER), r, 102.9)) == ["03e7:2485", "1a6e:089a"]
    assert ids(h.apply(scan(OTHER), r, 103.0)) == ["03e7:2485"]
    assert h.held == 0 and h.next_expiry() is None


def test_a_device_at_the_same_place_replaces_the_held_one_at_once() -> None:
    h, r = Hold(3.0), [reader()]
    h.apply(scan(BOOT), r, 0.0)
    assert ids(h.apply(scan(), r, 1.0)) == ["1a6e:089a"]
    assert ids(h.apply(scan(RUNTIME), r, 2.0)) == ["18d1:9302"]
    # and when the runtime one goes, it is the one held
    assert ids(h.apply(scan(), r, 10.0)) == ["18d1:9302"]


def test_no_hold_means_no_memory() -> None:
    h, r = Hold(0.0), [reader()]
    h.apply(scan(BOOT), r, 0.0)
    assert ids(h.apply(scan(), r, 0.0)) == []


def test_buses_are_kept_apart() -> None:
    h = Hold(3.0)
    usb, pci = reader("usb"), reader("pci")
    dev = Rec(DeviceKey("pci", "0000:01:00.0"), "1ac1:089a")
    h.apply({"usb": ScanResult(()), "pci": ScanResult((dev,))}, [usb, pci], 0.0)
    out = h.apply({"usb": ScanResult(()), "pci": ScanResult(())}, [usb, pci], 1.0)
    assert out["usb"].devices == () and out["pci"].devices == (dev,)
