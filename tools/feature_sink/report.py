"""What the sink tells people about problems: one log line and one Warning Event each, once.

Every problem is a `Problem` with a message that is safe to publish: it names a file, a line
and a reason, never the content of a line that was refused (a symlinked secret, a token
pasted in the wrong place): Events are readable cluster-wide and logs are shipped off the node.
The refused key and value are logged at debug level only (`-vv`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from .budget import OverBudget
from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import NodeAPI
from .notices import NoticeGate
from .ownership import Conflict, DroppedClaim
from .patch import NodeView
from .problem import Problem

log = logging.getLogger(__name__)

COMPONENT = "feature-sink"
# A file with thousands of refused lines (or a forged annotation with thousands of claims)
# must not turn into thousands of API writes at once: the rest are posted at later syncs.
MAX_EVENTS_PER_SYNC = 10


def desired_problems(desired: Desired, notices: NoticeGate | None = None) -> list[Problem]:
    """The problems of what was read: the files' and, through `notices` (the sink's one
    gate; a one-shot run takes a fresh one), the other containers' notices."""
    out = [Problem("FeatureFileProblem", w, f"file|{w}") for w in desired.warnings]
    # the other containers' degraded states, each its writer's (edgefd.core.notices), few
    out.extend((notices or NoticeGate()).problems(desired.notices))
    out.extend(
        Problem("LabelRejected", str(r), f"rejected|{r.source}|{r.reason}", r.detail())
        for r in desired.rejected
    )
    return out


def conflict_problems(conflicts: Iterable[Conflict]) -> list[Problem]:
    # a conflicting label passed every check: it is as public as any label the sink applies
    return [
        Problem(
            "LabelConflict",
            f"label {c.key}={c.wanted!r} from {c.producer} not applied: the node has "
            f"{c.found!r}, set by another writer; edgefd does not overwrite labels it does "
            "not own",
            f"conflict|{c.producer}|{c.key}|{c.wanted}|{c.found}",
        )
        for c in conflicts
    ]


def ownership_problems(dropped: Iterable[DroppedClaim]) -> list[Problem]:
    return [
        Problem("OwnershipClaimDropped", str(d), f"claim|{d.producer}|{d.reason}|{d.keys}")
        for d in dropped
    ]


def untrusted_problem(where: str, why: str) -> Problem:
    return Problem(
        "OwnershipUntrusted",
        f"{why}; the sink writes nothing to {where} until the annotation is removed or "
        "fixed (every label is kept as it is)",
        f"untrusted|{why}",
    )


def budget_problems(over: Iterable[OverBudget]) -> list[Problem]:
    return [Problem("LabelBudgetExceeded", str(o), f"budget|{o.producer}|{o.labels}") for o in over]


class Reporter:
    """Reports each problem once per occurrence, not on every resync.

    A log line the first time it is seen; a Warning Event on the object's Node, retried until
    it is posted. When the problem goes away it is forgotten, so a recurrence is reported
    again. The metric gauges say how many problems of each kind there are now.
    """

    def __init__(self, metrics: SinkMetrics, events: bool = True) -> None:
        self._metrics = metrics
        self._events = events
        self.notices = NoticeGate()  # which notice of each writer is told now (notices.py)
        self._logged: set[str] = set()
        self._posted: set[str] = set()

    def observe(self, problems: Sequence[Problem], complete: bool = True) -> None:
        """Log new problems (no API needed, so this happens even when the API is down).

        `complete=False` for what is known before the object is read (the files' problems):
        new ones are logged, and nothing seen so far is forgotten, so the object's own
        problems (conflicts, dropped claims) are not logged again when the full list follows.
        """
        keys = {p.key for p in problems}
        for p in problems:
            if p.key not in self._logged:
                log.warning("%s", p.message)
                if p.detail:
                    log.debug("%s", p.detail)
        counts: dict[str, int] = {}
        for p in problems:
            counts[p.reason] = counts.get(p.reason, 0) + 1
        m = self._metrics
        m.rejected.set(counts.get("LabelRejected", 0))
        m.file_problems.set(counts.get("FeatureFileProblem", 0))
        if not complete:
            self._logged |= keys
            return
        self._logged = keys
        self._posted &= keys
        m.conflicts.set(counts.get("LabelConflict", 0))
        m.ownership_problems.set(
            counts.get("OwnershipClaimDropped", 0) + counts.get("OwnershipUntrusted", 0)
        )
        m.over_budget.set(counts.get("LabelBudgetExceeded", 0))

    def post_events(self, api: NodeAPI, node: NodeView, problems: Sequence[Problem]) -> None:
        """Post Events for problems not posted yet (at most MAX_EVENTS_PER_SYNC); failures
        are retried next sync."""
        if not self._events:
            return
        posted = 0
        for p in problems:
            if p.key in self._posted:
                continue
            if posted >= MAX_EVENTS_PER_SYNC:
                return
            dedup = f"{node.name}|{p.key}"
            try:
                if api.create_node_event(node, p.reason, p.message, dedup, COMPONENT):
                    self._metrics.events.labels(reason=p.reason).inc()
                    posted += 1  # one that already existed (a restart) costs nothing
            except Exception as e:  # an Event is best effort; the sync itself succeeded
                log.info("could not post %s event (will retry): %s", p.reason, e)
                return
            self._posted.add(p.key)
