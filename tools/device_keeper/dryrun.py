"""`device-keeper serve --dry-run`: what a keeper starting now would grant and revoke, from
devplugin's decisions as they are, the kubelet's answer and the runtime's containers: each
device devplugin hands out is caught up (moves.catch_up) by a keeper that changes nothing
(`Keeper(dry_run=True)`: the cgroup writes are planned, not made; no container path, no
ledger). Printed, then it exits: a command to run by hand on a node, not a service."""

from __future__ import annotations

from typing import Any

from edgefd.core.errors import BadInput
from edgefd.core.output import emit_json, write_stdout
from edgefd.inventory.decisions import BadDecisions, read

from .moves import catch_up
from .service import Keeper


def show(path: str, keeper: Keeper, output: str) -> int:
    try:
        decisions = read(path)
    except BadDecisions as e:
        raise BadInput(f"{path}: {e}") from None
    if decisions is None:
        raise BadInput(f"{path}: no decisions there (is devplugin running with --decisions?)")
    keeper.pods.list()  # unreachable: said (exit 5) before anything is planned
    docs: list[dict[str, Any]] = []
    lines: list[str] = []
    for h in decisions.handouts:
        if not h.present:
            lines.append(f"{h.device} ({h.describe()}): absent, nothing to do")
            docs.append({"device": h.device, "present": False, "containers": []})
            continue
        for move in catch_up(h, decisions):
            done = keeper.handle(move)
            docs.append(
                {
                    "device": h.device,
                    "present": True,
                    "number": str(move.new),
                    "path": move.path,
                    "containers": [d.as_json() for d in done],
                }
            )
            head = f"{h.device} ({h.describe()}) {move.new} at {move.path}"
            if not done:
                lines.append(f"{head}: no running container holds it")
            for d in done:
                lines.append(f"{head}: {d.holder} ({d.container[:12]}): {_said(d)}")
    if output == "json":
        emit_json(docs)
    else:
        write_stdout("".join(f"{line}\n" for line in lines).encode())
    return 0


def _said(d: Any) -> str:
    if d.refused:
        return f"refused: {d.refused}"
    if d.node == "current":
        return "given the device's node when created: nothing to do"
    revoked = ", ".join(d.revoked) or "nothing"
    return (
        f"would allow {d.allowed}, would revoke {revoked} ({', '.join(d.cgroups) or 'no cgroup'})"
    )
