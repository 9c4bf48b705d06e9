"""The uninstall prune as a Job (issue 25 item 6): k8s/prune for kustomize users and the chart's
post-delete hook (labels.pruneOnUninstall) run the image's own `feature-sink --prune
--all-nodes` with an account of their own that may list, read and patch Nodes and nothing
else, and that goes away with the Job.

Offline: the kustomize Job and the chart's hook are the same objects; the pod is Pod Security
"restricted"; the hook's annotations make Helm create the account first and delete it after.
Real API server: the exact command of the Job, with a token of that account, prunes every
labelled Node and is refused anything else; `helm uninstall` creates the hook Job and removes
its rights (nothing runs pods here, so the Job itself cannot finish: the e2e does that).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.test_dra_manifests import render
from tests.k8s.test_helm import (
    CHART,
    HELM_LABELS,
    NO_GATE,
    SHARED,
    helm,
    helm_uninstall,
    kubectl,
    s,
    template,
)
from tests.k8s.test_manifests import schema_errors

ROOT = Path(__file__).resolve().parents[2]
PRUNE = ROOT / "k8s" / "prune"
HOOK = "helm.sh/hook"
COMMAND = ["feature-sink", "--prune", "--all-nodes"]
F = "feature.node.kubernetes.io"


def kustomized() -> list[dict[str, Any]]:
    return render([PRUNE], [])


def hooked(*extra: str) -> list[dict[str, Any]]:
    docs = template(*s("labels.pruneOnUninstall=true"), *extra)
    return [d for d in docs if HOOK in (d["metadata"].get("annotations") or {})]


def job_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [d for d in docs if d["kind"] == "Job"]
    return job


def comparable(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects without what differs by design: the namespace (the chart's hook runs in the
    release's), Helm's labels and hook annotations, the Job's TTL (Helm deletes the Job itself
    on success; a failed one goes after a day)."""
    out = {}
    for d in copy.deepcopy(docs):
        if d["kind"] == "Namespace":
            continue
        md = d["metadata"]
        md.pop("namespace", None)
        md.pop("annotations", None)
        for k in HELM_LABELS:
            md.get("labels", {}).pop(k, None)
        md.get("labels", {}).pop("app.kubernetes.io/part-of", None)
        for subject in d.get("subjects", []):
            subject.pop("namespace", None)
        if d["kind"] == "Job":
            d["spec"].pop("ttlSecondsAfterFinished", None)
            c = d["spec"]["template"]["spec"]["containers"][0]
            c["image"] = "IMAGE"
        out[(d["kind"], md["name"])] = d
    return out


# -- offline ---------------------------------------------------------------------------------


def test_kustomize_job_and_chart_hook_are_the_same_objects() -> None:
    k, h = kustomized(), hooked()
    assert comparable(k) == comparable(h)
    assert {d["kind"] for d in k} == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Job",
    }
    for d in k + h:
        if d["kind"] != "Namespace":
            assert schema_errors(d) is None, (d["kind"], d["metadata"]["name"])


def test_the_job_runs_the_images_prune_unprivileged() -> None:
    job = job_of(kustomized())
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == COMMAND
    assert c["image"] == f"ghcr.io/edgefd/edgefd:{__import__('edgefd').__version__}"
    assert pod["serviceAccountName"] == "edgefd-prune"
    assert pod.get("automountServiceAccountToken", True) is True  # its token is what it uses
    assert not {"hostNetwork", "hostPID", "hostIPC", "volumes"} & set(pod)
    sec = {**pod["securityContext"], **c["securityContext"]}
    assert sec["runAsNonRoot"] is True and sec["runAsUser"] != 0
    assert sec["allowPrivilegeEscalation"] is False and sec["privileged"] is False
    assert sec["readOnlyRootFilesystem"] is True and sec["capabilities"] == {"drop": ["ALL"]}
    assert sec["seccompProfile"] == {"type": "RuntimeDefault"}
    (ns,) = [d for d in kustomized() if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (role,) = [d for d in kustomized() if d["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                              "verbs": ["list", "get", "patch"]}]  # fmt: skip


def test_the_hook_is_helms_to_create_first_and_delete_after() -> None:
    docs = hooked()
    for d in docs:
        ann = d["metadata"]["annotations"]
        assert ann[HOOK] == "post-delete"
        assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        if d["kind"] != "Job":
            assert int(ann["helm.sh/hook-weight"]) < int(
                job_of(docs)["metadata"]["annotations"]["helm.sh/hook-weight"]
            )
        if d["metadata"].get("namespace"):
            assert d["metadata"]["namespace"] == "default"  # the release's, not edgefd's
    # nothing of it without the value, in nodefeature mode, or without labels
    assert not [d for d in template() if d["metadata"]["name"] == "edgefd-prune"]
    for extra in (("labels.mode=nodefeature",), ("labels.enabled=false",)):
        docs = template(*s("labels.pruneOnUninstall=true", *extra))
        assert not [d for d in docs if d["metadata"]["name"] == "edgefd-prune"], extra


def test_the_hook_refuses_the_namespace_the_uninstall_deletes() -> None:
    r = helm("template", "edgefd", str(CHART), "--namespace", "edgefd",
             *s("labels.pruneOnUninstall=true"), check=False)  # fmt: skip
    assert r.returncode != 0 and "install the release into another namespace" in r.stderr
    # an existing namespace it does not create is fine
    r = helm("template", "edgefd", str(CHART), "--namespace", "edgefd",
             *s("labels.pruneOnUninstall=true", "namespace.create=false"))  # fmt: skip
    assert "kind: Job" in r.stdout


# -- real API server -------------------------------------------------------------------------


def label_with_sink(kube_apiserver: Any, node: str, tmp_path: Path) -> None:
    fdir = tmp_path / node
    fdir.mkdir()
    (fdir / "usb-scan").write_text(f"{F}/usb-fe_1a6e_089a.present=true\n")
    p = subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", "--once", "--listen=",
         "--kubeconfig", str(kube_apiserver.kubeconfig), "--node-name", node,
         "--features-dir", str(fdir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr


@pytest.mark.realpeer
def test_the_jobs_account_prunes_every_node_and_may_do_nothing_else(
    kube_apiserver: Any, tmp_path: Path
) -> None:
    from tests.feature_sink.peer import Cluster, forget_other_tests_nodes

    forget_other_tests_nodes(Cluster(kube_apiserver))  # the session's API server is shared
    r = kubectl(kube_apiserver, "apply", "--server-side", "-k", str(PRUNE))
    assert r.returncode == 0, r.stderr
    try:
        nodes = ["prune-job-a", "prune-job-b"]
        for n in nodes:
            kube_apiserver.create_node(n, {"kubernetes.io/hostname": n})
            label_with_sink(kube_apiserver, n, tmp_path)
        token = kube_apiserver.mint_token("edgefd-prune", "edgefd-prune")
        as_job = kube_apiserver.kubeconfig_for_token(token)
        p = subprocess.run(
            [sys.executable, "-m", "edgefd.feature_sink", *COMMAND[1:], "--kubeconfig", as_job],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 0, p.stderr
        for n in nodes:
            md = kube_apiserver.get_node(n).metadata
            assert f"{F}/usb-fe_1a6e_089a.present" not in md.labels
            assert "edgefd.io/owned-labels" not in (md.annotations or {})
            assert f"{n}: remove  {F}/usb-fe_1a6e_089a.present (was true)" in p.stdout
        # and nothing but Nodes: no Events, no Secrets, no other Node verbs
        for verb, what in (("create", "events"), ("list", "secrets"), ("delete", "nodes")):
            r = kubectl(kube_apiserver, "auth", "can-i", verb, what, "-A",
                        "--as=system:serviceaccount:edgefd-prune:edgefd-prune")  # fmt: skip
            assert r.stdout.strip() == "no", (verb, what)
    finally:
        r = kubectl(kube_apiserver, "delete", "-k", str(PRUNE), "--wait=false")
        assert r.returncode == 0, r.stderr
    for kind in ("clusterrole", "clusterrolebinding"):
        r = kubectl(kube_apiserver, "get", kind, "edgefd-prune")
        assert "NotFound" in r.stderr, (kind, r.stdout)


@pytest.mark.realpeer
def test_helm_uninstall_runs_the_hook_and_removes_its_rights(kube_apiserver: Any) -> None:
    """Helm creates the account and its rights, then the Job; here no node runs the Job, so
    the hook times out, and Helm still deletes the rights (the failed Job stays to be read)."""
    for kind, ns, name in SHARED:
        kubectl(kube_apiserver, "delete", kind, name, "--ignore-not-found",
                *(["-n", ns] if ns else []))  # fmt: skip
    args = [f"--kubeconfig={kube_apiserver.kubeconfig}", "--namespace=default"]
    name = "edgefd-prune-hook"
    values = s("namespace.name=edgefd-prune-hook", "labels.pruneOnUninstall=true", NO_GATE)
    helm("install", name, str(CHART), *args, *values)
    try:
        r = helm("uninstall", name, *args, "--timeout", "20s", check=False, timeout=180)
        assert r.returncode != 0 and "Job/default/edgefd-prune not ready" in r.stderr, r.stderr
        job = json.loads(kubectl(kube_apiserver, "get", "job", "edgefd-prune", "-n", "default",
                                 "-o", "json").stdout)  # fmt: skip
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == COMMAND
        for kind, ns in (("serviceaccount", "default"), ("clusterrole", None),
                         ("clusterrolebinding", None)):  # fmt: skip
            r = kubectl(kube_apiserver, "get", kind, "edgefd-prune", *(["-n", ns] if ns else []))
            assert "NotFound" in r.stderr, (kind, r.stdout)
    finally:
        helm_uninstall(kube_apiserver, name, *args, "--no-hooks", check=False)
        kubectl(kube_apiserver, "delete", "job", "edgefd-prune", "-n", "default",
                "--ignore-not-found", "--cascade=background")  # fmt: skip
