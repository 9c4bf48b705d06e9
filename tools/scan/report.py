"""What a bus scan says to people and scripts: the --explain text (per device, which labels it
gave and why not) and the JSON inventory (everything read about every device)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgefd.bus.catalogue import AccelMatch
from edgefd.bus.enumerate import rehost
from edgefd.core.escape import printable
from edgefd.core.hostroot import HostRoot

from .derive import Evaluation, capability_count_label, describe_match


def explain_text(ev: Evaluation, host: HostRoot) -> str:
    """Human explanation: per device, which labels it gave and why the others were not."""
    cfg = ev.config
    out = [
        f"{ev.spec.producer}: host root {host.root}",
        f"  class whitelist: {', '.join(cfg.class_whitelist) or '(empty: nothing is labelled)'}",
        f"  label fields: {', '.join(cfg.label_fields)}",
        "",
    ]
    if not ev.reports:
        out.append(f"no {ev.spec.rules.bus} devices found")
    rejected_keys = {r.key for r in ev.rejected}
    for rep in ev.reports:
        out.append(f"{rep.key}  {rep.title}")
        for line in rep.lines:
            out.append(f"  {line}")
            if any(k in line for k in rejected_keys):
                out.append("    ^ label refused (see warnings): it is not written")
        m = ev.own_matches.get(rep.key.split(" ", 1)[1])
        if m is not None:
            out.append(
                f"  catalogue: {describe_match(m)} -> counts toward "
                f"{capability_count_label(m.accelerator.kind)} (whatever the class whitelist)"
            )
        out.append("")
    out.append("capabilities (all buses):")
    if not ev.capabilities:
        out.append("  no catalogue accelerator found")
    kinds = sorted({k.split("/", 1)[1].rsplit(".", 1)[0] for k in ev.capabilities})
    allm = [*ev.own_matches.values(), *ev.other_matches]
    for kind in kinds:
        who = ", ".join(
            f"{m.bus} {m.device} {describe_match(m)}" for m in allm if m.accelerator.kind == kind
        )
        count = capability_count_label(kind)
        present = count.removesuffix(".count") + ".present"
        version = ev.capabilities.get(count.removesuffix(".count") + ".driver-version")
        said = f", .driver-version={version}" if version else ""
        out.append(f"  {present}=true, .count={ev.capabilities[count]}{said}: {who}")
    if ev.warnings:
        out.append("")
        out.append("warnings:")
        out.extend(f"  {rehost(host, w)}" for w in ev.warnings)
    out.append("")
    out.append(f"labels ({len(ev.labels)}):")
    out.extend(f"  {k}={ev.labels[k]}" for k in sorted(ev.labels))
    # device strings (names, descriptors, sysfs paths) are chosen by the device: escaped, so
    # none can forge a line of this report or break the write
    return "\n".join(printable(line) for line in out) + "\n"


def inventory(ev: Evaluation, host: HostRoot) -> dict[str, Any]:
    """The JSON inventory: every device with everything read about it, and the labels."""
    devices = []
    for d in ev.devices:
        devices.append(ev.spec.inventory(d, ev.own_matches.get(d.key.place)))
    return {
        "source": ev.spec.rules.bus,
        "producer": ev.spec.producer,
        "host_root": str(host.root),
        "config": {
            "deviceClassWhitelist": list(ev.config.class_whitelist),
            "deviceLabelFields": list(ev.config.label_fields),
        },
        "devices": devices,
        "capabilities": _capability_json([*ev.own_matches.values(), *ev.other_matches]),
        "labels": dict(sorted(ev.labels.items())),
        "warnings": [rehost(host, w) for w in ev.warnings],
    }


def _capability_json(matches: Sequence[AccelMatch]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for m in matches:
        out.setdefault(m.accelerator.kind, []).append(
            {"bus": m.bus, "device": m.device, "accelerator": m.accelerator.id, "state": m.state}
        )
    return dict(sorted(out.items()))


def accelerator_json(m: AccelMatch | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "id": m.accelerator.id,
        "kind": m.accelerator.kind,
        "name": m.accelerator.name,
        "state": m.state,
        "resource": m.accelerator.resource,
    }
