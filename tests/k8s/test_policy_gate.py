"""The policy gate (issue 46 item 3, charts/edgefd/templates/policy-gate.yaml): before Helm
stores any right of the release, a hook Job waits with `kubectl-edgefd policies` until the API
server enforces the admission policies, shown by a canary policy stored after them.

Against the real API server (the harness's): the chart's own canary, the Job's account and its
command, run here as the Job would run it (these API servers have no node for the Job; the real
node's Helm scenarios run it). The claim the gate rests on, that once the canary is enforced
every policy stored before it is too, is tested directly: a policy stored just before the
canary refuses its request the moment the gate returns, round after round."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.test_helm import CHART, helm, s

NS = "edgefd-gate"
CANARY = "edgefd-policies-in-force"
WEIGHTS = {  # Helm applies hooks by weight: the gate's rights, the policies, the canary, the Job
    ("ServiceAccount", "edgefd-policy-gate"): -30,
    ("Role", "edgefd-policy-gate"): -30,
    ("RoleBinding", "edgefd-policy-gate"): -30,
    ("ValidatingAdmissionPolicy", CANARY): -5,
    ("ValidatingAdmissionPolicyBinding", CANARY): -4,
    ("Job", "edgefd-policy-gate"): 0,
}


def gate(*args: str, chart: Path = CHART) -> list[dict[str, Any]]:
    out = helm("template", "edgefd", str(chart), "--namespace", NS, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d and is_gate(d)]


def is_gate(d: dict[str, Any]) -> bool:
    return d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "policy-gate"


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (d,) = [d for d in docs if d["kind"] == kind]
    return d


def expected(docs: list[dict[str, Any]]) -> str:
    """What the Job waits for (its --expect), as the chart renders it."""
    (arg,) = [a for a in by_kind(docs, "Job")["spec"]["template"]["spec"]["containers"][0][
        "command"] if a.startswith("--expect=")]  # fmt: skip
    return arg.removeprefix("--expect=")


# -- the render ---------------------------------------------------------------------------------


def test_the_gate_comes_after_the_policies_and_before_any_right() -> None:
    docs = gate()
    assert {(d["kind"], d["metadata"]["name"]): int(d["metadata"]["annotations"][
        "helm.sh/hook-weight"]) for d in docs} == WEIGHTS  # fmt: skip
    for d in docs:
        ann = d["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == "pre-install,pre-upgrade,pre-rollback", d["metadata"]
        # stored again at every operation (after the policies), gone once the hooks succeed
        assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # the policies' own hook weights are -20 and -10: the canary and its binding come after
    policies = helm("template", "edgefd", str(CHART), "--namespace", NS).stdout
    weights = {int(d["metadata"]["annotations"]["helm.sh/hook-weight"])
               for d in yaml.safe_load_all(policies) if d and not is_gate(d)
               and "helm.sh/hook" in d["metadata"].get("annotations", {})
               and "pre-install" in d["metadata"]["annotations"]["helm.sh/hook"]}  # fmt: skip
    assert weights == {-20, -10}
    # the one right: dry-running a ConfigMap in the release's namespace
    assert by_kind(docs, "Role")["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}
    ]
    assert by_kind(docs, "Role")["metadata"]["namespace"] == NS


def test_the_job_runs_the_probe_as_the_canary_says_it() -> None:
    docs = gate(*s("policyGate.wait=45s"))
    pod = by_kind(docs, "Job")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:3] == ["kubectl-edgefd", "policies", f"--namespace={NS}"]
    assert "--wait=45s" in c["command"]
    assert pod["serviceAccountName"] == "edgefd-policy-gate"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert "hostNetwork" not in pod
    on = by_kind(
        gate(*s("hostNetwork=true", "apiServer.host=127.0.0.1", "apiServer.port=6443")), "Job"
    )
    spec = on["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"} in spec["containers"][0]["env"]
    canary = by_kind(docs, "ValidatingAdmissionPolicy")["spec"]
    assert canary["validations"][0]["message"].endswith(": " + expected(docs))
    assert expected(docs).startswith("revision 1, policies ")


def test_the_gate_is_left_out_when_asked_or_without_the_policies_first() -> None:
    assert gate(*s("policyGate.enabled=false")) == []
    assert gate(*s("policiesFirst=false")) == []


def test_another_policy_is_another_expectation(tmp_path: Path) -> None:
    """A change to any policy changes what the Job waits for: an older canary still loaded
    (the same revision's, from before) does not count."""
    base = expected(gate())
    for rel in ("admission-policy.yaml", "dra/admission-policy.yaml"):
        chart = tmp_path / rel.replace("/", "-") / "edgefd"
        shutil.copytree(CHART, chart)
        f = chart / "templates" / rel
        f.write_text(f.read_text().replace("failurePolicy: Fail", "failurePolicy: Ignore", 1))
        other = expected(gate(chart=chart))
        assert other != base and other.split(",")[0] == base.split(",")[0], rel


# -- against the real API server ----------------------------------------------------------------


def kubectl(kube_apiserver: Any, *args: str, stdin: str | None = None) -> Any:
    from tests.k8s.monitoring import kubectl as run

    return run(kube_apiserver, *args, stdin=stdin)


def apply(kube_apiserver: Any, docs: list[dict[str, Any]]) -> None:
    r = kubectl(kube_apiserver, "apply", "--server-side", "-f", "-",
                stdin="\n---\n".join(json.dumps(d) for d in docs))  # fmt: skip
    assert r.returncode == 0, r.stderr


def delete(kube_apiserver: Any, kind: str, *names: str) -> None:
    r = kubectl(kube_apiserver, "delete", kind, *names, "--ignore-not-found", "--wait")
    assert r.returncode == 0, r.stderr


def policies(kube_apiserver: Any, kubeconfig: str, *args: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "edgefd.kubectl_edgefd", "policies", "-n", NS,
         f"--kubeconfig={kubeconfig}", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def as_the_job(docs: list[dict[str, Any]], kubeconfig: str) -> Any:
    """The Job's container command, word for word, with the token of its account (the pod's
    in-cluster configuration, here a kubeconfig)."""
    (c,) = by_kind(docs, "Job")["spec"]["template"]["spec"]["containers"]
    assert c["command"][0] == "kubectl-edgefd" and not c.get("args")
    return subprocess.run(
        [sys.executable, "-m", "edgefd.kubectl_edgefd", *c["command"][1:],
         f"--kubeconfig={kubeconfig}"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.fixture
def gated(kube_apiserver: Any) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """The gate's account and rights in NS (as the hooks of weight -30 leave them), and a
    kubeconfig with a token of that account (the Job's); removed after."""
    kubectl(kube_apiserver, "create", "namespace", NS)
    docs = gate()
    apply(kube_apiserver, [d for d in docs if d["kind"] in ("ServiceAccount", "Role",
                                                           "RoleBinding")])  # fmt: skip
    token = kube_apiserver.mint_token(NS, "edgefd-policy-gate")
    yield docs, kube_apiserver.kubeconfig_for_token(token)
    delete(kube_apiserver, "validatingadmissionpolicybinding", CANARY, "edgefd-gate-test")
    delete(kube_apiserver, "validatingadmissionpolicy", CANARY, "edgefd-gate-test")
    kubectl(kube_apiserver, "delete", "rolebinding,role,serviceaccount", "edgefd-policy-gate",
            "-n", NS, "--ignore-not-found")  # fmt: skip


def canary(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]


def stored_before(name: str) -> list[dict[str, Any]]:
    """A policy standing for the chart's, stored before the canary: it refuses a dry run of
    ConfigMap `name` in NS."""
    meta = {"name": "edgefd-gate-test"}
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
              "resources": ["configmaps"]}]  # fmt: skip
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": meta, "spec": {
             "failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": rules, "namespaceSelector": {
                 "matchLabels": {"kubernetes.io/metadata.name": NS}}},
             "matchConditions": [{"name": "probe", "expression":
                                  f"request.dryRun == true && object.metadata.name == '{name}'"}],
             "validations": [{"expression": "false", "message": "stored before the canary"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": meta,
         "spec": {"policyName": "edgefd-gate-test", "validationActions": ["Deny"]}},
    ]  # fmt: skip


def refused(kube_apiserver: Any, name: str) -> str | None:
    r = kubectl(kube_apiserver, "create", "configmap", name, "-n", NS, "--dry-run=server")
    return r.stderr if r.returncode else None


@pytest.mark.realpeer
def test_without_the_canary_the_gate_waits_and_fails(kube_apiserver: Any, gated: Any) -> None:
    docs, kubeconfig = gated
    t0 = time.monotonic()
    r = policies(kube_apiserver, kubeconfig, f"--expect={expected(docs)}", "--wait=1.5s")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - t0 >= 1.5
    assert "not in force after 1.5 s" in r.stderr
    assert "admitted: the canary policy is not enforced yet" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.realpeer
def test_a_probe_refused_by_rbac_fails_at_once(kube_apiserver: Any, gated: Any) -> None:
    docs, _ = gated
    other = kube_apiserver.kubeconfig_for_token(kube_apiserver.mint_token(NS, "not-the-gate"))
    t0 = time.monotonic()
    r = policies(kube_apiserver, other, f"--expect={expected(docs)}", "--wait=60s")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - t0 < 30  # no wait: more time will not grant the right
    assert "cannot create resource" in r.stderr and "configmaps" in r.stderr, r.stderr


@pytest.mark.realpeer
def test_an_older_canary_does_not_count(kube_apiserver: Any, gated: Any) -> None:
    docs, kubeconfig = gated
    apply(kube_apiserver, canary(docs))
    r = policies(kube_apiserver, kubeconfig, "--expect=revision 2, policies 0000", "--wait=2s")
    assert r.returncode == 1, r.stderr
    assert f"edgefd's admission policies are in force: {expected(docs)}" in r.stderr  # the last


@pytest.mark.realpeer
def test_once_the_gate_returns_every_policy_stored_before_the_canary_is_in_force(
    kube_apiserver: Any, gated: Any
) -> None:
    """Round after round from nothing loaded: a policy, then the canary (stored again, as
    before-hook-creation does), then the gate; the policy refuses at once when it returns."""
    docs, kubeconfig = gated
    waited = []
    for i in range(4):
        name = f"edgefd-gate-probe-{i}"
        delete(kube_apiserver, "validatingadmissionpolicybinding", CANARY, "edgefd-gate-test")
        delete(kube_apiserver, "validatingadmissionpolicy", CANARY, "edgefd-gate-test")
        apply(kube_apiserver, stored_before(name))
        apply(kube_apiserver, canary(docs))
        r = as_the_job(docs, kubeconfig)
        assert r.returncode == 0, r.stderr
        said = refused(kube_apiserver, name)
        assert said is not None and "stored before the canary" in said, (i, said, r.stdout)
        waited.append(float(r.stdout.split("after ")[1].split(" s")[0]))
        assert r.stdout.startswith("edgefd's admission policies are in force (revision 1")
    print("the gate waited", waited)
