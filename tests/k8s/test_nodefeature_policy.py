"""The NodeFeature admission policy (k8s/admission-policy.yaml, in force whatever the options;
the nodefeature option, k8s/overlays/nodefeature or the chart's labels.mode=nodefeature,
grants the rights it restricts) against the real kube-apiserver with NFD's own CRDs.

With a pod-bound token of feature-sink's account (its pod on node A) and the option's rights,
the token writes its own node's NodeFeature (named after A, labelled
nfd.node.kubernetes.io/node-name A) and nothing else: not one naming B by its name or its label
(nfd-master labels the Node the label names: tests/feature_sink/test_nfd_master.py shows B is
not labelled), not A's relabelled for B, not B's own (as nfd-worker writes it), no
Kubernetes-owned label, no raw features; a token without the node claim writes none. Other
writers are not affected. Both the kustomize component's and the chart's render, applied
as they are."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.k8s.test_apiserver import _status_and_message, until_refused
from tests.k8s.test_dra_manifests import render
from tests.k8s.test_manifests import K8S, NAMESPACE, SERVICE_ACCOUNT
from tests.peers.processes import harness_binary

pytestmark = pytest.mark.realpeer

POLICY = "edgefd-nodefeature-restriction"
GROUP, VERSION, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
NODE_LABEL = "nfd.node.kubernetes.io/node-name"
NODE_A, NODE_B = "edgefd-nf-policy-a", "edgefd-nf-policy-b"
POD_A = "edgefd-nf-policy-pod-a"
FEATURE = "feature.node.kubernetes.io/usb-fe_1a6e_089a.present"
# what the option's accounts, rights and policy are: no workload, no Node policy (tested in
# tests/k8s/test_apiserver.py)
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def option_objects(docs: list[dict[str, Any]], policy: str = POLICY) -> list[dict[str, Any]]:
    """The option's accounts and rights, and its NodeFeature policy and binding."""
    rights = [d for d in docs if d["kind"] in KINDS]
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["name"] == policy]  # fmt: skip
    return rights + policies


def kubectl(kube_apiserver: Any, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(harness_binary("kubectl")), f"--kubeconfig={kube_apiserver.kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def apply(kube_apiserver: Any, docs: list[dict[str, Any]]) -> None:
    args = ("apply", "--server-side", "--force-conflicts", "--field-manager=edgefd-tests")
    r = kubectl(kube_apiserver, *args, "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert r.returncode == 0, r.stderr


def delete_policies(kube_apiserver: Any, docs: list[dict[str, Any]]) -> None:
    """The policies go, and the option's own rights (the base's stay, as other tests of the
    shared API server apply them)."""
    for d in docs:
        if d["kind"] in ("Role", "RoleBinding") or d["kind"].startswith("ValidatingAdmission"):
            namespace = d["metadata"].get("namespace")
            kubectl(kube_apiserver, "delete", d["kind"].lower(), d["metadata"]["name"],
                    *(["-n", namespace] if namespace else []), "--ignore-not-found")  # fmt: skip


def nodefeature(name: str, node: str | None, labels: dict[str, str] | None = None,
                features: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A NodeFeature as the sink writes it (tools/feature_sink/nodefeature.py), for `node`
    (None: without the node-name label)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeFeature",
        "metadata": {"name": name, "labels": {NODE_LABEL: node} if node else {}},
        "spec": {"labels": labels or {}, "features": features or {}},
    }


class Writer:
    """NodeFeatures in one namespace, as one token (or the admin) writes them."""

    def __init__(self, api: Any, namespace: str) -> None:
        import kubernetes.client as k8s

        self.objects = k8s.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.objects.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )

    def get(self, name: str) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self.objects.replace_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, body
        )

    def delete(self, name: str) -> None:
        import kubernetes.client as k8s

        try:
            self.objects.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name
            )
        except k8s.exceptions.ApiException as e:
            if e.status != 404:
                raise


def refused(write: Any, says: str) -> str:
    """The write is refused by the NodeFeature policy (403 naming it and `says`)."""
    import kubernetes.client as k8s

    with pytest.raises(k8s.exceptions.ApiException) as err:
        write()
    status, message = _status_and_message(err.value)
    assert status == 403 and POLICY in message and says in message, (status, message)
    return message


def wait_for_policy(writer: Writer, admin: Writer, policy: str = POLICY) -> None:
    """A new policy is enforced once the API server's informer has it: probe with a write
    RBAC allows and the policy refuses, for a node that does not exist (so that nothing,
    nfd-master included, acts on it while it still gets through; then it is deleted)."""
    probe = nodefeature("edgefd-nf-probe", "edgefd-nf-nowhere")
    until_refused(lambda: writer.create(probe), policy, time.monotonic() + 60,
                  undo=lambda _: admin.delete("edgefd-nf-probe"))  # fmt: skip


@pytest.fixture(scope="module", params=["k8s", "chart"])
def option(request: pytest.FixtureRequest, kube_apiserver: Any) -> Iterator[dict[str, Any]]:
    """The option's rights and policy as the component (or the chart) renders them, applied;
    nodes A and B; a pod-bound token of the sink's account on A; the policy in force."""
    from tests.peers.nfd import install_nfd_crds

    if request.param == "chart":
        from tests.k8s.test_helm import s, template

        docs = option_objects(template(*s("labels.mode=nodefeature")))
    else:
        docs = option_objects(render([K8S], [K8S / "overlays" / "nodefeature"]))
    install_nfd_crds(kube_apiserver)
    kube_apiserver.ensure_namespace(NAMESPACE)
    apply(kube_apiserver, docs)
    for node in (NODE_A, NODE_B):
        kube_apiserver.create_node(node)
    token = kube_apiserver.mint_pod_token(NAMESPACE, SERVICE_ACCOUNT, POD_A, NODE_A)
    sa = Writer(kube_apiserver.api_for_token(token), NAMESPACE)
    admin = Writer(kube_apiserver.admin_api(), NAMESPACE)
    if any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs):  # (the tests say if not)
        wait_for_policy(sa, admin)
    yield {"sa": sa, "admin": admin, "apiserver": kube_apiserver}
    delete_policies(kube_apiserver, docs)
    for name in (NODE_A, NODE_B, "edgefd-nf-probe"):
        admin.delete(name)


@pytest.fixture
def clean(option: dict[str, Any]) -> dict[str, Any]:
    for name in (NODE_A, NODE_B):
        option["admin"].delete(name)
    return option


def test_its_own_nodefeature_is_written(clean: dict[str, Any]) -> None:
    sa = clean["sa"]
    created = sa.create(nodefeature(NODE_A, NODE_A, {FEATURE: "true"}))
    created["spec"]["labels"] = {FEATURE: "true", "edgefd.io/edgetpu.count": "1"}
    sa.replace(created)
    assert sa.get(NODE_A)["spec"]["labels"]["edgefd.io/edgetpu.count"] == "1"
    # a key outside the allowed namespaces can always be taken out (the sink drops what it
    # no longer wants; an administrator may have put it there)
    admin = clean["admin"]
    obj = admin.get(NODE_A)
    obj["spec"]["labels"]["node-role.kubernetes.io/edge"] = ""
    admin.replace(obj)
    obj = sa.get(NODE_A)
    obj["spec"]["labels"] = {FEATURE: "true"}
    sa.replace(obj)


@pytest.mark.parametrize(
    ("name", "node", "says"),
    [
        (NODE_B, NODE_B, f"not for Node {NODE_B}"),
        # the attack: nfd-master labels the Node the label names, whatever the object's name
        (NODE_A, NODE_B, f"not for Node {NODE_B}"),
        (NODE_B, NODE_A, f"named after it, not {NODE_B}"),
        (NODE_A, None, "not one without the label"),
    ],
    ids=["B-for-B", "A-for-B", "B-for-A", "A-unlabelled"],
)
def test_a_nodefeature_for_another_node_is_refused(
    clean: dict[str, Any], name: str, node: str | None, says: str
) -> None:
    refused(lambda: clean["sa"].create(nodefeature(name, node, {FEATURE: "true"})), says)


def test_its_own_relabelled_for_another_node_is_refused(clean: dict[str, Any]) -> None:
    sa = clean["sa"]
    obj = sa.create(nodefeature(NODE_A, NODE_A, {FEATURE: "true"}))
    obj["metadata"]["labels"][NODE_LABEL] = NODE_B
    refused(lambda: sa.replace(obj), f"not for Node {NODE_B}")
    assert sa.get(NODE_A)["metadata"]["labels"][NODE_LABEL] == NODE_A


def test_another_nodes_own_nodefeature_is_refused(clean: dict[str, Any]) -> None:
    """B's NodeFeature, as B's nfd-worker writes it (other writers are not held): A's token
    can neither change it nor take it over for A."""
    admin, sa = clean["admin"], clean["sa"]
    obj = admin.create(nodefeature(NODE_B, NODE_B, {FEATURE: "true"}))
    obj["spec"]["labels"]["feature.node.kubernetes.io/planted"] = "true"
    refused(lambda: sa.replace(obj), f"not for Node {NODE_B}")
    obj = admin.get(NODE_B)
    obj["metadata"]["labels"][NODE_LABEL] = NODE_A
    refused(lambda: sa.replace(obj), f"not for Node {NODE_B}")
    assert admin.get(NODE_B)["spec"]["labels"] == {FEATURE: "true"}


@pytest.mark.parametrize(
    "key", ["node-role.kubernetes.io/control-plane", "kubernetes.io/arch", "k8s.io/x", "bare"]
)
def test_a_kubernetes_label_is_refused(clean: dict[str, Any], key: str) -> None:
    body = nodefeature(NODE_A, NODE_A, {FEATURE: "true", key: "x"})
    refused(lambda: clean["sa"].create(body), f"outside the allowed namespaces: {key}")


def test_raw_features_are_refused(clean: dict[str, Any]) -> None:
    flags = {"flags": {"edgefd.planted": {"elements": {"x": {}}}}}
    refused(lambda: clean["sa"].create(nodefeature(NODE_A, NODE_A, features=flags)),
            "raw features")  # fmt: skip


def test_a_token_without_the_node_claim_writes_none(clean: dict[str, Any]) -> None:
    apiserver = clean["apiserver"]
    plain = Writer(apiserver.api_for_token(apiserver.mint_token(NAMESPACE, SERVICE_ACCOUNT)),
                   NAMESPACE)  # fmt: skip
    refused(lambda: plain.create(nodefeature(NODE_A, NODE_A)), "pod-bound token")
