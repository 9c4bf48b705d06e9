"""The keeper's memory of what it granted (ledger.py): kept across a restart, bounded, written
atomically; a file that is not the ledger (corrupt, a symlink, a FIFO, another version, a bad
entry) is a warning and an empty ledger or that entry dropped, never an error; containers
whose cgroup is gone are forgotten."""

from __future__ import annotations

import json
import logging
import os

import pytest

from edgefd.device_keeper import ledger as ledger_mod
from edgefd.device_keeper.ledger import FILE, MAX_NUMBERS, Ledger
from edgefd.device_keeper.rules import DeviceNumber

PATH = "/dev/edgefd/coral-usb-1-1-3"
N4, N5, N6 = (DeviceNumber("c", 189, m) for m in (4, 5, 6))


def test_grants_survive_a_restart(tmp_path):
    state = tmp_path / "keeper" / FILE
    first = Ledger(state)
    first.record("c0ffee", "/kubepods/pod1/c0ffee", PATH, N5)
    first.record("c0ffee", "/kubepods/pod1/c0ffee", PATH, N6)
    first.record("c0ffee", "/kubepods/pod1/c0ffee", PATH, N6)  # already the last: unchanged
    later = Ledger(state)
    assert later.granted("c0ffee", PATH) == {N5, N6}
    assert later.granted("c0ffee", PATH + ".1") == set() == later.granted("other", PATH)
    assert json.loads(state.read_text())["containers"]["c0ffee"]["paths"] == {
        PATH: ["c:189:5", "c:189:6"]
    }
    assert [p.name for p in state.parent.iterdir()] == [FILE]  # no temp file left


def test_numbers_a_path_are_bounded_oldest_first(tmp_path):
    led = Ledger(tmp_path / FILE)
    for m in range(MAX_NUMBERS + 3):
        led.record("c0ffee", "/cg", PATH, DeviceNumber("c", 189, m))
    got = Ledger(tmp_path / FILE).granted("c0ffee", PATH)
    assert len(got) == MAX_NUMBERS and DeviceNumber("c", 189, 0) not in got


def test_containers_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_mod, "MAX_CONTAINERS", 2)
    led = Ledger(tmp_path / FILE)
    for cid in ("a", "b", "c"):
        led.record(cid, "/cg", PATH, N5)
    assert set(Ledger(tmp_path / FILE).entries) == {"b", "c"}


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[" * 100000,
        json.dumps({"version": 99, "containers": {}}).encode(),
        json.dumps([1, 2]).encode(),
    ],
)
def test_a_file_that_is_not_the_ledger_is_a_warning_and_an_empty_one(tmp_path, caplog, content):
    (tmp_path / FILE).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        led = Ledger(tmp_path / FILE)
    assert led.entries == {} and len(caplog.records) == 1
    led.record("c0ffee", "/cg", PATH, N5)  # and it is replaced by a good one
    assert Ledger(tmp_path / FILE).granted("c0ffee", PATH) == {N5}


def test_a_symlink_or_fifo_is_not_followed(tmp_path, caplog):
    target = tmp_path / "elsewhere"
    target.write_text(json.dumps({"version": 1, "containers": {}}))
    (tmp_path / FILE).symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        assert Ledger(tmp_path / FILE).entries == {}
    assert "symlink" in caplog.text
    os.mkfifo(tmp_path / "fifo")
    assert Ledger(tmp_path / "fifo").entries == {}  # does not block


def test_bad_entries_are_dropped_the_rest_kept(tmp_path, caplog):
    good = {"cgroup": "/cg", "paths": {PATH: ["c:189:5"]}}
    doc = {
        "version": 1,
        "containers": {
            "good": good,
            "bad number": good,
            "x": {"cgroup": "/cg", "paths": {PATH: ["c:189:99999999"]}},
            "y": {"cgroup": "/cg", "paths": {"/etc/passwd": ["c:1:7"]}},
            "z": "not an object",
            # a trailing newline is no part of an ID or a number (`$` would let it through)
            "newline\n": good,
            "w": {"cgroup": "/cg", "paths": {PATH: ["c:189:5\n"]}},
        },
    }
    (tmp_path / FILE).write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        led = Ledger(tmp_path / FILE)
    assert set(led.entries) == {"good"} and "6 entry(ies) not understood" in caplog.text


def test_gone_containers_are_forgotten(tmp_path):
    led = Ledger(tmp_path / FILE)
    led.record("gone", "/cg/gone", PATH, N5)
    led.record("live", "/cg/live", PATH, N5)
    led.record("kept", "/cg/gone-too", PATH, N5)
    assert led.forget(lambda cg: "gone" in cg, keep=["kept"]) == ["gone"]
    assert set(Ledger(tmp_path / FILE).entries) == {"live", "kept"}


def test_without_a_file_it_remembers_in_memory(tmp_path):
    led = Ledger(None)
    led.record("c0ffee", "/cg", PATH, N4)
    assert led.granted("c0ffee", PATH) == {N4}


def test_a_save_that_fails_refuses_the_record_until_one_succeeds(tmp_path, caplog):
    """Issue 46 item 5 (it failed open: logged, and the grant went on): a record that cannot be
    saved raises Unsaved, `unsaved` says why, said once; the same record again is saved once
    the disk takes it, and the next process knows it."""
    (tmp_path / "dir").write_text("")  # the ledger's directory is a file: every save fails
    led = Ledger(tmp_path / "dir" / FILE)
    with caplog.at_level(logging.ERROR, logger="device-keeper"):
        with pytest.raises(ledger_mod.Unsaved, match="cannot save the grants"):
            led.record("c0ffee", "/cg", PATH, N4)
        with pytest.raises(ledger_mod.Unsaved):
            led.record("c0ffee", "/cg", PATH, N4)  # in memory already: still not on disk
    assert "cannot save the grants" in led.unsaved
    assert caplog.text.count("no new grant is made until it can") == 1
    (tmp_path / "dir").unlink()
    (tmp_path / "dir").mkdir()
    led.record("c0ffee", "/cg", PATH, N4)
    assert led.unsaved == "" and Ledger(tmp_path / "dir" / FILE).granted("c0ffee", PATH) == {N4}
