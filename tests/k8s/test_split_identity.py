"""k8s/overlays/split-identity (issue 34 item 3): the default is one DaemonSet, one pod; this
component renders the two-DaemonSet arrangement split by identity, for DRA clusters that want
it. devplugin and device-keeper run in DaemonSet edgefd-devplugin as ServiceAccount
edgefd-devplugin, exactly as they run in the one pod (the same containers, volumes and pod
settings); DRA's rights are bound to that account alone; with no-devplugin it is refused in
either order, in one line naming the rule (every rule: tests/k8s/test_refusals.py). (Every
order with every other component: tests/k8s/test_kustomize.py; the chart's splitByIdentity:
tests/k8s/test_profiles.py.)"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.test_dra_manifests import render
from tests.k8s.test_kustomize import (
    OVERLAYS,
    assert_refused,
    system_kubectl,
    write_kustomization,
)
from tests.k8s.test_manifests import (
    DEVPLUGIN_SA,
    K8S,
    LABELS_DS,
    MARK_DEVPLUGIN,
    SERVICE_ACCOUNT,
    SPLIT_DS,
    TOKEN_PATH,
    all_containers,
    container,
    daemonset,
    daemonsets,
    find,
    granted_to,
    pod_spec,
)
from tests.peers.processes import harness_binary

SPLIT = OVERLAYS / "split-identity"
DRA = OVERLAYS / "dra"
PLUGIN = ("devplugin", "device-keeper")


def mounted(spec: dict[str, Any]) -> set[str]:
    return {m["name"] for _, c in all_containers(spec) for m in c.get("volumeMounts", [])}


def token_users(spec: dict[str, Any]) -> set[str]:
    return {
        c["name"]
        for _, c in all_containers(spec)
        for m in c.get("volumeMounts", [])
        if m["mountPath"] == TOKEN_PATH
    }


@pytest.mark.parametrize("dra", [False, True], ids=["device-plugin", "dra"])
def test_two_daemonsets_each_container_as_in_the_one_pod(dra: bool) -> None:
    one = render([K8S], [DRA] if dra else [])
    two = render([K8S], [DRA, SPLIT] if dra else [SPLIT])
    assert [d["metadata"]["name"] for d in daemonsets(one)] == [LABELS_DS]
    assert [d["metadata"]["name"] for d in daemonsets(two)] == [LABELS_DS, SPLIT_DS]
    whole = pod_spec(daemonset(one))
    labels, plugin = pod_spec(daemonset(two)), pod_spec(daemonset(two, SPLIT_DS))
    assert [c["name"] for c in labels["containers"]] == ["feature-sink"]
    # devplugin, the one pod's first init container (a native sidecar), is the first
    # container of its own pod: nothing comes before it there
    assert whole["initContainers"][0]["name"] == "devplugin"
    assert labels["initContainers"] == whole["initContainers"][1:]
    assert "initContainers" not in plugin
    assert [c["name"] for c in plugin["containers"]] == list(PLUGIN)
    sidecar = dict(container(whole, "devplugin"))
    assert sidecar.pop("restartPolicy") == "Always"
    assert container(plugin, "devplugin") == sidecar
    # securityContext, probes, ports, mounts: all as in the one pod
    assert container(plugin, "device-keeper") == container(whole, "device-keeper")
    # feature-sink as in the one pod, less the read-only mounts of devplugin's and the keeper's
    # notices: neither is here, and their directories stay in their pod, read by nobody
    gone = ("/run/edgefd/notices/devplugin", "/run/edgefd/notices/device-keeper")
    sink = copy.deepcopy(container(whole, "feature-sink"))
    sink["volumeMounts"] = [m for m in sink["volumeMounts"] if m["mountPath"] not in gone]
    assert len(sink["volumeMounts"]) == len(container(whole, "feature-sink")["volumeMounts"]) - 2
    assert container(labels, "feature-sink") == sink
    # each pod has exactly the volumes its containers mount, as the one pod has them
    volumes = {v["name"]: v for v in whole["volumes"]}
    for spec in (labels, plugin):
        assert {v["name"] for v in spec["volumes"]} == mounted(spec)
        assert all(v == volumes[v["name"]] for v in spec["volumes"])
        own = ("initContainers", "containers", "volumes", "serviceAccountName")
        rest = {k: v for k, v in spec.items() if k not in own}
        assert rest == {k: v for k, v in whole.items() if k not in own}
    # a token only where the API is called: the sink, and devplugin only in DRA mode
    assert token_users(whole) == ({"feature-sink", "devplugin"} if dra else {"feature-sink"})
    assert token_users(labels) == {"feature-sink"}
    assert token_users(plugin) == ({"devplugin"} if dra else set())


def test_separate_accounts_and_dra_rights_on_devplugins_only() -> None:
    for order in ([DRA, SPLIT],):  # split-identity last (test_kustomize.py: the other order)
        docs = render([K8S], order)
        assert pod_spec(daemonset(docs))["serviceAccountName"] == SERVICE_ACCOUNT
        assert pod_spec(daemonset(docs, SPLIT_DS))["serviceAccountName"] == DEVPLUGIN_SA
        sa = find(docs, "ServiceAccount", DEVPLUGIN_SA)
        assert sa["automountServiceAccountToken"] is False
        binding = find(docs, "ClusterRoleBinding", "edgefd-dra")
        assert [s["name"] for s in binding["subjects"]] == [DEVPLUGIN_SA]
        sink = {r for _, _, r, _ in granted_to(docs, SERVICE_ACCOUNT)}
        plugin = {r for _, _, r, _ in granted_to(docs, DEVPLUGIN_SA)}
        assert not sink & {"resourceslices", "resourceclaims", "resourceclaims/status"}
        assert "resourceslices" in plugin and not plugin & {"events", "nodefeatures"}
        # the marks moved with devplugin; the labels DaemonSet names its account
        marks = daemonset(docs, SPLIT_DS)["metadata"]["annotations"]
        assert marks[MARK_DEVPLUGIN] == "true" and marks["edgefd.io/device-api"] == "dra"
        assert daemonset(docs)["metadata"]["annotations"] == {
            "edgefd.io/devplugin-account": DEVPLUGIN_SA
        }


def test_the_one_pod_binds_dra_to_its_own_account() -> None:
    """The trade-off the default makes (k8s/pod-template.yaml): one account, both rights."""
    docs = render([K8S], [DRA])
    binding = find(docs, "ClusterRoleBinding", "edgefd-dra")
    assert [s["name"] for s in binding["subjects"]] == [SERVICE_ACCOUNT]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"] == [
        SERVICE_ACCOUNT
    ]


@pytest.mark.parametrize("kubectl", ["system", "harness"])
@pytest.mark.parametrize("order", [("split-identity", "no-devplugin"),
                                   ("no-devplugin", "split-identity")])  # fmt: skip
def test_with_no_devplugin_it_is_refused(kubectl: str, order: tuple[str, str], tmp_path: Path):
    """Nothing to split off: kustomize stops at the later one, in one line naming the rule
    (split-identity before it copies anything), and in no words of its own."""
    binary = system_kubectl() if kubectl == "system" else str(harness_binary("kubectl"))
    write_kustomization(tmp_path, order)
    r = subprocess.run([binary, "kustomize", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_refused(r, order[1], "list-split-identity-or-no-devplugin-not-both")
