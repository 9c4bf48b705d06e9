"""`kubectl edgefd why POD`: the reasons a pod that asks for an accelerator stays Pending,
told in one paragraph, from one snapshot of the cluster.

What the pod asks is read from its spec (podspec): `edgefd.io/*` resources, ResourceClaims
(named, or made from a template) of edgefd's DeviceClasses, labels edgefd's producers write.
Then, in the order an operator checks them: may it go to any node at all (selection), then
each resource (extended) and each claim request (claims), each naming its evidence: the label
no node has, the devices and who holds them, a device's taint, the selector that matches
nothing, the node that has the accelerator and serves none. The scheduler's own message ends
the paragraph: it is the one line the scheduler gives for every cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgefd.inventory.naming import DOMAIN, qualified

from . import claims, extended
from .causes import Cause, listing, ordered
from .known import Known, is_edgefd_class
from .podspec import blocking_taints, edgefd_requests, meta, name_of, node_of, ref, taint_text
from .selection import asks_labels, selected, selector_cause
from .snapshot import Snapshot


@dataclass(frozen=True)
class Explanation:
    pod: str
    phase: str
    node: str
    message: str  # the scheduler's (PodScheduled False), or ''
    causes: list[Cause] = field(default_factory=list)
    asks: dict[str, Any] = field(default_factory=dict)

    def paragraph(self) -> str:
        told = " ".join(c.text for c in self.causes)
        if any(c.kind in ("not-pending", "scheduled") for c in self.causes):
            return told
        said = f' The scheduler says: "{self.message}"' if self.message else ""
        return f"Pod {self.pod} is Pending. {told}{said}".rstrip()

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "phase": self.phase,
            "node": self.node or None,
            "scheduler": self.message or None,
            "asks": self.asks,
            "causes": [c.as_json() for c in self.causes],
            "paragraph": self.paragraph(),
        }


def scheduler_message(pod: dict[str, Any]) -> str | None:
    """The PodScheduled=False message ('' when it has no message); None: never looked at."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return " ".join(str(c.get("message") or c.get("reason") or "").split())
    return None


def templates_to_read(pod: dict[str, Any], snap: Snapshot) -> list[str]:
    """The ResourceClaimTemplates whose claim is not made yet: `why` reads their spec."""
    out = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if entry.get("resourceClaimTemplateName") and not claims.claim_of(pod, entry, snap)[1]:
            out.append(str(entry["resourceClaimTemplateName"]))
    return out


def _settled(pod: dict[str, Any]) -> Cause | None:
    """The pod is past scheduling: not Pending, or Pending on a node."""
    status = pod.get("status") or {}
    phase, node = status.get("phase") or "Pending", node_of(pod)
    if phase != "Pending":
        where = f" on node {node}" if node else ""
        said = ": ".join(f"{status.get(k)}" for k in ("reason", "message") if status.get(k))
        return Cause(
            "not-pending",
            f"Pod {ref(pod)} is not Pending: it is {phase}{where}"
            + (f" ({said})." if said else "."),
        )
    if node:
        waiting = [
            f"{s.get('name')}: {((s.get('state') or {}).get('waiting') or {}).get('reason')}"
            for s in [
                *(status.get("initContainerStatuses") or ()),
                *(status.get("containerStatuses") or ()),
            ]
            if (s.get("state") or {}).get("waiting")
        ]
        state = f" (waiting: {listing(waiting)})" if waiting else ""
        return Cause(
            "scheduled",
            f"Pod {ref(pod)} is Pending but already scheduled to node {node}: the scheduler "
            f"found it a place, and the node's kubelet has not started it yet{state}.",
        )
    return None


def explain(
    pod: dict[str, Any],
    snap: Snapshot,
    known: Known,
    templates: dict[str, dict[str, Any] | None] | None = None,
) -> Explanation:
    status = pod.get("status") or {}
    phase, node = str(status.get("phase") or "Pending"), node_of(pod)
    message = scheduler_message(pod)
    resources = edgefd_requests(pod)
    labels = asks_labels(pod)
    asks: dict[str, Any] = {
        "resources": resources,
        "claims": [],
        "labels": [r.text() for r in labels],
    }
    settled = _settled(pod)
    if settled is not None:
        return Explanation(ref(pod), phase, node, message or "", [settled], asks)
    causes: list[Cause] = []
    claim_asks: list[tuple[str, list[list[claims.Ask]], dict[str, Any] | None]] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        cause, where, spec, claim = _claim_spec(pod, entry, snap, templates or {})
        if cause is not None:
            causes.append(cause)
        if spec is not None:
            found = claims.asks(spec, where)
            if any(_edgefd(a, snap) for alts in found for a in alts):
                asks["claims"].append(where)
                claim_asks.append((where, found, claim))
    if not resources and not claim_asks and not labels and not causes:
        causes.append(
            Cause(
                "nothing-asked",
                f"It asks for no edgefd accelerator (no {qualified('*')} resource, no claim "
                "of an edgefd DeviceClass, no label edgefd writes), so nothing edgefd publishes "
                "keeps it off a node.",
            )
        )
    blocked = selector_cause(pod, snap.nodes)
    if blocked is not None:
        return _done(pod, phase, message, [*causes, blocked], asks)
    scene = claims.Scene.of(pod, snap, known, [name_of(n) for n in selected(pod, snap.nodes)])
    for resource, n in sorted(resources.items()):
        causes += extended.explain(resource, n, scene)
    for _, found, claim in claim_asks:
        allocated = _allocated(claim, scene) if claim is not None else None
        if allocated is not None:
            causes += allocated
            continue
        for alternatives in found:
            causes += claims.explain(alternatives, scene)
    if not resources and not claim_asks and labels:
        causes += _labels_only(pod, scene)
    return _done(pod, phase, message, causes, asks)


def _done(
    pod: dict[str, Any], phase: str, message: str | None, causes: list[Cause], asks: dict[str, Any]
) -> Explanation:
    spec = pod.get("spec") or {}
    gates = [str(g.get("name")) for g in spec.get("schedulingGates") or ()]
    if gates:
        causes.append(
            Cause(
                "no-scheduler",
                f"It has scheduling gates ({listing(gates)}): no scheduler places it until they "
                "are removed.",
            )
        )
    elif message is None and not any(c.kind == "claim-missing" for c in causes):
        name = spec.get("schedulerName") or "default-scheduler"
        causes.append(
            Cause(
                "no-scheduler",
                f"No scheduler has looked at it yet (no PodScheduled condition): is {name} "
                "running?",
            )
        )
    return Explanation(ref(pod), phase, "", message or "", ordered(causes), asks)


def _edgefd(ask: claims.Ask, snap: Snapshot) -> bool:
    cls = next((c for c in snap.classes if name_of(c) == ask.device_class), None)
    if cls is None:  # a missing class of edgefd's name is edgefd's to explain
        return ask.device_class.endswith(f".{DOMAIN}")
    return is_edgefd_class(cls)


def _claim_spec(
    pod: dict[str, Any],
    entry: dict[str, Any],
    snap: Snapshot,
    templates: dict[str, dict[str, Any] | None],
) -> tuple[Cause | None, str, dict[str, Any] | None, dict[str, Any] | None]:
    """(a cause to tell, how to name it, the claim spec to ask, the claim) of one entry."""
    ns = meta(pod).get("namespace") or ""
    name, claim = claims.claim_of(pod, entry, snap)
    if claim is not None:
        return None, f"claim {ns}/{name}", claim.get("spec") or {}, claim
    if entry.get("resourceClaimName"):
        return (
            Cause(
                "claim-missing",
                f"Its ResourceClaim {ns}/{name} does not exist; the scheduler does not try to "
                "place the pod until it does.",
            ),
            f"claim {ns}/{name}",
            None,
            None,
        )
    tname = str(entry.get("resourceClaimTemplateName") or "")
    template = templates.get(tname)
    if template is None:
        return (
            Cause(
                "claim-missing",
                f"Its ResourceClaimTemplate {ns}/{tname} does not exist; the scheduler does not "
                "try to place the pod until it does.",
            ),
            f"template {ns}/{tname}",
            None,
            None,
        )
    note = Cause(
        "claim-pending",
        f"Its claim from ResourceClaimTemplate {ns}/{tname} is not made yet (the resourceclaim "
        "controller of kube-controller-manager makes it); what follows is asked of the template.",
    )
    return note, f"template {ns}/{tname}", (template.get("spec") or {}).get("spec") or {}, None


def _allocated(claim: dict[str, Any], scene: claims.Scene) -> list[Cause] | None:
    """A claim already allocated: its devices are the pod's; it may only go where they are."""
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return None
    results = (alloc.get("devices") or {}).get("results") or ()
    devs = {(r.get("pool"), r.get("device")) for r in results}
    nodes = sorted({d.node for d in scene.devices if (d.pool, d.name) in devs})
    where = listing([f"{dev} ({pool})" for pool, dev in sorted(devs)])
    out = [
        Cause(
            "claim-pending",
            f"Claim {ref(claim)} is allocated already ({where}): the pod may only go to "
            f"{listing(nodes) or 'the node of those devices'}.",
        )
    ]
    for node in nodes:
        closed = scene.closed(node)
        if closed:
            out.append(
                Cause("node-blocked", f"Node {node} holds its claim's devices, but {closed}.")
            )
    return out


def _labels_only(pod: dict[str, Any], scene: claims.Scene) -> list[Cause]:
    """A pod that selects nodes by edgefd's labels only: are all those nodes closed to it?"""
    closed = []
    for node in scene.selected:
        n = scene.snap.node(node)
        taints = blocking_taints(pod, n) if n is not None else []
        if taints:
            closed.append(f"{node} ({taint_text(taints[0])})")
    if closed and len(closed) == len(scene.selected):
        return [
            Cause(
                "node-blocked",
                f"Every node with the labels it asks is closed to it by a taint it does not "
                f"tolerate: {listing(closed, 6)}.",
            )
        ]
    return [
        Cause(
            "could-fit",
            f"{listing(list(scene.selected))} {'has' if len(scene.selected) == 1 else 'have'} the "
            "labels it asks; what keeps it off is not edgefd's (the scheduler's message).",
        )
    ]
