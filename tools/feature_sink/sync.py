"""One sync of where the labels go (the Node, or an NFD NodeFeature): read it, plan, send at
most one guarded write, report problems.

A dry run goes through the same planner: `plan` against what `read` returns (or against
`empty()` when the API cannot be read), printed instead of written. `plan` is pure; `Syncer.sync`
adds the API calls, the retry after a concurrent write and the reporting of refused or
conflicting labels, once for both targets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

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
from .patch import Change, NodeView, build_patch, label_changes

log = logging.getLogger(__name__)

COMPONENT = "feature-sink"
MAX_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Plan:
    """What one sync would do: the label outcome and the one write that makes it so."""

    outcome: Outcome
    changes: list[Change]
    write: Any  # Node: the JSON Patch ops ([] = nothing); NodeFeature: the object, or None
    warnings: tuple[str, ...] = ()

    @property
    def needed(self) -> bool:
        return bool(self.write)


def read_ownership(raw: str | None, where: str, warnings: list[str]) -> Ownership:
    """The annotation's ownership; a damaged one is never guessed at: own nothing. Labels
    already at the desired value are then adopted again; others are reported as conflicts
    rather than overwritten."""
    try:
        return decode(raw)
    except MalformedOwnership as e:
        warnings.append(f"{e}; treating the sink as owning no labels on {where}")
        return Ownership()


def annotation_value(raw: str | None, own: Ownership) -> str | None:
    """The annotation to write: `raw` itself when it already says the same (equal content,
    other spelling, is not worth a write)."""
    new = encode(own)
    if raw is not None and new is not None and raw != new:
        try:
            if decode(raw) == own:
                return raw
        except MalformedOwnership:
            pass
    return new


def plan_node(node: NodeView, desired: Desired, now: datetime, grace: timedelta) -> Plan:
    """Diff the node against the desired state. Pure."""
    warnings: list[str] = []
    raw = (node.annotations or {}).get(ANNOTATION)
    owned = read_ownership(raw, node.name, warnings)
    current = dict(node.labels or {})
    outcome = reconcile(current, owned, desired, now, grace)
    ops = build_patch(node, outcome.labels, ANNOTATION, annotation_value(raw, outcome.ownership))
    return Plan(outcome, label_changes(current, outcome.labels), ops, tuple(warnings))


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
                    self._metrics.events.labels(reason=reason).inc()
            except Exception as e:  # an Event is best effort; the sync itself succeeded
                log.info("could not post %s event (will retry): %s", reason, e)
                return
            self._posted.add(key)


class Syncer:
    """Keeps one object's labels equal to the desired labels; subclasses say how to read,
    plan and write that object."""

    what = "object"

    def __init__(
        self,
        api: NodeAPI | None,
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

    def read(self) -> Any:
        raise NotImplementedError

    def empty(self) -> Any:
        """What `plan` is given when the object cannot be read (a dry run without the API)."""
        raise NotImplementedError

    def plan(self, current: Any, desired: Desired, now: datetime) -> Plan:
        raise NotImplementedError

    def write(self, current: Any, plan: Plan) -> None:
        raise NotImplementedError

    def event_target(self, current: Any) -> NodeView:
        return NodeView(self.node_name, None, None)

    def sync(self, desired: Desired, now: datetime) -> SyncResult:
        """Converge once. Raises the nodeapi errors; the caller decides about retrying."""
        self.reporter.observe(desired, ())
        for attempt in range(1, MAX_CONFLICT_RETRIES + 1):
            current = self.read()
            plan = self.plan(current, desired, now)
            for w in plan.warnings:
                log.error("%s", w)
            self.reporter.observe(desired, plan.outcome.conflicts)
            wrote = False
            if plan.needed:
                try:
                    self.write(current, plan)
                except ApiConflict as e:
                    self.metrics.patch_conflicts.inc()
                    log.info("%s changed while syncing (attempt %d): %s", self.what, attempt, e)
                    continue
                wrote = True
                for c in plan.changes:
                    log.info("%s: %s", self.what, c)
            owned = len(plan.outcome.ownership.keys)
            self.metrics.owned.set(owned)
            self.metrics.kept.set(len(plan.outcome.kept_for_grace))
            if self.api is not None:
                self.reporter.post_events(
                    self.api, self.event_target(current), desired, plan.outcome.conflicts
                )
            return SyncResult(wrote, plan.changes, owned, plan.outcome.next_expiry)
        raise ApiConflict(
            f"{self.what} kept changing; gave up after {MAX_CONFLICT_RETRIES} attempts"
        )


class NodeSyncer(Syncer):
    """Applies the desired labels to one Node through guarded JSON Patches."""

    def __init__(self, api: NodeAPI | None, node_name: str, *args: Any) -> None:
        super().__init__(api, node_name, *args)
        self.what = f"node {node_name}"

    def read(self) -> NodeView:
        assert self.api is not None
        return self.api.get_node(self.node_name)

    def empty(self) -> NodeView:
        return NodeView(name=self.node_name, labels={}, annotations={})

    def plan(self, current: NodeView, desired: Desired, now: datetime) -> Plan:
        return plan_node(current, desired, now, self.grace)

    def write(self, current: NodeView, plan: Plan) -> None:
        assert self.api is not None
        self.api.patch_node(self.node_name, plan.write)

    def event_target(self, current: NodeView) -> NodeView:
        return current
