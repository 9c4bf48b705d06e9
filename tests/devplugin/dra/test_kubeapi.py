"""The resource.k8s.io calls of the DRA mode (kubeapi.py), as the requests they send: this
node's slices of our driver selected by field (what the list-watch, RBAC and the admission
policy see), a replace guarded by the body's resourceVersion, a delete with its
precondition, and the claim status written by server-side apply under our field manager,
forced, with `status.devices` only; claims read by a twin client on a rate limiter of its
own (never queued behind the publisher's requests). The API server's answers to them are
tested against the real one in tests/k8s/test_dra_apiserver.py and test_dra_claim_status.py."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from edgefd.devplugin.dra.kubeapi import CLAIM_BURST, CLAIM_QPS, SLICES, DraApi
from edgefd.kube.client import connect
from edgefd.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS


class Recorded(DraApi):
    """A DraApi that sends nothing: every request is recorded and answered with {}."""

    def __init__(self) -> None:  # no configuration, no connection
        self.sent: list[dict[str, Any]] = []

    def request(
        self,
        method: str,
        resource: str,
        path: str,
        what: str,
        body: Any = None,
        content_type: str | None = None,
        verb: str | None = None,
    ) -> Any:
        self.sent.append(
            {"method": method, "resource": resource, "path": path, "body": body,
             "content_type": content_type}
        )  # fmt: skip
        return {}


def test_this_nodes_slices_of_our_driver() -> None:
    resource, path = DraApi.slices_query("edge-1", "edgefd.io")
    url = urlsplit(path)
    assert (resource, url.path) == ("resourceslices", "/apis/resource.k8s.io/v1/resourceslices")
    assert parse_qs(url.query) == {"fieldSelector": ["spec.nodeName=edge-1,spec.driver=edgefd.io"]}


def test_slice_writes() -> None:
    api = Recorded()
    body = {"metadata": {"name": "edge-1-edgefd.io-0", "resourceVersion": "7"}, "spec": {}}
    api.create_slice(body)
    api.replace_slice(body)
    api.delete_slice("edge-1-edgefd.io-0", "7")
    api.delete_slice("edge-1-edgefd.io-0")
    one = f"{SLICES}/edge-1-edgefd.io-0"
    assert [(s["method"], s["path"], s["body"], s["content_type"]) for s in api.sent] == [
        ("POST", SLICES, body, "application/json"),
        ("PUT", one, body, "application/json"),  # its resourceVersion guards it: 409 if moved
        ("DELETE", one, {"preconditions": {"resourceVersion": "7"}}, "application/json"),
        ("DELETE", one, None, None),
    ]
    assert {s["resource"] for s in api.sent} == {"resourceslices"}


def test_claim_status_is_applied_server_side_as_ours() -> None:
    api = Recorded()
    devices = [{"driver": "edgefd.io", "pool": "edge-1", "device": "coral-usb-2-1"}]
    api.apply_claim_status("ns", "c1", devices, "edgefd.io-devplugin")
    [sent] = api.sent
    url = urlsplit(sent["path"])
    assert (sent["method"], sent["resource"]) == ("PATCH", "resourceclaims")
    assert url.path == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1/status"
    assert parse_qs(url.query) == {"fieldManager": ["edgefd.io-devplugin"], "force": ["true"]}
    assert sent["content_type"] == "application/apply-patch+yaml"
    assert json.loads(sent["body"]) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns"},
        "status": {"devices": devices},
    }
    api.get_claim("ns", "c1")
    api.get_node("edge-1")
    assert [(s["method"], s["path"]) for s in api.sent[1:]] == [
        ("GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1"),
        ("GET", "/api/v1/nodes/edge-1"),
    ]


def test_claims_are_read_by_a_twin_on_a_limiter_of_its_own(tmp_path) -> None:
    """The publisher's client keeps its own rate; the claim reader is a DraApi on the same
    server with the kubelet's default rate (50/s, bursts of 100), its tokens its own."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    api = connect(str(kubeconfig), 1.0, client_class=DraApi)
    reader = api.claim_reader()
    assert isinstance(reader, DraApi) and reader.limiter is not api.limiter
    assert (reader.limiter.qps, reader.limiter.burst) == (CLAIM_QPS, CLAIM_BURST)
    assert (api.limiter.qps, api.limiter.burst) == (DEFAULT_QPS, DEFAULT_BURST)
    assert CLAIM_QPS >= 10 * DEFAULT_QPS
