"""Relocating the kustomize base (issue 22, item 1): a kustomization of a user's that moves
edgefd to another namespace and prefixes every name (`namespace:`, `namePrefix:`), with the
dra component, rendered by the harness's `kubectl kustomize` and applied to the real API
server with `kubectl apply --server-side -k`.

Every admission policy must still confine the relocated ServiceAccounts: the policies find
them by the mark in their roles (k8s/rbac.yaml), which kustomize renames and rebinds along
with them, not by a user name written into the policy, which it would not. So the relocated
feature-sink token labels its own Node and is refused on another, and the relocated
devplugin token publishes its own node's ResourceSlice and is refused another node's.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.test_apiserver import until_refused
from tests.k8s.test_dra_apiserver import slice_body
from tests.k8s.test_kustomize import OVERLAYS
from tests.k8s.test_manifests import DEVPLUGIN_SA, K8S, NAMESPACE, POLICIES, SERVICE_ACCOUNT
from tests.peers.processes import harness_binary

RELOCATED = "edge-relocated"
PREFIX = "reloc-"
NODE_A = "edgefd-reloc-node-a"
NODE_B = "edgefd-reloc-node-b"
ALL_POLICIES = POLICIES  # every one, whatever the options
FEATURE = "feature.node.kubernetes.io~1usb-fe_1a6e_089a.present"


def kustomization(where: Path) -> Path:
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": RELOCATED,
        "namePrefix": PREFIX,
        "resources": [os.path.relpath(K8S, where)],
        # with split-identity: both accounts relocated, each held to its own rights
        "components": [os.path.relpath(OVERLAYS / c, where) for c in ("dra", "split-identity")],
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return where


def kubectl(*args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(harness_binary("kubectl"))]
    if kubeconfig:
        cmd.append(f"--kubeconfig={kubeconfig}")
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def relocation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kustomization(tmp_path_factory.mktemp("relocated"))


@pytest.fixture(scope="module")
def rendered(relocation: Path) -> list[dict[str, Any]]:
    r = kubectl("kustomize", str(relocation))
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


# -- the render ----------------------------------------------------------------------------


def test_everything_is_renamed_and_moved(rendered: list[dict[str, Any]]) -> None:
    namespaces = by_kind(rendered, "Namespace")
    assert list(namespaces) == [RELOCATED]
    for d in rendered:
        if d["kind"] in ("Namespace", "DeviceClass"):
            continue
        assert d["metadata"]["name"].startswith(PREFIX), (d["kind"], d["metadata"]["name"])
        ns = d["metadata"].get("namespace")
        # kustomize does not know these kinds are cluster-scoped: the API server ignores it
        assert ns in (None, RELOCATED), (d["kind"], ns)
        for s in d.get("subjects", []):
            assert s["name"].startswith(PREFIX) and s["namespace"] == RELOCATED, s


def test_every_binding_names_its_renamed_policy(rendered: list[dict[str, Any]]) -> None:
    policies = by_kind(rendered, "ValidatingAdmissionPolicy")
    bindings = by_kind(rendered, "ValidatingAdmissionPolicyBinding")
    assert set(policies) == {PREFIX + p for p in ALL_POLICIES}
    assert {b["spec"]["policyName"] for b in bindings.values()} == set(policies)
    # and no policy names a ServiceAccount kustomize would have to rename
    assert "system:serviceaccount:" + NAMESPACE not in json.dumps(list(policies.values()))


def test_old_kustomize_is_taught_to_rename_the_policy_reference() -> None:
    """kustomize >= 5.5 (kubectl >= 1.32) renames a binding's policyName with its policy;
    the base hands older ones the same rule (k8s/KustomizeConfig), or their binding would
    name no policy after a `namePrefix:` and nothing would be enforced."""
    assert yaml.safe_load((K8S / "Kustomization").read_text())["configurations"] == [
        "KustomizeConfig"
    ]
    (spec,) = yaml.safe_load((K8S / "KustomizeConfig").read_text())["nameReference"]
    assert (spec["kind"], spec["group"]) == ("ValidatingAdmissionPolicy",
                                             "admissionregistration.k8s.io")  # fmt: skip
    assert spec["fieldSpecs"] == [
        {
            "kind": "ValidatingAdmissionPolicyBinding",
            "group": "admissionregistration.k8s.io",
            "path": "spec/policyName",
        }
    ]


# -- the real API server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def applied(kube_apiserver: Any, relocation: Path, rendered: list[dict[str, Any]]) -> Iterator:
    """`kubectl apply --server-side -k` of the relocated build, for real; everything it made
    is deleted afterwards (its policies would confine any ServiceAccount holding the mark)."""
    r = kubectl("apply", "--server-side", "--field-manager=edgefd-relocated", "-k",
                str(relocation), kubeconfig=kube_apiserver.kubeconfig)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for n in (NODE_A, NODE_B):
        kube_apiserver.create_node(n, {"kubernetes.io/hostname": n})
    yield r
    kubectl("delete", "--ignore-not-found", "--wait=false", "-k", str(relocation),
            kubeconfig=kube_apiserver.kubeconfig)  # fmt: skip
    admin = kube_apiserver.admin_api()
    import kubernetes

    core = kubernetes.client.CoreV1Api(admin)
    for n in (NODE_A, NODE_B):
        core.delete_node(n)


@pytest.mark.realpeer
def test_apply_creates_the_relocated_objects(applied: Any, rendered: list[dict]) -> None:
    lines = applied.stdout.splitlines()
    assert len(lines) == len(rendered), applied.stdout
    assert all(line.endswith("serverside-applied") for line in lines), applied.stdout


@pytest.mark.realpeer
def test_relocated_sink_token_is_held_to_its_own_node(applied: Any, kube_apiserver: Any):
    import kubernetes

    sa = PREFIX + SERVICE_ACCOUNT
    token = kube_apiserver.mint_pod_token(RELOCATED, sa, "reloc-sink", NODE_A)
    core = kubernetes.client.CoreV1Api(kube_apiserver.api_for_token(token))
    admin = kubernetes.client.CoreV1Api(kube_apiserver.admin_api())
    add = [{"op": "add", "path": f"/metadata/labels/{FEATURE}", "value": "true"}]

    def patch(node: str, ops: list[dict[str, Any]]) -> Any:
        return core.patch_node(node, ops, _content_type="application/json-patch+json")

    deadline = time.monotonic() + 60
    policy = PREFIX + "edgefd-node-restriction"
    message = until_refused(lambda: patch(NODE_B, add), policy, deadline)
    assert f"may not modify Node {NODE_B}" in message
    assert "usb-fe_1a6e_089a.present" not in (admin.read_node(NODE_B).metadata.labels or {})
    # its own Node: allowed, but only what the policy allows
    patch(NODE_A, add)
    assert admin.read_node(NODE_A).metadata.labels[FEATURE.replace("~1", "/")] == "true"
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        patch(NODE_A, [{"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1x",
                        "value": ""}])  # fmt: skip
    assert err.value.status == 403
    # Events: about its own Node in `default`, nothing else
    event = {
        "metadata": {"name": f"{NODE_B}.0123456789abcdef", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": NODE_B},
        "reason": "LabelRejected",
        "message": "x",
        "type": "Warning",
    }
    until_refused(
        lambda: core.create_namespaced_event("default", event),
        PREFIX + "edgefd-event-restriction",
        deadline,
    )
    own = dict(event, metadata={"name": f"{NODE_A}.0123456789abcdef", "namespace": "default"},
               involvedObject={"apiVersion": "v1", "kind": "Node", "name": NODE_A})  # fmt: skip
    core.create_namespaced_event("default", own)


@pytest.mark.realpeer
def test_relocated_devplugin_token_is_held_to_its_own_nodes_slices(
    applied: Any, kube_apiserver: Any
) -> None:
    import kubernetes

    sa = PREFIX + DEVPLUGIN_SA
    token = kube_apiserver.mint_pod_token(RELOCATED, sa, "reloc-devplugin", NODE_A)
    api = kube_apiserver.api_for_token(token)
    resource = kubernetes.client.ResourceV1Api(api)
    admin = kubernetes.client.ResourceV1Api(kube_apiserver.admin_api())
    deadline = time.monotonic() + 60
    message = until_refused(
        lambda: resource.create_resource_slice(slice_body(f"{NODE_B}-edgefd.io-0", NODE_B)),
        PREFIX + "edgefd-resourceslice-restriction",
        deadline,
    )
    assert f"may not write ResourceSlices of Node {NODE_B}" in message
    created = resource.create_resource_slice(slice_body(f"{NODE_A}-edgefd.io-0", NODE_A))
    assert created.spec.node_name == NODE_A
    admin.delete_resource_slice(f"{NODE_A}-edgefd.io-0")
    # and it is not the sink: no Node rights at all (RBAC, before any policy)
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        core.patch_node(NODE_A, {"metadata": {"labels": {"edgefd.io/x": "1"}}})
    assert err.value.status == 403 and "cannot patch resource" in (err.value.body or "")


@pytest.mark.realpeer
def test_relocated_sink_token_writes_no_slices(applied: Any, kube_apiserver: Any) -> None:
    import kubernetes

    token = kube_apiserver.mint_pod_token(RELOCATED, PREFIX + SERVICE_ACCOUNT, "reloc-sink",
                                          NODE_A)  # fmt: skip
    resource = kubernetes.client.ResourceV1Api(kube_apiserver.api_for_token(token))
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        resource.create_resource_slice(slice_body(f"{NODE_A}-sink", NODE_A))
    assert err.value.status == 403 and "cannot create resource" in (err.value.body or "")
