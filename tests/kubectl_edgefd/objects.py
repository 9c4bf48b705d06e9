"""Plain API objects for the unit tests of kubectl-edgefd's pure functions, in the shape the API
server returns them (the real-peer tests create the same shapes on the real one)."""

from __future__ import annotations

from typing import Any

from edgefd.kubectl_edgefd.known import known
from edgefd.kubectl_edgefd.snapshot import Snapshot

KNOWN = known()


def node(
    name: str,
    labels: dict[str, str] | None = None,
    resources: dict[str, tuple[int, int]] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    res = resources or {}
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "capacity": {k: str(c) for k, (c, _) in res.items()},
            "allocatable": {k: str(a) for k, (_, a) in res.items()},
        },
    }


def pod(
    name: str,
    ns: str = "default",
    node: str = "",
    limits: dict[str, str] | None = None,
    phase: str = "Pending",
    message: str | None = "0/1 nodes are available",
    **spec: Any,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app:1"}
    if limits:
        container["resources"] = {"limits": limits}
    status: dict[str, Any] = {"phase": phase}
    if message is not None and not node:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [container], **({"nodeName": node} if node else {}), **spec},
        "status": status,
    }


def device(name: str, taint: str | None = None, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "attributes": {
            k: {"int": v} if isinstance(v, int) else {"string": v} for k, v in attrs.items()
        },
    }
    if taint:
        out["taints"] = [{"key": "edgefd.io/unhealthy", "value": taint, "effect": "NoSchedule"}]
    return out


def coral(name: str = "coral-usb-2-1", **kw: Any) -> dict[str, Any]:
    return device(name, kind="edgetpu", model="coral-usb", bus="usb", port="2-1", **kw)


def slice_of(node: str, devices: list[dict[str, Any]], generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-edgefd.io-0"},
        "spec": {
            "driver": "edgefd.io",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(
    name: str,
    ns: str = "default",
    device_class: str = "edgetpu.edgefd.io",
    selectors: list[str] | None = None,
    allocated: list[tuple[str, str]] | None = None,  # (pool, device)
    users: list[str] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    status: dict[str, Any] = {}
    if allocated:
        results = [
            {"request": "tpu", "driver": "edgefd.io", "pool": p, "device": d} for p, d in allocated
        ]
        status["allocation"] = {"devices": {"results": results}}
    if users:
        status["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in users]
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "tpu", "exactly": exactly}]}},
        "status": status,
    }


def edgetpu_class() -> dict[str, Any]:
    return {
        "metadata": {"name": "edgetpu.edgefd.io"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": 'device.driver == "edgefd.io" && '
                        'device.attributes["edgefd.io"].kind == "edgetpu"'
                    }
                }
            ]
        },
    }


def snapshot(**kw: Any) -> Snapshot:
    kw.setdefault("classes", [edgetpu_class()])
    return Snapshot(**kw)


def claiming(claim_name: str, **kw: Any) -> dict[str, Any]:
    p = pod("waits", **kw)
    p["spec"]["resourceClaims"] = [{"name": "tpu", "resourceClaimName": claim_name}]
    return p
