"""The resource.k8s.io/v1 calls the DRA mode makes, on the shared client (edgefd.kube):
ResourceSlices of this node (the query edgefd.kube.listwatch lists and watches them by, and
create, replace, delete), reading a ResourceClaim, and reading its own Node (the slices'
owner). Plain JSON, no typed models (see edgefd.kube.client).

Claims are read on the kubelet's path (NodePrepareResources waits for the read), so they are
read by a client of their own (`claim_reader`) with a rate of its own: on the publisher's
(DEFAULT_QPS, 5 a second) a node starting many pods queued each read behind the others and
behind the slice writes (500 claims took 98 s), and the reads took the publisher's tokens.
Their rate is the kubelet's own default client rate: the kubelet asks for no more
preparations than its own budget lets it start pods, so this one never binds before it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from edgefd.kube.client import Client, quote
from edgefd.kube.ratelimit import RateLimiter

GROUP_VERSION = "resource.k8s.io/v1"
SLICES = f"/apis/{GROUP_VERSION}/resourceslices"
USER_AGENT = "edgefd-devplugin"
CLAIM_QPS = 50.0  # claim reads a second (the kubelet's default --kube-api-qps)
CLAIM_BURST = 100  # ... at once (its --kube-api-burst)


class DraApi(Client):
    def claim_reader(self) -> DraApi:
        """This client's twin for reading claims, on a rate limiter of its own (see above)."""
        return self.with_limiter(RateLimiter(CLAIM_QPS, CLAIM_BURST))

    @staticmethod
    def slices_query(node: str, driver: str) -> tuple[str, str]:
        """(resource, collection path with its selector) of this node's slices of `driver`:
        what a ListWatch lists and watches, and RBAC and the admission policy see."""
        selector = urlencode({"fieldSelector": f"spec.nodeName={node},spec.driver={driver}"})
        return "resourceslices", f"{SLICES}?{selector}"

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self.request(
            "POST",
            "resourceslices",
            SLICES,
            f"create resourceslice {name}",
            body=body,
            content_type="application/json",
        )

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT guarded by metadata.resourceVersion in `body` (409 if it moved)."""
        name = body["metadata"]["name"]
        return self.request(
            "PUT",
            "resourceslices",
            f"{SLICES}/{quote(name)}",
            f"replace resourceslice {name}",
            body=body,
            content_type="application/json",
        )

    def delete_slice(self, name: str, resource_version: str | None = None) -> None:
        body = None
        if resource_version:
            body = {"preconditions": {"resourceVersion": resource_version}}
        self.request(
            "DELETE",
            "resourceslices",
            f"{SLICES}/{quote(name)}",
            f"delete resourceslice {name}",
            body=body,
            content_type="application/json" if body else None,
        )

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/apis/{GROUP_VERSION}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        return self.request("GET", "resourceclaims", path, f"get resourceclaim {namespace}/{name}")

    def apply_claim_status(
        self, namespace: str, name: str, devices: list[dict[str, Any]], manager: str
    ) -> dict[str, Any]:
        """Server-side apply of `status.devices` (ours only: the list is a map keyed by
        driver, pool and device, so other drivers' entries stay theirs)."""
        path = (
            f"/apis/{GROUP_VERSION}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
            f"/status?{urlencode({'fieldManager': manager, 'force': 'true'})}"
        )
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"devices": devices},
        }
        return self.request(
            "PATCH",
            "resourceclaims",
            path,
            f"apply status of resourceclaim {namespace}/{name}",
            body=json.dumps(body),  # JSON is YAML; sent as is
            content_type="application/apply-patch+yaml",
        )

    def get_node(self, name: str) -> dict[str, Any]:
        return self.request("GET", "nodes", f"/api/v1/nodes/{quote(name)}", f"get node {name}")
