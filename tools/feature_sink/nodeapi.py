"""The sink's calls to Kubernetes: its Node, Node Events and NFD NodeFeatures.

The client itself (connecting, requests with timeouts, the kinds of API failure, URL-segment
escaping) is edgefd's shared one, edgefd.kube; its names are re-exported here for the sink's
modules. `kubernetes` is imported only there, and only once a client is built.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from edgefd.core.errors import EdgefdError
from edgefd.inventory.naming import qualified
from edgefd.kube import client as kube
from edgefd.kube.client import quote
from edgefd.kube.errors import ApiConflict, ApiNotFound, ApiRefused, ApiUnreachable
from edgefd.kube.listwatch import name_selector
from edgefd.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS, RateLimiter

from .patch import NodeView, Op

# the shared client's names, for the sink's modules
__all__ = [
    "ApiConflict",
    "ApiNotFound",
    "ApiRefused",
    "ApiUnreachable",
    "EdgefdError",
    "NodeAPI",
    "connect",
    "quote",
]

log = logging.getLogger(__name__)

USER_AGENT = "edgefd-feature-sink"
EVENT_NAMESPACE = "default"  # where the kubelet and kubectl put Node events

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NFD_PLURAL = "nodefeatures"


class NodeAPI(kube.Client):
    """A configured client plus the handful of calls the sink makes.

    Requests go through the kubernetes client's REST layer (its TLS, proxy and auth handling,
    and the in-cluster token refresh) but not through its typed API classes: deserialising a
    Node into the generated models cost about 2 s of CPU on the first call (building every
    model class the Node references) and tens of MiB; the sink only needs a few fields, so
    it reads the JSON itself. `on_request(verb, resource)` is called for every request.
    """

    def __init__(
        self,
        configuration: Any,
        timeout: float,
        on_request: Callable[[str, str], None] | None = None,
        user_agent: str = USER_AGENT,
        limiter: RateLimiter | None = None,
    ) -> None:
        super().__init__(configuration, timeout, on_request, user_agent, limiter)

    # -- Node -------------------------------------------------------------------------------

    def get_node(self, name: str) -> NodeView:
        node = self.request("GET", "nodes", f"/api/v1/nodes/{quote(name)}", f"get node {name}")
        return node_view(node, name, f"get node {name}", listed=False)

    def patch_node(self, name: str, ops: list[Op]) -> dict[str, Any]:
        """Send one JSON Patch; return the Node as the API server stored it."""
        node = self.request(
            "PATCH",
            "nodes",
            f"/api/v1/nodes/{quote(name)}",
            f"patch node {name}",
            body=ops,
            content_type="application/json-patch+json",
        )
        return node or {}

    @staticmethod
    def node_query(name: str) -> tuple[str, str]:
        """(resource, collection path) selecting exactly this Node, for a list and watch."""
        return "nodes", f"/api/v1/nodes?{name_selector(name)}"

    # -- Events -----------------------------------------------------------------------------

    def create_node_event(
        self, node: NodeView, reason: str, message: str, dedup_key: str, component: str
    ) -> bool:
        """Post a Warning Event on the Node; False if an identical one already exists.

        The Event's name is derived from `dedup_key`, so the API server itself deduplicates
        across sink restarts: a second create of the same rejection gets 409 and is skipped.
        """
        digest = hashlib.sha256(dedup_key.encode()).hexdigest()[:16]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{node.name}.{digest}", "namespace": EVENT_NAMESPACE},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node.name,
                **({"uid": node.uid} if node.uid else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": component, "host": node.name},
            "reportingComponent": qualified(component),
            "reportingInstance": node.name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.request(
                "POST",
                "events",
                f"/api/v1/namespaces/{EVENT_NAMESPACE}/events",
                f"create event {reason}",
                body=body,
                content_type="application/json",
            )
        except ApiConflict:
            return False
        return True

    # -- NodeFeature (NFD) ------------------------------------------------------------------

    def _nf_path(self, namespace: str, name: str | None = None) -> str:
        path = f"/apis/{NFD_GROUP}/{NFD_VERSION}/namespaces/{quote(namespace)}/{NFD_PLURAL}"
        return path + (f"/{quote(name)}" if name else "")

    def nodefeature_query(self, namespace: str, name: str) -> tuple[str, str]:
        """(resource, collection path) selecting exactly this NodeFeature."""
        return NFD_PLURAL, f"{self._nf_path(namespace)}?{name_selector(name)}"

    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request(
                "GET",
                NFD_PLURAL,
                self._nf_path(namespace, name),
                f"get nodefeature {namespace}/{name}",
            )
        except ApiNotFound as e:
            if "the server could not find the requested resource" in str(e):
                raise  # the CRD is not installed: not "object absent"
            return None

    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request(
            "POST",
            NFD_PLURAL,
            self._nf_path(namespace),
            f"create nodefeature {namespace}/{body['metadata']['name']}",
            body=body,
            content_type="application/json",
        )

    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace guarded by metadata.resourceVersion in `body` (409 if it moved)."""
        name = body["metadata"]["name"]
        return self.request(
            "PUT",
            NFD_PLURAL,
            self._nf_path(namespace, name),
            f"replace nodefeature {namespace}/{name}",
            body=body,
            content_type="application/json",
        )


def node_view(node: Any, name: str, what: str, listed: bool = True) -> NodeView:
    """A Node's JSON as the sink sees it; ApiRefused if it is not Node `name` (an answer that
    is not the object asked for is never acted on). Items of a list carry no `kind`."""
    md = (node or {}).get("metadata") or {}
    kind = (node or {}).get("kind", "Node" if listed else None)
    if kind != "Node" or md.get("name") != name:
        raise ApiRefused(
            f"{what}: the API answered with {(node or {}).get('kind')!r} "
            f"{md.get('name')!r}, not Node {name!r}"
        )
    return NodeView(
        name=name,
        labels=dict(md["labels"]) if md.get("labels") is not None else None,
        annotations=dict(md["annotations"]) if md.get("annotations") is not None else None,
        resource_version=md.get("resourceVersion"),
        uid=md.get("uid"),
    )


def connect(
    kubeconfig: str | None,
    timeout: float,
    on_request: Callable[[str, str], None] | None = None,
    context: str | None = None,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    on_wait: Callable[[str, float], None] | None = None,
) -> NodeAPI:
    """Load the client configuration (`kubeconfig`, $KUBECONFIG, ~/.kube/config, else
    in-cluster; edgefd.kube.client.find_kubeconfig) and build the client, rate-limited to
    `qps` requests a second (bursts of `burst`). Makes no request.

    Only configuration errors fail here (a bad kubeconfig or context: exit 3; none at all:
    exit 1); an unreachable API server is discovered later, by the loop, which retries.
    """
    return kube.connect(
        kubeconfig,
        timeout,
        on_request,
        context=context,
        user_agent=USER_AGENT,
        client_class=NodeAPI,
        qps=qps,
        burst=burst,
        on_wait=on_wait,
    )
