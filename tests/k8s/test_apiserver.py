"""k8s/ against a real kube-apiserver (the harness's, see tests/peers/apiserver.py).

1. Every object in k8s/ passes a server-side-apply dry run with strict field validation, in
   the order `kubectl apply -f k8s/` sends them; then everything is applied for real.
2. With a pod-bound token of feature-sink's ServiceAccount (pod on node-a), the
   ValidatingAdmissionPolicy lets it patch node-a's allowed labels and the ownership
   annotation, and refuses: node-b, Kubernetes-owned labels, spec/taints, other annotations,
   status, and a token that names no node; the Event policy lets it create Events about
   node-a in `default` and nothing else. Administrators, also ServiceAccounts holding every
   verb, are unaffected.
3. The real feature-sink (`--once`) labels its node through all of this, and cannot label
   another node with its token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.test_manifests import (
    NAMESPACE,
    POLICIES,
    SERVICE_ACCOUNT,
    daemonset,
    load_manifests,
)

pytestmark = pytest.mark.realpeer

ROOT = Path(__file__).resolve().parents[2]
OWNERSHIP = "edgefd.io/owned-labels"
NODE_A = "edgefd-node-a"
NODE_B = "edgefd-node-b"
POD_A = "edgefd-pod-a"
FIELD_MANAGER = "edgefd-tests"
POLICY_ACTIVE_TIMEOUT = 60.0

# What an administrator (kubelet, kubeadm) has already put on the nodes.
BASE_LABELS = {
    "kubernetes.io/hostname": "{node}",
    "kubernetes.io/os": "linux",
    "node-role.kubernetes.io/worker": "",
    "example.com/rack": "r1",
}
BASE_ANNOTATIONS = {
    "node.alpha.kubernetes.io/ttl": "0",
    "example.com/owner": "team-a",
}


# -- helpers ----------------------------------------------------------------------------------


def _kubernetes():
    import kubernetes  # edgefd's own dependency (install_requires): never skip on its absence

    return kubernetes


def _api_client_for(kube_apiserver: Any, token: str) -> Any:
    k8s = _kubernetes()
    cfg = k8s.client.Configuration()
    k8s.config.load_kube_config(
        config_file=str(kube_apiserver.kubeconfig_for_token(token)), client_configuration=cfg
    )
    cfg.retries = False
    return k8s.client.ApiClient(cfg)


def _status_and_message(exc: Exception) -> tuple[int, str]:
    body = getattr(exc, "body", None) or ""
    try:
        message = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        message = str(body)
    return int(getattr(exc, "status", 0) or 0), str(message)


def _node(core: Any, name: str) -> Any:
    return core.read_node(name)


def _json_patch(core: Any, name: str, ops: list[dict[str, Any]]) -> Any:
    return core.patch_node(name, ops, _content_type="application/json-patch+json")


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _refused(core: Any, name: str, ops: list[dict[str, Any]], *, expect: str = "") -> str:
    """Send `ops`; assert the API server refuses with 403 (optionally naming `expect`)."""
    k8s = _kubernetes()
    try:
        _json_patch(core, name, ops)
    except k8s.client.exceptions.ApiException as e:
        status, message = _status_and_message(e)
        assert status == 403, f"expected 403, got {status}: {message}"
        assert expect in message, message
        return message
    raise AssertionError(f"patch {ops} on {name} was accepted")


def until_refused(
    attempt: Callable[[], Any],
    policy: str,
    deadline: float,
    undo: Callable[[Any], Any] | None = None,
) -> str:
    """Retry `attempt` until the API server refuses it naming `policy`, and return the
    message: a new policy is enforced once the API server's informer has it. What gets
    through meanwhile is undone (`undo` of its result); past the deadline, fail."""
    k8s = _kubernetes()
    while True:
        try:
            result = attempt()
        except k8s.client.exceptions.ApiException as e:
            status, message = _status_and_message(e)
            if status == 403 and policy in message:
                return message
            if status != 403:
                raise
        else:
            if undo is not None:
                undo(result)
        if time.monotonic() > deadline:
            raise AssertionError(f"{policy} was never enforced")
        time.sleep(0.5)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(kube_apiserver: Any) -> Any:
    return kube_apiserver.admin_api()


@pytest.fixture(scope="module", params=["k8s", "chart"])
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """What is applied: k8s/, then the Helm chart's default render (tests/k8s/test_helm.py),
    so every test here holds for `helm install` as well."""
    if request.param == "chart":
        from tests.k8s.test_helm import chart_objects

        return chart_objects()
    return load_manifests()


@pytest.fixture(scope="module")
def applied(
    kube_apiserver: Any, admin: Any, manifests: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """Dry-run then apply the manifests, create two nodes, wait until the policy is
    enforced."""
    k8s = _kubernetes()
    dyn = kube_apiserver.dynamic(admin)
    docs = manifests
    report: dict[str, Any] = {"dry_run": [], "applied": []}

    def apply(doc: dict[str, Any], dry_run: bool) -> Any:
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force_conflicts": True,
            "query_params": [("fieldValidation", "Strict")],
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        return dyn.server_side_apply(
            resource, body=doc, namespace=doc["metadata"].get("namespace"), **kwargs
        )

    # The namespace first, for real: namespaced objects cannot even be dry-run without it.
    for doc in docs:
        apply(doc, dry_run=True)
        report["dry_run"].append((doc["kind"], doc["metadata"]["name"]))
        if doc["kind"] == "Namespace":
            apply(doc, dry_run=False)
    for doc in docs:
        apply(doc, dry_run=False)
        report["applied"].append((doc["kind"], doc["metadata"]["name"]))

    core = k8s.client.CoreV1Api(admin)
    for name in (NODE_A, NODE_B):
        try:
            core.delete_node(name)
        except k8s.client.exceptions.ApiException as e:
            if e.status != 404:
                raise
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {k: v.format(node=name) for k, v in BASE_LABELS.items()},
                    "annotations": dict(BASE_ANNOTATIONS),
                },
                "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
            }
        )

    token = kube_apiserver.mint_pod_token(NAMESPACE, SERVICE_ACCOUNT, POD_A, NODE_A)
    sa = _api_client_for(kube_apiserver, token)
    sa_core = k8s.client.CoreV1Api(sa)

    # The policy becomes active asynchronously (the API server's policy informer): probe with
    # a change RBAC allows and every rule of the policy refuses (another node, a Kubernetes
    # label, a foreign annotation), so that one broken rule still shows up as its own test
    # failure below; while the change still gets through, undo it.
    deadline = time.monotonic() + POLICY_ACTIVE_TIMEOUT
    label = _esc("node-role.kubernetes.io/edgefd-policy-probe")
    annotation = _esc("example.com/edgefd-policy-probe")
    probe = [
        {"op": "add", "path": f"/metadata/labels/{label}", "value": "x"},
        {"op": "add", "path": f"/metadata/annotations/{annotation}", "value": "x"},
    ]
    undo = [
        {"op": "remove", "path": f"/metadata/labels/{label}"},
        {"op": "remove", "path": f"/metadata/annotations/{annotation}"},
    ]
    until_refused(
        lambda: _json_patch(sa_core, NODE_B, probe),
        "edgefd-node-restriction",
        deadline,
        undo=lambda _: _json_patch(core, NODE_B, undo),
    )
    # and the Event policy: an Event about node-b, until refused
    until_refused(
        lambda: sa_core.create_namespaced_event("default", _event(NODE_B)),
        "edgefd-event-restriction",
        deadline,
        undo=lambda ev: core.delete_namespaced_event(ev.metadata.name, "default"),
    )

    yield {
        "core": core,
        "sa": sa,
        "sa_core": sa_core,
        "token": token,
        "dyn": dyn,
        "report": report,
    }

    # Leave the shared API server as other tests expect it: no edgefd policy (it would
    # constrain any other test using the same ServiceAccount name), no test nodes.
    for doc in reversed(docs):
        if doc["kind"] not in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            continue
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        dyn.delete(resource, name=doc["metadata"]["name"])
    for name in (NODE_A, NODE_B):
        core.delete_node(name)
    k8s.client.CoreV1Api(admin).delete_namespaced_pod(POD_A, NAMESPACE)


@pytest.fixture
def fresh_nodes(applied: dict[str, Any]) -> dict[str, Any]:
    """Reset both nodes' labels and annotations to the administrator's baseline."""
    core = applied["core"]
    for name in (NODE_A, NODE_B):
        node = _node(core, name)
        labels = {k: v.format(node=name) for k, v in BASE_LABELS.items()}
        body = {
            "metadata": {
                "labels": {k: None for k in node.metadata.labels or {} if k not in labels} | labels,
                "annotations": {
                    k: None for k in node.metadata.annotations or {} if k not in BASE_ANNOTATIONS
                }
                | BASE_ANNOTATIONS,
            },
            "spec": {"taints": None, "unschedulable": None},
        }
        core.patch_node(name, body, _content_type="application/merge-patch+json")
    return applied


# -- 1. the manifests are accepted -------------------------------------------------------------


def test_every_object_passes_a_strict_server_side_dry_run(
    applied: dict[str, Any], manifests: list[dict[str, Any]]
) -> None:
    expected = [(d["kind"], d["metadata"]["name"]) for d in manifests]
    assert applied["report"]["dry_run"] == expected
    assert applied["report"]["applied"] == expected


def test_strict_dry_run_rejects_an_unknown_field(applied: dict[str, Any]) -> None:
    """The dry run above would have caught a misspelt field: the server says so."""
    k8s = _kubernetes()
    dyn = applied["dyn"]
    bad = json.loads(json.dumps(daemonset()))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "readOnlyRootFileSystem"
    ] = True
    resource = dyn.resources.get(api_version="apps/v1", kind="DaemonSet")
    with pytest.raises(k8s.client.exceptions.ApiException) as err:
        dyn.server_side_apply(
            resource,
            body=bad,
            namespace=NAMESPACE,
            field_manager=FIELD_MANAGER,
            dry_run="All",
            query_params=[("fieldValidation", "Strict")],
        )
    # server-side apply is always strict about the schema; it answers 500 "field not declared
    # in schema" (an unknown field in a create/update with fieldValidation=Strict is a 400/422)
    status, message = _status_and_message(err.value)
    assert status in (400, 422, 500), message
    assert "readOnlyRootFileSystem" in message


@pytest.mark.parametrize("name", POLICIES)
def test_policy_type_checks_cleanly(applied: dict[str, Any], name: str) -> None:
    """Type warnings (e.g. a field Node does not have) land in the policy's status.

    Compilation errors already failed the apply above. The status is written by
    kube-controller-manager's validatingadmissionpolicy-status controller, which the
    ``kube_apiserver`` fixture runs (and nothing else of the controller manager).
    """
    k8s = _kubernetes()
    api = k8s.client.AdmissionregistrationV1Api(applied["core"].api_client)
    deadline = time.monotonic() + 30
    while True:
        policy = api.read_validating_admission_policy(name)
        status = policy.status
        if status is not None and status.type_checking is not None:
            break
        if time.monotonic() > deadline:
            pytest.fail(
                f"status.typeChecking of ValidatingAdmissionPolicy {name} not "
                "written within 30 s: is the fixture's kube-controller-manager "
                "(validatingadmissionpolicy-status-controller) running? See "
                "kube-controller-manager.log in the kube_apiserver fixture's directory.",
                pytrace=False,
            )
        time.sleep(0.5)
    warnings = status.type_checking.expression_warnings or []
    assert not warnings, [(w.field_ref, w.warning) for w in warnings]


# -- 2. the policy ----------------------------------------------------------------------------


def test_token_is_bound_to_node_a(applied: dict[str, Any]) -> None:
    k8s = _kubernetes()
    review = k8s.client.AuthenticationV1Api(applied["sa"]).create_self_subject_review({})
    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    assert user.extra["authentication.kubernetes.io/node-name"] == [NODE_A]


def test_may_patch_own_node_labels_and_ownership_annotation(fresh_nodes: dict[str, Any]) -> None:
    sa_core, core = fresh_nodes["sa_core"], fresh_nodes["core"]
    labels = {
        "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true",
        "feature.node.kubernetes.io/pci-0302_10de.present": "true",
        "beta.devicetree.org/brcm-bcm2711": "1",
        "edgefd.io/edgetpu.present": "true",
        "sub.feature.node.kubernetes.io/x": "y",
        "profile.node.kubernetes.io/edge": "true",
    }
    node = _node(core, NODE_A)
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version}
    ]
    ops += [
        {"op": "add", "path": f"/metadata/labels/{_esc(k)}", "value": v} for k, v in labels.items()
    ]
    ops.append({"op": "add", "path": f"/metadata/annotations/{_esc(OWNERSHIP)}", "value": "{}"})
    _json_patch(sa_core, NODE_A, ops)
    after = _node(core, NODE_A)
    assert labels.items() <= after.metadata.labels.items()
    assert after.metadata.annotations[OWNERSHIP] == "{}"

    # change and remove its labels, rewrite and then drop the annotation
    _json_patch(
        sa_core,
        NODE_A,
        [
            {
                "op": "replace",
                "path": f"/metadata/labels/{_esc('beta.devicetree.org/brcm-bcm2711')}",
                "value": "2",
            },
            {"op": "remove", "path": f"/metadata/labels/{_esc('edgefd.io/edgetpu.present')}"},
            {
                "op": "replace",
                "path": f"/metadata/annotations/{_esc(OWNERSHIP)}",
                "value": '{"v":1}',
            },
        ],
    )
    _json_patch(
        sa_core, NODE_A, [{"op": "remove", "path": f"/metadata/annotations/{_esc(OWNERSHIP)}"}]
    )
    after = _node(core, NODE_A)
    assert after.metadata.labels["beta.devicetree.org/brcm-bcm2711"] == "2"
    assert "edgefd.io/edgetpu.present" not in after.metadata.labels
    assert OWNERSHIP not in after.metadata.annotations
    # what the administrator set is untouched
    assert after.metadata.labels["node-role.kubernetes.io/worker"] == ""
    assert after.metadata.annotations["example.com/owner"] == "team-a"


def test_refused_on_another_node(fresh_nodes: dict[str, Any]) -> None:
    sa_core, core = fresh_nodes["sa_core"], fresh_nodes["core"]
    before = _node(core, NODE_B).metadata.labels
    key = _esc("feature.node.kubernetes.io/usb-fe_1a6e_089a.present")
    message = _refused(
        sa_core,
        NODE_B,
        [{"op": "add", "path": f"/metadata/labels/{key}", "value": "true"}],
        expect=f"may not modify Node {NODE_B}",
    )
    assert NODE_A in message
    assert _node(core, NODE_B).metadata.labels == before


@pytest.mark.parametrize(
    "ops",
    [
        [
            {
                "op": "add",
                "path": "/metadata/labels/node-role.kubernetes.io~1control-plane",
                "value": "",
            }
        ],
        [{"op": "remove", "path": "/metadata/labels/node-role.kubernetes.io~1worker"}],
        [{"op": "add", "path": "/metadata/labels/node-restriction.kubernetes.io~1x", "value": "y"}],
        [{"op": "replace", "path": "/metadata/labels/kubernetes.io~1hostname", "value": "evil"}],
        [{"op": "add", "path": "/metadata/labels/topology.kubernetes.io~1zone", "value": "z"}],
        [{"op": "add", "path": "/metadata/labels/k8s.io~1x", "value": "y"}],
        [{"op": "add", "path": "/metadata/labels/sub.k8s.io~1x", "value": "y"}],
        [{"op": "add", "path": "/metadata/labels/unqualified", "value": "y"}],
        # an allowed label does not carry a forbidden one through
        [
            {"op": "add", "path": "/metadata/labels/feature.node.kubernetes.io~1ok", "value": "1"},
            {"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1gpu", "value": ""},
        ],
    ],
    ids=[
        "add-node-role",
        "remove-node-role",
        "node-restriction",
        "change-hostname",
        "topology",
        "k8s.io",
        "sub.k8s.io",
        "unqualified",
        "mixed",
    ],
)
def test_refused_for_kubernetes_owned_labels(fresh_nodes: dict[str, Any], ops: list) -> None:
    sa_core, core = fresh_nodes["sa_core"], fresh_nodes["core"]
    before = _node(core, NODE_A).metadata.labels
    _refused(sa_core, NODE_A, ops, expect="labels outside the allowed namespaces")
    assert _node(core, NODE_A).metadata.labels == before


@pytest.mark.parametrize(
    "ops",
    [
        [
            {
                "op": "add",
                "path": "/spec/taints",
                "value": [{"key": "example.com/evil", "effect": "NoSchedule"}],
            }
        ],
        [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        [{"op": "add", "path": "/spec/providerID", "value": "evil://x"}],
    ],
    ids=["taint", "cordon", "provider-id"],
)
def test_refused_for_spec_changes(fresh_nodes: dict[str, Any], ops: list) -> None:
    sa_core, core = fresh_nodes["sa_core"], fresh_nodes["core"]
    before = _node(core, NODE_A).spec.to_dict()
    _refused(sa_core, NODE_A, ops, expect="spec")
    assert _node(core, NODE_A).spec.to_dict() == before


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "add", "path": "/metadata/annotations/example.com~1evil", "value": "1"}],
        [{"op": "replace", "path": "/metadata/annotations/example.com~1owner", "value": "me"}],
        [{"op": "remove", "path": "/metadata/annotations/node.alpha.kubernetes.io~1ttl"}],
        [{"op": "add", "path": "/metadata/annotations/edgefd.io~1other", "value": "1"}],
    ],
    ids=["add", "change", "remove", "own-domain-other-key"],
)
def test_refused_for_other_annotations(fresh_nodes: dict[str, Any], ops: list) -> None:
    sa_core, core = fresh_nodes["sa_core"], fresh_nodes["core"]
    before = _node(core, NODE_A).metadata.annotations
    _refused(sa_core, NODE_A, ops, expect="annotation")
    assert _node(core, NODE_A).metadata.annotations == before


def test_refused_for_finalizers(fresh_nodes: dict[str, Any]) -> None:
    _refused(
        fresh_nodes["sa_core"],
        NODE_A,
        [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}],
        expect="finalizers",
    )


def test_other_patch_types_are_held_to_the_same_rules(fresh_nodes: dict[str, Any]) -> None:
    """Admission sees the resulting object, so merge and strategic patches are covered too."""
    k8s = _kubernetes()
    sa_core = fresh_nodes["sa_core"]
    for content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        with pytest.raises(k8s.client.exceptions.ApiException) as err:
            sa_core.patch_node(
                NODE_A,
                {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
                _content_type=content_type,
            )
        assert err.value.status == 403
    sa_core.patch_node(
        NODE_A,
        {"metadata": {"labels": {"feature.node.kubernetes.io/merge": "ok"}}},
        _content_type="application/merge-patch+json",
    )


def test_status_and_delete_are_refused(fresh_nodes: dict[str, Any]) -> None:
    k8s = _kubernetes()
    sa_core = fresh_nodes["sa_core"]
    with pytest.raises(k8s.client.exceptions.ApiException) as err:
        sa_core.patch_node_status(
            NODE_A,
            {"status": {"capacity": {"example.com/fake": "1"}}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 403
    with pytest.raises(k8s.client.exceptions.ApiException) as err:
        sa_core.delete_node(NODE_A)
    assert err.value.status == 403


def test_token_without_a_node_claim_changes_no_node(
    kube_apiserver: Any, fresh_nodes: dict[str, Any]
) -> None:
    """A token not bound to a pod (no node-name claim) is refused even on node-a."""
    k8s = _kubernetes()
    core = fresh_nodes["core"]
    tr = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 600}}
    )
    sa_core = k8s.client.CoreV1Api(_api_client_for(kube_apiserver, tr.status.token))
    _refused(
        sa_core,
        NODE_A,
        [{"op": "add", "path": "/metadata/labels/feature.node.kubernetes.io~1x", "value": "1"}],
        expect="pod-bound token",
    )


def test_administrators_are_not_affected(fresh_nodes: dict[str, Any]) -> None:
    core = fresh_nodes["core"]
    _json_patch(
        core,
        NODE_B,
        [
            {"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1gpu", "value": ""},
            {"op": "add", "path": "/metadata/annotations/example.com~1note", "value": "x"},
        ],
    )


def test_a_service_account_holding_every_verb_is_not_affected(
    kube_apiserver: Any, fresh_nodes: dict[str, Any]
) -> None:
    """cluster-admin holds edgefd's mark too (a wildcard verb): the policies tell it apart by
    a verb nobody is granted, so another tool's all-powerful pod-bound token (a cluster
    operator's, say) keeps working on every Node."""
    k8s = _kubernetes()
    rbac = k8s.client.RbacAuthorizationV1Api(fresh_nodes["core"].api_client)
    kube_apiserver.ensure_service_account(NAMESPACE, "edgefd-test-admin")
    binding = {
        "metadata": {"name": "edgefd-test-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "edgefd-test-admin",
                      "namespace": NAMESPACE}],
    }  # fmt: skip
    try:
        rbac.create_cluster_role_binding(binding)
    except k8s.client.exceptions.ApiException as e:
        assert e.status == 409, e
    try:
        token = kube_apiserver.mint_pod_token(NAMESPACE, "edgefd-test-admin", "admin-pod", NODE_A)
        admin_sa = k8s.client.CoreV1Api(_api_client_for(kube_apiserver, token))
        deadline = time.monotonic() + 30
        while True:  # RBAC's cache takes a moment to see the new binding
            try:
                _json_patch(
                    admin_sa,
                    NODE_B,
                    [{"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1x",
                      "value": ""}],
                )  # fmt: skip
                break
            except k8s.client.exceptions.ApiException as e:
                status, message = _status_and_message(e)
                assert status == 403 and "edgefd" not in message, message
                assert time.monotonic() < deadline, message
                time.sleep(0.3)
    finally:
        rbac.delete_cluster_role_binding("edgefd-test-admin")
        k8s.client.CoreV1Api(fresh_nodes["core"].api_client).delete_namespaced_pod(
            "admin-pod", NAMESPACE
        )


def _event(node: str, name: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """An Event as the sink posts one (nodeapi.create_node_event): about a Node, named
    `<node>.<digest>`; in another namespace about a Pod there (the API server's validation
    keeps Events about cluster-scoped objects in `default`)."""
    about = {"apiVersion": "v1", "kind": "Node", "name": node}
    if namespace != "default":
        about = {"apiVersion": "v1", "kind": "Pod", "name": node, "namespace": namespace}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name or f"{node}.{os.urandom(8).hex()}", "namespace": namespace},
        "involvedObject": about,
        "reason": "LabelRejected",
        "message": "x",
        "type": "Warning",
        "source": {"component": "feature-sink"},
    }


@pytest.mark.parametrize(
    ("event", "expect"),
    [
        (_event(NODE_B), "may only create Events about that Node"),
        (_event(NODE_A, name=f"{NODE_B}.0123456789abcdef"), "named after it"),
        (_event(NODE_A, namespace="kube-system"), "namespace default"),
        (_event(NODE_A, namespace=NAMESPACE), "namespace default"),
    ],
    ids=["other-node", "other-nodes-name", "kube-system", "own-namespace"],
)
def test_events_only_about_its_own_node(
    kube_apiserver: Any, applied: dict[str, Any], event: dict[str, Any], expect: str
) -> None:
    """RBAC lets the sink create Events anywhere; admission confines it to Events in
    `default` about its own Node, named after it (so node-b's Event names stay node-b's)."""
    k8s = _kubernetes()
    ns = event["metadata"]["namespace"]
    kube_apiserver.ensure_namespace(ns)
    sa_core = applied["sa_core"]
    sa_core.create_namespaced_event("default", _event(NODE_A))  # what the sink does: allowed
    with pytest.raises(k8s.client.exceptions.ApiException) as err:
        sa_core.create_namespaced_event(ns, event)
    status, message = _status_and_message(err.value)
    assert status == 403 and "edgefd-event-restriction" in message and expect in message, message


def test_events_need_a_node_claim(kube_apiserver: Any, applied: dict[str, Any]) -> None:
    k8s = _kubernetes()
    tr = applied["core"].create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 600}}
    )
    core = k8s.client.CoreV1Api(_api_client_for(kube_apiserver, tr.status.token))
    with pytest.raises(k8s.client.exceptions.ApiException) as err:
        core.create_namespaced_event("default", _event(NODE_A))
    assert err.value.status == 403 and "pod-bound token" in (err.value.body or "")


def test_rbac_is_narrow(applied: dict[str, Any]) -> None:
    k8s = _kubernetes()
    authz = k8s.client.AuthorizationV1Api(applied["sa"])

    def can(verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
        review = authz.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "group": group,
                        "namespace": namespace,
                    }
                }
            }
        )
        return bool(review.status.allowed)

    assert can("get", "nodes") and can("patch", "nodes")
    # anywhere, for RBAC (a RoleBinding in `default` would not survive a kustomize
    # `namespace:`); the Event policy confines it (test_events_only_about_its_own_node)
    assert can("watch", "nodes") and can("list", "nodes")  # the sink watches its own Node
    assert can("create", "events", "default")
    for verb, resource, ns, group in [
        ("update", "nodes", "", ""),
        ("delete", "nodes", "", ""),
        ("patch", "nodes/status", "", ""),
        ("patch", "events", "default", ""),
        ("delete", "events", "default", ""),
        ("create", "events", "default", "events.k8s.io"),
        ("create", "resourceslices", "", "resource.k8s.io"),
        ("get", "resourceclaims", "default", "resource.k8s.io"),
        ("get", "secrets", NAMESPACE, ""),
        ("list", "pods", "", ""),
        ("create", "nodefeatures", "kube-system", "nfd.k8s-sigs.io"),
        # node mode never touches NodeFeatures: the nodefeature option grants them
        ("create", "nodefeatures", NAMESPACE, "nfd.k8s-sigs.io"),
        ("update", "nodefeatures", NAMESPACE, "nfd.k8s-sigs.io"),
        ("delete", "nodefeatures", NAMESPACE, "nfd.k8s-sigs.io"),
    ]:
        assert not can(verb, resource, ns, group), f"{verb} {resource} in {ns or 'cluster'}"


# -- 3. the real feature-sink through all of it ---------------------------------------------------


def _run_sink(kube_apiserver: Any, token: str, node: str, features: Path) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEFD_", "KUBE"))}
    env.pop("NODE_NAME", None)
    return subprocess.run(
        [
            sys.executable,
            *("-m", "edgefd.feature_sink", "--once"),
            f"--kubeconfig={kube_apiserver.kubeconfig_for_token(token)}",
            f"--node-name={node}",
            f"--features-dir={features}",
            "--listen=",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_feature_sink_labels_its_own_node_and_not_another(
    kube_apiserver: Any, fresh_nodes: dict[str, Any], tmp_path: Path
) -> None:
    core = fresh_nodes["core"]
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "usb-scan").write_text(
        "feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true\nedgefd.io/edgetpu.present=true\n"
    )
    # refused by the sink itself (reported as an Event), never sent to the API server
    (features / "evil").write_text("node-role.kubernetes.io/control-plane=true\n")
    proc = _run_sink(kube_apiserver, fresh_nodes["token"], NODE_A, features)
    assert proc.returncode == 0, proc.stderr
    node = _node(core, NODE_A)
    assert node.metadata.labels["feature.node.kubernetes.io/usb-fe_1a6e_089a.present"] == "true"
    assert node.metadata.labels["edgefd.io/edgetpu.present"] == "true"
    assert "node-role.kubernetes.io/control-plane" not in node.metadata.labels
    assert OWNERSHIP in node.metadata.annotations
    events = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={NODE_A}"
    ).items
    assert events, "the refused label should have been reported as an Event"

    before = _node(core, NODE_B).metadata
    proc = _run_sink(kube_apiserver, fresh_nodes["token"], NODE_B, features)
    assert proc.returncode != 0, proc.stdout
    after = _node(core, NODE_B).metadata
    assert after.labels == before.labels and after.annotations == before.annotations
