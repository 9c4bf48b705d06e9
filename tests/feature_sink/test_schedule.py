"""When the sink syncs next (schedule.py), as a pure decision, without a thread: a change of
features.d runs a sync at once and answers a pending drift too; drift runs once its hold and
quiet window are over and not before; while syncs fail neither brings the retry forward; the
scheduled sync runs when due, and until then the loop sleeps to the earlier of it and a
drift's due time. Triggers told from other threads are taken once."""

from __future__ import annotations

import threading

from edgefd.feature_sink.schedule import State, Step, Triggers, next_step


def _state(**kw: object) -> State:
    base = {"next_sync": 100.0, "why": "resync", "failing": False, "changed": False,
            "drift": False, "drift_due": 0.0}  # fmt: skip
    return State(**(base | kw))  # type: ignore[arg-type]


def test_a_change_runs_at_once_and_answers_a_pending_drift() -> None:
    step = next_step(_state(changed=True, drift=True, drift_due=50.0), now=10.0)
    assert step == Step("features", 10.0, frozenset({"changed", "drift"}))


def test_drift_waits_for_its_due_time_then_runs() -> None:
    early = next_step(_state(drift=True, drift_due=12.5), now=10.0)
    assert early == Step(None, 12.5)  # sleeps to the drift's due time, not the resync's
    assert next_step(_state(drift=True, drift_due=12.5), now=12.5) == Step(
        "drift", 12.5, frozenset({"drift"})
    )


def test_while_failing_nothing_brings_the_retry_forward() -> None:
    failing = _state(next_sync=30.0, why="retry", failing=True, changed=True, drift=True)
    assert next_step(failing, now=10.0) == Step(None, 30.0)
    assert next_step(failing, now=30.0) == Step("retry", 30.0)


def test_the_scheduled_sync_when_due_and_the_start_at_once() -> None:
    assert next_step(_state(), now=99.0) == Step(None, 100.0)
    assert next_step(_state(), now=100.0) == Step("resync", 100.0)
    assert next_step(_state(next_sync=0.0, why="start"), now=0.0) == Step("start", 0.0)


def test_triggers_from_other_threads_are_taken_once() -> None:
    clock = iter([5.0, 6.0]).__next__
    t = Triggers(clock)
    threads = [threading.Thread(target=t.drifted) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t.features_changed()
    assert (t.changed, t.drift, t.drift_seen) == (True, True, 5.0)  # the first drift's time
    assert t.take(frozenset({"drift"})) == 5.0 and (t.changed, t.drift) == (True, False)
    t.take(frozenset({"changed"}))
    assert not t.changed and not t.stopping
    t.stop()
    t.wait(5.0)  # woken at once
    assert t.stopping
