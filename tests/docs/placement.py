"""Apply the guide's blocks with the real ``kubectl`` and read back where the real kube-scheduler
put each pod, or why it left it Pending.

Blocks are applied one at a time, in the guide's order, each waited for: the recipes build on
each other (a second pod finds the Coral taken by the first), and the scheduler's queue order is
only guaranteed for pods it has already seen. Waits are bounded; a pod that should land waits
until bound (a first "unschedulable" verdict on a cache that has not yet seen a Node's new
status is retried by the scheduler itself), a pod that should stay Pending waits for its
Unschedulable condition and is looked at again once the scenario is over.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .guide import LANDS, PENDING, Block

NAMESPACE = "scheduling-guide"
WAIT = 60.0  # per pod; the scheduler needs milliseconds when the machine is not overloaded
# A verdict made on a stale cache is retried when the event it missed arrives, after a backoff
# of 1 s (2 s, 4 s ... for later attempts): unschedulable this long, it is final.
SETTLE = 10.0
POLL = 0.05
CLAIMS = ("resource.k8s.io", "v1", "resourceclaims")
SLICES = ("resource.k8s.io", "v1", "resourceslices")


@dataclass(frozen=True)
class Placement:
    node: str | None  # bound to
    reason: str  # the PodScheduled condition's reason when not bound
    message: str  # ... and its message

    def describe(self) -> str:
        if self.node:
            return f"bound to {self.node}"
        return f"Pending ({self.reason or 'not looked at yet'}: {self.message})"


def placement_of(pod: Any) -> Placement:
    if pod.spec.node_name:
        return Placement(pod.spec.node_name, "", "")
    for c in pod.status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False":
            return Placement(None, c.reason or "", c.message or "")
    return Placement(None, "", "")


class Cluster:
    """The guide's namespace on the real API server, driven the way a user would."""

    def __init__(self, api_server: Any, core: Any, kubectl: Path) -> None:
        self.api_server = api_server
        self.core = core
        self.kubectl_bin = kubectl

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [str(self.kubectl_bin), f"--kubeconfig={self.api_server.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def create(self, manifest: str) -> None:
        self.kubectl("create", "--namespace", NAMESPACE, "-f", "-", stdin=manifest)

    def placement(self, pod_name: str) -> Placement:
        return placement_of(self.core.read_namespaced_pod(pod_name, NAMESPACE))

    def wait(self, pod_name: str, expect_kind: str, timeout: float = WAIT) -> Placement:
        """Until bound; or, for a pod that should stay Pending, until found unschedulable; or
        until it has been unschedulable for ``SETTLE`` s (no retry is coming); or ``timeout``."""
        deadline = time.monotonic() + timeout
        since = None  # when it was first seen unschedulable
        while True:
            p = self.placement(pod_name)
            now = time.monotonic()
            unschedulable = p.reason == "Unschedulable"
            since = (now if since is None else since) if unschedulable else None
            if p.node or (since is not None and expect_kind == PENDING):
                return p
            if now > deadline or (since is not None and now - since > SETTLE):
                return p
            time.sleep(POLL)

    def _claims_api(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.core.api_client)

    def claim_pools(self, name: str) -> list[str] | None:
        """The pools a ResourceClaim's devices were allocated from; None: not allocated."""
        claim = self._claims_api().get_namespaced_custom_object(
            *CLAIMS[:2], NAMESPACE, CLAIMS[2], name
        )
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            return None
        return [r["pool"] for r in alloc["devices"]["results"]]

    def clear(self, claims: bool = False) -> None:
        """Remove every pod (and claim) of the namespace, and wait until the pods are gone."""
        self.core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        if claims:
            self._clear_claims()
        deadline = time.monotonic() + WAIT
        while self.core.list_namespaced_pod(NAMESPACE).items:
            if time.monotonic() > deadline:
                raise AssertionError(f"pods of {NAMESPACE} still there after {WAIT}s")
            time.sleep(POLL)

    def delete_slices(self, nodes: Iterable[str]) -> None:
        """Every ResourceSlice published for these nodes."""
        api = self._claims_api()
        for node in nodes:
            on_node = f"spec.nodeName={node}"
            for item in api.list_cluster_custom_object(*SLICES, field_selector=on_node)["items"]:
                api.delete_cluster_custom_object(*SLICES, item["metadata"]["name"])

    def _clear_claims(self) -> None:
        """Delete the claims. The scheduler put its delete-protection finalizer on those it
        allocated, and only the resourceclaim controller (not running here) takes it off once
        no pod uses them: done here, as that controller would, since the pods are gone."""
        api = self._claims_api()
        group, version, plural = CLAIMS
        for c in api.list_namespaced_custom_object(group, version, NAMESPACE, plural)["items"]:
            name = c["metadata"]["name"]
            api.delete_namespaced_custom_object(group, version, NAMESPACE, plural, name)
            if c["metadata"].get("finalizers"):
                unprotect = {"metadata": {"finalizers": None}}
                api.patch_namespaced_custom_object(
                    group, version, NAMESPACE, plural, name, unprotect
                )


def check(block: Block, got: Placement) -> str | None:
    """What is wrong with ``got`` for the expectation stated after ``block``, if anything."""
    e = block.expect
    where = f"docs/scheduling.md:{e.line}: pod {block.pod_name}"
    if e.kind == LANDS:
        if got.node not in e.nodes:
            return f"{where}: the guide says it lands on {' or '.join(e.nodes)}; {got.describe()}"
        return None
    if got.node or got.reason != "Unschedulable":
        return f"{where}: the guide says it stays Pending; {got.describe()}"
    missing = [p for p in e.phrases if p not in got.message]
    if missing:
        return f"{where}: the scheduler's message lacks {missing}: {got.message!r}"
    return None


def pinned(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod with one more requirement, to be on ``node``: it binds iff ``node`` can take it.

    The field is added to every term of the required node affinity (terms are ORed, a term's
    requirements ANDed), or as the only term when there is none."""
    p = copy.deepcopy(pod)
    p["metadata"] = {"name": f"{pod['metadata']['name']}-on-{node}"}
    on_node = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = p["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]}
    )
    for term in required["nodeSelectorTerms"]:
        term.setdefault("matchFields", []).append(on_node)
    return p


def probe(cluster: Cluster, block: Block) -> list[str]:
    """Each node the guide names for a pod that may land on several can really take it."""
    pod = block.pod
    assert pod is not None
    copies = {node: pinned(pod, node) for node in block.expect.nodes}
    cluster.create("\n---\n".join(json.dumps(c) for c in copies.values()))
    failures = []
    for node, c in copies.items():
        got = cluster.wait(c["metadata"]["name"], LANDS)
        if got.node != node:
            failures.append(
                f"docs/scheduling.md:{block.expect.line}: pod {block.pod_name} may land on "
                f"{node}, says the guide; held to {node}, it is {got.describe()}"
            )
    cluster.clear()
    return failures
