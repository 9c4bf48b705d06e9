"""Device metadata in the container (KEP-5304): each prepared request of a claim gets a JSON
file that a container using the claim reads to learn which device it was given, where, and
what the device is, without an API token or a controller of its own.

The format, as confirmed (facts only; no text taken over):
* the in-container path, from k8s.io/dynamic-resource-allocation `api/metadata` (types.go,
  helpers.go, doc.go) and the Kubernetes 1.36 docs' "DRA device metadata" section:
  `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`
  for a claim the pod names, `resourceclaimtemplates/<pod's claim name>/...` for one made from
  a template (the claim's `resource.kubernetes.io/pod-claim-name` annotation says which, as
  the library's kubeletplugin/metadata.go reads it). `<request>` is the top-level request:
  a prioritized-list subrequest (`dev/coral`) is dropped from the path, kept in the content.
  An earlier revision of that library wrote `/var/run/dra-device-attributes/<claim>/...`;
  the layout above is the one Kubernetes 1.36 shipped.
* the content, from `api/metadata/v1alpha1/types.go` and the v1.36.0 compatibility fixture
  (`api/metadata/testdata/v1.36.0/metadata.json`): `apiVersion:
  metadata.resource.k8s.io/v1alpha1`, `kind: DeviceMetadata`, `metadata` (the claim's name,
  namespace, uid and a `generation`), `podClaimName` for a template's claim, `requests[]` of
  `{name, devices[]}`, each device `{driver, pool, name, attributes}` with attributes typed as
  in a ResourceSlice (`{"string": ...}`, `{"int": ...}`, `{"version": ...}`). A file is a
  stream of such objects, one per API version, newest first; v1alpha1 is the only version a
  released Kubernetes (1.36) reads, so it is the one written (a v1beta1 exists only in the
  library's development branch). `generation` must rise with every change of a file.

The attributes are the device's in this node's ResourceSlice, the very dict published there
(kind, model, bus, port or PCI address, serial when it has one, driver and device versions,
state), so what a claim selected on and what the container reads cannot disagree; the device
name is edgefd's one name. Added: `devicePath`, where the container finds the device's node
(`devicePath1`, ... for further nodes), as the claim's CDI spec puts it (`Resource.
container_path`, the one rule), and for a USB device `busPath`, its node under the read-only
`/dev/bus/usb` the container also gets (what libusb opens), while the device is usable.

Where the host file lives: `<kubelet-dir>/plugins/edgefd.io/metadata/<claim UID>/<request>/
edgefd.io-metadata.json`, in the driver's own directory, which devplugin has mounted at the
host's path (so the CDI spec's `hostPath` is right on the host, whichever kubelet root a
distribution has: the directory is derived from `--kubelet-dir`) and may write despite its
read-only root file system. The claim UID (checked by claims.py) and the request name (a DNS
label, checked here) are the only path parts taken from outside.

Rewritten atomically (edgefd.core.publish.write_atomic), only when the content changes, with
the generation raised: a reader opening the file never sees half of one. The CDI spec binds
the request's *directory* (a bind of the file would hold the inode it was given, so a running
container would keep the document of its creation): the rename reaches a running container
too, which, with device-keeper, keeps its device at the same `devicePath` across a
re-enumeration and reads the new `busPath`, `state` and `productID` here. The file goes when
the claim is unprepared, and the start-up sweep removes those of claims no longer prepared.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgefd.core.errors import OutputError
from edgefd.core.publish import write_atomic
from edgefd.core.regular import Refused, read_regular
from edgefd.devplugin.resources import Resource
from edgefd.inventory.device import Device

from .checkpoint import PreparedClaim
from .slices import DRIVER

log = logging.getLogger(__name__)

API_VERSION = "metadata.resource.k8s.io/v1alpha1"
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR = "resourceclaims"
TEMPLATES_SUBDIR = "resourceclaimtemplates"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FILE_NAME = f"{DRIVER}-metadata.json"
HOST_SUBDIR = "metadata"  # under the driver's plugin directory
MAX_BYTES = 1 << 20  # what is read back of a file (its generation); ours are a few KiB
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_SUBDOMAIN_PART = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


def _label(what: str, value: str) -> str:
    if not _LABEL.match(value):
        raise ValueError(f"{what} {value[:64]!r} is not a DNS label")
    return value


def _subdomain(what: str, value: str) -> str:
    parts = value.split(".")
    if len(value) > 253 or not all(_SUBDOMAIN_PART.match(p) for p in parts):
        raise ValueError(f"{what} {value[:64]!r} is not a DNS subdomain")
    return value


def claim_dir(claim: Mapping[str, Any]) -> str:
    """The claim's directory under CONTAINER_DIR, from its API object: the pod's name for a
    template's claim (its annotation), the claim's own name otherwise. ValueError for a name
    that is no Kubernetes name (the API server never returns one)."""
    meta = claim.get("metadata") or {}
    pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_ANNOTATION)
    if pod_claim:
        return f"{TEMPLATES_SUBDIR}/{_label('pod claim name', str(pod_claim))}"
    return f"{CLAIMS_SUBDIR}/{_subdomain('claim name', str(meta.get('name', '')))}"


def pod_claim_name(directory: str) -> str | None:
    """The pod's name for the claim, for a template's claim (as `claim_dir` made it)."""
    sub, _, name = directory.partition("/")
    return name if sub == TEMPLATES_SUBDIR else None


def base_request(request: str) -> str:
    """`dev` of `dev` or `dev/coral` (a prioritized list's choice): the path's request."""
    return _label("request", request.partition("/")[0])


def container_dir(directory: str, request: str) -> str:
    """Where the request's file appears in the container: the directory the claim's CDI spec
    binds (the file's, not the file: a rename in it reaches a running container)."""
    return f"{CONTAINER_DIR}/{directory}/{base_request(request)}"


def device_attributes(
    dev: Device, res: Resource, published: Mapping[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The slice's attributes of the device, with where the container finds its nodes."""
    attrs = dict(published)
    for n, node in enumerate(dev.devnodes):
        attrs["devicePath" if n == 0 else f"devicePath{n}"] = {
            "string": res.container_path(dev, n, node)
        }
    if dev.healthy and res.bus_mount(dev) and dev.devnodes:
        attrs["busPath"] = {"string": dev.devnodes[0]}
    return {k: attrs[k] for k in sorted(attrs)}


def device(pool: str, dev: Device, res: Resource, published: Mapping[str, Any]) -> dict[str, Any]:
    """One device of a request, as the document lists it."""
    return {
        "driver": DRIVER,
        "pool": pool,
        "name": dev.name,
        "attributes": device_attributes(dev, res, published),
    }


def document(
    claim: PreparedClaim, request: str, devices: Sequence[dict[str, Any]], generation: int
) -> dict[str, Any]:
    """The DeviceMetadata of one request (`request` as allocated: a subrequest's full name)."""
    meta = {
        "name": claim.name,
        "namespace": claim.namespace,
        "uid": claim.uid,
        "generation": generation,
    }
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
    pod_claim = pod_claim_name(claim.metadata_dir)
    if pod_claim is not None:
        doc["podClaimName"] = pod_claim
    doc["requests"] = [{"name": request, "devices": list(devices)}]
    return doc


def render(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def _first_object(data: bytes) -> dict[str, Any] | None:
    """The first document of a file's stream; None if there is none to read."""
    try:
        obj, _ = json.JSONDecoder().raw_decode(data.decode())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _generation(doc: Mapping[str, Any]) -> int:
    meta = doc.get("metadata")
    gen = meta.get("generation") if isinstance(meta, dict) else None
    return gen if isinstance(gen, int) and not isinstance(gen, bool) and gen > 0 else 0


def _unversioned(doc: Mapping[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata")
    rest = {k: v for k, v in meta.items() if k != "generation"} if isinstance(meta, dict) else meta
    return {**doc, "metadata": rest}


class MetadataFiles:
    """The host side: one file per prepared request, under `directory` (the caller holds the
    lock that serialises writes)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, uid: str, request: str) -> Path:
        return self.directory / uid / base_request(request) / FILE_NAME

    def write(
        self, claim: PreparedClaim, request: str, devices: Sequence[dict[str, Any]]
    ) -> tuple[Path, bool]:
        """Write the request's document if it says something new, the generation raised;
        (its host path, whether it was written). OutputError when it cannot be."""
        path = self.path(claim.uid, request)
        previous = self._read(path)
        doc = document(claim, request, devices, 1)
        if previous is not None and _unversioned(previous) == _unversioned(doc):
            return path, False
        if previous is not None:
            doc["metadata"]["generation"] = _generation(previous) + 1
        try:
            return path, write_atomic(path, render(doc), own=True)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from None

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return _first_object(read_regular(path, MAX_BYTES)[0])
        except FileNotFoundError:
            return None
        except (OSError, Refused) as e:  # ours, but replaced: written afresh
            log.warning("%s: %s; written afresh", path, e)
            return None

    def remove(self, uid: str) -> bool:
        """Remove a claim's files (`uid` checked by the caller); whether there were any."""
        where = self.directory / uid
        try:
            shutil.rmtree(where)  # never follows a link: removes it
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("%s cannot be removed (%s); left alone", where, e.strerror or e)
            return False
        return True

    def claims(self) -> list[str]:
        """The names in the directory (claim UIDs, or whatever else is there)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return sorted(os.listdir(self.directory))
        return []


def requests(claim: PreparedClaim) -> dict[str, list[str]]:
    """The claim's devices by the request each was allocated for (the name as allocated,
    first one of a path's request winning), each device once per request, in order."""
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}  # path's request -> its name as allocated
    for d in claim.devices:
        key = base_request(d.request)
        name = seen.setdefault(key, d.request)
        names = out.setdefault(name, [])
        if d.device not in names:
            names.append(d.device)
    return out
