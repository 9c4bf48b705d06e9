"""Reading the cluster, once, through the shared API client (edgefd.kube): every Node, every
pod that holds what it was given (not Succeeded or Failed), edgefd's ResourceSlices, every
ResourceClaim and DeviceClass. Everything else in kubectl-edgefd is a pure function of this.

Lists go a page at a time (PAGE objects), so a large cluster is read in bounded answers. A
cluster that does not serve `resource.k8s.io/v1` (before Kubernetes 1.34, or DRA turned off)
has no DRA objects: that is said (`dra_served`), not an error. A 403 is: the command says
which list it was refused, with the API server's words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from edgefd.core.errors import BadInput
from edgefd.inventory.naming import DOMAIN
from edgefd.kube.client import Client, quote
from edgefd.kube.errors import ApiNotFound

PAGE = 500
DRA = "/apis/resource.k8s.io/v1"
DRIVER = DOMAIN  # the DRA driver: edgefd's domain
USER_AGENT = "kubectl-edgefd"
ACTIVE = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class Snapshot:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)  # active pods, every namespace
    slices: list[dict[str, Any]] = field(default_factory=list)  # of driver edgefd.io
    claims: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    dra_served: bool = True

    def node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes if (n.get("metadata") or {}).get("name") == name), None)


def list_all(api: Client, resource: str, path: str, query: dict[str, str] | None = None) -> list:
    """Every object of a collection, a page at a time."""
    q = dict(query or {}, limit=str(PAGE))
    items: list[dict[str, Any]] = []
    while True:
        page = api.request("GET", resource, f"{path}?{urlencode(q)}", f"list {resource}") or {}
        items += page.get("items") or []
        q["continue"] = (page.get("metadata") or {}).get("continue") or ""
        if not q["continue"]:
            return items


def read(api: Client) -> Snapshot:
    """The whole picture both commands start from."""
    nodes = list_all(api, "nodes", "/api/v1/nodes")
    pods = list_all(api, "pods", "/api/v1/pods", {"fieldSelector": ACTIVE})
    try:
        slices = list_all(
            api,
            "resourceslices",
            f"{DRA}/resourceslices",
            {"fieldSelector": f"spec.driver={DRIVER}"},
        )
    except ApiNotFound:  # resource.k8s.io/v1 not served
        return Snapshot(nodes, pods, dra_served=False)
    claims = list_all(api, "resourceclaims", f"{DRA}/resourceclaims")
    classes = list_all(api, "deviceclasses", f"{DRA}/deviceclasses")
    return Snapshot(nodes, pods, slices, claims, classes)


def get_pod(api: Client, namespace: str, name: str) -> dict[str, Any]:
    """The pod, or BadInput (exit 3) naming what was looked for."""
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    try:
        return api.request("GET", "pods", path, f"get pod {namespace}/{name}")
    except ApiNotFound:
        raise BadInput(f"pod {name} not found in namespace {namespace}") from None


def get_dra(api: Client, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A ResourceClaim or ResourceClaimTemplate of the namespace; None when there is none."""
    path = f"{DRA}/namespaces/{quote(namespace)}/{plural}/{quote(name)}"
    try:
        return api.request("GET", plural, path, f"get {plural[:-1]} {namespace}/{name}")
    except ApiNotFound:
        return None
