"""What the API server holds of this node's slices, as the list-watch tells it (heldslices.py),
judged once where it arrives: only this node's pool is kept (another pool's slice is left
alone, said once), the echo of our own write is no news, a late event never undoes a newer
state, a slice someone else deleted is news and has the Node's UID read again, and the
Node as owner is read once, [] while it cannot be read (said once per reason). The writer
acting on it is dra/test_publisher.py's."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from edgefd.devplugin.dra.heldslices import HeldSlices
from edgefd.kube.errors import ApiNotFound

NODE = "n1"


def piece(name: str, rv: str, pool: str = NODE, gen: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {
            "driver": "edgefd.io",
            "nodeName": NODE,
            "pool": {"name": pool, "generation": gen},
        },
    }


@pytest.fixture
def held() -> tuple[HeldSlices, list[str]]:
    told: list[str] = []
    return HeldSlices(NODE, told.append), told


def test_a_list_keeps_our_pool_only_and_says_a_foreign_one_once(
    held: tuple[HeldSlices, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    h, told = held
    ours, theirs = piece("n1-edgefd.io-0", "5"), piece("theirs", "6", pool="shared")
    with caplog.at_level(logging.INFO):
        h.listed({"n1-edgefd.io-0": ours, "theirs": theirs}, "start")
        h.listed({"n1-edgefd.io-0": ours, "theirs": theirs}, "relist")
        h.event("MODIFIED", piece("theirs", "7", pool="shared"))
    assert h.snapshot() == {"n1-edgefd.io-0": ours}
    assert told == ["listed", "listed"]  # another pool's change is not ours to act on
    said = [r for r in caplog.records if "is of pool 'shared'" in r.getMessage()]
    assert len(said) == 1


def test_our_own_writes_echo_is_no_news_anything_else_is(
    held: tuple[HeldSlices, list[str]],
) -> None:
    h, told = held
    h.listed({}, "start")
    h.wrote("n1-edgefd.io-0", piece("n1-edgefd.io-0", "10"))
    h.event("ADDED", piece("n1-edgefd.io-0", "10"))  # the watch's echo of our create
    assert told == ["listed"]
    h.event("MODIFIED", piece("n1-edgefd.io-0", "11", gen=7))  # someone else's change
    assert told == ["listed", "changed"]
    assert h.snapshot()["n1-edgefd.io-0"]["spec"]["pool"]["generation"] == 7


def test_a_late_event_never_undoes_a_newer_state(held: tuple[HeldSlices, list[str]]) -> None:
    h, told = held
    h.listed({"n1-edgefd.io-0": piece("n1-edgefd.io-0", "20", gen=2)}, "start")
    h.event("MODIFIED", piece("n1-edgefd.io-0", "19", gen=1))
    h.event("DELETED", piece("n1-edgefd.io-0", "18"))
    assert h.snapshot()["n1-edgefd.io-0"]["metadata"]["resourceVersion"] == "20"
    assert told == ["listed"]
    # our write's answer is kept over an older copy, not over a newer one
    h.wrote("n1-edgefd.io-0", piece("n1-edgefd.io-0", "15"))
    assert h.snapshot()["n1-edgefd.io-0"]["metadata"]["resourceVersion"] == "20"


def test_a_slice_moved_to_another_pool_is_no_longer_ours(
    held: tuple[HeldSlices, list[str]],
) -> None:
    h, told = held
    h.listed({"n1-edgefd.io-0": piece("n1-edgefd.io-0", "5")}, "start")
    h.event("MODIFIED", piece("n1-edgefd.io-0", "6", pool="shared"))
    assert h.snapshot() == {} and told == ["listed", "deleted"]


def test_the_owner_is_read_once_and_again_after_someone_deleted_a_slice(
    held: tuple[HeldSlices, list[str]],
) -> None:
    h, told = held
    reads: list[str] = []
    nodes = iter(["uid-1", "uid-2"])

    def read_node() -> dict[str, Any]:
        reads.append("GET")
        return {"metadata": {"name": NODE, "uid": next(nodes)}}

    owner = h.owner(read_node)
    assert [o["uid"] for o in owner] == ["uid-1"] and owner[0]["kind"] == "Node"
    assert h.owner(read_node) == owner and reads == ["GET"]
    h.listed({"n1-edgefd.io-0": piece("n1-edgefd.io-0", "5")}, "start")
    h.event("DELETED", piece("n1-edgefd.io-0", "6"))  # the collector, or a starting kubelet
    assert told == ["listed", "deleted"] and h.snapshot() == {}
    assert [o["uid"] for o in h.owner(read_node)] == ["uid-2"] and reads == ["GET", "GET"]


def test_an_unreadable_node_is_no_owner_for_now_said_once(
    held: tuple[HeldSlices, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    h, _ = held

    def missing() -> dict[str, Any]:
        raise ApiNotFound(f"nodes {NODE!r} not found")

    with caplog.at_level(logging.WARNING):
        assert h.owner(missing) == [] and h.owner(missing) == []
    said = [r for r in caplog.records if "without their Node as owner" in r.getMessage()]
    assert len(said) == 1
    node = {"metadata": {"name": NODE, "uid": "uid-1"}}
    assert [o["uid"] for o in h.owner(lambda: node)] == ["uid-1"]  # asked again: now it is
