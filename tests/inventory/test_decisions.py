"""devplugin's decisions as a file (decisions.py): written atomically and read back as they
were; the history of what each node was given; and a file that is not right refused whole,
with what is wrong, never half-read: the reader (device-keeper) holds privileges the writer
does not, so every path, number and name in it is input."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from edgefd.inventory.decisions import (
    MAX_BYTES,
    MAX_WAS,
    BadDecisions,
    Decisions,
    GivenNode,
    Handout,
    History,
    parse,
    read,
    remembered,
    write,
)

CORAL = Handout(
    "coral-usb-2-1",
    (
        GivenNode(
            "/dev/edgefd/coral-usb-2-1",
            "c:189:130",
            (("/dev/edgefd/coral-usb-2-1", "c:189:129"),),
        ),
    ),
    plugin=(("edgefd.io/coral-usb", ("coral-usb-2-1-r0", "coral-usb-2-1-r1")),),
    dra=(("edgefd.io", "node-1.example", "coral-usb-2-1"),),
)  # fmt: skip


APEX = Handout(
    "coral-pcie-0000-02-00-0",
    (GivenNode("/dev/apex_0", "c:120:0"),),
    plugin=(("edgefd.io/coral-pcie", ("coral-pcie-0000-02-00-0",)),),
    present=False,
)


def _doc(**handout: object) -> bytes:
    base = CORAL.as_json() | handout
    return json.dumps({"version": 1, "time": 5.0, "handouts": [base]}).encode()


def test_written_atomically_and_read_back_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "d" / "decisions.json"
    decisions = Decisions(1733461234.5, (CORAL, APEX))
    assert write(path, decisions) is True
    assert read(path) == decisions
    assert write(path, decisions) is False  # the same bytes: nothing written
    assert [p.name for p in path.parent.iterdir()] == ["decisions.json"]  # no temp file left
    assert read(tmp_path / "none.json") is None  # none yet


def test_the_same_decisions_whenever_made() -> None:
    a, b = Decisions(1.0, (CORAL,)), Decisions(2.0, (CORAL,))
    assert a.same_as(b) and not a.same_as(None) and a != b


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"device": "../etc"}, "is not a device name"),
        ({"device": "Coral"}, "is not a device name"),
        ({"nodes": [{"path": "/dev/../etc/passwd", "number": "c:1:3"}]}, "not a plain path"),
        ({"nodes": [{"path": "/etc/passwd", "number": "c:1:3"}]}, "not a plain path"),
        ({"nodes": [{"path": "/dev/edgefd/./x", "number": "c:1:3"}]}, "not a plain path"),
        ({"nodes": [{"path": "/dev//x", "number": "c:1:3"}]}, "not a plain path"),
        ({"nodes": [{"path": "/dev/x\n", "number": "c:1:3"}]}, "not a plain path"),
        ({"nodes": [{"path": "/dev/x", "number": "b:8:0"}]}, "is not c:MAJOR:MINOR"),
        ({"nodes": [{"path": "/dev/x", "number": "c:4096:0"}]}, "kernel's range"),
        ({"nodes": [{"path": "/dev/x", "number": "c:1:1048576"}]}, "kernel's range"),
        ({"nodes": [{"path": "/dev/x", "number": "c:\u0661:2"}]}, "is not c:MAJOR:MINOR"),
        ({"nodes": [{"path": "/dev/x", "number": "c:1:2", "was": [["/tmp/x", "c:1:1"]]}]},
         "not a plain path"),
        ({"nodes": [{"path": "/dev/x", "number": "c:1:2", "was": [["/dev/y", "c:1:1"]] * 9}]},
         "at most 8"),
        ({"nodes": "x"}, "nodes: not a list"),
        ({"plugin": [["edgefd.io/coral-usb", "coral-usb-2-1"]]}, "kubelet IDs: not a list"),
        ({"plugin": [["edgefd.io/coral-usb", ["A"]]]}, "is not a device name"),
        ({"plugin": [["", ["x"]]]}, "resource ''"),
        ({"dra": [["edgefd.io", "node1"]]}, "[driver, pool, device]"),
        ({"present": "yes"}, "present: true or false"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_right_is_refused_whole(change: dict, why: str) -> None:
    with pytest.raises(BadDecisions, match=re.escape(why)):
        parse(_doc(**change))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"{", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"version": 2, "time": 1, "handouts": []}', "not a version 1"),
        (b'{"version": 1, "time": -1, "handouts": []}', "is not a time"),
        (b'{"version": 1, "time": true, "handouts": []}', "is not a time"),
        (b'{"version": 1, "time": 1}', "handouts: not a list"),
    ],
)
def test_a_document_that_is_not_decisions(data: bytes, why: str) -> None:
    with pytest.raises(BadDecisions, match=why):
        parse(data)


def test_a_handout_listed_twice_is_refused() -> None:
    doc = {"version": 1, "time": 1, "handouts": [CORAL.as_json(), CORAL.as_json()]}
    with pytest.raises(BadDecisions, match="listed twice"):
        parse(json.dumps(doc).encode())


def test_a_symlink_a_fifo_and_a_huge_file_are_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_bytes(_doc())
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "huge.json").write_bytes(b" " * (MAX_BYTES + 1))
    for name, why in (("link", "a symlink"), ("fifo", "a FIFO"), ("huge", "larger than")):
        with pytest.raises(BadDecisions, match=why):
            read(tmp_path / f"{name}.json")


def test_history_keeps_what_each_node_was_given_newest_first_and_bounded() -> None:
    h = History()
    assert h.given("x", 0, [("/dev/edgefd/x", "c:189:1")]) == ()
    assert h.given("x", 0, [("/dev/edgefd/x", "c:189:1")]) == ()  # unchanged
    assert h.given("x", 0, [("/dev/edgefd/x", "c:189:2")]) == (("/dev/edgefd/x", "c:189:1"),)
    for n in range(3, 20):
        was = h.given("x", 0, [("/dev/edgefd/x", f"c:189:{n}")])
    assert len(was) == MAX_WAS and was[0] == ("/dev/edgefd/x", "c:189:18")
    # two handouts of one device (two paths): each given pair is current, not "was"
    both = [("/dev/edgefd/x", "c:189:20"), ("/dev/bus/usb/002/021", "c:189:20")]
    assert both[0] not in h.given("x", 0, both) and both[1] not in h.given("x", 0, both)
    h.forget(["y"])
    assert h.given("x", 0, [("/dev/edgefd/x", "c:189:21")]) == ()


def test_a_restarted_writer_carries_the_history_on_from_its_file() -> None:
    h = History(remembered(Decisions(1.0, (CORAL,))))
    was = h.given("coral-usb-2-1", 0, [("/dev/edgefd/coral-usb-2-1", "c:189:131")])
    assert was == (
        ("/dev/edgefd/coral-usb-2-1", "c:189:130"),
        ("/dev/edgefd/coral-usb-2-1", "c:189:129"),
    )
