"""Why a pod's DRA request gets no device: the claim or its class is missing, its selectors
match no device any node publishes (or fail on one), every device it matches is allocated
(and to whom) or tainted, the nodes that have one are closed to the pod, or the nodes that
have the accelerator publish no ResourceSlice at all (devplugin --api dra not registered).

A request is asked as the scheduler asks it: its DeviceClass's selectors and its own, ANDed,
on every device of edgefd's slices (cel.py); `count` devices on one node (or, with
allocationMode All, every matching device there); taints tolerated only by the request's own
tolerations. A `firstAvailable` request is met by any of its alternatives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edgefd.inventory.naming import qualified

from . import cel
from .causes import Cause, listing, plural
from .devices import Device, Holder, devices, holders
from .edgefdpods import agent
from .known import Known, class_selectors, expressions, is_edgefd_class, kind_count
from .podspec import blocking_taints, meta, name_of, taint_text
from .selection import did_you_mean
from .snapshot import DRIVER, Snapshot

_ATTRIBUTE = re.compile(r'attributes\["[^"]*"\]\.([A-Za-z_][A-Za-z0-9_]*)')


@dataclass(frozen=True)
class Ask:
    """One way of meeting a request: a class, selectors, how many devices (0: all of them
    on the node), and the taints it tolerates. `label` names it in sentences."""

    label: str
    device_class: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    tolerations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Scene:
    """What every request is asked against: the pod, the cluster, the nodes its selectors
    let it onto, and edgefd's devices with their holders."""

    pod: dict[str, Any]
    snap: Snapshot
    known: Known
    selected: tuple[str, ...]
    devices: tuple[Device, ...]
    held: dict[tuple[str, str], Holder]

    @classmethod
    def of(cls, pod: dict[str, Any], snap: Snapshot, known: Known, selected: list[str]) -> Scene:
        return cls(
            pod, snap, known, tuple(selected), tuple(devices(snap.slices)), holders(snap.claims)
        )

    def device_class(self, name: str) -> dict[str, Any] | None:
        return next((c for c in self.snap.classes if name_of(c) == name), None)

    def closed(self, node: str) -> str | None:
        """Why the pod cannot go to `node` whatever its devices (None: it can)."""
        if node not in self.selected:
            return "its nodeSelector or node affinity excludes that node"
        n = self.snap.node(node)
        if n is None:
            return "no such Node"
        taints = blocking_taints(self.pod, n)
        if taints:
            return f"the pod does not tolerate the node's taint {taint_text(taints[0])}"
        return None


def asks(spec: dict[str, Any], where: str) -> list[list[Ask]]:
    """A claim spec's requests (all needed), each as its alternatives (any will do)."""
    out = []
    for r in (spec.get("devices") or {}).get("requests") or ():
        name = str(r.get("name") or "")
        if r.get("exactly"):
            out.append([_ask(r["exactly"], f"request {name!r} of {where}")])
        elif r.get("firstAvailable"):
            out.append(
                [
                    _ask(sub, f"alternative {sub.get('name')!r} of request {name!r} of {where}")
                    for sub in r["firstAvailable"]
                ]
            )
    return out


def _ask(r: dict[str, Any], label: str) -> Ask:
    mode = r.get("allocationMode") or "ExactCount"
    return Ask(
        label,
        str(r.get("deviceClassName") or ""),
        tuple(expressions(list(r.get("selectors") or ()))),
        0 if mode == "All" else int(r.get("count") or 1),
        tuple(r.get("tolerations") or ()),
    )


def explain(alternatives: list[Ask], scene: Scene) -> list[Cause]:
    """The causes of one request: none of its alternatives can be met now."""
    found = [explain_ask(a, scene) for a in alternatives]
    fits = [c for causes in found for c in causes if c.kind == "could-fit"]
    return fits[:1] if fits else [c for causes in found for c in causes]


def explain_ask(ask: Ask, scene: Scene) -> list[Cause]:
    cls = scene.device_class(ask.device_class)
    if cls is None:
        names = {name_of(c) for c in scene.snap.classes}
        near = did_you_mean(ask.device_class, names)
        hint = f" (did you mean {near}?)" if near else ""
        return [
            Cause(
                "claim-missing",
                f"DeviceClass {ask.device_class}, which {ask.label} asks for, does not "
                f"exist{hint}.",
            )
        ]
    if not is_edgefd_class(cls):
        return []
    kind = scene.known.kind_of_class(cls)
    of_class = [
        d
        for d in scene.devices
        if cel.evaluate_all(expressions(class_selectors(cls)), d.entry, DRIVER).matched
    ]
    if not of_class:
        causes = _unregistered(scene, kind)
        causes.append(
            Cause(
                "no-device",
                f"No node publishes a device of class {ask.device_class} in a ResourceSlice "
                f"(asked by {ask.label}).",
            )
        )
        return causes
    matched, errors, failed = [], [], []
    for d in of_class:
        expr, verdict = cel.failing(list(ask.selectors), d.entry, DRIVER)
        if verdict.matched:
            matched.append(d)
        elif verdict.error:
            errors.append((d, expr, verdict.error))
        else:
            failed.append((d, expr))
    if not matched:
        return _matches_nothing(ask, of_class, errors, failed)
    return _on_nodes(ask, matched, scene) + _unregistered(scene, kind)


def _matches_nothing(
    ask: Ask,
    of_class: list[Device],
    errors: list[tuple[Device, str, str]],
    failed: list[tuple[Device, str]],
) -> list[Cause]:
    causes = []
    if errors:
        _, expr, err = errors[0]
        names = sorted(
            {n.rpartition("/")[2] for x in of_class for n in x.entry.get("attributes") or {}}
        )
        missing = [a for a in _ATTRIBUTE.findall(expr) if a not in names]
        hint = ""
        if missing:
            near = did_you_mean(missing[0], set(names))
            hint = f" (no device has an attribute {missing[0]}" + (
                f"; did you mean {near}?)" if near else ")"
            )
        causes.append(
            Cause(
                "selector-error",
                f"The selector `{expr}` of {ask.label} fails on {plural(len(errors), 'device')} "
                f"({listing([e[0].where() for e in errors])}): {err}{hint}; the scheduler "
                "counts an error as no match.",
            )
        )
    if failed:
        exprs = sorted({expr for _, expr in failed})
        attrs = sorted({a for e in exprs for a in _ATTRIBUTE.findall(e)})
        have = "; ".join(
            f"their {a}: {listing(sorted({d.attribute(a) or '(none)' for d, _ in failed}))}"
            for a in attrs
        )
        causes.append(
            Cause(
                "selector-matches-nothing",
                f"The selectors of {ask.label} match no device: the "
                f"{plural(len(of_class), 'device')} of class {ask.device_class} "
                f"({listing([d.where() for d in of_class])}) fail "
                f"{listing([f'`{e}`' for e in exprs])}" + (f" ({have})." if have else "."),
            )
        )
    return causes


def _on_nodes(ask: Ask, matched: list[Device], scene: Scene) -> list[Cause]:
    """The request matches devices: on which nodes, and why none can be given out now."""
    by_node: dict[str, list[Device]] = {}
    for d in matched:
        by_node.setdefault(d.node, []).append(d)
    need = "every device it matches" if ask.count == 0 else plural(ask.count, "device")
    causes: list[Cause] = []
    held: list[str] = []
    tainted: list[str] = []
    for node, devs in sorted(by_node.items()):
        free = [
            d
            for d in devs
            if (d.pool, d.name) not in scene.held and not d.blocking(list(ask.tolerations))
        ]
        for d in devs:
            holder = scene.held.get((d.pool, d.name))
            if holder is not None:
                held.append(f"{d.where()} to {holder.text()}")
            elif d.blocking(list(ask.tolerations)):
                taints = ", ".join(taint_text(t) for t in d.blocking(list(ask.tolerations)))
                tainted.append(f"{d.where()} ({taints})")
        enough = (len(free) == len(devs)) if ask.count == 0 else len(free) >= ask.count
        if not free or not enough:
            if free:
                causes.append(
                    Cause(
                        "in-use",
                        f"Node {node} has {plural(len(free), 'free device')} that {ask.label} "
                        f"matches; it needs {need}.",
                    )
                )
            continue
        closed = scene.closed(node)
        if closed:
            causes.append(
                Cause(
                    "node-blocked",
                    f"Node {node} has {need} free for {ask.label} "
                    f"({listing([d.name for d in free])}), but {closed}.",
                )
            )
        else:
            return [
                Cause(
                    "could-fit",
                    f"Node {node} has {need} free for {ask.label} now "
                    f"({listing([d.name for d in free])}): the scheduler has not retried the pod "
                    "since, or something other than the device keeps it off (its message).",
                )
            ]
    if tainted:
        causes.append(
            Cause(
                "tainted",
                f"Devices {ask.label} matches are tainted, and it does not tolerate the taint: "
                f"{listing(tainted)} (devplugin taints a device unplugged, without its device "
                "node, or too hot; `kubectl get resourceslices -o yaml` shows since when).",
            )
        )
    if held:
        causes.append(
            Cause(
                "in-use",
                f"Every device {ask.label} matches is allocated: {listing(held, 6)}.",
            )
        )
    return causes


def _unregistered(scene: Scene, kind: str | None) -> list[Cause]:
    """Nodes the pod may go to whose labels say they have the kind, with no slice at all."""
    if kind is None:
        return []
    published = {s.get("spec", {}).get("nodeName") for s in scene.snap.slices}
    out = []
    for node in scene.selected:
        n = scene.snap.node(node)
        have = kind_count(n, kind) if n is not None else 0
        if have and node not in published:
            out.append(
                Cause(
                    "plugin-not-registered",
                    f"Node {node} has {plural(have, kind + ' device')} (label "
                    f"{qualified(kind)}.count) but publishes no ResourceSlice of driver {DRIVER}: "
                    f"{_dra_agent(scene, node)}.",
                )
            )
    return out


def _dra_agent(scene: Scene, node: str) -> str:
    runs = agent(scene.snap.pods, node)
    if runs.api is None:
        return "no edgefd devplugin runs there"
    if runs.api == "device-plugin":
        return "its devplugin serves the device plugin API, not DRA (--api dra)"
    return f"devplugin is not registered with the kubelet there ({runs.logs_hint(node)})"


def claim_of(
    pod: dict[str, Any], entry: dict[str, Any], snap: Snapshot
) -> tuple[str, dict[str, Any] | None]:
    """The name of the ResourceClaim a pod's `spec.resourceClaims` entry stands for, and the
    claim if it exists ('' when made from a template and not made yet)."""
    ns = meta(pod).get("namespace") or ""
    name = entry.get("resourceClaimName")
    if not name:
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            if s.get("name") == entry.get("name"):
                name = s.get("resourceClaimName")
    if not name:
        return "", None
    claim = next(
        (c for c in snap.claims if name_of(c) == name and meta(c).get("namespace") == ns), None
    )
    return str(name), claim
