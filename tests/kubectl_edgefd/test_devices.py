"""edgefd's DRA devices in the newest generation of each pool, and who holds them."""

from __future__ import annotations

from edgefd.kubectl_edgefd.devices import devices, holders

from .objects import claim, coral, device, slice_of


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = slice_of("pi", [coral("coral-usb-old")], generation=1)
    new = slice_of("pi", [coral()], generation=2)
    other = slice_of("pi", [coral("gpu")])
    other["spec"]["driver"] = "gpu.example.com"
    found = devices([old, new, other])
    assert [(d.node, d.name) for d in found] == [("pi", "coral-usb-2-1")]
    assert found[0].attribute("model") == "coral-usb" and found[0].attribute("nope") is None


def test_taints_and_what_tolerates_them() -> None:
    [d] = devices([slice_of("pi", [device("c", taint="overheating")])])
    assert [t["value"] for t in d.taints] == ["overheating"]
    assert d.blocking([]) == d.taints
    assert d.blocking([{"key": "edgefd.io/unhealthy", "operator": "Exists"}]) == []


def test_holders_name_the_claim_and_its_pods() -> None:
    c = claim("c1", "ns", allocated=[("pi", "coral-usb-2-1")], users=["p1"])
    held = holders([c, claim("unallocated")])
    assert list(held) == [("pi", "coral-usb-2-1")]
    assert held[("pi", "coral-usb-2-1")].text() == "pod ns/p1 (claim ns/c1)"
    lonely = holders([claim("c2", "ns", allocated=[("pi", "x")])])[("pi", "x")]
    assert lonely.text() == "claim ns/c2 (no pod uses it yet)"
