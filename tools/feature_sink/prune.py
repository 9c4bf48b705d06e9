"""`feature-sink --prune`: take back what edgefd put on a Node, once edgefd is uninstalled.

Uninstalling (`kubectl delete -k k8s/`, `helm uninstall`) leaves the labels on purpose: a
DaemonSet that goes away must not make every workload that selects on them unschedulable at
once. When they should go too, this removes exactly what the ownership annotation says edgefd
owns, and the annotation.

It is not a second planner: a prune is the sink's own sync in the state where every producer's
file has gone and every grace period has run out (no producer present, grace 0). So the same
rules decide, and the same guarded write (one JSON Patch testing the resourceVersion and the
annotation it read) carries it out: an annotation that cannot be trusted as a whole blocks
every write; a claim on a key the namespace policy refuses (`kubernetes.io/hostname` in a
tampered annotation) is dropped and its label left as it is; labels nobody claims are never
touched. Run it after the uninstall: a running sink would put the labels back.

With `--mode nodefeature` it empties edgefd's NodeFeature object the same way (nfd-master then
removes the labels); it never creates one. Deleting edgefd's namespace, as both uninstalls do
by default, already deletes those objects.

`--all-nodes` prunes every Node that carries the ownership annotation (or every NodeFeature the
sink created, in nodefeature mode), one guarded write each; a node that fails is reported and
the others are still pruned. This is what the uninstall Job (the chart's post-delete hook,
k8s/prune) runs, from the image, with an account that may only list, read and patch Nodes.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from edgefd.core.errors import EXIT_OK, EdgefdError
from edgefd.core.escape import printable
from edgefd.core.log import say
from edgefd.core.output import emit_json
from edgefd.kube.client import quote

from .desired import Desired
from .metrics import SinkMetrics
from .nodeapi import NFD_GROUP, NFD_PLURAL, NFD_VERSION
from .nodefeature import MANAGED_BY, MANAGED_BY_LABEL
from .ownership import ANNOTATION
from .patch import LabelChange
from .report import Reporter, desired_problems
from .service import Settings, connect, make_syncer
from .sync import OwnershipUntrusted, Syncer

# Every producer gone: nothing is present, and the state is authoritative, so each producer
# the annotation names has vanished and its labels are due for removal.
GONE = Desired()
PAGE = 500  # objects per list request


def prune_moment() -> datetime:
    """Now, in whole seconds. With a grace of 0 a vanished producer's labels expire at the
    first whole second after it is noticed (the annotation keeps whole seconds); a whole-second
    `now` is that very second, so nothing is kept back."""
    return datetime.now(UTC).replace(microsecond=0)


def pruner(settings: Settings, api: Any, metrics: SinkMetrics) -> Syncer:
    """The sink's own syncer for this node and mode, with no removal grace and no Events (an
    administrator's tool: problems go to stderr)."""
    quick = dataclasses.replace(settings, grace=timedelta(0), events=False)
    return make_syncer(quick, api, metrics)


@dataclass
class Pruned:
    """What a prune did (or would do) to one object."""

    node: str
    what: str
    changes: list[LabelChange] = field(default_factory=list)
    writes: bool = False  # labels or the annotation go (or would go)
    exists: bool = True


def prune_one(settings: Settings, api: Any, metrics: SinkMetrics, dry_run: bool) -> Pruned:
    """Prune one object (or plan it); the sync's exceptions carry the exit code."""
    syncer = pruner(settings, api, metrics)
    now = prune_moment()
    current = syncer.read()
    if current is None:  # no NodeFeature: nothing to take back (and none to create)
        return Pruned(settings.node_name, syncer.what, exists=False)
    if dry_run:
        plan = syncer.plan(current, GONE, now)
        Reporter(metrics, events=False).observe(desired_problems(GONE) + list(plan.problems))
        if plan.blocked:
            raise OwnershipUntrusted(plan.blocked)
        return Pruned(settings.node_name, syncer.what, plan.changes, plan.needed)
    result = syncer.sync(GONE, now)
    return Pruned(settings.node_name, syncer.what, result.changes, result.wrote)


def targets(settings: Settings, api: Any) -> list[str]:
    """The names to prune with --all-nodes: Nodes carrying the ownership annotation (node
    mode), or the NodeFeatures the sink created (nodefeature mode), listed a page at a time."""
    query: dict[str, str] = {"limit": str(PAGE)}
    if settings.mode == "nodefeature":
        ns = quote(settings.namespace)
        path, resource = f"/apis/{NFD_GROUP}/{NFD_VERSION}/namespaces/{ns}/{NFD_PLURAL}", NFD_PLURAL
        query["labelSelector"] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    else:
        path, resource = "/api/v1/nodes", "nodes"
    names: list[str] = []
    while True:
        page = api.request("GET", resource, f"{path}?{urlencode(query)}", f"list {resource}")
        for item in (page or {}).get("items") or []:
            md = item.get("metadata") or {}
            if md.get("name") and (
                resource != "nodes" or ANNOTATION in (md.get("annotations") or {})
            ):
                names.append(str(md["name"]))
        query["continue"] = ((page or {}).get("metadata") or {}).get("continue") or ""
        if not query["continue"]:
            return sorted(names)


def run(settings: Settings, dry_run: bool, output: str, all_nodes: bool = False) -> int:
    """Prune one node (or every node with --all-nodes), or show what would go.

    One node: its exceptions carry the exit code (5 API unreachable, 1 refused or the
    ownership annotation untrusted: nothing written). All nodes: listing them must work (else
    its exit code); then each node is pruned on its own, its failure reported on stderr, and
    the exit code is the worst of them (5 over 1)."""
    metrics = SinkMetrics()
    api = connect(settings, metrics)
    if not all_nodes:
        done = prune_one(settings, api, metrics, dry_run)
        _print([done], dry_run, output, all_nodes=False)
        return EXIT_OK
    code, done_all = EXIT_OK, []
    names = targets(settings, api)
    for name in names:
        try:
            done_all.append(
                prune_one(dataclasses.replace(settings, node_name=name), api, metrics, dry_run)
            )
        except EdgefdError as e:
            print(f"feature-sink: {name}: error: {printable(str(e))}", file=sys.stderr)
            code = max(code, e.exit_code)
    _print(done_all, dry_run, output, all_nodes=True)
    return code


def _print(done: list[Pruned], dry_run: bool, output: str, all_nodes: bool) -> None:
    """The labels that go (or would go), as data on stdout; the rest is said on stderr."""
    would = "would " if dry_run else ""
    if output == "json":
        emit_json(
            [
                {"node": d.node, "op": c.op, "key": c.key, "value": c.old}
                for d in done
                for c in d.changes
            ]
        )
    else:
        for d in done:
            for c in d.changes:
                line = f"{would}remove {c.key} (was {c.old})" if would else str(c)
                print(f"{d.node}: {line}" if all_nodes else line)
    for d in done:
        if not d.exists:
            _say(f"{d.what} does not exist; nothing to prune")
        elif not d.writes:
            _say(f"{d.what}: nothing to prune" if all_nodes else "nothing to prune")
        else:
            what = f"{len(d.changes)} label(s) and the ownership annotation"
            if not d.changes:
                what = "no labels; only the ownership annotation"
            _say(f"{d.what}: {'would remove' if dry_run else 'removed'} {what}")
    if all_nodes:
        touched = sum(1 for d in done if d.writes)
        labels = sum(len(d.changes) for d in done)
        verb = "would remove" if dry_run else "removed"
        _say(f"{verb} {labels} label(s) from {touched} of {len(done)} object(s) edgefd owned")
    if dry_run:
        _say("dry run: nothing was written")


def _say(message: str) -> None:
    say("feature-sink", message)
