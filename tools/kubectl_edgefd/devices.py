"""edgefd's DRA devices as the scheduler sees them, and which claim holds each.

A node's devices are the devices of its pool's slices of the newest generation (a pool being
rewritten may still have slices of the one before, which the scheduler ignores, as here).
A device is held when a ResourceClaim's `status.allocation` names it (driver, pool, device);
the pods using that claim are its `status.reservedFor`. A device's NoSchedule or NoExecute
taint keeps it from new claims that do not tolerate it (devplugin's
`edgefd.io/unhealthy=unplugged`, `=no-device-node`, `=overheating`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .podspec import BLOCKING, meta, ref, taint_text, tolerates
from .snapshot import DRIVER


@dataclass(frozen=True)
class Device:
    node: str
    pool: str
    name: str
    entry: dict[str, Any]  # the slice's device: name, attributes, taints

    @property
    def taints(self) -> list[dict[str, Any]]:
        return [t for t in self.entry.get("taints") or () if t.get("effect") in BLOCKING]

    def blocking(self, tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for t in self.taints if not tolerates(tolerations, t)]

    def attribute(self, name: str) -> str | None:
        value = (self.entry.get("attributes") or {}).get(name)
        if not isinstance(value, dict) or not value:
            return None
        return str(next(iter(value.values())))

    def where(self) -> str:
        return f"{self.name} on {self.node or 'pool ' + self.pool}"

    def as_json(self, holder: Holder | None = None) -> dict[str, Any]:
        return {
            "name": self.name,
            "node": self.node,
            "model": self.attribute("model"),
            "kind": self.attribute("kind"),
            "taints": [taint_text(t) for t in self.taints],
            "claim": holder.claim if holder else None,
            "pods": list(holder.pods) if holder else [],
        }


@dataclass(frozen=True)
class Holder:
    """The claim a device is allocated to, and the pods that use that claim."""

    claim: str
    pods: tuple[str, ...]

    def text(self) -> str:
        if self.pods:
            return f"pod {', '.join(self.pods)} (claim {self.claim})"
        return f"claim {self.claim} (no pod uses it yet)"


def devices(slices: list[dict[str, Any]], driver: str = DRIVER) -> list[Device]:
    """Every device of `driver` in the newest generation of each pool."""
    newest: dict[str, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == driver:
            pool = spec.get("pool") or {}
            name = str(pool.get("name") or "")
            newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or "")
        if spec.get("driver") != driver or int(pool.get("generation") or 0) != newest.get(name):
            continue
        for d in spec.get("devices") or ():
            out.append(Device(str(spec.get("nodeName") or ""), name, str(d.get("name")), d))
    return sorted(out, key=lambda d: (d.node, d.name))


def users(claim: dict[str, Any]) -> tuple[str, ...]:
    ns = meta(claim).get("namespace") or ""
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return tuple(f"{ns}/{r.get('name')}" for r in reserved if r.get("resource") == "pods")


def holders(claims: list[dict[str, Any]], driver: str = DRIVER) -> dict[tuple[str, str], Holder]:
    """(pool, device) -> the claim allocated that device of `driver`, and its pods."""
    out = {}
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or ():
            if r.get("driver") == driver:
                out[(str(r.get("pool")), str(r.get("device")))] = Holder(ref(c), users(c))
    return out
