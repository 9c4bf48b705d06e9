"""k8s/dra/ against a real kube-apiserver (tests/peers/apiserver.py).

1. Every object (and the base's DRA policies) passes a strict server-side dry run, then is
   applied; the DeviceClasses' CEL compiles (the API server compiles it on create) and the
   policy type-checks cleanly.
2. With a pod-bound token of devplugin's own ServiceAccount (split-identity's; pod on node A),
   the ResourceSlice policy lets it create, update and delete node A's slice of driver
   edgefd.io, and refuses:
   node B's slice (create, update, delete), another driver, another pool, and a token that
   names no node. RBAC grants only the verbs the DRA mode uses.
3. The real `devplugin --api dra`, with that token, publishes node A's slice through all of it,
   owned by node A's Node (its UID read from the API server), and cannot publish node B's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefd.devplugin.dra.kubeapi import DraApi
from edgefd.kube.client import connect
from edgefd.kube.errors import ApiNotFound, ApiRefused
from tests.devplugin.dra.peer import DraPlugin, list_slices
from tests.fixturegen import build_host
from tests.helpers import wait_until
from tests.k8s.test_dra_manifests import dra_docs
from tests.k8s.test_manifests import DEVPLUGIN_SA, DRA_POLICIES, NAMESPACE, find, load_manifests

pytestmark = pytest.mark.realpeer

NODE_A = "edgefd-dra-node-a"
NODE_B = "edgefd-dra-node-b"
POD_A = "edgefd-dra-pod-a"
FIELD_MANAGER = "edgefd-tests"
POLICY = "edgefd-resourceslice-restriction"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
BY_PORT = 'device.attributes["edgefd.io"].port == "1-1.3"'


def slice_body(name: str, node: str, driver: str = "edgefd.io", pool: str | None = None) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "coral-usb-2-1", "attributes": {"kind": {"string": "edgetpu"}}}],
        },
    }


@pytest.fixture(scope="module")
def applied(kube_apiserver: Any) -> Iterator[dict[str, Any]]:
    admin_client = kube_apiserver.admin_api()
    dyn = kube_apiserver.dynamic(admin_client)
    base = load_manifests()
    # devplugin's own account, as k8s/overlays/split-identity makes it and binds DRA's rights
    # to it (the one pod binds them to its own, edgefd-feature-sink: then the sink's tests on
    # this shared API server would hold them too)
    split = Path(__file__).resolve().parents[2] / "k8s" / "overlays" / "split-identity"
    account = yaml.safe_load((split / "serviceaccount.yaml").read_text())
    assert account["metadata"]["name"] == DEVPLUGIN_SA
    needed = [find(base, "Namespace"), account]
    # k8s/dra/ and the base's policies of DRA (k8s/admission-policy.yaml)
    policies = [d for d in base if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["name"] in DRA_POLICIES]  # fmt: skip
    docs = [*policies, *dra_docs()]
    for doc in docs:
        for subject in doc.get("subjects", []):
            subject["name"] = DEVPLUGIN_SA
    report: dict[str, list] = {"dry_run": [], "applied": []}

    def apply(doc: dict[str, Any], dry_run: bool) -> None:
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force_conflicts": True,
            "query_params": [("fieldValidation", "Strict")],
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        dyn.server_side_apply(
            resource, body=doc, namespace=doc["metadata"].get("namespace"), **kwargs
        )

    for doc in needed:
        apply(doc, dry_run=False)
    for doc in docs:
        apply(doc, dry_run=True)
        report["dry_run"].append((doc["kind"], doc["metadata"]["name"]))
    for doc in docs:
        apply(doc, dry_run=False)
        report["applied"].append((doc["kind"], doc["metadata"]["name"]))

    admin = connect(kube_apiserver.kubeconfig, 10.0, client_class=DraApi)
    node_uids = {n: kube_apiserver.create_node(n).metadata.uid for n in (NODE_A, NODE_B)}
    token = kube_apiserver.mint_pod_token(NAMESPACE, DEVPLUGIN_SA, POD_A, NODE_A)
    kubeconfig = kube_apiserver.kubeconfig_for_token(token)
    sa = connect(kubeconfig, 10.0, client_class=DraApi)

    # the policy is enforced once the API server's informer has it: probe with a slice RBAC
    # allows and the policy refuses (node B's), undoing it while it still gets through
    deadline = time.monotonic() + 60
    while True:
        try:
            sa.create_slice(slice_body(f"{NODE_B}-probe", NODE_B))
        except ApiRefused as e:
            if POLICY in str(e):
                break
            raise
        admin.delete_slice(f"{NODE_B}-probe")
        if time.monotonic() > deadline:
            raise AssertionError("the ResourceSlice policy never became enforced")
        time.sleep(0.5)

    yield {
        "admin": admin,
        "sa": sa,
        "kubeconfig": kubeconfig,
        "report": report,
        "docs": docs,
        "api_client": admin_client,
        "node_uids": node_uids,
    }

    # leave the shared API server as other tests expect it: no edgefd policy in force
    for doc in reversed(docs):
        if doc["kind"].startswith("ValidatingAdmissionPolicy"):
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            dyn.delete(resource, name=doc["metadata"]["name"])
    for s in admin.request("GET", "resourceslices", SLICES, "list").get("items", []):
        if s["spec"].get("nodeName") in (NODE_A, NODE_B):
            admin.delete_slice(s["metadata"]["name"])


@pytest.fixture
def clean(applied: dict[str, Any]) -> dict[str, Any]:
    admin = applied["admin"]
    for node in (NODE_A, NODE_B):
        for s in list_slices(admin, node, "edgefd.io").get("items", []):
            admin.delete_slice(s["metadata"]["name"])
    return applied


def refused(fn: Any, expect: str) -> str:
    with pytest.raises(ApiRefused) as err:
        fn()
    message = str(err.value)
    assert "403" in message and POLICY in message, message
    assert expect in message, message
    return message


# -- 1. accepted


def test_every_object_passes_a_strict_server_side_dry_run(applied: dict[str, Any]) -> None:
    expected = [(d["kind"], d["metadata"]["name"]) for d in applied["docs"]]
    assert applied["report"]["dry_run"] == expected
    assert applied["report"]["applied"] == expected


def test_device_classes_select_by_kind(applied: dict[str, Any]) -> None:
    """A claim on each class is accepted (the CEL compiled when the class was created)."""
    admin = applied["admin"]
    for d in applied["docs"]:
        if d["kind"] != "DeviceClass":
            continue
        name = d["metadata"]["name"]
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"generateName": "probe-"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "r",
                            "exactly": {
                                "deviceClassName": name,
                                "selectors": [{"cel": {"expression": BY_PORT}}],
                            },
                        }
                    ]
                }
            },
        }
        path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
        got = admin.request("POST", "resourceclaims", path, "create", claim, "application/json")
        assert got["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == name
        admin.request("DELETE", "resourceclaims", f"{path}/{got['metadata']['name']}", "delete")


def test_policy_type_checks_cleanly(applied: dict[str, Any]) -> None:
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(applied["api_client"])
    deadline = time.monotonic() + 30
    while True:
        status = api.read_validating_admission_policy(POLICY).status
        if status is not None and status.type_checking is not None:
            break
        assert time.monotonic() < deadline, "status.typeChecking never written"
        time.sleep(0.5)
    warnings = status.type_checking.expression_warnings or []
    assert not warnings, [(w.field_ref, w.warning) for w in warnings]


# -- 2. the policy and RBAC


def test_may_create_update_and_delete_its_own_nodes_slice(clean: dict[str, Any]) -> None:
    sa = clean["sa"]
    created = sa.create_slice(slice_body(f"{NODE_A}-edgefd.io-0", NODE_A))
    body = slice_body(f"{NODE_A}-edgefd.io-0", NODE_A)
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    body["spec"]["pool"]["generation"] = 2
    updated = sa.replace_slice(body)
    assert updated["spec"]["pool"]["generation"] == 2
    assert [s["metadata"]["name"] for s in list_slices(sa, NODE_A, "edgefd.io")["items"]] == [
        f"{NODE_A}-edgefd.io-0"
    ]
    sa.delete_slice(f"{NODE_A}-edgefd.io-0")
    with pytest.raises(ApiNotFound):
        sa.delete_slice(f"{NODE_A}-edgefd.io-0")


def test_a_noexecute_device_taint_is_accepted_as_written(clean: dict[str, Any]) -> None:
    """`--evict-after`'s taint (eviction.py) in the form the API server serves (v1, device
    taints GA): stored as sent, timeAdded kept, so the publisher's echo compares equal."""
    from edgefd.devplugin.dra import slices
    from edgefd.devplugin.dra.eviction import Eviction
    from tests.devplugin.devices import coral

    gone = coral(
        present=False,
        reason="unplugged from port 2-1",
        last_seen=1_700_000_000.0,
        missing_since=1_700_000_010.0,
        missed_since=1_700_000_010.0,
    )
    taints = slices.taints(gone, Eviction(after=2.0, hold=3.0), 1_800_000_000.0)
    body = slice_body(f"{NODE_A}-edgefd.io-0", NODE_A)
    body["spec"]["devices"][0]["taints"] = taints
    got = clean["sa"].create_slice(body)
    assert got["spec"]["devices"][0]["taints"] == taints
    assert taints[0]["effect"] == "NoExecute"
    clean["sa"].delete_slice(f"{NODE_A}-edgefd.io-0")


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (slice_body("b-0", NODE_B), f"may not write ResourceSlices of Node {NODE_B}"),
        (slice_body("a-gpu", NODE_A, driver="gpu.example.com"), "its own driver"),
        (slice_body("a-pool", NODE_A, pool="shared"), "the pool of its own node"),
    ],
    ids=["other-node", "other-driver", "other-pool"],
)
def test_create_is_refused(clean: dict[str, Any], body: dict, expect: str) -> None:
    refused(lambda: clean["sa"].create_slice(body), expect)
    assert not list_slices(clean["admin"], body["spec"]["nodeName"], body["spec"]["driver"])[
        "items"
    ]


def test_another_nodes_slice_cannot_be_changed_or_deleted(clean: dict[str, Any]) -> None:
    admin, sa = clean["admin"], clean["sa"]
    theirs = admin.create_slice(slice_body(f"{NODE_B}-edgefd.io-0", NODE_B))
    body = slice_body(f"{NODE_B}-edgefd.io-0", NODE_B)
    body["metadata"]["resourceVersion"] = theirs["metadata"]["resourceVersion"]
    body["spec"]["devices"] = []
    refused(lambda: sa.replace_slice(body), f"of Node {NODE_B}")
    refused(lambda: sa.delete_slice(f"{NODE_B}-edgefd.io-0"), f"of Node {NODE_B}")
    [kept] = list_slices(admin, NODE_B, "edgefd.io")["items"]
    assert kept["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]


def test_a_token_without_a_node_claim_writes_no_slice(
    kube_apiserver: Any, clean: dict[str, Any]
) -> None:
    token = kube_apiserver.mint_token(NAMESPACE, DEVPLUGIN_SA, expiration_seconds=600)
    plain = connect(kube_apiserver.kubeconfig_for_token(token), 10.0, client_class=DraApi)
    refused(lambda: plain.create_slice(slice_body("a-0", NODE_A)), "pod-bound token")


def test_administrators_and_other_users_are_not_affected(clean: dict[str, Any]) -> None:
    admin = clean["admin"]
    admin.create_slice(slice_body("x-gpu", NODE_B, driver="gpu.example.com", pool="shared"))
    admin.delete_slice("x-gpu")


def test_rbac_is_narrow(kube_apiserver: Any, applied: dict[str, Any]) -> None:
    from kubernetes import client

    sa_client = kube_apiserver.api_for_token(
        kube_apiserver.mint_pod_token(NAMESPACE, DEVPLUGIN_SA, POD_A, NODE_A)
    )
    authz = client.AuthorizationV1Api(sa_client)

    def can(verb: str, resource: str, namespace: str = "", sub: str = "") -> bool:
        review = authz.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "group": "resource.k8s.io",
                        "resource": resource,
                        "subresource": sub,
                        "namespace": namespace,
                    }
                }
            }
        )
        return bool(review.status.allowed)

    for verb in ("get", "list", "watch", "create", "update", "delete"):
        assert can(verb, "resourceslices"), verb
    assert can("get", "resourceclaims", "default")
    nodes = authz.create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": "get", "resource": "nodes", "name": NODE_A}}}
    )
    assert nodes.status.allowed  # the slices' owner
    for verb, resource, ns, sub in [
        ("patch", "resourceslices", "", ""),
        ("deletecollection", "resourceslices", "", ""),
        ("list", "resourceclaims", "default", ""),
        ("watch", "resourceclaims", "default", ""),
        ("update", "resourceclaims", "default", ""),
        ("update", "resourceclaims", "default", "status"),
        ("create", "deviceclasses", "", ""),
        ("create", "resourceclaims", "default", ""),
    ]:
        assert not can(verb, resource, ns, sub), f"{verb} {resource}/{sub}"


# -- 3. the real devplugin through all of it


def test_devplugin_publishes_its_own_node_and_not_another(
    clean: dict[str, Any], tmp_path: Path
) -> None:
    admin = clean["admin"]
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    ok = DraPlugin(host, NODE_A, clean["kubeconfig"]).start()
    bad = DraPlugin(host, NODE_B, clean["kubeconfig"]).start()
    try:
        [s] = wait_until(lambda: list_slices(admin, NODE_A, "edgefd.io")["items"], 20, 0.1)
        assert {d["name"] for d in s["spec"]["devices"]} == {"ncs2-1-1-1", "coral-usb-2-1"}
        # owned by its Node, as the upstream kubelet-plugin helper does, the UID the Node's
        assert s["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": NODE_A,
                "uid": clean["node_uids"][NODE_A],
                "controller": True,
            }
        ]
        wait_until(lambda: "may not write ResourceSlices of Node" in bad.stderr(), 20, 0.1)
        assert not list_slices(admin, NODE_B, "edgefd.io")["items"]
        errors = bad.metrics()
        assert any(k.startswith("edgefd_devplugin_dra_slice_write_errors_total") for k in errors)
    finally:
        for p in (ok, bad):
            with contextlib.suppress(Exception):
                p.stop()
            p.close()
    # a clean shutdown without prepared claims removed node A's slice, through the policy
    assert not list_slices(admin, NODE_A, "edgefd.io")["items"]
