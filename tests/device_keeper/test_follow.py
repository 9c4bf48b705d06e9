"""`serve`'s component, devplugin's decisions followed (follow.py): a version written by
devplugin reaches the service on the worker's thread (its catch-ups, then each move), /readyz
says what is followed or why not, a file that is not right is refused (said once, counted,
not ready, nothing granted) and the next good one is followed again from the last good one,
and a worker that dies ends the process with its error."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest

from edgefd.device_keeper.follow import Following
from edgefd.device_keeper.ledger import Unsaved
from edgefd.device_keeper.metrics import KeeperMetrics
from edgefd.device_keeper.moves import number
from edgefd.device_keeper.service import Keeper
from edgefd.inventory.decisions import Decisions, write
from edgefd.runtime.runner import Lifeline
from tests.helpers import wait_until

from .pods import handout


class Nobody:
    """The kubelet, holding nothing: each move is handled and reported all the same."""

    def list(self) -> list:
        return []


def _following(tmp_path: Path, lifeline: Lifeline | None = None):
    metrics = KeeperMetrics()
    keeper = Keeper(Nobody(), None, str(tmp_path), str(tmp_path), metrics)  # type: ignore[arg-type]
    reported: queue.Queue = queue.Queue()
    f = Following(
        str(tmp_path / "decisions.json"),
        keeper,
        lambda move, done: reported.put(move),
        lifeline or Lifeline(),
        metrics,
        poll_interval=0.05,
    )
    return f, reported, metrics


def _handled(f: Following) -> queue.Queue:
    """Every move the keeper handles, in order (it still handles them)."""
    handled: queue.Queue = queue.Queue()
    keeper = f.worker.keeper
    handle = keeper.handle
    keeper.handle = lambda move: (handled.put(move), handle(move))[1]  # type: ignore[method-assign]
    return handled


def test_each_version_reaches_the_service_on_the_workers_thread(tmp_path: Path) -> None:
    f, reported, _ = _following(tmp_path)
    f.start()
    try:
        assert f.ready() == (False, f"waiting for devplugin's decisions ({f.path})")
        write(f.path, Decisions(1.0, (handout(number="c:189:4"),)))
        catch_up = reported.get(timeout=10)
        assert (catch_up.old, catch_up.new) == (None, number("c:189:4"))
        assert wait_until(lambda: f.ready()[0], timeout=5)
        assert f.ready() == (True, "following 1 handed-out device(s)")
        write(f.path, Decisions(2.0, (handout(number="c:189:9"),)))
        moved = reported.get(timeout=10)
        assert (moved.old, moved.new, moved.seen) == (number("c:189:4"), number("c:189:9"), 2.0)
    finally:
        f.stop()
    assert not f.worker.thread.is_alive()


def test_a_file_that_is_not_right_grants_nothing_and_is_said_once(tmp_path: Path, caplog) -> None:
    f, _, metrics = _following(tmp_path)  # not started: read() says what it queues
    write(f.path, Decisions(1.0, (handout(number="c:189:4"),)))
    [catch_up] = f.read()
    assert catch_up.old is None
    f.path.write_text('{"version": 1, "time": 2, "handouts": [{"device": "../../etc"}]}')
    assert f.read() == [] and f.read() == []
    ok, why = f.ready()
    assert not ok and "not acted on: device '../../etc' is not a device name" in why
    assert metrics.value("edgefd_device_keeper_refused_total", reason="decisions") == 1
    assert caplog.text.count("nothing is granted from it") == 1
    write(f.path, Decisions(3.0, (handout(number="c:189:6"),)))
    [move] = f.read()  # from the last good version
    assert (move.old, move.new) == (number("c:189:4"), number("c:189:6")) and f.ready()[0]


def test_a_worker_that_dies_ends_the_process(tmp_path: Path) -> None:
    lifeline = Lifeline()
    f, _, _ = _following(tmp_path, lifeline)

    def broken(move):
        raise RuntimeError("a bug")

    f.worker.keeper.handle = broken  # type: ignore[method-assign]
    f.start()
    try:
        write(f.path, Decisions(1.0, (handout(),)))
        wait_until(lambda: lifeline.failure is not None, timeout=10)
    finally:
        f.stop()
    assert isinstance(lifeline.failure, RuntimeError)


def test_a_ledger_that_cannot_be_saved_is_not_ready(tmp_path: Path) -> None:
    """Issue 46 item 5: /readyz says the grants cannot be saved (it said ready before) and is
    ready again once a save succeeds."""
    f, _, _ = _following(tmp_path)
    write(f.path, Decisions(1.0, (handout(number="c:189:4"),)))
    f.read()
    assert f.ready()[0]
    led = f.worker.keeper.ledger
    led.path = tmp_path / "decisions.json" / "granted.json"  # under a file: cannot be saved
    with pytest.raises(Unsaved):
        led.save()
    ok, why = f.ready()
    assert (
        not ok
        and "cannot save the grants" in why
        and why.endswith("no new grant is made until it can")
    )
    led.path = tmp_path / "granted.json"
    led.save()
    assert f.ready()[0]


def _following_one(tmp_path: Path, recheck: tuple[float, ...]):
    """Started with these second looks, following one handout (its first catch-up handled);
    every move the keeper handles comes out of the last queue."""
    f, reported, _ = _following(tmp_path)
    handled = _handled(f)
    f.recheck = recheck
    f.start()
    try:
        write(f.path, Decisions(1.0, (handout(number="c:189:4"),)))
        assert handled.get(timeout=10).old is None  # the first catch-up
    except BaseException:
        f.stop()
        raise
    return f, reported, handled


def test_a_move_is_looked_at_again_for_containers_created_meanwhile(tmp_path: Path) -> None:
    """Issue 46 item 6: a container the runtime was still creating when its device moved was
    never caught up (it was not listed yet, and nothing looked again). Each move is followed
    by catch-ups of every handout, marked as a second look, handled as any move and reported
    only when they did something; a stop cancels those still due."""
    f, reported, handled = _following_one(tmp_path, (0.3,))
    try:
        write(f.path, Decisions(2.0, (handout(number="c:189:9"),)))
        moved = handled.get(timeout=10)
        assert (moved.old, moved.new, moved.again) == (number("c:189:4"), number("c:189:9"), False)
        again = handled.get(timeout=10)
        assert (again.old, again.new, again.again) == (None, number("c:189:9"), True)
        f.recheck = (30.0,)
        write(f.path, Decisions(3.0, (handout(number="c:189:11"),)))
        assert handled.get(timeout=10).new == number("c:189:11")
    finally:
        f.stop()
    assert handled.empty() and not any(t.is_alive() for t in f._timers)
    assert [m.again for m in reported.queue] == [False, False, False]  # nobody held it


def test_a_burst_of_moves_gets_one_set_of_looks_after_it(tmp_path: Path) -> None:
    """A device re-enumerating again and again (the e2e's ten rounds a second apart) must not
    queue a second look per move ahead of the next real move: each move re-arms the looks,
    so they come once, after the latest."""
    f, _, handled = _following_one(tmp_path, (0.6,))
    try:
        for i, minor in enumerate((9, 11, 13, 15)):
            write(f.path, Decisions(2.0 + i, (handout(number=f"c:189:{minor}"),)))
            f.read()  # now, not when the watcher gets to it: the burst is 0.2 s apart
            assert handled.get(timeout=10).new == number(f"c:189:{minor}")
            time.sleep(0.2)
        again = handled.get(timeout=10)
        assert (again.new, again.again) == (number("c:189:15"), True)
        with pytest.raises(queue.Empty):  # the earlier moves' looks were replaced
            handled.get(timeout=1.0)
    finally:
        f.stop()


def test_a_second_look_leaves_a_device_absent_since_alone(tmp_path: Path) -> None:
    """A second look falls due while the moved device is unplugged again: its last seen
    number is not its number any more (another device may have it), so nothing is granted
    for it; the look after it returns sees its new number."""
    f, _, handled = _following_one(tmp_path, ())
    try:
        write(f.path, Decisions(2.0, (handout(number="c:189:9"),)))
        assert handled.get(timeout=10).new == number("c:189:9")
        write(f.path, Decisions(3.0, (handout(number="c:189:9", present=False),)))
        f.read()  # read now (the watcher may be a moment behind): it is away
        f._recheck()  # the look due 2 s after the move, while it is away
        with pytest.raises(queue.Empty):
            handled.get(timeout=0.5)
        write(f.path, Decisions(4.0, (handout(number="c:189:12"),)))
        assert handled.get(timeout=10).new == number("c:189:12")
        f.read()
        f._recheck()
        again = handled.get(timeout=10)
        assert (again.new, again.again) == (number("c:189:12"), True)
    finally:
        f.stop()
