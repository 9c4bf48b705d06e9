"""Comparing a slice read back from the API server with what the publisher would write
(readback.py), so that it writes only when the content differs: the pool and generation of
whatever the server returns (missing fields are none), a taint's `timeAdded` the server added
where we set none ignored (one we set is compared), and a slice that matches only at the
same generation, with the same content and, once the Node is known, the same owner."""

from __future__ import annotations

from typing import Any

from edgefd.devplugin.dra.readback import generation, matches, normalise, pool
from edgefd.devplugin.dra.slices import pool_slices, slice_object

OWNER = [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1", "controller": True}]
UNPLUGGED = {"key": "edgefd.io/unhealthy", "value": "unplugged", "effect": "NoSchedule"}


def spec_of(*devices: dict[str, Any]) -> dict[str, Any]:
    [(_, spec)] = pool_slices("n1", devices)
    return spec


def read_back(spec: dict[str, Any], gen: int, owner: list | None = None) -> dict[str, Any]:
    """What the server returns for a slice we wrote: our spec at `gen`, with its metadata."""
    obj = slice_object("n1-edgefd.io-0", spec, gen, owner)
    obj["metadata"]["resourceVersion"] = "42"
    return obj


def test_pool_and_generation_of_what_is_read() -> None:
    obj = read_back(spec_of(), 3)
    assert (pool(obj), generation(obj)) == ("n1", 3)
    assert (pool({}), generation({})) == ("", 0)
    assert (pool({"spec": {"pool": None}}), generation({"spec": None})) == ("", 0)


def test_a_time_the_server_added_is_not_a_difference_one_we_set_is() -> None:
    want = spec_of({"name": "coral-usb-2-1", "taints": [UNPLUGGED]})
    got = read_back(want, 2)
    stamped = dict(UNPLUGGED, timeAdded="2026-01-01T00:00:00Z")
    got["spec"]["devices"][0]["taints"] = [stamped]  # the API server sets it on create
    assert normalise(got["spec"], want) == want
    assert matches(want, got, 2, [])
    ours = spec_of({"name": "coral-usb-2-1", "taints": [dict(UNPLUGGED, timeAdded="x")]})
    assert not matches(ours, got, 2, [])  # we said when: the server's differs
    assert matches(ours, read_back(ours, 2), 2, [])


def test_a_match_needs_the_generation_the_content_and_the_known_owner() -> None:
    want = spec_of({"name": "coral-usb-2-1"})
    assert matches(want, read_back(want, 5, OWNER), 5, OWNER)
    assert not matches(want, None, 5, OWNER)  # not there
    assert not matches(want, read_back(want, 4, OWNER), 5, OWNER)  # another generation
    assert not matches(spec_of({"name": "ncs2-1-1-1"}), read_back(want, 5, OWNER), 5, OWNER)
    assert not matches(want, read_back(want, 5), 5, OWNER)  # written before the Node was known
    assert matches(want, read_back(want, 5), 5, [])  # the Node unknown: any owner will do
