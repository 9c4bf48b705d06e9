"""From devplugin's decisions, version after version, to moves (moves.py; a pure diff): the
first sight of a present handout is a catch-up, an absent one moves nothing and is compared
with its last present nodes when it is back, a handout devplugin stops listing is a first
sight again when it returns, and a version that decides the same moves nothing."""

from __future__ import annotations

from edgefd.device_keeper.moves import MoveTracker, number
from edgefd.inventory.decisions import Decisions

from .pods import handout

AT4, AT5, AT6 = handout(number="c:189:4"), handout(number="c:189:5"), handout(number="c:189:6")


def _moves(tracker: MoveTracker, t: float, *handouts) -> list[tuple]:
    return [(m.device, m.old, m.new, m.seen) for m in tracker.moves(Decisions(t, handouts))]


def test_first_sight_is_a_catch_up_then_each_new_number_a_move() -> None:
    tracker = MoveTracker()
    assert _moves(tracker, 1.0, AT4) == [("coral-usb-1-1-3", None, number("c:189:4"), 0.0)]
    assert _moves(tracker, 2.0, AT4) == []  # decided the same again
    assert _moves(tracker, 3.0, AT5) == [
        ("coral-usb-1-1-3", number("c:189:4"), number("c:189:5"), 3.0)
    ]


def test_an_absence_moves_nothing_and_the_return_is_from_the_last_present_node() -> None:
    tracker = MoveTracker()
    tracker.moves(Decisions(1.0, (AT4,)))
    assert _moves(tracker, 2.0, handout(number="c:189:4", present=False)) == []
    assert _moves(tracker, 3.0, handout(number="c:189:5", present=False)) == []
    assert _moves(tracker, 4.0, AT6) == [
        ("coral-usb-1-1-3", number("c:189:4"), number("c:189:6"), 4.0)
    ]
    assert [h.device for h in tracker.following] == ["coral-usb-1-1-3"]


def test_a_handout_no_longer_decided_is_a_first_sight_when_it_comes_back() -> None:
    tracker = MoveTracker()
    tracker.moves(Decisions(1.0, (AT4,)))
    assert _moves(tracker, 2.0) == []  # forgotten, or a configuration that serves it no more
    assert _moves(tracker, 3.0, AT5) == [("coral-usb-1-1-3", None, number("c:189:5"), 0.0)]


def test_another_handout_of_the_device_is_its_own() -> None:
    """A resource added that gives the same device at its bus path: a catch-up of that
    handout; the first one moves on by itself."""
    bus = handout(
        number="c:189:4",
        path="/dev/bus/usb/002/005",
        plugin=(("example.com/raw", ("coral-usb-1-1-3",)),),
        dra=(),
    )
    tracker = MoveTracker()
    tracker.moves(Decisions(1.0, (AT4,)))
    [catch_up] = tracker.moves(Decisions(2.0, (AT4, bus)))
    assert (catch_up.old, catch_up.path) == (None, "/dev/bus/usb/002/005")
