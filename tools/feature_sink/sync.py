"""One sync of where the labels go (the Node, or an NFD NodeFeature): read it, plan, send at
most one guarded write, report problems.

A dry run goes through the same planner: `plan` against what `read` returns (or against
`empty()` when the API cannot be read), printed instead of written. `plan` is pure; `Syncer.sync`
adds the API calls, the retry after a concurrent write and the reporting of refused or
conflicting labels, once for both targets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from edgefd.core.errors import EdgefdError
from edgefd.core.labels import NamespacePolicy

from . import story
from .budget import DEFAULT_BUDGET, fit
from .desired import Desired
from .metrics import SinkMetrics
from .namespaces import SINK_POLICY
from .nodeapi import ApiConflict, ApiNotFound, NodeAPI, node_view
from .ownership import (
    ANNOTATION,
    MalformedOwnership,
    Ownership,
    Target,
    decode,
    encode,
    reconcile,
    vet,
)
from .patch import LabelChange, NodeView, build_patch, label_changes
from .problem import Problem
from .report import (
    Reporter,
    budget_problems,
    conflict_problems,
    desired_problems,
    ownership_problems,
    untrusted_problem,
)
from .watched import WatchedObject

log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 5


class OwnershipUntrusted(EdgefdError):
    """The ownership annotation cannot be trusted as a whole: the sink writes nothing."""


@dataclass(frozen=True)
class Rules:
    """What bounds the sink's decisions, the same for every sync and both targets."""

    grace: timedelta
    policy: NamespacePolicy = SINK_POLICY
    budget: int = DEFAULT_BUDGET


@dataclass(frozen=True)
class Plan:
    """What one sync would do: the label outcome and the one write that makes it so.

    `blocked` says why nothing at all may be written (an untrusted ownership annotation);
    `owned` is what the sink owned before (the annotation as read and vetted), for the log."""

    outcome: Target
    changes: list[LabelChange]
    write: Any  # Node: the JSON Patch ops ([] = nothing); NodeFeature: the object, or None
    problems: tuple[Problem, ...] = ()
    blocked: str | None = None
    owned: Ownership = field(default_factory=Ownership)

    @property
    def needed(self) -> bool:
        return bool(self.write) and self.blocked is None


@dataclass(frozen=True)
class Decision:
    """The part of planning both targets share: trust, budget, reconcile."""

    outcome: Target
    annotation: str | None
    problems: tuple[Problem, ...]
    blocked: str | None = None
    owned: Ownership = field(default_factory=Ownership)


def decide(
    labels: dict[str, str],
    raw: str | None,
    desired: Desired,
    now: datetime,
    rules: Rules,
    where: str,
) -> Decision:
    """From the object's labels and ownership annotation to its target labels. Pure."""
    try:
        claimed = decode(raw)
    except MalformedOwnership as e:
        problem = untrusted_problem(where, str(e))
        return Decision(Target(dict(labels), Ownership()), raw, (problem,), problem.message)
    owned, dropped = vet(claimed, rules.policy)
    fitted, over = fit(desired, owned, labels, rules.budget)
    outcome = reconcile(labels, owned, fitted, now, rules.grace)
    problems = (
        ownership_problems(dropped) + budget_problems(over) + conflict_problems(outcome.conflicts)
    )
    annotation = annotation_value(raw, outcome.ownership)
    return Decision(outcome, annotation, tuple(problems), owned=owned)


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


def plan_node(node: NodeView, desired: Desired, now: datetime, rules: Rules) -> Plan:
    """Diff the node against the desired state. Pure."""
    raw = (node.annotations or {}).get(ANNOTATION)
    current = dict(node.labels or {})
    d = decide(current, raw, desired, now, rules, f"node {node.name}")
    if d.blocked:
        return Plan(d.outcome, [], [], d.problems, d.blocked)
    ops = build_patch(node, d.outcome.labels, ANNOTATION, d.annotation)
    changes = label_changes(current, d.outcome.labels)
    return Plan(d.outcome, changes, ops, d.problems, owned=d.owned)


@dataclass
class SyncResult:
    """What one successful sync did; `next_expiry` tells the loop when to look again."""

    wrote: bool
    changes: list[LabelChange] = field(default_factory=list)
    owned: int = 0
    next_expiry: datetime | None = None


def _earliest(*times: datetime | None) -> datetime | None:
    present = [t for t in times if t is not None]
    return min(present) if present else None


class Syncer:
    """Keeps one object's labels equal to the desired labels; subclasses say how to read,
    plan and write that object.

    With `cache` (the object as its watch keeps it, see watched.py) a sync reads nothing from
    the API server unless asked for a `fresh` read (the safety resync, a retry, a write refused
    because the object moved): one guarded write per change, and no request at all when
    nothing changed."""

    what = "object"

    def __init__(
        self,
        api: NodeAPI | None,
        node_name: str,
        rules: Rules,
        metrics: SinkMetrics,
        reporter: Reporter,
        on_drift: Callable[[], None] | None = None,
    ) -> None:
        """`on_drift`: the object is watched (its copy kept: `cache`), and this is called
        when someone else changes what a sync depends on; None: every sync GETs it."""
        self.api = api
        self.node_name = node_name
        self.rules = rules
        self.metrics = metrics
        self.reporter = reporter
        # the owned labels as the last successful sync left them (None: none yet)
        self.applied: dict[str, str] | None = None
        self.cache: WatchedObject | None = None
        if on_drift is not None:
            self.cache = WatchedObject(node_name, self.fingerprint, on_drift, metrics)

    def lost(self) -> None:
        """No answer at all from the API server: the watch's copy may be stale (its
        connection may not have noticed yet); read the object until the watch speaks again."""
        if self.cache is not None:
            self.cache.lost()

    def read(self, fresh: bool = True) -> Any:
        """The object as `plan` takes it: from the watch's copy when trusted and not `fresh`,
        else from the API server."""
        if not fresh and self.cache is not None:
            trusted, obj = self.cache.get()
            if trusted:
                return self.view(obj)
        return self.fetch()

    def fetch(self) -> Any:
        """GET the object."""
        raise NotImplementedError

    def view(self, obj: dict[str, Any] | None) -> Any:
        """The object's JSON (None: it does not exist) as `plan` takes it."""
        raise NotImplementedError

    def query(self) -> tuple[str, str]:
        """(resource, collection path) selecting exactly the object, for its watch."""
        raise NotImplementedError

    def fingerprint(self, obj: dict[str, Any] | None) -> Any:
        """What of the object's JSON a sync's plan depends on (a change of anything else is
        no reason to sync)."""
        raise NotImplementedError

    def empty(self) -> Any:
        """What `plan` is given when the object cannot be read (a dry run without the API)."""
        raise NotImplementedError

    def plan(self, current: Any, desired: Desired, now: datetime) -> Plan:
        raise NotImplementedError

    def write(self, current: Any, plan: Plan) -> dict[str, Any] | None:
        """Send `plan`'s write; the object as the API server stored it."""
        raise NotImplementedError

    def event_target(self, current: Any) -> NodeView:
        return NodeView(self.node_name, None, None)

    def sync(self, desired: Desired, now: datetime, fresh: bool = True) -> SyncResult:
        """Converge once. Raises the nodeapi errors, and OwnershipUntrusted; the caller
        decides about retrying. `fresh=False`: plan against the watch's copy when it has one
        (a refused write reads again from the API server)."""
        notices = self.reporter.notices
        self.reporter.observe(desired_problems(desired, notices), complete=False)
        for attempt in range(1, MAX_CONFLICT_RETRIES + 1):
            current = self.read(fresh=fresh or attempt > 1)
            plan = self.plan(current, desired, now)
            problems = desired_problems(desired, notices) + list(plan.problems)
            self.reporter.observe(problems)
            if plan.blocked:
                self.metrics.owned.set(0)
                if self.api is not None:
                    self.reporter.post_events(self.api, self.event_target(current), problems)
                raise OwnershipUntrusted(plan.blocked)
            wrote = False
            if plan.needed:
                try:
                    stored = self.write(current, plan)
                except ApiConflict as e:
                    self.metrics.patch_conflicts.inc()
                    # a routine retry (the kubelet updates its Node too), not news at info
                    log.debug("%s changed while syncing (attempt %d): %s", self.what, attempt, e)
                    continue
                wrote = True
                if self.cache is not None:
                    self.cache.remember(stored)
                story.tell(
                    self.what,
                    plan.changes,
                    plan.owned,
                    plan.outcome,
                    desired,
                    self.applied,
                    self.rules.grace,
                )
            self.applied = story.applied_labels(plan.outcome)
            owned = len(plan.outcome.ownership.keys)
            self.metrics.owned.set(owned)
            self.metrics.kept.set(len(plan.outcome.kept_for_grace))
            if self.api is not None:
                self.reporter.post_events(self.api, self.event_target(current), problems)
            held = notices.next_due()  # a writer's notice, held back to bound its Events
            expiry = _earliest(
                plan.outcome.next_expiry,
                desired.recheck_at,
                None if held is None else now + timedelta(seconds=held),
            )
            return SyncResult(wrote, plan.changes, owned, expiry)
        raise ApiConflict(
            f"{self.what} kept changing; gave up after {MAX_CONFLICT_RETRIES} attempts"
        )


class NodeSyncer(Syncer):
    """Applies the desired labels to one Node through guarded JSON Patches."""

    def __init__(self, api: NodeAPI | None, node_name: str, *args: Any) -> None:
        super().__init__(api, node_name, *args)
        self.what = f"node {node_name}"

    def fetch(self) -> NodeView:
        assert self.api is not None
        return self.api.get_node(self.node_name)

    def view(self, obj: dict[str, Any] | None) -> NodeView:
        if obj is None:
            raise ApiNotFound(f"{self.what}: not found (deleted?)")
        return node_view(obj, self.node_name, self.what)

    def query(self) -> tuple[str, str]:
        assert self.api is not None
        return self.api.node_query(self.node_name)

    def fingerprint(self, obj: dict[str, Any] | None) -> Any:
        """Only labels in the namespaces the sink may write: the plan never reads any other
        (desired and owned keys are vetted against the same policy), so another controller
        relabelling the Node in its own namespace is no reason to sync (issue 30 item 9)."""
        if obj is None:
            return None
        md = obj.get("metadata") or {}
        labels = md.get("labels")
        check = self.rules.policy.check
        return (
            None
            if labels is None
            else tuple(sorted(kv for kv in labels.items() if not check(kv[0]))),
            (md.get("annotations") or {}).get(ANNOTATION),
            md.get("annotations") is None,
        )

    def empty(self) -> NodeView:
        return NodeView(name=self.node_name, labels={}, annotations={})

    def plan(self, current: NodeView, desired: Desired, now: datetime) -> Plan:
        return plan_node(current, desired, now, self.rules)

    def write(self, current: NodeView, plan: Plan) -> dict[str, Any]:
        assert self.api is not None
        return self.api.patch_node(self.node_name, plan.write)

    def event_target(self, current: NodeView) -> NodeView:
        return current
