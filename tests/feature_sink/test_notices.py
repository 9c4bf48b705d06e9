"""What the sink says for the pod's notices (notices.py): an Event that names its writer and
quotes its words, and per writer a few at once, then one every INTERVAL, however often the
writer changes its notice or clears and posts it again (issue 46 item 4: each new message
was a new Event, 5.2 a second from one writer). A fake clock; the real API server's side is
in test_realpeer.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from edgefd.core.notices import CONFIG_RELOAD_FAILED, UNREADABLE, Notice
from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.notices import BURST, INTERVAL, MAX_QUOTED, NoticeGate, notice_problem
from edgefd.feature_sink.report import Reporter
from edgefd.feature_sink.sync import NodeSyncer
from tests.feature_sink.states import NOW, RULES, desired_of
from tests.feature_sink.test_sync import TrustedCopy


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def n(writer: str, message: str) -> Notice:
    return Notice(writer, CONFIG_RELOAD_FAILED, message)


def test_the_event_names_its_writer_and_quotes_its_words() -> None:
    """A notice never reads as if another component had sent it: bus-scan's `kubelet: run
    curl | sh` is bus-scan's, quoted, with the reason from the fixed set."""
    p = notice_problem(n("bus-scan", 'kubelet: image pull failed; fix: "curl x | sh"'))
    assert p.reason == CONFIG_RELOAD_FAILED
    assert p.message == (
        'edgefd\'s bus-scan left this notice: "kubelet: image pull failed; fix: \\"curl x | sh\\""'
    )
    long = notice_problem(n("devplugin", "é" * 1000))
    assert len(long.message) < 1024 and long.message.endswith('…"')
    assert len(long.message) - len("edgefd's devplugin left this notice: ") == MAX_QUOTED + 2
    bad = notice_problem(Notice("devplugin", UNREADABLE, "a FIFO, not a regular file"))
    assert bad.reason == UNREADABLE
    assert bad.message == (
        "edgefd's devplugin left a notice the sink cannot read: a FIFO, not a regular file; ignored"
    )
    assert p.key != notice_problem(n("devplugin", p.message)).key  # whose, in the key too


def test_a_writer_changing_its_notice_gets_a_burst_then_one_event_per_interval() -> None:
    clock = Clock()
    gate = NoticeGate(clock)
    shown = []
    for i in range(50):  # a new message every 0.2 s for 10 s
        clock.t += 0.2
        (p,) = gate.problems([n("bus-scan", f"m{i}")])
        if not shown or p != shown[-1]:
            shown.append(p)
    assert [p.message.rpartition(": ")[2] for p in shown] == ['"m0"', '"m1"', '"m2"']
    # refilling since the first was taken (at 0.2 s), it is whole 300 s after that
    assert gate.next_due() == pytest.approx(INTERVAL - (10 - 0.2))
    clock.t += gate.next_due() or 0
    (p,) = gate.problems([n("bus-scan", "m49")])
    assert p.message.startswith('edgefd\'s bus-scan left this notice: "m49" (46 notice(s) of ')
    assert f"at most {BURST}, then one every {INTERVAL:.0f} s" in p.message
    assert p.key == f"notice|bus-scan|{CONFIG_RELOAD_FAILED}|m49"  # the count is not
    assert gate.next_due() is None
    clock.t += 1
    assert gate.problems([n("bus-scan", "m49")]) == [p]  # unchanged: the same problem


def test_clearing_and_posting_again_is_bounded_too_and_the_others_are_not_held() -> None:
    """A writer that clears its notice and posts it again, twenty times in 20 s: its problem
    comes back BURST times (each a post the Reporter tries: the same words, the same Event
    name, so no second Event either), while another writer's notice stays shown."""
    clock = Clock()
    gate = NoticeGate(clock)
    returns, before = 0, False
    for i in range(40):
        clock.t += 0.5
        notices = [n("devplugin", "real failure")]
        if i % 2 == 0:
            notices.append(n("bus-scan", "flap"))
        shown = gate.problems(notices)
        assert shown[-1].message == 'edgefd\'s devplugin left this notice: "real failure"'
        now = any("bus-scan" in p.key for p in shown)
        returns += now and not before
        before = now
    assert returns == BURST
    clock.t += INTERVAL
    (p, _) = gate.problems([n("bus-scan", "flap"), n("devplugin", "real failure")])
    assert "(17 notice(s) of bus-scan before this one were not posted" in p.message


def test_a_held_notice_brings_its_own_sync() -> None:
    """Held back, a notice is posted when its writer's bucket allows: the sync says when (the
    loop syncs then), not at the next hourly resync."""
    clock = Clock()
    metrics = SinkMetrics()
    reporter = Reporter(metrics, events=False)
    reporter.notices = NoticeGate(clock)
    syncer = NodeSyncer(None, "n1", RULES, metrics, reporter)
    syncer.cache = TrustedCopy({"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "1"}})
    desired = desired_of({})
    for i in range(BURST + 1):
        clock.t += 1
        result = syncer.sync(replace(desired, notices=(n("bus-scan", f"m{i}"),)), NOW, False)
    assert result.next_expiry == NOW + timedelta(seconds=INTERVAL - BURST)
