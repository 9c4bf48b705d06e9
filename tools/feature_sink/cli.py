"""feature-sink: apply the labels in features.d to this node, and keep them applied.

Thin click layer: options in, validated Settings out, then service.py runs once, dry or as the
service. The decisions live in desired.py (what the files ask for), ownership.py / patch.py
(what changes, guarded), sync.py / nodefeature.py (one sync), loop.py (when to sync) and
nodeapi.py (the only code that talks to Kubernetes).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import click

from edgefd.cli import (
    NAMESPACE_NAME,
    Duration,
    Listen,
    api_options,
    command,
    context_option,
    features_dir_option,
    guarded,
    host_node_name,
    listen_option,
    notice_dir_option,
    output_option,
    verbose_option,
)
from edgefd.core.errors import UsageError

from .namespaces import SINK_NAMESPACES

TOOL = "feature-sink"
log = logging.getLogger("edgefd.feature_sink")


class Rate(click.FloatRange):
    """Requests a second: a finite number in range (FloatRange alone lets `nan` through)."""

    name = "rate"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        rate = super().convert(value, param, ctx)
        if rate != rate:
            self.fail(f"{value!r} is not a number of requests a second", param, ctx)
        return rate


def _checked(kind: click.ParamType, value: str, option: str) -> str:
    try:
        return str(kind.convert(value, None, None))
    except click.BadParameter as e:
        raise click.BadParameter(e.message, param_hint=f"'{option}'") from None


@command(
    TOOL,
    context_settings={"max_content_width": 100},
    exit_codes={
        0: "ok (the service: stopped by SIGTERM/SIGINT, every label kept)",
        1: "--once, --dry-run or --prune failed: the API refused (401/403/404), or the ownership "
        "annotation is untrusted",
        3: "bad input: an unusable kubeconfig or --context, an unreadable features stream",
        4: None,
        5: "the API server is unreachable (--once, --prune; the service keeps retrying)",
    },
)
@features_dir_option
@click.option(
    "--features",
    "features_stream",
    metavar="-",
    help="Read one features stream from stdin ('-') instead of --features-dir; it counts as "
    "one producer named 'stdin' and never removes other producers' labels.",
)
@click.option(
    "--host-features-dir",
    type=click.Path(file_okay=False),
    help="Also apply the feature files in this directory (the host's own NFD features.d, "
    "mounted read-only), each a producer named host:<file>, under the same rules.",
)
@api_options()
@context_option
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
    help="Also write labels in this namespace (and its subdomains); by default only "
    f"{', '.join(SINK_NAMESPACES)}. Never a Kubernetes one (kubernetes.io, k8s.io). "
    "Repeatable.",
)
@click.option(
    "--deny-namespace",
    multiple=True,
    help="Refuse labels in this namespace (and its subdomains); wins over allows. Repeatable.",
)
@click.option(
    "--resync-interval",
    type=Duration(minimum=1.0, maximum=86400.0),
    default="1h",
    show_default=True,
    help="Safety resync: re-read the object from the API server and features.d this often. "
    "The watch repairs foreign edits of owned labels at once; this only covers what a watch "
    "might miss (with --no-watch it is the only repair).",
)
@click.option(
    "--no-watch",
    is_flag=True,
    help="Do not watch the object (Node or NodeFeature); read it at every sync instead, for "
    "RBAC without list/watch. Foreign edits are then repaired only at the resync.",
)
@click.option(
    "--api-qps",
    type=Rate(0.1, 1000.0),
    default=5.0,
    show_default=True,
    help="Most API requests a second this sink sends, sustained (its client's rate limit; "
    "an API server's 429 Retry-After is honoured on top).",
)
@click.option(
    "--api-burst",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Most API requests sent at once before --api-qps applies.",
)
@click.option(
    "--removal-grace",
    type=Duration(minimum=0.0, maximum=30 * 86400.0),
    default="10m",
    show_default=True,
    help="Keep the labels of a producer whose file vanished for this long.",
)
@click.option(
    "--max-backoff",
    type=Duration(minimum=0.1, maximum=3600.0),
    default="30s",
    show_default=True,
    help="Longest wait between retries while the API server is unreachable.",
)
@click.option(
    "--debounce",
    type=Duration(minimum=0.0, maximum=60.0),
    default="100ms",
    show_default=True,
    help="Sync once the directory has been quiet this long (but see --max-latency).",
)
@click.option(
    "--max-latency",
    type=Duration(minimum=0.0, maximum=60.0),
    default="500ms",
    show_default=True,
    help="Sync no later than this after the first change, however busy the directory.",
)
@click.option(
    "--label-budget",
    type=click.IntRange(4096, 200 * 1024),
    default=128 * 1024,
    show_default=True,
    help="Most bytes the sink publishes on its object (label keys and values plus its "
    "ownership annotation); a producer that does not fit is refused whole and reported.",
)
@click.option(
    "--settle",
    type=Duration(minimum=0.0, maximum=60.0),
    default="1s",
    show_default=True,
    help="A file changed less than this ago may be mid-rewrite: its labels are added at "
    "once, but none is removed until it has been quiet this long.",
)
@listen_option(":8081")
@notice_dir_option(
    "Directory holding one directory per writer, named for it: where each of the pod's "
    "other edgefd containers leaves its notice (a failed configuration reload: they hold no "
    "right to post Events). Each is posted as a Warning Event on the Node naming its writer; "
    "a writer's changing notices, at most 3 Events, then one every 5 minutes."
)
@click.option(
    "--ready-max-age",
    type=Duration(minimum=1.0, maximum=7 * 86400.0),
    default=None,
    help="Fail /readyz when the last successful sync is older [default: 2 x resync + 60s].",
)
@click.option(
    "--poll-interval",
    type=Duration(minimum=0.05, maximum=60.0),
    default="500ms",
    show_default=True,
    help="How often features.d's files (names, sizes, times) are compared when it is polled "
    "(--no-inotify, or no inotify); a change is synced after --debounce. Not the scanners' "
    "--poll-interval, which compares the host's bus listing.",
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
@click.option(
    "--prune",
    is_flag=True,
    help="After uninstalling edgefd: remove the labels its ownership annotation lists, and the "
    "annotation, under the same rules as a sync (--allow/--deny-namespace); with --dry-run, "
    "only say what would go. Exit 0 done, 5 API unreachable, 1 refused or annotation "
    "untrusted.",
)
@click.option(
    "--all-nodes",
    is_flag=True,
    help="With --prune: every Node that carries edgefd's ownership annotation (in nodefeature "
    "mode: every NodeFeature the sink created), instead of --node-name.",
)
@output_option
@verbose_option
@guarded(TOOL)
def main(
    features_dir: str,
    features_stream: str | None,
    host_features_dir: str | None,
    node_name: str | None,
    kubeconfig: str | None,
    context: str | None,
    mode: str,
    namespace: str,
    allow_namespace: tuple[str, ...],
    deny_namespace: tuple[str, ...],
    resync_interval: float,
    no_watch: bool,
    api_qps: float,
    api_burst: int,
    removal_grace: float,
    max_backoff: float,
    debounce: float,
    max_latency: float,
    label_budget: int,
    settle: float,
    api_timeout: float,
    listen: Listen,
    notice_dir: str | None,
    ready_max_age: float | None,
    poll_interval: float,
    no_inotify: bool,
    no_events: bool,
    once: bool,
    dry_run: bool,
    prune: bool,
    all_nodes: bool,
    output: str,
    verbose: int,
) -> int:
    """Apply the labels in features.d to this node and keep them applied.

    Only labels the sink owns (recorded in the Node annotation edgefd.io/owned-labels) are
    ever changed or removed. Invalid or denied labels are refused and reported (log, metric,
    Event). Runs until SIGTERM (exit 0, labels kept), or once with --once / --dry-run.
    """
    from . import service
    from .namespaces import sink_policy

    if features_stream is not None and features_stream != "-":
        raise click.BadParameter("only '-' (stdin) is supported", param_hint="--features")
    if all_nodes:
        if not prune:
            raise UsageError("--all-nodes only applies to --prune")
        source = click.get_current_context().get_parameter_source("node_name")
        if source == click.core.ParameterSource.COMMANDLINE:
            raise UsageError("--all-nodes and --node-name exclude each other")
        node_name = "*"  # each listed name replaces it (prune.run)
    if not node_name:
        if not dry_run:
            raise UsageError("--node-name (or env NODE_NAME) is required")
        node_name = host_node_name()
        log.warning("no --node-name; the dry-run uses this host's name %r", node_name)
    if mode == "nodefeature":  # only then is it used (it comes from POD_NAMESPACE otherwise)
        namespace = _checked(NAMESPACE_NAME, namespace, "--namespace")
    directory = None if features_stream is not None else Path(features_dir)
    host = Path(host_features_dir) if host_features_dir else None
    if host is not None and features_stream is not None:
        raise UsageError("--host-features-dir applies to --features-dir, not to --features -")
    for option, path in (("--features-dir", directory), ("--host-features-dir", host)):
        if path is not None and not prune and not path.is_dir():
            raise UsageError(
                f"{option} {path}: not an existing directory (a missing directory would look "
                "like every producer's file had gone)"
            )
    try:
        policy = sink_policy(allow_namespace, deny_namespace)
    except ValueError as e:
        raise UsageError(str(e)) from None
    settings = service.Settings(
        node_name=node_name,
        features_dir=directory,
        kubeconfig=kubeconfig,
        mode=mode,
        namespace=namespace,
        policy=policy,
        grace=timedelta(seconds=removal_grace),
        api_timeout=api_timeout,
        events=not no_events,
        resync_interval=resync_interval,
        max_backoff=max_backoff,
        debounce=debounce,
        max_latency=max_latency,
        poll_interval=poll_interval,
        use_inotify=not no_inotify,
        listen=listen,
        ready_max_age=ready_max_age,
        label_budget=label_budget,
        settle=settle,
        watch=not no_watch,
        api_qps=api_qps,
        api_burst=api_burst,
        context=context,
        host_features_dir=host,
        notice_dir=Path(notice_dir) if notice_dir else None,
    )
    if prune:  # reads no features: everything the annotation names goes
        from . import prune as pruning

        return pruning.run(settings, dry_run, output, all_nodes)
    if dry_run:
        return service.run_dry(settings, output)
    if once:
        return service.run_once(settings)
    return service.serve(settings)
