"""Reading back the slices the API server holds: what pool and generation one is of, and its
spec minus what the server adds, so the publisher compares like with like and writes only
when the content differs."""

from __future__ import annotations

from typing import Any

from .slices import without_generation


def pool(obj: dict[str, Any]) -> str:
    return str(((obj.get("spec") or {}).get("pool") or {}).get("name") or "")


def generation(obj: dict[str, Any]) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def normalise(spec: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """`spec` as read back, minus what the server adds: a taint's timeAdded where we set none."""
    out = without_generation(spec)
    wanted = {d.get("name"): d for d in like.get("devices") or ()}
    devices = []
    for d in out.get("devices") or ():
        want = wanted.get(d.get("name")) or {}
        want_taints = want.get("taints") or []
        taints = []
        for i, t in enumerate(d.get("taints") or ()):
            w = want_taints[i] if i < len(want_taints) else {}
            taints.append(
                t if "timeAdded" in w else {k: v for k, v in t.items() if k != "timeAdded"}
            )
        devices.append(dict(d, taints=taints) if taints else d)
    if devices:
        out["devices"] = devices
    return out


def matches(
    spec: dict[str, Any], obj: dict[str, Any] | None, gen: int, owner: list[dict[str, Any]]
) -> bool:
    """Whether the slice read back holds `spec` at generation `gen`, owned by `owner` (when
    the owner is known: while the Node cannot be read, any owner will do)."""
    if obj is None:
        return False
    if owner and (obj.get("metadata") or {}).get("ownerReferences") != owner:
        return False
    got = obj.get("spec") or {}
    if (got.get("pool") or {}).get("generation") != gen:
        return False
    return normalise(got, spec) == spec
