"""What the kubelet plugin has prepared, on disk, so that a plugin restart (a rolling update,
a crash) keeps answering for the claims of running pods: Prepare stays idempotent (the same
CDI IDs again), Unprepare still knows what to remove, a clean shutdown knows whether claims
are still prepared, and the CDI specs and device metadata of prepared claims are kept current
after a restart (where a claim's metadata appears in its containers was decided at Prepare,
from the claim's annotations, and is read here rather than asked of the API server again).

One JSON file beside the plugin's socket (`<kubelet-dir>/plugins/edgefd.io/checkpoint.json`),
replaced atomically on every change. An unreadable file is moved aside (`.corrupt`) and the
plugin starts empty: the kubelet's own checkpoint still lists the claims, and Unprepare
removes a claim's spec by its UID whatever this file says. It is read by the one bounded,
non-blocking reader (edgefd.core.regular): a FIFO, a symlink or a huge file in its place is
"unreadable", never a start-up that hangs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgefd.core.publish import write_atomic
from edgefd.core.regular import Refused, read_regular

log = logging.getLogger(__name__)

VERSION = 1
FILE = "checkpoint.json"
MAX_BYTES = 16 << 20  # thousands of claims; a FIFO, a link or /dev/zero here is never read


@dataclass(frozen=True)
class PreparedDevice:
    request: str  # the claim's request the device was allocated for
    pool: str
    device: str  # name in the ResourceSlice
    device_id: str  # the same name (kept for checkpoints written before names were one)
    resource: str  # the device plugin resource it belongs to
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    # where its device metadata appears under the container's metadata root
    # (`resourceclaims/<name>`, dra/metadata.py); "" for a claim prepared by a release that
    # wrote none: its containers were made without, and it stays without
    metadata_dir: str = ""


def _claim(obj: dict[str, Any]) -> PreparedClaim:
    devices = tuple(
        PreparedDevice(
            request=str(d["request"]),
            pool=str(d["pool"]),
            device=str(d["device"]),
            device_id=str(d["device_id"]),
            resource=str(d["resource"]),
            cdi_ids=tuple(str(c) for c in d["cdi_ids"]),
        )
        for d in obj["devices"]
    )
    return PreparedClaim(
        str(obj["uid"]),
        str(obj["namespace"]),
        str(obj["name"]),
        devices,
        str(obj.get("metadata_dir") or ""),
    )


class Checkpoint:
    """The prepared claims by UID. Not thread-safe: the caller serialises changes."""

    def __init__(self, directory: str | os.PathLike[str], node: str) -> None:
        self.path = Path(directory) / FILE
        self.node = node
        self._claims: dict[str, PreparedClaim] = {}

    def load(self) -> dict[str, PreparedClaim]:
        try:
            data = json.loads(read_regular(self.path, MAX_BYTES)[0])
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            claims = {c.uid: c for c in (_claim(o) for o in data.get("claims", []))}
            if claims and data.get("node") != self.node:
                log.warning(
                    "%s was written for node %s, this is %s", self.path, data.get("node"), self.node
                )
        except FileNotFoundError:
            claims = {}
        except (
            Refused,
            OSError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            RecursionError,
        ) as e:
            aside = self.path.with_name(FILE + ".corrupt")
            log.error("%s is unreadable (%s); moved to %s, starting empty", self.path, e, aside)
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            claims = {}
        self._claims = claims
        return dict(claims)

    @property
    def claims(self) -> dict[str, PreparedClaim]:
        return dict(self._claims)

    def get(self, uid: str) -> PreparedClaim | None:
        return self._claims.get(uid)

    def put(self, claim: PreparedClaim) -> None:
        self._claims[claim.uid] = claim
        self._save()

    def remove(self, uid: str) -> bool:
        if self._claims.pop(uid, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        body = {
            "version": VERSION,
            "node": self.node,
            "claims": [asdict(c) for _, c in sorted(self._claims.items())],
        }
        data = (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()
        write_atomic(self.path, data, own=True)  # a link or FIFO put there later: replaced
