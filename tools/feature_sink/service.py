"""feature-sink's three ways to run, wired from one set of settings: once, as a dry run, and as
the long-running service (watch, loop, health endpoint).

`kubernetes` is imported (through nodeapi.connect) only when the API is actually used, so
`--help` and an offline `--dry-run` never load it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from edgefd.cli import Listen
from edgefd.core.duration import format_duration
from edgefd.core.errors import BadInput, EdgefdError
from edgefd.core.featuresd import MAX_FILE_SIZE
from edgefd.core.labels import NamespacePolicy
from edgefd.core.log import say
from edgefd.core.notices import writer_directories
from edgefd.core.output import emit_json
from edgefd.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS

from .budget import DEFAULT_BUDGET
from .desired import Desired, read_directory, read_stream, with_notices
from .metrics import SinkMetrics
from .namespaces import SINK_NAMESPACES
from .report import Reporter, desired_problems
from .sync import OwnershipUntrusted, Plan, Rules, Syncer

log = logging.getLogger("edgefd.feature_sink")

ReadDesired = Callable[[], Desired]


@dataclass(frozen=True)
class Settings:
    """Everything the command line decided, validated."""

    node_name: str
    features_dir: Path | None  # None: one stream from stdin
    kubeconfig: str | None
    mode: str  # "node" | "nodefeature"
    namespace: str
    policy: NamespacePolicy
    grace: timedelta
    api_timeout: float
    events: bool = True
    resync_interval: float = 3600.0
    max_backoff: float = 30.0
    debounce: float = 0.1
    max_latency: float = 0.5
    poll_interval: float = 0.5
    use_inotify: bool = True
    listen: Listen = None
    ready_max_age: float | None = None
    label_budget: int = DEFAULT_BUDGET
    settle: float = 1.0
    watch: bool = True  # keep the object current through a watch (else: read it each sync)
    api_qps: float = DEFAULT_QPS
    api_burst: int = DEFAULT_BURST
    context: str | None = None  # of the kubeconfig
    host_features_dir: Path | None = None  # the host's own features.d, read too
    notice_dir: Path | None = None  # the pod's other tools' notices: posted as Events

    @property
    def rules(self) -> Rules:
        return Rules(self.grace, self.policy, self.label_budget)

    def shown(self) -> dict[str, object]:
        """The settings as the start-up line shows them (what decides behaviour)."""
        out: dict[str, object] = {"node": self.node_name}
        if self.mode == "nodefeature":
            out["namespace"] = self.namespace
        out["features"] = self.features_dir if self.features_dir is not None else "stdin"
        if self.host_features_dir is not None:
            out["host-features"] = self.host_features_dir
        if self.notice_dir is not None:
            out["notices"] = self.notice_dir
        if self.kubeconfig:
            out["kubeconfig"] = self.kubeconfig
        if self.context:
            out["context"] = self.context
        allowed = self.policy.allowed
        if allowed is None:
            out["allow"] = "any"
        elif allowed != SINK_NAMESPACES:
            out["allow"] = ",".join(ns for ns in allowed if ns not in SINK_NAMESPACES)
        if self.policy.denied:
            out["deny"] = ",".join(self.policy.denied)
        for name, seconds in (
            ("resync", self.resync_interval),
            ("removal-grace", self.grace.total_seconds()),
            ("settle", self.settle),
            ("api-timeout", self.api_timeout),
            ("max-backoff", self.max_backoff),
        ):
            out[name] = format_duration(seconds)
        out["label-budget"] = self.label_budget
        out["events"] = "on" if self.events else "off"
        out["watch"] = "on" if self.watch else "off"
        out["api-qps"] = f"{self.api_qps:g}"
        out["api-burst"] = self.api_burst
        out["listen"] = "off" if self.listen is None else f"{self.listen[0]}:{self.listen[1]}"
        return out


def desired_source(settings: Settings) -> ReadDesired:
    """How each sync learns what the node should carry: re-read the directory every time (a
    missed notification is then harmless), or the one stream read from stdin now; with the
    notices of the pod's other tools read anew each time too."""
    read = _features_source(settings)
    notice_dir = settings.notice_dir
    if notice_dir is None:
        return read
    return lambda: with_notices(read(), notice_dir)


def _features_source(settings: Settings) -> ReadDesired:
    if settings.features_dir is None:
        if sys.stdin is None:  # fd 0 was closed before the interpreter started
            raise BadInput("--features -: stdin is closed; pipe the features stream in")
        try:
            data = sys.stdin.buffer.read(MAX_FILE_SIZE + 1)
        except (OSError, ValueError) as e:  # stdin closed or not readable
            raise BadInput(f"--features -: cannot read stdin ({e})") from None
        desired = read_stream(data, settings.policy)
        if desired.warnings and not desired.present:
            raise BadInput(f"features stream: {desired.warnings[0]}")
        return lambda: desired
    directory, host = settings.features_dir, settings.host_features_dir
    return lambda: read_directory(directory, settings.policy, settle=settings.settle, host=host)


def make_syncer(
    settings: Settings, api: Any, metrics: SinkMetrics, on_drift: Callable[[], None] | None = None
) -> Syncer:
    """The syncer of the mode's object; with `on_drift`, one whose copy of it a watch keeps
    (watch_object), calling `on_drift` when someone else changes it."""
    reporter = Reporter(metrics, events=settings.events)
    if settings.mode == "nodefeature":
        from .nodefeature import NodeFeatureSyncer

        return NodeFeatureSyncer(
            api,
            settings.node_name,
            settings.namespace,
            settings.rules,
            metrics,
            reporter,
            on_drift,
        )
    from .sync import NodeSyncer

    return NodeSyncer(api, settings.node_name, settings.rules, metrics, reporter, on_drift)


def connect(settings: Settings, metrics: SinkMetrics | None = None) -> Any:
    from . import nodeapi

    return nodeapi.connect(
        settings.kubeconfig,
        settings.api_timeout,
        metrics.on_request if metrics else None,
        settings.context,
        qps=settings.api_qps,
        burst=settings.api_burst,
        on_wait=metrics.on_wait if metrics else None,
    )


def watch_object(settings: Settings, syncer: Syncer, api: Any, metrics: SinkMetrics):
    """Keep the syncer's copy of its object current through one watch (its drift wakes the
    loop: make_syncer's `on_drift`): the ListWatch (a component: start it, stop it), or None
    when the object is not watched (`--no-watch`)."""
    cache = syncer.cache
    if cache is None:
        return None
    from edgefd.kube.listwatch import ListWatch
    from edgefd.kube.retry import Retry

    resource, path = syncer.query()

    def retried(reason: str) -> None:
        metrics.retries.labels(loop="watch", reason=reason).inc()
        metrics.object_watch_up.set(0)

    class Handler:  # the cache, plus the watch's state as a metric
        def listed(self, objects: dict, reason: str) -> None:
            cache.listed(objects, reason)
            metrics.object_watch_up.set(1)

        def event(self, kind: str, obj: dict) -> None:
            metrics.object_watch_up.set(1)
            cache.event(kind, obj)

        def lost(self) -> None:
            metrics.object_watch_up.set(0)
            cache.lost()

        def bookmark(self) -> None:
            metrics.object_watch_up.set(1)
            cache.bookmark()

    return ListWatch(
        api,
        resource,
        path,
        syncer.what,
        Handler(),
        retry=Retry(
            f"watching {syncer.what}", initial=0.2, cap=settings.max_backoff, on_retry=retried
        ),
        on_list=lambda reason: metrics.object_lists.labels(reason=reason).inc(),
    )


SETTLE_ROUNDS = 3


def read_settled(read_desired: ReadDesired) -> Desired:
    """What a one-shot run acts on: a file written moments ago is read again once quiet, so
    `--once` and `--dry-run` remove what it no longer lists instead of deferring that to a
    next sync that never comes. A file rewritten on every look is taken as it stands after a
    few rounds (its removals then stay deferred, as the service would defer them)."""
    desired = read_desired()
    for _ in range(SETTLE_ROUNDS):
        if not desired.settling or desired.recheck_at is None:
            break
        time.sleep(max(0.0, (desired.recheck_at - datetime.now(UTC)).total_seconds()) + 0.01)
        desired = read_desired()
    return desired


def run_once(settings: Settings) -> int:
    """One sync; its exceptions carry the exit code (5 unreachable, 1 anything else)."""
    read_desired = desired_source(settings)
    metrics = SinkMetrics()
    syncer = make_syncer(settings, connect(settings, metrics), metrics)
    result = syncer.sync(read_settled(read_desired), datetime.now(UTC))
    log.info(
        "sync done: %d change(s)%s, %d owned label(s)",
        len(result.changes),
        "" if result.wrote else " (no write needed)",
        result.owned,
    )
    return 0


def run_dry(settings: Settings, output: str) -> int:
    """Plan exactly as a sync would, against the live object when it can be read, and print
    the write instead of sending it."""
    desired = read_settled(desired_source(settings))
    metrics = SinkMetrics()
    api = None
    try:
        api = connect(settings)
    except EdgefdError as e:
        log.warning("%s", e)
    syncer = make_syncer(settings, api, metrics)
    current = syncer.empty()
    if api is not None:
        try:
            current = syncer.read()
        except EdgefdError as e:
            log.warning("%s", e)
            api = None
    if api is None:
        log.warning(
            "cannot read %s; showing the write against one with no labels (a Node with no "
            "labels, or no NodeFeature yet)",
            syncer.what,
        )
    plan = syncer.plan(current, desired, datetime.now(UTC))
    Reporter(metrics, events=False).observe(desired_problems(desired) + list(plan.problems))
    if plan.blocked:
        raise OwnershipUntrusted(plan.blocked)
    _print_plan(plan, output)
    return 0


def _print_plan(plan: Plan, output: str) -> None:
    if output == "json":
        emit_json(plan.write if plan.needed else [] if isinstance(plan.write, list) else None)
    else:
        for c in plan.changes:
            print(c)
        if plan.needed and not plan.changes:
            print("(ownership annotation update only)")
    if not plan.needed:
        say("feature-sink", "no changes")


def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT (exit 0; labels are kept): the features.d watcher, the watch
    of the object and the sync loop, as components of the runner."""
    from edgefd.core.version import startup_line
    from edgefd.runtime.runner import Lifeline, run
    from edgefd.runtime.watch import Watcher

    from .loop import LoopConfig, SinkLoop
    from .schedule import Triggers

    metrics = SinkMetrics()

    def build(lifeline: Lifeline) -> list[Any]:
        read_desired = desired_source(settings)
        api = connect(settings, metrics)
        triggers = Triggers(time.monotonic)  # what the watches below wake the loop with
        on_drift = triggers.drifted if settings.watch else None
        syncer = make_syncer(settings, api, metrics, on_drift)
        config = LoopConfig(
            settings.resync_interval,
            settings.max_backoff,
            wedged_after=max(60.0, 12 * settings.api_timeout),
            ready_max_age=settings.ready_max_age or 2 * settings.resync_interval + 60,
        )
        loop = SinkLoop(read_desired, syncer, metrics, config, triggers, on_crash=lifeline.fail)
        parts: list[Any] = []
        watcher = None
        if settings.features_dir is not None:
            watched = [settings.features_dir]
            if settings.notice_dir is not None:  # each writer's own directory (a mount)
                watched.extend(d for _, d in writer_directories(settings.notice_dir))
            watcher = Watcher(
                triggers.features_changed,
                watched,
                poll_interval=settings.poll_interval,
                debounce=settings.debounce,
                max_delay=settings.max_latency,
                use_inotify=settings.use_inotify,
                name="features-watch",
            )
            parts.append(watcher)
        object_watch = watch_object(settings, syncer, api, metrics)
        if object_watch is not None:
            parts.append(object_watch)
        started = _Started(settings, syncer.what, metrics, watcher, object_watch is not None)
        return [*parts, loop, started]

    return run(
        build,
        startup_line=startup_line(settings.mode, settings.shown()),
        listen=settings.listen,
        metrics=metrics.m,
    )


class _Started:
    """Says, once everything runs, what the sink follows and how (the log and the metric)."""

    def __init__(
        self, settings: Settings, what: str, metrics: SinkMetrics, watcher: Any, watched: bool
    ) -> None:
        self.settings = settings
        self.what = what
        self.metrics = metrics
        self.watcher = watcher
        self.watched = watched

    def start(self) -> None:
        s = self.settings
        if self.watcher is not None:
            self.metrics.m.watch_mode("feature-sink", self.watcher.mode)
        log.info(
            "started: %s (%s), %s, watch %s, at most %g API requests/s (burst %d)",
            self.what,
            "watched" if self.watched else "read at each sync",
            f"features dir {s.features_dir}" if self.watcher else "features from stdin",
            self.watcher.mode if self.watcher else "none",
            s.api_qps,
            s.api_burst,
        )

    def stop(self) -> None:
        """Nothing to stop."""
