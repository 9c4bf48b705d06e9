"""Record, the value type of the scan path: a NamedTuple's behaviour without its class-creation
cost (see edgefd.core.record)."""

from __future__ import annotations

import pickle

import pytest

from edgefd.core.record import Record


class Point(Record):
    x: int
    cls: str  # a field may be named like __new__'s first argument
    tags: tuple[str, ...] = ()


def test_fields_defaults_and_errors() -> None:
    p = Point(1, "a")
    assert (p.x, p.cls, p.tags) == (1, "a", ()) and Point._fields == ("x", "cls", "tags")
    assert Point(x=1, cls="a", tags=("t",)).tags == ("t",)
    with pytest.raises(TypeError, match="missing 'cls'"):
        Point(1)
    with pytest.raises(TypeError, match="unexpected 'z'"):
        Point(1, "a", z=2)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        Point(1, "a", (), 4)


def test_a_value_compared_hashed_sorted_copied_and_shown_by_its_fields() -> None:
    p = Point(1, "a")
    assert p == Point(1, "a") and hash(p) == hash(Point(1, "a")) and p < Point(2, "a")
    q = p._replace(cls="b")
    assert (q, p) == (Point(1, "b"), Point(1, "a")) and type(q) is Point
    with pytest.raises(TypeError, match="has no y"):
        p._replace(y=1)
    assert p._asdict() == {"x": 1, "cls": "a", "tags": ()}
    assert repr(p) == "Point(x=1, cls='a', tags=())"
    assert pickle.loads(pickle.dumps(p)) == p
