"""ResourceClaim status.devices (claimstatus.py) against a real kube-apiserver, with a
pod-bound token of devplugin's ServiceAccount (pod on node A) and k8s/dra/ applied (the
fixture of test_dra_apiserver.py): the status is written by server-side apply, with the
device's data and a Ready condition; nothing is written when nothing changed, nor after a
restart that finds the claim already saying it; another driver's entry stays; a claim
allocated on node B, and a change of the allocation, are refused by the admission policy."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from edgefd.devplugin.dra.checkpoint import PreparedClaim, PreparedDevice
from edgefd.devplugin.dra.claimstatus import FIELD_MANAGER, ClaimStatusWriter
from edgefd.devplugin.resources import default_config
from edgefd.kube.errors import ApiRefused
from tests.devplugin.devices import coral, table
from tests.helpers import wait_until
from tests.k8s.test_dra_apiserver import NODE_A, NODE_B, applied  # noqa: F401
from tests.k8s.test_manifests import DEVPLUGIN_SA, NAMESPACE

pytestmark = pytest.mark.realpeer

POLICY = "edgefd-resourceclaim-status-restriction"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
APPLY = "application/apply-patch+yaml"
CORAL = default_config().by_name()["edgefd.io/coral-usb"]
DEVICE = "coral-usb-2-1"


GPU = {"request": "tpu", "driver": "gpu.example.com", "pool": "p", "device": "gpu-0"}


def allocated_claim(admin: Any, name: str, node: str, *more: dict) -> dict[str, Any]:
    """A claim as the scheduler leaves it: allocated a device of `node`'s pool (and `more`
    results), pinned to that node by the allocation's node selector."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "tpu", "exactly": {"deviceClassName": "edgetpu.edgefd.io"}}]
            }
        },
    }
    got = admin.request("POST", "resourceclaims", CLAIMS, "create", claim, "application/json")
    got["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "tpu", "driver": "edgefd.io", "pool": node, "device": DEVICE},
                    *more,
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    return admin.request(
        "PUT", "resourceclaims", f"{CLAIMS}/{name}/status", "allocate", got, "application/json"
    )


def prepared(claim: dict[str, Any]) -> PreparedClaim:
    meta = claim["metadata"]
    pool = claim["status"]["allocation"]["devices"]["results"][0]["pool"]  # ours come first
    dev = PreparedDevice("tpu", pool, DEVICE, DEVICE, CORAL.name, ())
    return PreparedClaim(meta["uid"], meta["namespace"], meta["name"], (dev,))


@pytest.fixture
def claims(applied: dict[str, Any]) -> Iterator[dict[str, Any]]:  # noqa: F811
    admin = applied["admin"]
    made = {
        "a": allocated_claim(admin, "status-a", NODE_A, GPU),
        "b": allocated_claim(admin, "status-b", NODE_B),
    }
    # the policy is enforced once the API server's informer has it
    sa, deadline = applied["sa"], time.monotonic() + 60
    while True:
        try:
            sa.apply_claim_status(NAMESPACE, "status-b", [], FIELD_MANAGER)
        except ApiRefused as e:
            if POLICY in str(e):
                break
            raise
        assert time.monotonic() < deadline, "the claim status policy never became enforced"
        time.sleep(0.5)
    yield made
    for name in ("status-a", "status-b"):
        admin.request("DELETE", "resourceclaims", f"{CLAIMS}/{name}", "delete")


def _get(applied: dict[str, Any], name: str) -> dict[str, Any]:  # noqa: F811
    return applied["admin"].get_claim(NAMESPACE, name)


def write_own_status(sa: Any, claim: Any) -> None:
    """devplugin's writer, as `sa`, writes the claim's status for its prepared Coral (one write)."""
    writer = ClaimStatusWriter(sa).start()
    try:
        writer.set({claim.uid: claim}, table((coral(), CORAL)))
        wait_until(lambda: writer.writes == 1, 20)
    finally:
        writer.stop()


def test_status_devices_are_written_once_per_change(applied, claims) -> None:  # noqa: F811
    claim = prepared(claims["a"])
    writer = ClaimStatusWriter(applied["sa"]).start()
    try:
        writer.set({claim.uid: claim}, table((coral(), CORAL)))
        wait_until(lambda: (_get(applied, "status-a").get("status") or {}).get("devices"), 20)
        [entry] = _get(applied, "status-a")["status"]["devices"]
        assert (entry["driver"], entry["pool"], entry["device"]) == ("edgefd.io", NODE_A, DEVICE)
        assert entry["data"] == {
            "bus": "usb",
            "port": "2-1",
            "vendorID": "18d1",
            "productID": "9302",
            "model": "coral-usb",
            "state": "present",
            "devicePaths": ["/dev/edgefd/coral-usb-2-1"],  # its stable node in the container
        }
        [ready] = entry["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Healthy")
        assert ready["message"] == "present at port 2-1"
        first = ready["lastTransitionTime"]
        assert writer.writes == 1

        writer.set({claim.uid: claim}, table((coral(), CORAL)))  # the same: no write
        time.sleep(0.5)
        assert writer.writes == 1

        gone = coral(present=False, reason="unplugged from port 2-1", last_seen=time.time())
        writer.set({claim.uid: claim}, table((gone, CORAL)))
        wait_until(lambda: writer.writes == 2, 10)
        [entry] = _get(applied, "status-a")["status"]["devices"]
        [ready] = entry["conditions"]
        assert (ready["status"], ready["reason"]) == ("False", "Absent")
        assert ready["message"] == "unplugged from port 2-1"
        assert entry["data"]["state"] == "absent"
        assert ready["lastTransitionTime"] >= first
    finally:
        writer.stop()

    # a restart finds the claim already saying it: reads once, writes nothing
    again = ClaimStatusWriter(applied["sa"]).start()
    try:
        again.set({claim.uid: claim}, table((gone, CORAL)))
        time.sleep(1.0)
        assert again.writes == 0 and not again.pending()
    finally:
        again.stop()


def test_another_drivers_entry_stays(applied, claims) -> None:  # noqa: F811
    admin = applied["admin"]
    other = {"driver": "gpu.example.com", "pool": "p", "device": "gpu-0", "conditions": []}
    path = f"{CLAIMS}/status-a/status?fieldManager=gpu-driver&force=true"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "status-a", "namespace": NAMESPACE},
        "status": {"devices": [other]},
    }
    admin.request(
        "PATCH", "resourceclaims", path, "apply", json.dumps(body), "application/apply-patch+yaml"
    )
    claim = prepared(claims["a"])
    write_own_status(applied["sa"], claim)
    drivers = {d["driver"] for d in _get(applied, "status-a")["status"]["devices"]}
    assert drivers == {"gpu.example.com", "edgefd.io"}


def test_another_nodes_claim_is_refused(applied, claims) -> None:  # noqa: F811
    """By the API server's own check (associated-node:patch holds on the claim's node only)."""
    entry = {"driver": "edgefd.io", "pool": NODE_B, "device": DEVICE, "conditions": []}
    with pytest.raises(ApiRefused, match='requires resource="resourceclaims/driver"'):
        applied["sa"].apply_claim_status(NAMESPACE, "status-b", [entry], FIELD_MANAGER)
    assert not (_get(applied, "status-b").get("status") or {}).get("devices")


@pytest.fixture
def overgranted(kube_apiserver: Any, applied: dict[str, Any]) -> Iterator[None]:  # noqa: F811
    """devplugin's ServiceAccount given, by mistake, what the API server's own checks look for
    (any node's status.devices; the allocation): what remains is the policy."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(kube_apiserver.admin_api())
    name = "edgefd-test-overgranted"
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims/driver"],
                    "verbs": ["arbitrary-node:patch"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims/binding"],
                    "verbs": ["patch"],
                },
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": DEVPLUGIN_SA, "namespace": NAMESPACE}],
        }
    )
    try:
        yield
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def test_the_policy_refuses_another_nodes_claim(applied, claims, overgranted) -> None:  # noqa: F811
    entry = {"driver": "edgefd.io", "pool": NODE_B, "device": DEVICE, "conditions": []}
    message = ""
    deadline = time.monotonic() + 30  # until the API server's authorizer has the grant
    while 'resource="resourceclaims/driver"' in message or not message:
        assert time.monotonic() < deadline, message
        with pytest.raises(ApiRefused) as err:
            applied["sa"].apply_claim_status(NAMESPACE, "status-b", [entry], FIELD_MANAGER)
        message = str(err.value)
        time.sleep(0.2)
    assert POLICY in message, message
    assert f"edgefd running on Node {NODE_A} may only write the status of" in message
    assert not (_get(applied, "status-b").get("status") or {}).get("devices")


def test_the_policy_refuses_changing_reservations(applied, claims, overgranted) -> None:  # noqa: F811
    """Its own node's claim, but a write that also reserves it for a pod: refused."""
    path = f"{CLAIMS}/status-a/status?fieldManager={FIELD_MANAGER}&force=true"
    pod = {"resource": "pods", "name": "intruder", "uid": "7e57e57e-0000-4000-8000-000000000001"}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "status-a", "namespace": NAMESPACE},
        "status": {"reservedFor": [pod]},
    }
    deadline = time.monotonic() + 30  # until the API server's authorizer has the grant
    while True:
        with pytest.raises(ApiRefused) as err:
            applied["sa"].request("PATCH", "resourceclaims", path, "apply", json.dumps(body), APPLY)
        if POLICY in str(err.value) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "may not change who a claim is reserved for" in str(err.value)
    assert not _get(applied, "status-a")["status"].get("reservedFor")


ALLOCATION_REFUSAL = "edgefd may not change a claim's allocation"
# status.allocation's removal (a claim nobody reserved may be deallocated), and a change
DEALLOCATE = [{"op": "remove", "path": "/status/allocation"}]
REPOINT = [
    {
        "op": "replace",
        "path": "/status/allocation/nodeSelector/nodeSelectorTerms/0/matchFields/0/values",
        "value": [NODE_B],
    }
]


def patch_status(sa: Any, name: str, ops: list[dict[str, Any]]) -> Any:
    return sa.request("PATCH", "resourceclaims", f"{CLAIMS}/{name}/status", "patch", ops,
                      "application/json-patch+json")  # fmt: skip


def until_policy_refuses(write: Any, deadline: float = 30) -> str:
    """The write's refusal once the API server's authorizer has the over-grant (before, its
    own check refuses it, naming the right it looks for)."""
    end = time.monotonic() + deadline
    while True:
        with pytest.raises(ApiRefused) as err:
            write()
        if POLICY in str(err.value) or time.monotonic() > end:
            return str(err.value)
        time.sleep(0.2)


def test_removing_the_allocation_is_refused_by_the_api_server(applied, claims) -> None:  # noqa: F811
    """An unreserved claim of its own node: with the gate on, the API server's own check
    wants resourceclaims/binding, which the token has not."""
    with pytest.raises(ApiRefused, match='resource="resourceclaims/binding"'):
        patch_status(applied["sa"], "status-a", DEALLOCATE)
    assert _get(applied, "status-a")["status"]["allocation"] == claims["a"]["status"]["allocation"]


@pytest.mark.parametrize("ops", [DEALLOCATE, REPOINT], ids=["remove", "change"])
def test_the_policy_refuses_changing_the_allocation(applied, claims, overgranted, ops) -> None:  # noqa: F811
    """Its own node's claim, unreserved, and the binding right granted by mistake: the
    allocation is the scheduler's; removing it is refused by the policy (a change, by the API
    server's validation first: an allocation is immutable)."""
    message = until_policy_refuses(lambda: patch_status(applied["sa"], "status-a", ops))
    if ops is DEALLOCATE:
        assert POLICY in message and ALLOCATION_REFUSAL in message, message
    assert _get(applied, "status-a")["status"]["allocation"] == claims["a"]["status"]["allocation"]
