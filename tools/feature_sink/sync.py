"""One sync of the Node: read it, decide, send at most one guarded patch, report problems.

`plan_node` is pure (the dry-run prints its result); `NodeSyncer.sync` adds the API calls,
the retry after a concurrent write, and the reporting of refused or conflicting labels.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import ApiConflict, NodeAPI
from .ownership import (
    ANNOTATION,
    Conflict,
    MalformedOwnership,
    Outcome,
    Ownership,
    decode,
    encode,
    reconcile,
)
from .patch import Change, NodeView, Op, build_patch, label_changes

log = logging.getLogger(__name__)

COMPONENT = "feature-sink"
MAX_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Plan:
    """What a sync would do to one node."""

    node: NodeView
    outcome: Outcome
    ops: list[Op]
    changes: list[Change]
    warnings: tuple[str, ...] = ()


def plan_node(node: NodeView, desired: Desired, now: datetime, grace: timedelta) -> Plan:
    """Diff the node against the desired state. Pure."""
    warnings: list[str] = []
    raw = (node.annotations or {}).get(ANNOTATION)
    try:
        owned = decode(raw)
    except MalformedOwnership as e:
        # Never guess: own nothing. Labels already at the desired value are adopted again;
        # others are reported as conflicts rather than overwritten.
        warnings.append(f"{e}; treating the sink as owning no labels on {node.name}")
        owned = Ownership()
    current = dict(node.labels or {})
    outcome = reconcile(current, owned, desired, now, grace)
    new_annotation = encode(outcome.ownership)
    if raw is not None and new_annotation is not None and _same_ownership(raw, outcome.ownership):
        new_annotation = raw  # equal content, other spelling: not worth a write
    ops = build_patch(node, outcome.labels, ANNOTATION, new_annotation)
    return Plan(node, outcome, ops, label_changes(current, outcome.labels), tuple(warnings))


def _same_ownership(raw: str, own: Ownership) -> bool:
    try:
        return decode(raw) == own
    except MalformedOwnership:
        return False


class Syncer(Protocol):
    def sync(self, desired: Desired, now: datetime) -> SyncResult: ...


@dataclass
class SyncResult:
    """What one successful sync did; `next_expiry` tells the loop when to look again."""

    wrote: bool
    changes: list[Change] = field(default_factory=list)
    owned: int = 0
    next_expiry: datetime | None = None


class Reporter:
    """Reports each refused or conflicting label once per occurrence, not on every resync.

    A log line (file, line, reason) the first time it is seen; a Warning Event on the Node,
    retried until it is posted. When the problem goes away it is forgotten, so a recurrence is
    reported again. The Event's name is derived from the problem, so the API server also
    deduplicates across sink restarts.
    """

    def __init__(self, metrics: SinkMetrics, events: bool = True) -> None:
        self._metrics = metrics
        self._events = events
        self._logged: set[str] = set()
        self._posted: set[str] = set()

    @staticmethod
    def _items(desired: Desired, conflicts: tuple[Conflict, ...]) -> dict[str, tuple[str, str]]:
        items: dict[str, tuple[str, str]] = {}
        for w in desired.warnings:
            items[f"file|{w}"] = ("FeatureFileProblem", w)
        for r in desired.rejected:
            items[f"rejected|{r.source}|{r.key}|{r.value}|{r.reason}"] = ("LabelRejected", str(r))
        for c in conflicts:
            msg = (
                f"label {c.key}={c.wanted!r} from {c.producer} not applied: the node has "
                f"{c.found!r}, set by another writer; edgefd does not overwrite labels it "
                "does not own"
            )
            items[f"conflict|{c.producer}|{c.key}|{c.wanted}|{c.found}"] = ("LabelConflict", msg)
        return items

    def observe(self, desired: Desired, conflicts: tuple[Conflict, ...]) -> None:
        """Log new problems (no API needed, so this happens even when the API is down)."""
        items = self._items(desired, conflicts)
        for key, (_reason, msg) in items.items():
            if key not in self._logged:
                log.warning("%s", msg)
        self._logged = set(items)
        self._posted &= set(items)
        self._metrics.rejected.set(len(desired.rejected))
        self._metrics.file_problems.set(len(desired.warnings))
        self._metrics.conflicts.set(len(conflicts))

    def post_events(
        self, api: NodeAPI, node: NodeView, desired: Desired, conflicts: tuple[Conflict, ...]
    ) -> None:
        """Post Events for problems not posted yet; failures are retried next sync."""
        if not self._events:
            return
        for key, (reason, msg) in self._items(desired, conflicts).items():
            if key in self._posted:
                continue
            try:
                if api.create_node_event(node, reason, msg, f"{node.name}|{key}", COMPONENT):
                    self._metrics.events.inc(reason=reason)
            except Exception as e:  # an Event is best effort; the sync itself succeeded
                log.info("could not post %s event (will retry): %s", reason, e)
                return
            self._posted.add(key)


class NodeSyncer:
    """Applies the desired labels to one Node through guarded JSON Patches."""

    def __init__(
        self,
        api: NodeAPI,
        node_name: str,
        grace: timedelta,
        metrics: SinkMetrics,
        reporter: Reporter,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.grace = grace
        self.metrics = metrics
        self.reporter = reporter

    def sync(self, desired: Desired, now: datetime) -> SyncResult:
        """Converge once. Raises the nodeapi errors; the caller decides about retrying."""
        self.reporter.observe(desired, ())
        for attempt in range(1, MAX_CONFLICT_RETRIES + 1):
            node = self.api.get_node(self.node_name)
            plan = plan_node(node, desired, now, self.grace)
            for w in plan.warnings:
                log.error("%s", w)
            self.reporter.observe(desired, plan.outcome.conflicts)
            wrote = False
            if plan.ops:
                try:
                    self.api.patch_node(self.node_name, plan.ops)
                except ApiConflict as e:
                    self.metrics.patch_conflicts.inc()
                    log.info("node changed while syncing (attempt %d): %s", attempt, e)
                    continue
                wrote = True
                for c in plan.changes:
                    log.info("%s: %s", self.node_name, c)
            owned = len(plan.outcome.ownership.keys)
            self.metrics.owned.set(owned)
            self.metrics.kept.set(len(plan.outcome.kept_for_grace))
            self.reporter.post_events(self.api, node, desired, plan.outcome.conflicts)
            return SyncResult(wrote, plan.changes, owned, plan.outcome.next_expiry)
        raise ApiConflict(
            f"node {self.node_name} kept changing; gave up after {MAX_CONFLICT_RETRIES} attempts"
        )


def empty_node(name: str) -> NodeView:
    """A stand-in Node with no labels, for a dry-run when the real one cannot be read."""
    return NodeView(name=name, labels={}, annotations={}, resource_version=None, uid=None)


def describe(plan: Plan) -> dict[str, Any]:
    """Dry-run JSON document: the patch plus a readable summary."""
    return {
        "node": plan.node.name,
        "patch": plan.ops,
        "changes": [
            {"op": c.op, "key": c.key, "value": c.value, "old": c.old} for c in plan.changes
        ],
        "conflicts": [
            {"key": c.key, "wanted": c.wanted, "found": c.found, "producer": c.producer}
            for c in plan.outcome.conflicts
        ],
    }
