"""What a pod asks of a node, read from its spec as the scheduler reads it: the extended
resources it requests, which nodes its nodeSelector and required node affinity accept, and
which taints of a node it does not tolerate. Pure functions of the objects' JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgefd.inventory.naming import DOMAIN

RESOURCE_PREFIX = f"{DOMAIN}/"
TERMINAL = ("Succeeded", "Failed")
BLOCKING = ("NoSchedule", "NoExecute")
# a cordoned node: the scheduler refuses it unless the pod tolerates this taint
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: dict[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def ref(obj: dict[str, Any]) -> str:
    """`namespace/name` (a pod, a claim)."""
    return f"{meta(obj).get('namespace') or ''}/{name_of(obj)}"


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta(obj).get("labels") or {}).items()}


def count(value: Any) -> int:
    """A quantity of an extended resource (a whole number; `1`, `2`, `1k`); 0 when unreadable."""
    m = _QUANTITY.match(str(value).strip())
    if not m or m.group(2) not in _SUFFIX:
        return 0
    try:
        n = float(m.group(1)) * _SUFFIX[m.group(2)]
    except ValueError:
        return 0
    return math.ceil(n) if math.isfinite(n) else 0


def active(pod: dict[str, Any]) -> bool:
    """Holds what it was given: any pod not Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL


def node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _container_requests(c: dict[str, Any]) -> dict[str, int]:
    res = c.get("resources") or {}
    out = {str(k): count(v) for k, v in (res.get("limits") or {}).items()}
    out.update({str(k): count(v) for k, v in (res.get("requests") or {}).items()})
    return out


def requests(pod: dict[str, Any]) -> dict[str, int]:
    """The pod's effective request of each resource: its containers and native sidecars
    together, or its largest ordinary init container (with the sidecars started before it)
    when that asks more, as the scheduler counts."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        own = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                sidecars[k] = sidecars.get(k, 0) + v
            continue
        for k, v in own.items():
            peak[k] = max(peak.get(k, 0), v + sidecars.get(k, 0))
    for c in spec.get("containers") or ():
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, 0) + v
    for k, v in sidecars.items():
        total[k] = total.get(k, 0) + v
    return {k: max(total.get(k, 0), peak.get(k, 0)) for k in set(total) | set(peak)}


def edgefd_requests(pod: dict[str, Any]) -> dict[str, int]:
    """The edgefd.io/* extended resources the pod asks for (a positive count each)."""
    return {k: v for k, v in requests(pod).items() if k.startswith(RESOURCE_PREFIX) and v > 0}


# --------------------------------------------------------------------------- node selection


@dataclass(frozen=True)
class Requirement:
    """One condition on a node: a label `key` (or the field `metadata.name` when `field`)
    with an operator (In, NotIn, Exists, DoesNotExist, Gt, Lt) and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def holds(self, node: dict[str, Any]) -> bool:
        have = {"metadata.name": name_of(node)} if self.field else labels(node)
        value = have.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and self.values:
            try:
                a, b = int(value), int(self.values[0])
            except ValueError:
                return False
            return a > b if op == "Gt" else a < b
        return False

    def text(self) -> str:
        what = "field " + self.key if self.field else self.key
        if self.operator == "In" and len(self.values) == 1:
            return f"{what}={self.values[0]}"
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{what} {'exists' if self.operator == 'Exists' else 'absent'}"
        return f"{what} {self.operator} ({', '.join(self.values)})"


def selector_terms(pod: dict[str, Any]) -> list[list[Requirement]]:
    """The pod's node requirements as OR-ed terms of AND-ed requirements: its nodeSelector
    ANDed into each term of its required node affinity. [[]]: any node."""
    spec = pod.get("spec") or {}
    base = [
        Requirement(str(k), "In", (str(v),)) for k, v in (spec.get("nodeSelector") or {}).items()
    ]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return [base]
    out = []
    for term in terms:
        reqs = list(base)
        for e in term.get("matchExpressions") or ():
            values = tuple(str(v) for v in e.get("values") or ())
            reqs.append(Requirement(str(e.get("key")), str(e.get("operator")), values))
        for e in term.get("matchFields") or ():
            values = tuple(str(v) for v in e.get("values") or ())
            reqs.append(Requirement(str(e.get("key")), str(e.get("operator")), values, True))
        out.append(reqs)
    return out


def selects(terms: list[list[Requirement]], node: dict[str, Any]) -> bool:
    return any(all(r.holds(node) for r in term) for term in terms)


# --------------------------------------------------------------------------- taints


def tolerates(tolerations: Iterable[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether any toleration tolerates the taint (a pod's, or a DRA request's for a device
    taint: the same rules)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def blocking_taints(pod: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints (cordon included) that keep the pod off it."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or () if t.get("effect") in BLOCKING]
    if spec.get("unschedulable"):
        taints.append(UNSCHEDULABLE)
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    return [t for t in taints if not tolerates(tolerations, t)]


def taint_text(t: dict[str, Any]) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{value}:{t.get('effect')}"
