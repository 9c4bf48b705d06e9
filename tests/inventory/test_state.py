"""The state file: remembered devices survive a restart; a broken or hostile file costs
nothing (one warning, no hang, no traceback); the device plugin's old `.known.json` files are
taken over once."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.inventory import state
from edgefd.inventory.device import Device, Facts

NOW = 1_800_000_000.0
CORAL = Device(
    name="coral-usb-2-1",
    key=DeviceKey("usb", "2-1"),
    model="coral-usb",
    kind="edgetpu",
    state="runtime",
    ids="18d1:9302",
    nodes=(DevNode("/dev/bus/usb/002/005", "189:132"),),
    numa_node=0,
    facts=Facts(driver="usbfs", device_version="1.0.0"),
    resources=("edgefd.io/coral-usb",),
    present=False,
    last_seen=NOW - 60,
)


def entry(**kw: object) -> dict:
    return {**state.device_to_json(CORAL), **kw}


def write(path: Path, devices: list) -> None:
    path.write_text(json.dumps({"version": 1, "devices": devices}))


def test_a_platform_device_round_trips(tmp_path: Path) -> None:
    """Issue 31: a remembered RK3588 NPU (keyed at its platform device) survives a restart;
    a platform name that could be a path does not."""
    npu = Device(
        name="rockchip-npu-rknn", key=DeviceKey("platform", "rknn"), model="rockchip-npu",
        kind="npu", nodes=(DevNode("/dev/accel/accel0", "261:0"),),
        facts=Facts(driver="rocket", compatible="rockchip,rk3588-rknn-core"),
        resources=("edgefd.io/rockchip-npu",), present=False, last_seen=NOW - 60,
    )  # fmt: skip
    path = tmp_path / "s.json"
    state.save(path, [npu])
    assert state.load(path, NOW) == [npu]
    bad = {**state.device_to_json(npu), "place": "../rknn"}
    path.write_text(json.dumps({"version": state.VERSION, "devices": [bad]}))
    assert state.load(path, NOW) == []


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    away = CORAL._replace(missing_since=NOW - 30)  # since when it is missing: kept
    state.save(path, [CORAL])
    assert state.load(path, NOW) == [CORAL]
    state.save(path, [away])
    assert state.load(path, NOW) == [away]
    assert "missing_since" not in state.device_to_json(CORAL)  # present when saved: none
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"last_seen": -5}, "out of range"),
        ({"last_seen": True}, "is not a time"),
        ({"last_seen": "1e3"}, "is not a time"),
        ({"missing_since": -1}, "missing_since -1 is out of range"),
        ({"missing_since": "soon"}, "missing_since 'soon' is not a time"),
        ({"name": "../../etc"}, "is not this device's"),
        ({"name": "usb-2-1"}, "is not this device's"),
        ({"nodes": [["/etc/shadow", None]]}, "is not under /dev"),
        ({"nodes": [["/dev/../etc/shadow", None]]}, "is not under /dev"),
        ({"nodes": [["/dev/x", "a:b"]]}, "is not major:minor"),
        ({"nodes": "/dev/x"}, "lists"),
        ({"bus": "scsi"}, "bad place"),
        ({"place": "../x"}, "bad place"),
        ({"bus": "pci"}, "bad place"),
        ({"bus": "dev", "place": "/etc/passwd"}, "bad place"),
        ({"state": "warm"}, "state"),
        ({"model": "a\nb"}, "printable"),
        ({"by_serial": True}, "serial it does not have"),
        ({"facts": ["x"]}, "not a mapping"),
    ],
)
def test_a_bad_entry_is_dropped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: dict, why: str
) -> None:
    path = tmp_path / "s.json"
    good = entry(name="coral-usb-2-2", place="2-2")
    write(path, [entry(**bad), good, entry(**bad)])
    with caplog.at_level(logging.WARNING):
        assert [d.name for d in state.load(path, NOW)] == ["coral-usb-2-2"]
    [record] = caplog.records
    assert "2 entries dropped" in record.getMessage() and why in record.getMessage()


@pytest.mark.parametrize("t", [1e300, 4e11, NOW + 10 * 86400])
def test_a_last_seen_time_in_the_future_counts_as_now_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, t: float
) -> None:
    """Issue 22 item 6: a clock that was (or is) wrong: the device stays known, remembered
    from now (presence.py counts the rest in monotonic time), and its time is one an API
    timestamp can carry."""
    path = tmp_path / "s.json"
    write(path, [entry(last_seen=t), entry(name="coral-usb-2-2", place="2-2", last_seen=t)])
    with caplog.at_level(logging.WARNING):
        got = state.load(path, NOW)
    assert [(d.name, d.last_seen) for d in got] == [
        ("coral-usb-2-1", NOW),
        ("coral-usb-2-2", NOW),
    ]
    [record] = caplog.records
    assert "2 last-seen time(s) in the future" in record.getMessage()
    near = NOW + 3600  # within a day: kept as it is (a clock set back a little)
    write(path, [entry(last_seen=near)])
    assert [d.last_seen for d in state.load(path, NOW)] == [near]


def test_non_finite_numbers_in_json_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    text = json.dumps({"version": 1, "devices": [entry()]})
    for literal in ("NaN", "Infinity", "-Infinity"):
        path.write_text(text.replace(f"{CORAL.last_seen}", literal))
        assert state.load(path, NOW) == []


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        b"[1, 2]",
        b'{"version": 2, "devices": []}',
        b'{"version": 1}',
        b"[" * 100_000,
        b"\xff\xfe",
        b'{"version": 1, "devices": 7}',
    ],
)
def test_a_garbage_file_means_no_memory_and_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert state.load(path, NOW) == []
    assert len(caplog.records) == 1 and "starting with no remembered devices" in caplog.text


def test_a_fifo_symlink_directory_or_huge_file_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    target = tmp_path / "target.json"
    write(target, [entry()])
    link.symlink_to(target)
    huge = tmp_path / "huge"
    with open(huge, "wb") as fh:
        fh.truncate(state.MAX_BYTES + 1)
    result: list = []
    t = threading.Thread(
        target=lambda: result.extend(
            state.load(p, NOW) for p in (fifo, link, tmp_path, huge, tmp_path / "missing")
        ),
        daemon=True,
    )
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading the state file hung"
    assert result == [[], [], [], [], []]
    # and writing replaces whatever is in the way, never writing through a link
    state.save(link, [CORAL])
    assert not link.is_symlink() and json.loads(target.read_text())["devices"][0]["place"] == "2-1"
    state.save(fifo, [CORAL])
    assert state.load(fifo, NOW) == [CORAL]
