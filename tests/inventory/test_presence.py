"""Presence: one tracker, two views. The hold (labels) keeps a vanished record for `hold`
seconds from when it was first missed, and a record with the same identity replaces it at
once; the memory (devices) keeps an absent device, saying why, until `forget_after`."""

from __future__ import annotations

from typing import Any, NamedTuple

from edgefd.bus.key import DeviceKey
from edgefd.inventory.device import Device
from edgefd.inventory.presence import Presence


class Rec(NamedTuple):
    key: DeviceKey
    id: str


def dev(rec: Rec, model: str, state: str = "", t: float = 0.0) -> Device:
    return Device(
        name=f"{model}-{rec.key.place.replace('.', '-')}",
        key=rec.key,
        model=model,
        kind=model,
        state=state,
        ids=rec.id,
        last_seen=t,
    )


BOOT = Rec(DeviceKey("usb", "2-1"), "1a6e:089a")
RUNTIME = Rec(DeviceKey("usb", "2-1"), "18d1:9302")
NCS2 = Rec(DeviceKey("usb", "2-1"), "03e7:2485")
HUB = Rec(DeviceKey("usb", "1-1"), "05e3:0610")
OTHER_HUB = Rec(DeviceKey("usb", "1-1"), "2109:3431")


def ids(p: Presence, mono: float) -> list[str]:
    return [r.id for recs in p.held(mono).values() for r in recs]


def seen(*pairs: tuple[Rec, Device | None]) -> list[tuple[Any, Device | None]]:
    return list(pairs)


def test_a_vanished_record_is_held_from_when_it_was_missed() -> None:
    p = Presence(3.0, None)
    p.update(seen((HUB, None)), 0.0, 0.0)
    p.update(seen(), 100.0, 100.0)  # found missing at t=100: held until 103
    assert ids(p, 100.0) == ["05e3:0610"] and p.next_expiry(100.0) == 103.0
    p.update(seen(), 102.9, 102.9)
    assert ids(p, 102.9) == ["05e3:0610"]
    p.update(seen(), 103.0, 103.0)
    assert ids(p, 103.0) == [] and p.next_expiry(103.0) is None


def test_the_same_identity_replaces_the_held_one_at_once() -> None:
    p = Presence(3.0, None)
    p.update(seen((BOOT, dev(BOOT, "coral-usb", "boot"))), 0, 0)
    p.update(seen(), 1, 1)
    [gone] = p.devices(1)
    assert (gone.present, gone.reason) == (False, "re-enumerating at port 2-1")
    assert ids(p, 1) == ["1a6e:089a"]
    p.update(seen((RUNTIME, dev(RUNTIME, "coral-usb", "runtime", 2))), 2, 2)
    assert ids(p, 2) == []
    [back] = p.devices(2)
    assert (back.present, back.state, back.ids) == (True, "runtime", "18d1:9302")
    # a plain record (a hub) is known by its place: another hub there is the same thing
    p.update(seen((HUB, None)), 3, 3)
    p.update(seen((OTHER_HUB, None)), 4, 4)
    assert ids(p, 4) == ["18d1:9302"]  # the Coral (gone at 3) is held; the first hub is not


def test_another_model_at_the_same_place_is_another_device() -> None:
    """Issue 22 item 2: an NCS2 unplugged and a Coral plugged into its port are two devices;
    the NCS2 stays known (absent), the Coral is new."""
    p = Presence(3.0, None)
    p.update(seen((NCS2, dev(NCS2, "ncs2", "boot"))), 0, 0)
    p.update(seen((BOOT, dev(BOOT, "coral-usb", "boot", 1))), 1, 1)
    coral, ncs2 = p.devices(1)
    assert (coral.name, coral.present) == ("coral-usb-2-1", True)
    assert (ncs2.name, ncs2.present) == ("ncs2-2-1", False)
    assert ids(p, 1) == ["03e7:2485"]  # and it counts for its labels through the hold
    p.update(seen((BOOT, dev(BOOT, "coral-usb", "boot", 10))), 10, 10)
    assert p.devices(10)[1].reason == "unplugged from port 2-1"  # the hold is over


def test_memory_forgets_after_forget_after_and_no_hold_holds_nothing() -> None:
    p = Presence(0.0, 100.0)
    p.update(seen((RUNTIME, dev(RUNTIME, "coral-usb", "runtime", 0))), 0, 0)
    p.update(seen(), 50, 50)
    assert ids(p, 50) == [] and [d.present for d in p.devices(50)] == [False]
    p.update(seen(), 100, 100)
    assert len(p.devices(100)) == 1
    p.update(seen(), 100.5, 100.5)
    assert p.devices(100.5) == []


def test_restored_devices_are_absent_and_never_held() -> None:
    p = Presence(3.0, None)
    p.restore([dev(BOOT, "coral-usb", "boot", 5)], 5, 0)
    [d] = p.devices(0)
    assert not d.present and d.reason == "not seen since the start (last at port 2-1)"
    assert p.held(0) == {} and p.next_expiry(0) is None
    p.update(seen((BOOT, dev(BOOT, "coral-usb", "boot", 9))), 9, 9)
    assert p.devices(9)[0].present


def test_buses_are_kept_apart() -> None:
    p = Presence(3.0, None)
    apex = Rec(DeviceKey("pci", "0000:01:00.0"), "1ac1:089a")
    p.update(seen((apex, None)), 0, 0)
    p.update(seen(), 1, 1)
    assert p.held(1) == {"pci": (apex,)}


def test_a_wall_clock_that_steps_never_keeps_a_device_for_ever_nor_drops_it_early() -> None:
    """Issue 22 item 6: a Pi without an RTC, a bad NTP step: the memory counts in monotonic
    time. Seen while the clock said 2050, gone after it was set back to 2026: forgotten
    `forget_after` later all the same; and a step forward does not forget it at once."""
    year = 365 * 86400.0
    p = Presence(0.0, 100.0)
    p.update(seen((RUNTIME, dev(RUNTIME, "coral-usb", "runtime", 80 * year))), 80 * year, 0)
    p.update(seen(), 56 * year, 10)  # the clock set back 24 years, the device gone
    assert len(p.devices(10)) == 1
    p.update(seen(), 56 * year + 101, 101)
    assert p.devices(101) == []
    q = Presence(0.0, 100.0)
    q.update(seen((RUNTIME, dev(RUNTIME, "coral-usb", "runtime", 100.0))), 100.0, 0)
    q.update(seen(), 56 * year, 50)  # 1970 -> 2026 by NTP, the device gone meanwhile
    assert len(q.devices(50)) == 1
    q.update(seen(), 56 * year + 51, 100.5)
    assert q.devices(100.5) == []


def test_a_restored_device_is_remembered_from_its_last_seen_time_and_never_beyond() -> None:
    p = Presence(0.0, 100.0)
    young, future = dev(BOOT, "coral-usb", "boot", 960.0), dev(HUB, "hub", "", 1e300)
    p.restore([young, future], 1000.0, 0)  # young: away 40 s; future: counts as now
    assert len(p.devices(0)) == 2
    p.update(seen(), 1060.0, 60.5)
    assert [d.name for d in p.devices(60.5)] == ["hub-1-1"]
    p.update(seen(), 1100.0, 100.5)
    assert p.devices(100.5) == []


def test_an_absent_device_says_since_when_from_the_first_scan_without_it() -> None:
    p = Presence(3.0, None)
    p.update(seen((BOOT, dev(BOOT, "coral-usb", "boot", t=1000.0))), 1000.0, 10.0)
    assert p.devices(10.0)[0].missing_since is None
    p.update(seen(), 1007.0, 17.0)  # a rescan 7 s later finds it gone
    p.update(seen(), 1009.0, 19.0)
    [gone] = p.devices(19.0)
    assert not gone.present and gone.missing_since == 1007.0 and gone.last_seen == 1000.0
    assert p.held_names(19.0) == {gone.name} and p.held_names(20.0) == frozenset()
    p.update(seen((RUNTIME, dev(RUNTIME, "coral-usb", "runtime", t=1010.0))), 1010.0, 20.0)
    assert p.devices(20.0)[0].missing_since is None  # back: no longer missing


def test_a_restart_keeps_an_absence_but_starts_none_early() -> None:
    """Persisted: a device already absent when the last run saved it keeps since when; one
    that was present counts from the first scan of this run that does not see it (a Coral
    loading its firmware at the restart must not count its absence from the last run's
    last_seen). The eviction clock (`missed_since`) starts at this run's first scan without
    it for both (issue 30, item 3)."""
    absent = dev(BOOT, "coral-usb", t=900.0)._replace(present=False, missing_since=950.0)
    present = dev(HUB, "hub", t=990.0)
    p = Presence(3.0, None)
    p.restore([absent, present], 1000.0, 5.0)
    p.update(seen(), 1002.0, 7.0)
    got = {d.name: d for d in p.devices(7.0)}
    assert got[absent.name].missing_since == 950.0
    assert got[present.name].missing_since == 1002.0
    assert {d.missed_since for d in got.values()} == {1002.0}
    p.update(seen(), 1004.0, 9.0)
    assert {d.missed_since for d in p.devices(9.0)} == {1002.0}  # fixed from then on
    assert not any(d.present for d in got.values()) and p.held_names(7.0) == frozenset()
