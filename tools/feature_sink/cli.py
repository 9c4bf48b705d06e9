"""feature-sink: apply the labels in features.d to this node, and keep them applied.

Thin click layer: options, wiring and exit codes. The decisions live in desired.py (what the
files ask for), ownership.py / patch.py (what changes, guarded), sync.py / nodefeature.py (one
sync), loop.py (when to sync) and nodeapi.py (the only code that talks to Kubernetes, imported
lazily so `--help` and an offline `--dry-run` never load the kubernetes package).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from tools.common.cli import (
    BadInput,
    EdgefdError,
    Listen,
    emit_json,
    features_dir_option,
    guarded,
    listen_option,
    output_option,
    verbose_option,
)
from tools.common.featuresd import MAX_FILE_SIZE
from tools.common.httpserve import HealthServer
from tools.common.labels import NamespacePolicy

from .desired import STDIN_PRODUCER, Desired, build_desired, read_directory
from .metrics import SinkMetrics

TOOL = "feature-sink"
log = logging.getLogger("edgefd.feature_sink")

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class Duration(click.ParamType):
    """Seconds as a number, or with a unit: `250ms`, `30s`, `10m`, `1h`."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        m = _DURATION_RE.match(str(value))
        if not m:
            self.fail(f"{value!r} is not a duration (e.g. 30, 30s, 10m, 250ms)", param, ctx)
        return float(m.group(1)) * _UNITS[m.group(2)]


DURATION = Duration()


def _stream_desired(data: bytes, policy: NamespacePolicy) -> Desired:
    from tools.common.featuresd import parse_bytes

    parsed = parse_bytes(data, STDIN_PRODUCER)
    if parsed.error:
        raise BadInput(f"features stream: {parsed.error}")
    return build_desired([parsed], policy, authoritative=False)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@features_dir_option
@click.option(
    "--features",
    "features_stream",
    metavar="-",
    help="Read one features stream from stdin ('-') instead of --features-dir; it counts as "
    "one producer named 'stdin' and never removes other producers' labels.",
)
@click.option("--node-name", envvar="NODE_NAME", help="The Node to label [env NODE_NAME].")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    help="Kubeconfig file; default: the pod's in-cluster service account.",
)
@click.option(
    "--mode",
    type=click.Choice(["node", "nodefeature"]),
    default="node",
    show_default=True,
    help="node: patch the Node's labels. nodefeature: publish an NFD NodeFeature object "
    "for an existing nfd-master to apply.",
)
@click.option(
    "--namespace",
    envvar="POD_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of the NodeFeature object (--mode nodefeature) [env POD_NAMESPACE].",
)
@click.option(
    "--allow-namespace",
    multiple=True,
    help="Also allow labels in this namespace (and its subdomains). Repeatable.",
)
@click.option(
    "--deny-namespace",
    multiple=True,
    help="Refuse labels in this namespace (and its subdomains); wins over allows. Repeatable.",
)
@click.option(
    "--resync-interval",
    type=DURATION,
    default="300s",
    show_default=True,
    help="Re-read everything and repair hand edits of owned labels this often.",
)
@click.option(
    "--removal-grace",
    type=DURATION,
    default="10m",
    show_default=True,
    help="Keep the labels of a producer whose file vanished for this long.",
)
@click.option(
    "--max-backoff",
    type=DURATION,
    default="30s",
    show_default=True,
    help="Longest wait between retries while the API server is unreachable.",
)
@click.option(
    "--debounce",
    type=DURATION,
    default="100ms",
    show_default=True,
    help="Sync once the directory has been quiet this long...",
)
@click.option(
    "--max-latency",
    type=DURATION,
    default="500ms",
    show_default=True,
    help="...but no later than this after the first change.",
)
@click.option(
    "--api-timeout",
    type=DURATION,
    default="10s",
    show_default=True,
    help="Timeout of each API request (a hung connection never blocks longer).",
)
@listen_option(":8081")
@click.option(
    "--ready-max-age",
    type=DURATION,
    default=None,
    help="/readyz fails when the last successful sync is older [default: 2 x resync + 60s].",
)
@click.option(
    "--poll-interval",
    type=DURATION,
    default="500ms",
    show_default=True,
    help="Directory polling period when inotify is unavailable.",
)
@click.option("--no-inotify", is_flag=True, help="Poll the directory instead of using inotify.")
@click.option("--no-events", is_flag=True, help="Do not post Kubernetes Events for problems.")
@click.option(
    "--once", is_flag=True, help="Sync once; exit 0 on success, 5 API unreachable, 1 failed."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the JSON Patch that would be sent (against the live Node when reachable, "
    "else against a Node with no labels); write nothing.",
)
@output_option
@verbose_option
@guarded(TOOL)
def main(
    features_dir: str,
    features_stream: str | None,
    node_name: str | None,
    kubeconfig: str | None,
    mode: str,
    namespace: str,
    allow_namespace: tuple[str, ...],
    deny_namespace: tuple[str, ...],
    resync_interval: float,
    removal_grace: float,
    max_backoff: float,
    debounce: float,
    max_latency: float,
    api_timeout: float,
    listen: str,
    ready_max_age: float | None,
    poll_interval: float,
    no_inotify: bool,
    no_events: bool,
    once: bool,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Apply the labels in features.d to this node and keep them applied.

    Only labels the sink owns (recorded in the Node annotation edgefd.io/owned-labels) are
    ever changed or removed. Invalid or denied labels are refused and reported (log, metric,
    Event). Runs until SIGTERM (exit 0, labels kept), or once with --once / --dry-run.
    """
    policy = NamespacePolicy.from_lists(allow_namespace, deny_namespace)
    if features_stream is not None:
        if features_stream != "-":
            raise click.BadParameter("only '-' (stdin) is supported", param_hint="--features")
        data = sys.stdin.buffer.read(MAX_FILE_SIZE + 1)
        stream_desired = _stream_desired(data, policy)

        def read_desired() -> Desired:
            return stream_desired

    else:
        directory = Path(features_dir)

        def read_desired() -> Desired:
            return read_directory(directory, policy)

    grace = timedelta(seconds=removal_grace)
    if not node_name:
        if not dry_run:
            raise click.UsageError("--node-name (or env NODE_NAME) is required")
        node_name = os.uname().nodename
        log.warning("no --node-name; the dry-run uses this host's name %r", node_name)

    if dry_run:
        return _dry_run(
            read_desired, node_name, kubeconfig, mode, namespace, grace, output, api_timeout
        )

    metrics = SinkMetrics()
    from . import nodeapi

    api = nodeapi.connect(kubeconfig, api_timeout, metrics.on_request)
    syncer = _make_syncer(api, mode, node_name, namespace, grace, metrics, not no_events)
    if once:
        return _once(read_desired, syncer)
    return _serve(
        read_desired,
        syncer,
        metrics,
        None if features_stream is not None else Path(features_dir),
        listen=listen,
        resync_interval=resync_interval,
        debounce=debounce,
        max_latency=max_latency,
        max_backoff=max_backoff,
        poll_interval=poll_interval,
        use_inotify=not no_inotify,
        ready_max_age=ready_max_age or 2 * resync_interval + 60,
        wedged_after=max(60.0, 12 * api_timeout),
        description=f"node {node_name}, mode {mode}",
    )


def _make_syncer(
    api: Any,
    mode: str,
    node_name: str,
    namespace: str,
    grace: timedelta,
    metrics: SinkMetrics,
    events: bool,
) -> Any:
    from .sync import NodeSyncer, Reporter

    reporter = Reporter(metrics, events=events)
    if mode == "nodefeature":
        from .nodefeature import NodeFeatureSyncer

        return NodeFeatureSyncer(api, node_name, namespace, grace, metrics, reporter)
    return NodeSyncer(api, node_name, grace, metrics, reporter)


def _once(read_desired: Callable[[], Desired], syncer: Any) -> int:
    """One sync; its exceptions carry the exit code (5 unreachable, 1 anything else)."""
    result = syncer.sync(read_desired(), datetime.now(UTC))
    log.info(
        "sync done: %d change(s)%s, %d owned label(s)",
        len(result.changes),
        "" if result.wrote else " (no write needed)",
        result.owned,
    )
    return 0


def _dry_run(
    read_desired: Callable[[], Desired],
    node_name: str,
    kubeconfig: str | None,
    mode: str,
    namespace: str,
    grace: timedelta,
    output: str,
    api_timeout: float,
) -> int:
    from .sync import Reporter, describe, empty_node, plan_node

    desired = read_desired()
    now = datetime.now(UTC)
    api = None
    try:
        from . import nodeapi

        api = nodeapi.connect(kubeconfig, api_timeout)
    except EdgefdError as e:
        log.warning("%s", e)

    if mode == "nodefeature":
        from .nodefeature import NodeFeatureSyncer

        metrics = SinkMetrics()
        nf = NodeFeatureSyncer(api, node_name, namespace, grace, metrics, Reporter(metrics))
        obj = None
        if api is not None:
            try:
                obj = api.get_nodefeature(namespace, node_name)
            except EdgefdError as e:
                log.warning("%s; showing the object as if none existed", e)
        else:
            log.warning("API not available; showing the object as if none existed")
        Reporter(metrics, events=False).observe(desired, ())
        body, result = nf.plan(obj, desired, now)
        if output == "json":
            emit_json(body)
        else:
            for c in result.changes:
                click.echo(str(c))
        if body is None:
            click.echo(f"{TOOL}: no changes", err=True)
        return 0

    node = None
    if api is not None:
        try:
            node = api.get_node(node_name)
        except EdgefdError as e:
            log.warning("%s", e)
    if node is None:
        click.echo(
            f"{TOOL}: cannot read node {node_name}; showing the patch against a Node with no "
            "labels",
            err=True,
        )
        node = empty_node(node_name)
    plan = plan_node(node, desired, now, grace)
    for w in plan.warnings:
        log.warning("%s", w)
    Reporter(SinkMetrics(), events=False).observe(desired, plan.outcome.conflicts)
    if output == "json":
        emit_json(plan.ops)
    else:
        for c in plan.changes:
            click.echo(str(c))
        if plan.ops and not plan.changes:
            click.echo("(ownership annotation update only)")
    if not plan.ops:
        click.echo(f"{TOOL}: no changes", err=True)
    if output == "text" and log.isEnabledFor(logging.DEBUG):
        log.debug("patch: %s", describe(plan))
    return 0


def _serve(
    read_desired: Callable[[], Desired],
    syncer: Any,
    metrics: SinkMetrics,
    directory: Path | None,
    *,
    listen: Listen,
    resync_interval: float,
    debounce: float,
    max_latency: float,
    max_backoff: float,
    poll_interval: float,
    use_inotify: bool,
    ready_max_age: float,
    wedged_after: float,
    description: str,
) -> int:
    from .loop import DirWatcher, LoopConfig, SinkLoop, StopFlag

    stop = StopFlag()
    stop.install()
    watcher = DirWatcher(directory, poll_interval, use_inotify) if directory else None
    config = LoopConfig(
        resync_interval=resync_interval,
        debounce=debounce,
        max_latency=max_latency,
        max_backoff=max_backoff,
        poll_interval=poll_interval,
        use_inotify=use_inotify,
    )
    loop = SinkLoop(read_desired, syncer, metrics, watcher, config, stop)
    server = None
    addr = listen
    if addr is not None:
        try:
            server = HealthServer(
                metrics.registry,
                host=addr[0],
                port=addr[1],
                healthz=lambda: loop.healthy(wedged_after),
                readyz=lambda: loop.ready(ready_max_age),
            ).start()
        except OSError as e:
            raise EdgefdError(f"cannot listen on {addr[0]}:{addr[1]}: {e.strerror or e}") from e
        log.info("serving /healthz /readyz /metrics on %s:%d", addr[0], server.port)
    log.info(
        "started: %s, %s, watch %s",
        description,
        f"features dir {directory}" if directory else "features from stdin",
        watcher.mode if watcher else "none",
    )
    try:
        loop.run()
    finally:
        if server is not None:
            server.stop()
        if watcher is not None:
            watcher.close()
        stop.close()
    return 0
