"""What the sink says for the notices of the pod's other containers (edgefd.core.notices):
one problem per writer at a time, in words that say whose it is, and few of them.

A writer is trusted for nothing but its own notice, and may be hostile. Posted as they came,
its notices were a stream of Events (each new message one more, 5.2 a second from one
writer) and read as if anyone had sent them. So, per writer:

- What the sink shows is the writer's last *admitted* notice. A writer has a bucket of BURST
  admissions, refilled one every INTERVAL: a first failure and the next few corrections show
  at once, a writer that keeps changing its message (or clearing and posting again) gets one
  Event every INTERVAL, with how many notices it left in between that were not posted. Until
  then the notice shown stays the one already posted, so neither an Event nor a log line
  follows a change; when a held notice is due, the sink syncs for it (`next_due`).
- The same notice is one problem, keyed by the writer, its reason and its words, and so one
  Event: its name is derived from the key (report.py), so the API server refuses a second
  one even after a restart of the sink.
- The Event names the writer (`edgefd's devplugin left this notice: "…"`), its words are
  quoted as a JSON string (escaped, clipped to MAX_QUOTED), and the reason is one of a fixed
  set, so an Event never reads as if the kubelet, the sink or another writer had said it.

Updating one Event in place (count, lastTimestamp) would need `patch` on Events, which the
sink does not hold (k8s/rbac.yaml): a patch could rewrite the kubelet's Events on the same
Node, whose names look alike, and the policy would have to tell them apart.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from edgefd.core.notices import Notice

from .problem import Problem

log = logging.getLogger(__name__)

BURST = 3
INTERVAL = 300.0
MAX_QUOTED = 800  # the writer's words in an Event, whose message the sink clips at 1024


def notice_problem(n: Notice, held: int = 0) -> Problem:
    """The problem (the Event) for writer `n.writer`'s notice; `held`: how many of its
    notices before this one were not posted."""
    if n.readable:
        words = n.message if len(n.message) <= MAX_QUOTED else n.message[: MAX_QUOTED - 1] + "…"
        said = f"edgefd's {n.writer} left this notice: {json.dumps(words, ensure_ascii=False)}"
    else:
        said = f"edgefd's {n.writer} left a notice the sink cannot read: {n.message}; ignored"
    if held:
        said += (
            f" ({held} notice(s) of {n.writer} before this one were not posted: at most "
            f"{BURST}, then one every {INTERVAL:.0f} s)"
        )
    return Problem(n.reason, said, f"notice|{n.writer}|{n.reason}|{n.message}")


@dataclass
class _Writer:
    tokens: float
    refilled: float  # clock time the tokens were counted at
    shown: Notice | None = None  # the notice its problem says (admitted)
    problem: Problem | None = None
    seen: Notice | None = None  # the last notice read that is not shown
    held: int = 0  # how many such notices since the last one shown


class NoticeGate:
    """Which notice of each writer the sink shows now (see the module docstring). One per
    sink process; `problems` is called at every sync with the notices read then."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        burst: int = BURST,
        interval: float = INTERVAL,
    ) -> None:
        self.clock = clock
        self.burst = burst
        self.interval = interval
        self._writers: dict[str, _Writer] = {}

    def problems(self, notices: Iterable[Notice]) -> list[Problem]:
        now = self.clock()
        current = {n.writer: n for n in notices}
        for name in current.keys() | self._writers.keys():
            w = self._writers.setdefault(name, _Writer(float(self.burst), now))
            w.tokens = min(self.burst, w.tokens + (now - w.refilled) / self.interval)
            w.refilled = now
            n = current.get(name)
            if n is None:  # cleared: a recurrence is news (and costs an admission)
                w.held += w.seen is not None  # one that went unposted
                w.shown = w.problem = w.seen = None
            elif n != w.shown:
                if n != w.seen:
                    w.held += w.seen is not None  # superseded, unposted
                    w.seen = n
                if w.tokens >= 1:
                    w.tokens -= 1
                    w.shown, w.problem = n, notice_problem(n, w.held)
                    w.seen, w.held = None, 0
                else:
                    log.debug("%s's notice held (at most one Event every %.0f s)",
                              name, self.interval)  # fmt: skip
        # the writers are the pod's directories (at most MAX_WRITERS): never forgotten
        return [w.problem for _, w in sorted(self._writers.items()) if w.problem is not None]

    def next_due(self) -> float | None:
        """Seconds until a held notice may be shown (0: now), None when none is held."""
        waits = [
            max(0.0, (1 - w.tokens) * self.interval - (self.clock() - w.refilled))
            for w in self._writers.values()
            if w.seen is not None
        ]
        return min(waits) if waits else None
