"""The causes' order, their one-time telling, and the lists they are written with."""

from __future__ import annotations

import pytest

from edgefd.kubectl_edgefd.causes import ORDER, Cause, listing, ordered, plural


def test_causes_are_told_in_order_each_once() -> None:
    got = ordered(
        [
            Cause("in-use", "B."),
            Cause("no-node-matches-selector", "A."),
            Cause("in-use", "B."),
            Cause("tainted", "C."),
        ]
    )
    assert [c.text for c in got] == ["A.", "C.", "B."]


def test_an_unknown_kind_is_a_bug() -> None:
    with pytest.raises(ValueError):
        Cause("because", "x")
    assert len(set(ORDER)) == len(ORDER)


def test_listing_and_plural() -> None:
    assert listing([]) == "" and listing(["a"]) == "a" and listing(["a", "b"]) == "a and b"
    assert listing(["a", "b", "c"]) == "a, b and c"
    assert listing(list("abcdef"), 3) == "a, b, c and 3 more"
    assert plural(1, "device") == "1 device" and plural(2, "device") == "2 devices"
