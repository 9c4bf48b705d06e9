"""The ResourceSlice publisher's own logic over a stand-in slice API (fakeapi.py): what it
writes and when. The API interaction itself is tested against the real API server
(test_realpeer.py, tests/k8s/test_dra_apiserver.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from edgefd.devplugin.dra.publisher import SlicePublisher
from tests.devplugin.dra.fakeapi import FakeSliceApi
from tests.helpers import wait_until

NODE = "n1"


def dev(name: str, tainted: bool = False) -> dict:
    d: dict = {"name": name, "attributes": {"model": {"string": "coral-usb"}}}
    if tainted:
        d["taints"] = [{"key": "edgefd.io/unhealthy", "value": "unplugged", "effect": "NoSchedule"}]
    return d


@pytest.fixture
def api() -> FakeSliceApi:
    return FakeSliceApi()


@pytest.fixture
def pub(api: FakeSliceApi) -> Iterator[SlicePublisher]:
    p = SlicePublisher(api, NODE).start()
    yield p
    p.stop()


def test_nothing_is_published_before_the_first_scan(api: FakeSliceApi, pub: SlicePublisher) -> None:
    wait_until(lambda: api.watches)
    assert api.writes == [] and not pub.in_sync.is_set()
    pub.set_devices([])
    wait_until(pub.in_sync.is_set)
    assert api.writes == [("create", "n1-edgefd.io-0")] and api.generation() == 1


def test_every_change_raises_the_generation_and_nothing_else_writes(
    api: FakeSliceApi, pub: SlicePublisher
) -> None:
    pub.set_devices([dev("coral-usb-2-1")])
    wait_until(lambda: api.generation() == 1 and pub.in_sync.is_set())
    pub.set_devices([dev("coral-usb-2-1")])  # the same devices again: no write
    pub.set_devices([dev("coral-usb-2-1", tainted=True)])
    wait_until(lambda: api.generation() == 2 and pub.in_sync.is_set())
    assert api.devices()["coral-usb-2-1"]["taints"][0]["value"] == "unplugged"
    assert [v for v, _ in api.writes] == ["create", "update"]


def test_a_slice_deleted_by_someone_else_comes_back_newer(
    api: FakeSliceApi, pub: SlicePublisher
) -> None:
    pub.set_devices([dev("coral-usb-2-1")])
    wait_until(lambda: api.generation() == 1 and pub.in_sync.is_set())
    api.delete_behind_its_back("n1-edgefd.io-0")
    wait_until(lambda: api.generation() == 2)
    assert "coral-usb-2-1" in api.devices()


def test_a_write_refused_as_stale_lists_again_then_writes(
    api: FakeSliceApi, pub: SlicePublisher, caplog: pytest.LogCaptureFixture
) -> None:
    pub.set_devices([dev("coral-usb-2-1")])
    wait_until(lambda: api.generation() == 1 and pub.in_sync.is_set())
    lists = api.lists
    with api.lock:  # changed without an event (as if the watch had missed it): a 409 next
        api.rv += 1
        api.objects["n1-edgefd.io-0"]["metadata"]["resourceVersion"] = str(api.rv)
    pub.set_devices([dev("coral-usb-2-1", tainted=True)])
    wait_until(lambda: api.generation() == 2 and pub.in_sync.is_set())
    assert "failed (conflict)" in caplog.text
    assert api.lists == lists + 1  # the list the 409 asked for, nothing more
    assert [v for v, _ in api.writes] == ["create", "update"] and pub.last_error == ""


def test_more_than_64_devices_are_cut_and_shrinking_deletes(
    api: FakeSliceApi, pub: SlicePublisher
) -> None:
    pub.set_devices([dev(f"d-{i:03d}") for i in range(70)])
    wait_until(lambda: len(api.objects) == 2 and pub.in_sync.is_set())
    pub.set_devices([dev("d-000")])
    wait_until(lambda: len(api.objects) == 1 and pub.in_sync.is_set())
    assert ("delete", "n1-edgefd.io-1") in api.writes and api.generation() == 2


def test_an_outage_delays_a_change_and_loses_none(api: FakeSliceApi, pub: SlicePublisher) -> None:
    pub.set_devices([dev("coral-usb-2-1")])
    wait_until(pub.in_sync.is_set)
    api.down = True
    pub.set_devices([dev("coral-usb-2-1", tainted=True)])
    wait_until(lambda: pub.last_error)
    assert "connection refused" in pub.last_error and not pub.in_sync.is_set()
    api.down = False
    wait_until(pub.in_sync.is_set, timeout=10)
    assert "taints" in api.devices()["coral-usb-2-1"] and pub.last_error == ""


def test_a_restart_over_unchanged_slices_writes_nothing(api: FakeSliceApi) -> None:
    first = SlicePublisher(api, NODE).start()
    first.set_devices([dev("coral-usb-2-1")])
    wait_until(first.in_sync.is_set)
    first.stop()
    writes = len(api.writes)
    second = SlicePublisher(api, NODE).start()
    try:
        second.set_devices([dev("coral-usb-2-1")])
        wait_until(second.in_sync.is_set)
        assert len(api.writes) == writes and second.generation == 1
    finally:
        second.stop(delete=True)
    assert api.objects == {}


def foreign(name: str, node: str = NODE, pool: str = "shared", gen: int = 7) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": "5"},
        "spec": {
            "driver": "edgefd.io",
            "nodeName": node,
            "pool": {"name": pool, "generation": gen, "resourceSliceCount": 1},
            "devices": [dev("theirs")],
        },
    }


def test_another_pools_slice_on_this_node_is_left_alone(api: FakeSliceApi) -> None:
    api.objects["theirs"] = foreign("theirs")
    p = SlicePublisher(api, NODE).start()
    try:
        p.set_devices([dev("coral-usb-2-1")])
        wait_until(p.in_sync.is_set, 5, 0.01)
        p.set_devices([dev("coral-usb-2-1"), dev("ncs2-1-1-1")])
        wait_until(lambda: len(api.devices()) == 3, 5, 0.01)
        wait_until(p.in_sync.is_set, 5, 0.01)
    finally:
        p.stop(delete=True)
    # never rewritten or deleted, not even by the clean shutdown; its generation is not ours
    assert api.objects["theirs"]["metadata"]["resourceVersion"] == "5"
    assert [w for w in api.writes if w[1] == "theirs"] == []
    assert p.generation == 2


def test_a_squatted_slice_name_backs_off_instead_of_spinning(
    api: FakeSliceApi, caplog: pytest.LogCaptureFixture
) -> None:
    # another node's slice under this node's slice name: invisible to this node's list, so
    # every create is a 409 that no re-read resolves
    api.objects["n1-edgefd.io-0"] = foreign("n1-edgefd.io-0", node="n2", pool="n2")
    p = SlicePublisher(api, NODE).start()
    try:
        p.set_devices([dev("coral-usb-2-1")])
        wait_until(lambda: api.creates >= 1, 5, 0.01)
        time.sleep(2.0)
        creates = api.creates
    finally:
        p.stop()
    # backoff 0.1 s doubling (jittered): about 5 attempts in 2 s; without it, hundreds
    assert 2 <= creates <= 10, creates
    said = [r for r in caplog.records if "cannot create ResourceSlice n1-edgefd.io-0" in r.message]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, caplog.text
    assert "name-taken" in said[0].message
    assert not p.in_sync.is_set() and "not of this node's pool" in p.last_error


def _node(uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": uid}}


def _owners(api: FakeSliceApi) -> list:
    return [o["metadata"].get("ownerReferences") for o in api.objects.values()]


def test_slices_are_owned_by_their_node(api: FakeSliceApi) -> None:
    api.nodes[NODE] = _node("uid-1")
    p = SlicePublisher(api, NODE).start()
    try:
        p.set_devices([dev("coral-usb-2-1")])
        wait_until(lambda: api.generation() == 1 and p.in_sync.is_set())
        owner = {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-1"}
        assert _owners(api) == [[dict(owner, controller=True)]]
        gets = api.node_gets
        p.set_devices([dev("coral-usb-2-1", tainted=True)])
        wait_until(lambda: api.generation() == 2 and p.in_sync.is_set())
        assert api.node_gets == gets  # the UID is read once, not per write
        # the Node registered again (a new UID) and the collector deleted the slice: it
        # comes back owned by the new Node, not the old one (which would delete it again)
        api.nodes[NODE] = _node("uid-2")
        api.delete_behind_its_back("n1-edgefd.io-0")
        wait_until(lambda: _owners(api) and _owners(api)[0][0]["uid"] == "uid-2")
    finally:
        p.stop()


def test_without_a_readable_node_slices_are_written_and_owned_later(api: FakeSliceApi) -> None:
    p = SlicePublisher(api, NODE).start()
    try:
        p.set_devices([dev("coral-usb-2-1")])
        wait_until(lambda: api.generation() == 1 and p.in_sync.is_set())
        assert _owners(api) == [None]  # no Node (yet): published all the same
        api.nodes[NODE] = _node("uid-1")
        p.set_devices([dev("coral-usb-2-1", tainted=True)])
        wait_until(lambda: api.generation() == 2 and p.in_sync.is_set())
        assert _owners(api)[0][0]["uid"] == "uid-1"
    finally:
        p.stop()


def test_a_restart_adds_the_owner_to_slices_written_without_one(api: FakeSliceApi) -> None:
    first = SlicePublisher(api, NODE).start()
    first.set_devices([dev("coral-usb-2-1")])
    wait_until(lambda: api.generation() == 1 and first.in_sync.is_set())
    first.stop()
    api.nodes[NODE] = _node("uid-1")
    second = SlicePublisher(api, NODE).start()
    try:
        second.set_devices([dev("coral-usb-2-1")])
        wait_until(lambda: api.generation() == 2 and second.in_sync.is_set())
        assert _owners(api)[0][0]["uid"] == "uid-1"
    finally:
        second.stop()
    writes = len(api.writes)
    third = SlicePublisher(api, NODE).start()  # owned now: the next restart writes nothing
    try:
        third.set_devices([dev("coral-usb-2-1")])
        wait_until(third.in_sync.is_set)
        assert len(api.writes) == writes
    finally:
        third.stop()
