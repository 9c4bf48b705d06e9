"""`feature-sink --mode nodefeature` with the real nfd-master as the one writer of the Node's
labels: NFD's own CRDs (from the pinned module's deployment files), nfd-master built by the
harness from the same module, the sink with exactly the rights the nodefeature option grants.
The labels reach the Node through nfd-master, leave it through nfd-master, a foreign edit of
the NodeFeature is repaired within a second, and edgefd never writes the Node. With the option's
NodeFeature policy, one node's pod-bound token cannot have nfd-master label another node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.feature_sink.peer import ROOT, Cluster, F, run_sink, wait_for, write
from tests.peers.nfd import NFDMaster, install_nfd_crds

pytestmark = pytest.mark.realpeer

NS = "edgefd-nf"  # edgefd's namespace in this test (the option's RBAC, re-namespaced)
GROUP, VERSION, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
EDGEFD = "edgefd.io"


@pytest.fixture(scope="module")
def nfd_master(cluster: Cluster, kube_apiserver: Any, tmp_path_factory: Any) -> Any:
    install_nfd_crds(kube_apiserver)
    master = NFDMaster(
        kube_apiserver,
        tmp_path_factory.mktemp("nfd-master"),
        node=kubelet_like_node(cluster),
    ).start()
    try:
        yield master
    finally:
        master.stop()


@pytest.fixture(scope="module")
def nodefeature_kubeconfig(cluster: Cluster, kube_apiserver: Any) -> str:
    """A token with the rights of k8s/overlays/nodefeature (its Role, in NS): NodeFeatures of
    that namespace only, nothing on Nodes."""
    import kubernetes.utils
    import yaml

    api = kube_apiserver.admin_api()
    path = ROOT / "k8s" / "overlays" / "nodefeature" / "nodefeature-rbac.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    # the account the option binds (its subject), in NS
    sa = next(
        s["name"] for d in docs for s in d.get("subjects") or () if s["kind"] == "ServiceAccount"
    )
    kube_apiserver.ensure_service_account(NS, sa)
    for doc in docs:
        doc["metadata"]["namespace"] = NS
        for subject in doc.get("subjects") or ():
            subject["namespace"] = NS
        try:
            kubernetes.utils.create_from_dict(api, doc)
        except kubernetes.utils.FailToCreateError as e:
            if any(getattr(x, "status", None) != 409 for x in e.api_exceptions):
                raise
    return kube_apiserver.kubeconfig_for_token(kube_apiserver.mint_token(NS, sa))


def kubelet_like_node(cluster: Cluster, labels: dict[str, str] | None = None) -> str:
    """A Node as a kubelet registers it: with annotations. nfd-master (v0.17.3) adds its own
    into /metadata/annotations by JSON Patch, which fails on a Node that has none."""
    name = cluster.new_node(labels)
    kubelet = {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    cluster.core.patch_node(name, {"metadata": {"annotations": kubelet}})
    return name


def node_writers(cluster: Cluster, node: str) -> set[str]:
    """Every field manager that ever wrote this Node (the API server records each)."""
    return {m.manager for m in cluster.node(node).metadata.managed_fields or []}


def test_labels_reach_and_leave_the_node_through_nfd_master(
    cluster, sinks, fdir, kube_apiserver, nfd_master, nodefeature_kubeconfig
):
    import kubernetes.client as k8s

    custom = k8s.CustomObjectsApi(kube_apiserver.admin_api())
    node = kubelet_like_node(cluster, {"example.com/team": "edge"})
    write(
        fdir, "usb-scan", {f"{F}/usb-fe_1a6e_089a.present": "true", f"{EDGEFD}/edgetpu.count": "1"}
    )
    write(fdir, "dt-labeller", {"beta.devicetree.org/brcm-bcm2711": "1"})
    s = sinks(
        node, fdir, "--kubeconfig", nodefeature_kubeconfig, "--mode", "nodefeature",
        "--namespace", NS, "--no-events", "--resync-interval", "1h",
    )  # fmt: skip
    t0 = time.monotonic()
    try:
        wait_for(
            lambda: cluster.labels(node).get(f"{EDGEFD}/edgetpu.count") == "1",
            30,
            "labels on the Node through nfd-master",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\nsink:\n{s.tail()}\nnfd-master:\n{nfd_master.tail()}") from e
    first = time.monotonic() - t0
    labels = cluster.labels(node)
    assert labels[f"{F}/usb-fe_1a6e_089a.present"] == "true"
    assert labels["beta.devicetree.org/brcm-bcm2711"] == "1"  # NFD denies only kubernetes.io
    assert labels["example.com/team"] == "edge"

    def nodefeature() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, node)

    # a label the producer drops leaves the Node through nfd-master
    write(fdir, "usb-scan", {f"{EDGEFD}/edgetpu.count": "1"})
    wait_for(lambda: f"{F}/usb-fe_1a6e_089a.present" not in cluster.labels(node), 30, "removed")
    assert cluster.labels(node)[f"{EDGEFD}/edgetpu.count"] == "1"

    # a foreign edit of the sink's NodeFeature is repaired within a second
    wait_for(lambda: s.metric("edgefd_sink_object_watch_up") == 1, what="the watch is open")
    obj = nodefeature()
    obj["spec"]["labels"].pop(f"{EDGEFD}/edgetpu.count")
    t1 = time.monotonic()
    custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, node, obj)
    wait_for(
        lambda: nodefeature()["spec"]["labels"].get(f"{EDGEFD}/edgetpu.count") == "1",
        5,
        "NodeFeature repaired",
    )
    assert time.monotonic() - t1 < 1.5
    wait_for(lambda: cluster.labels(node).get(f"{EDGEFD}/edgetpu.count") == "1", 30)

    # edgefd never wrote the Node: no write counted, none recorded by the API server
    assert s.metric("edgefd_sink_api_writes_total", resource="nodes", verb="PATCH") == 0
    writers = node_writers(cluster, node)
    assert not any("edgefd" in w for w in writers), writers
    assert any("nfd-master" in w for w in writers), writers
    assert nfd_master.metric("nfd_master_node_updates_total") >= 2
    print(f"first labels through nfd-master after {first:.2f} s")

    # --prune empties the NodeFeature; nfd-master then takes the labels off the Node
    assert s.stop() == 0
    p = run_sink(
        "--prune", "--mode", "nodefeature", "--namespace", NS, "--node-name", node,
        "--kubeconfig", nodefeature_kubeconfig, "--features-dir", str(Path(fdir)),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    wait_for(
        lambda: (
            not any(k.startswith((F, EDGEFD, "beta.devicetree.org")) for k in cluster.labels(node))
        ),
        30,
        "pruned through nfd-master",
    )
    assert cluster.labels(node)["example.com/team"] == "edge"


def test_a_nodes_token_cannot_label_another_node_through_nfd_master(
    cluster, kube_apiserver, nfd_master, tmp_path
):
    """nfd-master labels the Node a NodeFeature's nfd.node.kubernetes.io/node-name names. With
    the nodefeature option as kustomize renders it (relocated, as a user may: its own
    namespace and name prefix), node A's pod-bound token writes A's NodeFeature, which
    nfd-master applies to A, and cannot write one for B, neither a new one nor its own
    relabelled: B gets no label from it (before the option's NodeFeature policy, A's token
    labelled B within 2 s)."""
    import os
    import subprocess

    import kubernetes.client as k8s
    import yaml

    from tests.k8s.test_nodefeature_policy import (
        NODE_LABEL,
        Writer,
        apply,
        delete_policies,
        nodefeature,
        option_objects,
        wait_for_policy,
    )
    from tests.peers.processes import harness_binary

    ns, prefix = "edgefd-nfm", "nfm-"
    k8s_dir = ROOT / "k8s"
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": ns,
        "namePrefix": prefix,
        "resources": [os.path.relpath(k8s_dir, tmp_path)],
        "components": [os.path.relpath(k8s_dir / "overlays" / "nodefeature", tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    r = subprocess.run([str(harness_binary("kubectl")), "kustomize", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    policy = f"{prefix}edgefd-nodefeature-restriction"
    docs = option_objects([d for d in yaml.safe_load_all(r.stdout) if d], policy)
    kube_apiserver.ensure_namespace(ns)
    apply(kube_apiserver, docs)
    a, b = kubelet_like_node(cluster), kubelet_like_node(cluster)
    token = kube_apiserver.mint_pod_token(ns, f"{prefix}edgefd-feature-sink", f"{prefix}pod", a)
    sa = Writer(kube_apiserver.api_for_token(token), ns)
    admin = Writer(kube_apiserver.admin_api(), ns)
    own, evil = f"{EDGEFD}/own", f"{F}/planted-by-another-node"
    try:
        if any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs):
            wait_for_policy(sa, admin, policy)
        # its own: nfd-master applies it to A (so it reads this namespace, and is up)
        mine = sa.create(nodefeature(a, a, {own: "true"}))
        wait_for(lambda: cluster.labels(a).get(own) == "true", 30, "A labelled via nfd-master")
        # for B: a NodeFeature of B's, and its own relabelled for B
        outcomes = []
        for attempt in (
            lambda: sa.create(nodefeature(b, b, {evil: "true"})),
            lambda: sa.replace(
                {**mine, "metadata": {**mine["metadata"], "labels": {NODE_LABEL: b}},
                 "spec": {"labels": {evil: "true"}, "features": {}}}
            ),
        ):  # fmt: skip
            try:
                attempt()
                outcomes.append("accepted")
            except k8s.exceptions.ApiException as e:
                outcomes.append(f"{e.status}: {e.body}")
        # nfd-master took 2 s to label B; it gets 5 s here
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert evil not in cluster.labels(b), f"B labelled through nfd-master: {outcomes}"
            time.sleep(0.1)
        for outcome in outcomes:
            assert outcome.startswith("403") and policy in outcome, outcome
            assert f"not for Node {b}" in outcome, outcome
        assert cluster.labels(a).get(own) == "true"
    finally:
        delete_policies(kube_apiserver, docs)
        for name in (a, b):
            admin.delete(name)
