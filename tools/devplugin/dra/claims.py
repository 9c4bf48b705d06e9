"""Preparing and unpreparing claims: from a ResourceClaim's allocation to a CDI spec, and
back. What NodePrepareResources and NodeUnprepareResources do, without the gRPC.

Prepare reads the claim from the API server (the kubelet sends only its namespace, name and
UID), takes the results for this driver and this node's pool, checks every device is here and
usable, writes the claim's CDI spec (`edgefd.io-claim_<claim UID>.json`, devices
`edgefd.io/claim=<UID>-<device name>`, each device once however often the claim lists it) and
records the claim in the checkpoint. It is idempotent: a claim already prepared gets the same
answer without asking the API server. Unprepare removes the spec and the record; an unknown
claim is already unprepared.

Every device this driver publishes is exclusive, and the checkpoint knows which claim holds
each: a claim allocated a device still prepared for another claim is refused (its own entry's
error, which the kubelet retries) until that claim is unprepared. The kubelet does ask for
that: after a pod is force-deleted it prepares the device for the next pod's claim about two
seconds before it unprepares the old one (kubernetes#141471), and two containers would hold
one device.

The UID the kubelet sends names a file in a CDI directory the device plugin may share
(`--api both`), so both calls refuse anything but a Kubernetes UID (a lower-case RFC 4122
UUID, what the API server assigns): `coral-usb` must never name `edgefd.io-coral-usb.json`.
Claim specs have had two names: `edgefd.io-<UID>.json` (the first DRA releases) and
`edgefd.io-claim_<UID>.json` (since); the start-up sweep removes the old ones (their claims'
specs are written under the new name first) and orphaned new ones. The CDI directory is the
host's and shared, so a file under either name may be anything: the sweep looks with lstat
and never opens what is not a regular file (opening a FIFO or a device node can block, or
act: a watchdog starts on open), nor removes it; it says so, and start-up goes on.

A prepared claim's spec is rewritten whenever one of its devices moves (cdi.py says why),
including after a plugin restart (the checkpoint says which claims).

Each request of a claim also gets its device metadata file (metadata.py, KEP-5304), written
before the spec that binds it into the container (a container made in between would fail on
a missing file) and kept current with the spec; where it appears in the container is decided
at Prepare from the claim and kept in the checkpoint. Unprepare and the start-up sweep remove
a claim's metadata with its spec.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edgefd.core.errors import EdgefdError
from edgefd.core.regular import Refused, kind_of, read_regular

from .. import cdi
from ..links import LinkLayout
from . import metadata
from .checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from .metadata import MetadataFiles
from .slices import DRIVER
from .table import Entry

log = logging.getLogger(__name__)

_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def checked_uid(uid: str) -> str:
    """`uid` if it is a Kubernetes UID; PrepareError (that claim's error) otherwise."""
    if not _UID.match(uid):
        shown = uid[:64].encode("unicode_escape").decode()
        raise PrepareError(f"claim UID {shown!r} is not a Kubernetes UID; refused")
    return uid


# every name a claim's spec has had, newest first: (prefix before the UID, current)
SPEC_NAMES = ((f"{cdi.VENDOR}-{cdi.CLAIM_SPEC_INFIX}", True), (f"{cdi.VENDOR}-", False))


def spec_uid(name: str) -> tuple[str, bool] | None:
    """(UID, whether the name is the current one) of a file named as a claim's spec by any
    release; None for any other name."""
    for prefix, current in SPEC_NAMES:
        uid = name.removeprefix(prefix).removesuffix(".json")
        if name.startswith(prefix) and name.endswith(".json") and _UID.match(uid):
            return uid, current
    return None


def _kind(path: Path) -> Any:
    """The `kind` of a CDI spec file, or None (not read: anything but a small regular file)."""
    try:
        return json.loads(read_regular(path, cdi.MAX_SPEC_BYTES)[0]).get("kind")
    except (OSError, Refused, ValueError, AttributeError, RecursionError):
        return None


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


class PrepareError(EdgefdError):
    """One claim cannot be prepared now; the kubelet retries."""


class StillPrepared(PrepareError):
    """The claim's device is still prepared for another claim (retried until unprepared)."""


class Preparer:
    def __init__(
        self,
        node: str,
        cdi_dir: str,
        links: LinkLayout,
        checkpoint: Checkpoint,
        claims: ClaimSource | None,
        metadata_files: MetadataFiles | None = None,  # None: no device metadata written
    ) -> None:
        self.node = node
        self.cdi_dir = cdi_dir
        self.links = links
        self.checkpoint = checkpoint
        self.claims = claims
        self.metadata = metadata_files
        self._lock = threading.Lock()
        self._table: dict[str, Entry] = {}

    # -- the device table, and keeping prepared claims' specs current

    def update(self, table: Mapping[str, Entry]) -> None:
        with self._lock:
            self._table = dict(table)
            for claim in self.checkpoint.claims.values():
                try:
                    self._write_spec(claim)
                except EdgefdError as e:
                    log.error("claim %s/%s: %s", claim.namespace, claim.name, e)

    def spec_file(self, uid: str) -> Path:
        return cdi.claim_spec_path(self.cdi_dir, checked_uid(uid))

    def _write_spec(self, claim: PreparedClaim) -> None:
        files = self._write_metadata(claim)
        entries = []
        pairs = []
        for name in dict.fromkeys(d.device for d in claim.devices):  # each device once
            e = self._table.get(name)
            if e is None:
                log.warning("claim %s: device %s is no longer known", claim.uid, name)
                continue
            entry = cdi.device_entry(
                cdi.claim_device_name(claim.uid, e.device.name),
                e.device,
                e.resource,
                self.links,
                files.get(name, ()),
            )
            if entry is not None:
                entries.append(entry)
                pairs.append((e.device, e.resource))
        if entries:
            cdi.write(self.spec_file(claim.uid), cdi.spec(cdi.CLAIM_KIND, entries, cdi.env(pairs)))

    def _write_metadata(self, claim: PreparedClaim) -> dict[str, list[tuple[str, str]]]:
        """Write each request's metadata file; device name -> the (host, container) files
        its CDI entry binds. A device no longer known is left out, as from the spec."""
        files: dict[str, list[tuple[str, str]]] = {}
        if self.metadata is None or not claim.metadata_dir:
            return files
        pools = {d.device: d.pool for d in claim.devices}
        try:
            by_request = metadata.requests(claim)
        except ValueError as e:  # a checkpoint's record that Prepare would have refused
            log.error("claim %s/%s: %s; no device metadata", claim.namespace, claim.name, e)
            return files
        for request, names in by_request.items():
            known = {n: self._table[n] for n in names if n in self._table}
            devices = [
                metadata.device(pools[n], e.device, e.resource, e.attributes)
                for n, e in known.items()
            ]
            host = self.metadata.path(claim.uid, request)
            try:
                self.metadata.write(claim, request, devices)
            except EdgefdError as e:
                if not host.is_file():  # nothing to bind: the claim is not prepared (retried)
                    raise
                # the spec still follows the device; the file stays as it was
                log.error("claim %s/%s: %s", claim.namespace, claim.name, e)
            inside = metadata.container_dir(claim.metadata_dir, request)
            for n in known:
                files.setdefault(n, []).append((str(host.parent), inside))
        return files

    def sweep(self) -> list[Path]:
        """Remove claim specs and metadata the checkpoint does not know (a crash between
        writing them and the checkpoint, a claim unprepared while no plugin ran), and every
        spec under an old name. Only regular files of our claim kind are removed; anything
        else under such a name is left alone, with a warning; nothing here stops start-up."""
        removed = []
        with self._lock:
            known = set(self.checkpoint.claims)
            try:
                names = sorted(os.listdir(self.cdi_dir))
            except FileNotFoundError:
                names = []
            except OSError as e:
                log.warning("%s cannot be listed (%s): claim specs not swept", self.cdi_dir, e)
                names = []
            for name in names:
                found = spec_uid(name)
                if found is None or (found[1] and found[0] in known):
                    continue
                path = Path(self.cdi_dir) / name
                if self._sweep_one(path):
                    removed.append(path)
            if self.metadata is not None:
                for name in self.metadata.claims():
                    if _UID.match(name) and name not in known and self.metadata.remove(name):
                        removed.append(self.metadata.directory / name)
        for path in removed:
            log.info("removed %s: no prepared claim has it", path)
        return removed

    @staticmethod
    def _sweep_one(path: Path) -> bool:
        """Remove one claim-named file if it is a regular file of our claim kind."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("%s: %s; left alone", path, e.strerror or e)
            return False
        if not stat.S_ISREG(mode):
            log.warning(
                "%s: %s, not a regular file, under a claim spec's name; left alone (not opened)",
                path,
                kind_of(mode),
            )
            return False
        if _kind(path) != cdi.CLAIM_KIND:
            return False
        try:
            return cdi.remove(path)
        except OSError as e:
            log.warning("%s cannot be removed (%s); left alone", path, e.strerror or e)
            return False

    # -- Prepare / Unprepare

    def prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        """The devices of one claim, prepared; PrepareError says why not (retried)."""
        checked_uid(ref.uid)
        with self._lock:
            done = self.checkpoint.get(ref.uid)
            if done is not None:
                self._write_spec(done)
                return done.devices
        if self.claims is None:
            raise PrepareError("no API access to read the claim (--kubeconfig / in-cluster)")
        claim = self.claims.get_claim(ref.namespace, ref.name)
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise PrepareError(
                f"claim {ref.namespace}/{ref.name} has UID {uid}, the kubelet asked for {ref.uid}"
            )
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        )
        if results is None:
            raise PrepareError(f"claim {ref.namespace}/{ref.name} is not allocated")
        mine = [r for r in results if r.get("driver") == DRIVER]
        try:
            where = metadata.claim_dir(claim)
            for r in mine:
                metadata.base_request(str(r.get("request", "")))
        except ValueError as e:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: {e}") from None
        with self._lock:
            devices = []
            for r in mine:
                devices.append(self._device(ref, r))
            self._refuse_held(ref, devices)
            prepared = PreparedClaim(ref.uid, ref.namespace, ref.name, tuple(devices), where)
            self._write_spec(prepared)
            self.checkpoint.put(prepared)
        log.info(
            "prepared claim %s/%s: %s",
            ref.namespace,
            ref.name,
            ", ".join(d.device for d in prepared.devices) or "no device of ours",
        )
        return prepared.devices

    def _device(self, ref: ClaimRef, result: dict[str, Any]) -> PreparedDevice:
        pool, name = result.get("pool"), result.get("device")
        if pool != self.node:
            raise PrepareError(f"device {pool}/{name} is in another node's pool, not {self.node}'s")
        entry = self._table.get(str(name))
        if entry is None:
            raise PrepareError(f"device {name} is not on node {self.node}")
        dev = entry.device
        if not dev.healthy:
            why = dev.reason
            raise PrepareError(f"device {name} cannot be used now: {why}")
        cdi_id = cdi.qualified(cdi.CLAIM_KIND, cdi.claim_device_name(ref.uid, dev.name))
        return PreparedDevice(
            request=str(result.get("request", "")),
            pool=str(pool),
            device=str(name),
            device_id=dev.name,
            resource=entry.resource.name,
            cdi_ids=(cdi_id,),
        )

    def _refuse_held(self, ref: ClaimRef, devices: list[PreparedDevice]) -> None:
        """StillPrepared if another prepared claim holds one of `devices` (under the lock)."""
        wanted = {(d.pool, d.device) for d in devices}
        for other in self.checkpoint.claims.values():
            if other.uid == ref.uid:
                continue
            held = sorted(d.device for d in other.devices if (d.pool, d.device) in wanted)
            if held:
                raise StillPrepared(
                    f"device {held[0]} is still prepared for claim {other.namespace}/"
                    f"{other.name} (UID {other.uid}); retried once that claim is unprepared"
                )

    def unprepare(self, ref: ClaimRef) -> None:
        checked_uid(ref.uid)
        with self._lock:
            removed = cdi.remove(self.spec_file(ref.uid))
            if self.metadata is not None:
                removed = self.metadata.remove(ref.uid) or removed
            known = self.checkpoint.remove(ref.uid)
        if removed or known:
            log.info("unprepared claim %s/%s", ref.namespace, ref.name)

    def prepared_claims(self) -> dict[str, PreparedClaim]:
        """The claims prepared here, by UID (a copy)."""
        with self._lock:
            return dict(self.checkpoint.claims)

    @property
    def prepared(self) -> int:
        with self._lock:
            return len(self.checkpoint.claims)
