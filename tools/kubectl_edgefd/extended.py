"""Why a pod's request of an `edgefd.io/*` extended resource is not met: no node serves a
resource of that name (a typo reads exactly like a full node to the scheduler), the nodes that
have the accelerator do not serve it (devplugin not registered there, or serving it through
DRA or under another model's name), its devices are unhealthy, every one is held (by whom),
or the nodes with a free one are closed to the pod.

What the kubelet publishes is the evidence: a node's capacity counts every device of the
resource, its allocatable the healthy ones; the pods bound to the node hold what they
request. A resource that a DeviceClass serves through DRA (`extendedResourceName`, Kubernetes
1.37) is asked of DRA on nodes that do not publish it (claims.py).
"""

from __future__ import annotations

from typing import Any

from . import claims
from .causes import Cause, listing, plural
from .edgefdpods import agent
from .known import kind_count
from .nodes import node_resources
from .podspec import RESOURCE_PREFIX, blocking_taints, count, name_of, taint_text
from .selection import did_you_mean


def served_by_dra(scene: claims.Scene, resource: str) -> list[dict[str, Any]]:
    return [
        c
        for c in scene.snap.classes
        if (c.get("spec") or {}).get("extendedResourceName") == resource
    ]


def explain(resource: str, n: int, scene: claims.Scene) -> list[Cause]:
    snap, known = scene.snap, scene.known
    nodes = {name_of(x): x for x in snap.nodes}
    published = {
        k
        for x in snap.nodes
        for k in ((x.get("status") or {}).get("capacity") or {})
        if k.startswith(RESOURCE_PREFIX)
    }
    dra_classes = served_by_dra(scene, resource)
    if resource not in published and resource not in known.resources and not dra_classes:
        names = published | set(known.resources)
        near = did_you_mean(resource, names)
        hint = f"did you mean {near}? " if near else ""
        return [
            Cause(
                "unknown-resource",
                f"No node has {resource}, and edgefd serves no resource of that name: {hint}"
                f"edgefd's are {listing(sorted(names), 12)} (the scheduler reads a misspelt "
                "name as a full node).",
            )
        ]
    kind = known.kind_of_resource(resource)
    what = known.name_of_resource(resource)
    causes: list[Cause] = []
    held: list[str] = []
    biggest = 0
    for node in scene.selected:
        x = nodes[node]
        res = {r.name: r for r in node_resources(x, snap.pods)}.get(resource)
        if res is None or res.capacity == 0:
            if dra_classes:  # the scheduler asks DRA for it on this node (1.37)
                for cls in dra_classes:
                    ask = claims.Ask(
                        f"{resource} (served through DRA, class {name_of(cls)})",
                        name_of(cls),
                        (),
                        n,
                    )
                    causes += claims.explain_ask(ask, _only(scene, node))
                continue
            causes += _not_served(scene, x, resource, kind, what)
            continue
        biggest = max(biggest, res.capacity)
        free = res.allocatable - res.used
        if res.allocatable < res.capacity:
            bad = res.capacity - res.allocatable
            causes.append(
                Cause(
                    "unhealthy",
                    f"Node {node} has {plural(res.capacity, resource)}, {bad} of them "
                    "unhealthy (unplugged or unusable: devplugin's log on that node says which).",
                )
            )
        if res.used and free < n:
            held.append(f"node {node}'s {res.allocatable} held by pod {listing(list(res.pods))}")
        if free >= n:
            taints = blocking_taints(scene.pod, x)
            if taints:
                causes.append(
                    Cause(
                        "node-blocked",
                        f"Node {node} has {plural(free, 'free ' + resource)}, but the pod does not "
                        f"tolerate its taint {taint_text(taints[0])}.",
                    )
                )
            else:
                return [
                    Cause(
                        "could-fit",
                        f"Node {node} has {plural(free, 'free ' + resource)} now: the "
                        "scheduler has not retried the pod since, or something other than the "
                        "device keeps it off (its message).",
                    )
                ]
    if held:
        causes.append(Cause("in-use", f"Every {resource} is in use: {listing(held, 6)}."))
    if 0 < biggest < n:
        causes.append(
            Cause(
                "no-device",
                f"The pod asks for {n} {resource} at once; no node it may run on has more "
                f"than {biggest}.",
            )
        )
    elsewhere = [
        name
        for name, x in nodes.items()
        if name not in scene.selected
        and count(((x.get("status") or {}).get("allocatable") or {}).get(resource, 0)) > 0
    ]
    if elsewhere:
        causes.append(
            Cause(
                "node-blocked",
                f"{listing(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} {resource}, but "
                "its nodeSelector or node affinity excludes "
                f"{'it' if len(elsewhere) == 1 else 'them'}.",
            )
        )
    if not causes:
        where = "no node it may run on" if len(scene.selected) < len(nodes) else "no node"
        label = f"; none is labelled {RESOURCE_PREFIX}{kind}.present" if kind else ""
        causes.append(
            Cause(
                "no-device",
                f"{where[0].upper()}{where[1:]} has a device of {resource} ({what}{label}).",
            )
        )
    return causes


def _only(scene: claims.Scene, node: str) -> claims.Scene:
    """The scene with the devices of one node (a request asked of that node alone)."""
    return claims.Scene(
        scene.pod,
        scene.snap,
        scene.known,
        scene.selected,
        tuple(d for d in scene.devices if d.node == node),
        scene.held,
    )


def _not_served(
    scene: claims.Scene, node: dict[str, Any], resource: str, kind: str | None, what: str
) -> list[Cause]:
    """A node without the resource: is it one that has the accelerator (its labels)? Then
    what serves it there, if anything."""
    if kind is None:
        return []
    have = kind_count(node, kind)
    if not have:
        return []
    name = name_of(node)
    label = f"{RESOURCE_PREFIX}{kind}.count={have}"
    others = sorted(
        k
        for k, v in ((node.get("status") or {}).get("capacity") or {}).items()
        if k.startswith(RESOURCE_PREFIX) and k != resource and count(v) > 0
    )
    if others:
        return [
            Cause(
                "no-device",
                f"Node {name} has {plural(have, kind + ' device')} (label {label}), but it is "
                "served as "
                f"{listing(others)}, not {resource} (a {what}).",
            )
        ]
    runs = agent(scene.snap.pods, name)
    if runs.api == "dra":
        why = (
            "its devplugin serves devices through DRA (--api dra), not as extended resources: "
            "ask with a ResourceClaim, or install the DeviceClasses whose extendedResourceName "
            "serves the resource through DRA (Kubernetes 1.37)"
        )
    elif runs.api is None:
        why = "no edgefd devplugin runs there (no edgefd pod holding one on the node)"
    else:
        why = f"edgefd's device plugin is not registered there ({runs.logs_hint(name)})"
    return [
        Cause(
            "plugin-not-registered",
            f"Node {name} has {plural(have, kind + ' device')} (label {label}) but no "
            f"{resource} in its capacity: {why}.",
        )
    ]
