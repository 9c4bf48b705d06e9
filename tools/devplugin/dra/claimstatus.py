"""ResourceClaim `status.devices` (KEP-4817): for each device of each claim prepared here,
what it is (`data`: port or PCI address, serial, IDs, state, its node in the container) and a
`Ready` condition that follows its health, so `kubectl get resourceclaim -o yaml` says where
the workload's Coral is and why it is not usable.

Written by server-side apply of the status subresource under our own field manager: the
entries are a map keyed by (driver, pool, device), so another driver's entries of the same
claim are never touched. Written only when what we would write differs from what was last
written or read: after a restart the claim is read once and nothing is written if it already
says the same. A condition's `lastTransitionTime` moves only when its status does.

One thread writes; the API client's rate limit bounds it and edgefd.kube's Retry backs off a
failing claim (the others are still written). The admission policy lets the driver write
only claims allocated on its own node (k8s/admission-policy.yaml).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import ApiNotFound
from edgefd.kube.retry import Retry

from .checkpoint import PreparedClaim
from .health import health_of
from .slices import DRIVER
from .table import Entry

log = logging.getLogger(__name__)

READY = "Ready"
FIELD_MANAGER = f"{DRIVER}-devplugin"
Key = tuple[str, str, str]  # claim UID, pool, device


class ClaimStatusApi(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...
    def apply_claim_status(
        self, namespace: str, name: str, devices: list[dict[str, Any]], manager: str
    ) -> dict[str, Any]: ...


def device_data(entry: Entry | None) -> dict[str, Any]:
    """`data` of one device: what a person or a tool needs to find it."""
    if entry is None:
        return {"state": "unknown"}
    dev = entry.device
    out: dict[str, Any] = {"bus": dev.bus}
    place_key = {"pci": "pciAddress", "platform": "platformDevice"}.get(dev.bus, "port")
    out[place_key] = dev.key.place
    vendor, _, product = dev.ids.partition(":")
    if vendor and vendor != "?":
        out["vendorID"] = vendor
    if product and product != "?":
        out["productID"] = product
    if dev.facts.serial:
        out["serial"] = dev.facts.serial
    out["model"] = dev.model
    if dev.state:
        out["usbState"] = dev.state
    out["state"] = "present" if dev.healthy else ("absent" if not dev.present else "unusable")
    paths = [entry.resource.container_path(dev, i, n) for i, n in enumerate(dev.devnodes)]
    if paths:
        out["devicePaths"] = paths
    return out


def _reason(entry: Entry | None) -> str:
    if entry is None:
        return "NotOnNode"
    dev = entry.device
    if dev.healthy:
        return "Healthy"
    return "Absent" if not dev.present else "Unusable"


def desired(claim: PreparedClaim, table: Mapping[str, Entry]) -> dict[Key, dict[str, Any]]:
    """The claim's entries as we would write them, less the conditions' transition times."""
    out = {}
    for d in claim.devices:
        entry = table.get(d.device)
        ok, message = health_of(entry.device) if entry else (False, "not in this node's pool")
        out[(claim.uid, d.pool, d.device)] = {
            "driver": DRIVER,
            "pool": d.pool,
            "device": d.device,
            "data": device_data(entry),
            "conditions": [
                {
                    "type": READY,
                    "status": "True" if ok else "False",
                    "reason": _reason(entry),
                    "message": message,
                }
            ],
        }
    return out


def _timeless(entry: dict[str, Any]) -> dict[str, Any]:
    conds = [
        {k: v for k, v in c.items() if k in ("type", "status", "reason", "message")}
        for c in entry.get("conditions") or ()
    ]
    return {
        "driver": entry.get("driver"),
        "pool": entry.get("pool"),
        "device": entry.get("device"),
        "data": entry.get("data"),
        "conditions": conds,
    }


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class ClaimStatusWriter:
    def __init__(
        self,
        api: ClaimStatusApi,
        clock: Callable[[], float] = time.time,
        on_write: Callable[[bool], None] = lambda ok: None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.on_write = on_write
        self._cond = threading.Condition()
        self._claims: dict[str, PreparedClaim] = {}
        self._want: dict[Key, dict[str, Any]] = {}
        self._written: dict[str, list[dict[str, Any]]] = {}  # claim UID -> as last written/read
        self._since: dict[Key, tuple[str, str]] = {}  # (status, lastTransitionTime)
        self._retry: dict[str, Retry] = {}
        self._not_before: dict[str, float] = {}
        self._stopping = False
        self.writes = 0
        self._thread = threading.Thread(target=self._loop, name="dra-claim-status", daemon=True)

    def start(self) -> ClaimStatusWriter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def set(self, claims: Mapping[str, PreparedClaim], table: Mapping[str, Entry]) -> None:
        """The claims prepared here and the devices as they are now; wakes the writer."""
        want: dict[Key, dict[str, Any]] = {}
        for claim in claims.values():
            want.update(desired(claim, table))
        with self._cond:
            self._claims = dict(claims)
            self._want = want
            for uid in set(self._written) - set(claims):
                self._forget(uid)
            self._cond.notify_all()

    def _forget(self, uid: str) -> None:
        self._written.pop(uid, None)
        self._retry.pop(uid, None)
        self._not_before.pop(uid, None)
        for key in [k for k in self._since if k[0] == uid]:
            del self._since[key]

    def _entries(self, uid: str) -> list[dict[str, Any]]:
        """The claim's entries to write, with transition times that move only on a change."""
        now = _rfc3339(self.clock())
        out = []
        for key in sorted(k for k in self._want if k[0] == uid):
            entry = dict(self._want[key])
            cond = dict(entry["conditions"][0])
            known = self._since.get(key)
            if known is None or known[0] != cond["status"]:
                known = (cond["status"], now)
                self._since[key] = known
            cond["lastTransitionTime"] = known[1]
            entry["conditions"] = [cond]
            out.append(entry)
        return out

    def pending(self) -> list[str]:
        """Claims whose status differs from what was last written (or is unknown)."""
        with self._cond:
            now = time.monotonic()
            return [
                uid
                for uid in sorted(self._claims)
                if self._not_before.get(uid, 0.0) <= now and self._differs(uid)
            ]

    def _differs(self, uid: str) -> bool:
        if uid not in self._written:
            return True
        want = [_timeless(e) for k, e in sorted(self._want.items()) if k[0] == uid]
        return [_timeless(e) for e in self._written[uid]] != want

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._due():
                    self._cond.wait(self._next_wake())
                if self._stopping:
                    return
            for uid in self.pending():
                self._sync(uid)

    def _due(self) -> bool:
        now = time.monotonic()
        return any(
            self._not_before.get(uid, 0.0) <= now and self._differs(uid) for uid in self._claims
        )

    def _next_wake(self) -> float | None:
        waits = [t - time.monotonic() for t in self._not_before.values()]
        return max(0.01, min(waits)) if waits else None

    def _sync(self, uid: str) -> None:
        with self._cond:
            claim = self._claims.get(uid)
            if claim is None:
                return
            retry = self._retry.setdefault(
                uid, Retry(f"status of claim {claim.namespace}/{claim.name}", logger=log)
            )
        try:
            if uid not in self._written:
                self._seed(claim)  # after a restart: what the claim already says
                if not self._differs_locked(uid):
                    return
            with self._cond:
                entries = self._entries(uid)
            got = self.api.apply_claim_status(claim.namespace, claim.name, entries, FIELD_MANAGER)
            self.writes += 1
            self.on_write(True)
        except ApiNotFound:
            with self._cond:
                self._written[uid] = []  # gone: nothing to write until it is prepared again
                self._want = {k: v for k, v in self._want.items() if k[0] != uid}
            return
        except EdgefdError as e:
            self.on_write(False)
            delay = retry.failed(e, type(e).__name__)
            with self._cond:
                self._not_before[uid] = time.monotonic() + delay
            return
        retry.succeeded()
        with self._cond:
            self._not_before.pop(uid, None)
            self._written[uid] = _ours(got) if got else entries

    def _differs_locked(self, uid: str) -> bool:
        with self._cond:
            return self._differs(uid)

    def _seed(self, claim: PreparedClaim) -> None:
        """Take what the claim says (our entries and their transition times) as written."""
        obj = self.api.get_claim(claim.namespace, claim.name)
        if (obj.get("metadata") or {}).get("uid") != claim.uid:
            raise ApiNotFound(f"claim {claim.namespace}/{claim.name} was replaced")
        ours = _ours(obj)
        with self._cond:
            self._written[claim.uid] = ours
            for e in ours:
                for c in e.get("conditions") or ():
                    if c.get("type") == READY and c.get("lastTransitionTime"):
                        key = (claim.uid, e.get("pool"), e.get("device"))
                        self._since[key] = (c.get("status"), c["lastTransitionTime"])


def _ours(claim: dict[str, Any]) -> list[dict[str, Any]]:
    devices = (claim.get("status") or {}).get("devices") or []
    return sorted(
        (d for d in devices if d.get("driver") == DRIVER),
        key=lambda d: (d.get("pool"), d.get("device")),
    )
