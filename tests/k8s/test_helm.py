"""The Helm chart (charts/edgefd) with the real helm (the harness's, from helm.sh/helm/v4).

Offline: `helm lint --strict` and `helm template` of every documented value set; the default
render is the kustomize base's objects, and each option is the matching k8s/overlays component
(a diff of the objects, normalised only as `normalise` says and justifies); every render is
valid against the Kubernetes schema and least-privilege; values reach the objects; bad values
are refused. Real API server: each rendered set passes a strict server-side dry run; `helm
install` (server-side apply, Helm 4's default), an upgrade to another mode and `helm uninstall`
work; the admission policy holds for a release in another namespace; the PodMonitor appears
exactly when the API server serves the Prometheus Operator's kind. The admission-policy tests
of tests/k8s/test_apiserver.py also run on the chart's default render (its `manifests`).
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.monitoring import (
    PODMONITOR_API,
    PROMETHEUSRULE_API,
    kubectl,
    served,
    uninstall,
)
from tests.k8s.test_kustomize import keyed, overlay_dirs
from tests.k8s.test_manifests import (
    DEVPLUGIN_DS,
    DRA_POLICIES,
    K8S,
    NAMESPACE,
    POLICIES,
    SERVICE_ACCOUNT,
    container,
    daemonset,
    daemonsets,
    every_container,
    pod_spec,
    pod_violations,
    schema_errors,
    setting,
)
from tests.peers.processes import REPO_ROOT, harness_binary

CHART = REPO_ROOT / "charts" / "edgefd"
RELEASE = "edgefd"


def s(*pairs: str) -> list[str]:
    return [a for p in pairs for a in ("--set", p)]


# Every documented value combination (charts/edgefd/values.yaml, README.md), and the
# k8s/overlays components each one must equal (None: no kustomize counterpart).
VALUE_SETS: dict[str, tuple[list[str], tuple[str, ...] | None]] = {
    "default": ([], ()),
    "nodefeature": (s("labels.mode=nodefeature"), ("nodefeature",)),
    "no-devplugin": (s("devicePlugin.enabled=false"), ("no-devplugin",)),
    "hostnetwork": (s("hostNetwork=true"), ("hostnetwork",)),
    "dra": (s("devicePlugin.api=dra"), ("dra",)),
    "nodefeature+no-devplugin": (
        s("labels.mode=nodefeature", "devicePlugin.enabled=false"),
        ("nodefeature", "no-devplugin"),
    ),
    "hostnetwork+nodefeature+no-devplugin": (
        s("hostNetwork=true", "labels.mode=nodefeature", "devicePlugin.enabled=false"),
        ("hostnetwork", "nodefeature", "no-devplugin"),
    ),
    "nodefeature+dra": (
        s("labels.mode=nodefeature", "devicePlugin.api=dra"),
        ("nodefeature", "dra"),
    ),
    "no-device-keeper": (s("deviceKeeper.enabled=false"), ("no-device-keeper",)),
    "no-device-keeper+dra": (
        s("deviceKeeper.enabled=false", "devicePlugin.api=dra"),
        ("no-device-keeper", "dra"),
    ),
    "crio": (s("criSocket=/var/run/crio/crio.sock"), None),
    "hostnetwork+no-device-keeper": (
        s("hostNetwork=true", "deviceKeeper.enabled=false"),
        ("hostnetwork", "no-device-keeper"),
    ),
    # the distribution profiles (issue 34 item 1; tests/k8s/test_profiles.py: their paths)
    "k3s": (s("distribution=k3s"), ("k3s",)),
    "microk8s": (s("distribution=microk8s"), ("microk8s",)),
    "k0s": (s("distribution=k0s"), ("k0s",)),
    "microk8s+dra": (s("distribution=microk8s", "devicePlugin.api=dra"), ("microk8s", "dra")),
    "k0s+dra+hostnetwork": (
        s("distribution=k0s", "devicePlugin.api=dra", "hostNetwork=true"),
        ("dra", "hostnetwork", "k0s"),
    ),
    "k0s+no-device-keeper": (
        s("distribution=k0s", "deviceKeeper.enabled=false"),
        ("no-device-keeper", "k0s"),
    ),
    "k3s+dra+both": (s("distribution=k3s", "devicePlugin.api=both"), None),
    # overrides win (to paths the keeper's check knows: another distribution's, CRI-O's)
    "k0s+overrides": (
        s(
            "distribution=k0s",
            "kubeletDir=/var/snap/microk8s/common/var/lib/kubelet",
            "criSocket=/var/run/crio/crio.sock",
        ),
        None,
    ),
    "devplugin-only": (s("labels.enabled=false"), None),
    "devplugin-only+dra": (s("labels.enabled=false", "devicePlugin.api=dra"), None),
    "hostnetwork+apiserver": (
        s("hostNetwork=true", "apiServer.host=10.0.0.10", "apiServer.port=6443"),
        None,
    ),
    "hostnetwork+dra+apiserver": (
        s(
            "hostNetwork=true",
            "devicePlugin.api=dra",
            "apiServer.host=10.0.0.10",
            "apiServer.port=6443",
        ),
        None,
    ),
    "dra-evict": (s("devicePlugin.api=dra", "devicePlugin.evictAfter=5m"), ("dra", "dra-evict")),
    # devplugin --api both: the dra component's pieces and the device-plugin directory
    "dra+both": (s("devicePlugin.api=both", "devicePlugin.evictAfter=5m"), None),
    "namespace": (s("namespace.name=edgefd-helm"), None),
    # the post-delete prune hook (tests/k8s/test_prune_job.py: the same objects as k8s/prune)
    "prune": (s("labels.pruneOnUninstall=true"), None),
    "host-features": (
        s("labels.hostFeaturesDir=/etc/kubernetes/node-feature-discovery/features.d"),
        ("host-features",),
    ),
    "nodefeature+host-features": (
        s(
            "labels.mode=nodefeature",
            "labels.hostFeaturesDir=/etc/kubernetes/node-feature-discovery/features.d",
        ),
        ("nodefeature", "host-features"),
    ),
    "existing-namespace": (s("namespace.create=false"), None),
    "allow-namespaces": (
        ["--set-json", 'labels.allowNamespaces=["example.com","profile.node.kubernetes.io"]'],
        None,
    ),
    "tuned": (
        [
            *s(
                "image.repository=registry.example.com/edgefd",
                "image.pullPolicy=Always",
                f"image.digest=sha256:{'ab' * 32}",
                "priorityClassName=",
                "labels.removalGrace=30m",
                "maxUnavailable=10%",
                "resources.devplugin.limits.memory=128Mi",
            ),
            "--set-json",
            'tolerations=[{"key":"edge","operator":"Exists","effect":"NoSchedule"}]',
            "--set-json",
            'nodeSelector={"kubernetes.io/arch":"arm64"}',
            "--set-json",
            'imagePullSecrets=[{"name":"regcred"}]',
            "--set-json",
            'affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuring'
            'Execution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"edge",'
            '"operator":"Exists"}]}]}}}',
        ],
        None,
    ),
    "podmonitor": (
        ["--api-versions", PODMONITOR_API, *s("metrics.podMonitor.labels.release=p")],
        None,
    ),
    "podmonitor+hostnetwork": (["--api-versions", PODMONITOR_API, *s("hostNetwork=true")], None),
    "podmonitor+devplugin-only": (
        ["--api-versions", PODMONITOR_API, *s("labels.enabled=false")],
        None,
    ),
    # the alerting rules (issue 45 item 2): where the kind is served, the alerts component
    "prometheusrule": (["--api-versions", PROMETHEUSRULE_API], ("alerts",)),
    "prometheusrule-off": (
        ["--api-versions", PROMETHEUSRULE_API, *s("metrics.prometheusRule.enabled=false")],
        (),
    ),
    "prometheusrule+hostnetwork+no-devplugin": (
        [
            "--api-versions",
            PROMETHEUSRULE_API,
            *s("hostNetwork=true", "devicePlugin.enabled=false"),
        ],
        ("hostnetwork", "no-devplugin", "alerts"),
    ),
    "prometheusrule+split+dra+k3s": (
        [
            "--api-versions",
            PROMETHEUSRULE_API,
            *s("splitByIdentity=true", "devicePlugin.api=dra", "distribution=k3s"),
        ],
        ("alerts", "dra", "k3s", "split-identity"),
    ),
    "prometheusrule+labels": (
        [
            "--api-versions",
            PROMETHEUSRULE_API,
            *s(
                "metrics.prometheusRule.labels.release=p",
                "metrics.prometheusRule.ruleLabels.team=edge",
            ),
        ],
        None,
    ),
    # two DaemonSets split by identity (issue 34 item 3)
    "split": (s("splitByIdentity=true"), ("split-identity",)),
    # split-identity after the components that patch devplugin (k8s/overlays/dra/after-split.yaml)
    "split+dra": (s("splitByIdentity=true", "devicePlugin.api=dra"), ("dra", "split-identity")),
    "split+dra+hostnetwork+nodefeature": (
        s(
            "splitByIdentity=true",
            "devicePlugin.api=dra",
            "hostNetwork=true",
            "labels.mode=nodefeature",
        ),
        ("dra", "hostnetwork", "split-identity", "nodefeature"),
    ),
    "split+k0s+no-device-keeper": (
        s("splitByIdentity=true", "distribution=k0s", "deviceKeeper.enabled=false"),
        ("k0s", "split-identity", "no-device-keeper"),
    ),
    "split+dra+both": (s("splitByIdentity=true", "devicePlugin.api=both"), None),
}

# Helm's conventional labels: they say which release and chart version made an object
# (`helm ls`, dashboards, `kubectl get -l app.kubernetes.io/instance=...`); no selector or
# behaviour depends on them, so the diff against kustomize ignores them.
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)
# There was a pod-template checksum of the device plugin's resources file, so that a `helm
# upgrade` rolled the pods; devplugin now reloads the mounted file itself (issue 25 item 4), and
# a roll would only take every device away from the kubelet for a few seconds.
CHECKSUM = "checksum/devplugin-config"


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(harness_binary("helm")), *args], capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert r.returncode == 0, f"helm {' '.join(args[:3])}: {r.stderr}"
    return r


KEPT = "validatingadmissionpolicybinding,validatingadmissionpolicy"  # keepPoliciesOnUninstall
# These API servers have no node to run the policy gate's Job (tests/k8s/test_policy_gate.py
# runs its command by hand; the real node's Helm scenarios run the Job)
NO_GATE = "policyGate.enabled=false"


def helm_uninstall(kube_apiserver: Any, name: str, *args: str, check: bool = True) -> None:
    """`helm uninstall`, then what values.yaml says removes the policies it leaves (the test
    API server is shared: the next test installs a release of another name)."""
    helm("uninstall", name, *args, check=check, timeout=180)
    r = kubectl(kube_apiserver, "delete", KEPT, "-l", f"app.kubernetes.io/instance={name}")
    assert r.returncode == 0, r.stderr


def kept_policies(kube_apiserver: Any, name: str) -> list[dict[str, Any]]:
    """The policies and bindings of release `name` there are."""
    r = kubectl(
        kube_apiserver, "get", KEPT, "-l", f"app.kubernetes.io/instance={name}", "-o", "json"
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["items"]


HOOK = "helm.sh/hook"
POLICY_HOOK = "pre-install,pre-upgrade,pre-rollback"  # admission-policy-first.yaml


def is_gate(d: dict[str, Any]) -> bool:
    """An object of the policy gate (policy-gate.yaml: hooks only, deleted once they succeed;
    tests/k8s/test_policy_gate.py)."""
    return d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "policy-gate"


def is_policy_hook(d: dict[str, Any]) -> bool:
    """A policy's copy that Helm applies before the release's objects (issue 30 item 9)."""
    ann = d["metadata"].get("annotations") or {}
    return (
        d["kind"].startswith("ValidatingAdmissionPolicy")
        and ann.get(HOOK) == POLICY_HOOK
        and not is_gate(d)
    )


def template_all(*args: str) -> list[dict[str, Any]]:
    out = helm("template", RELEASE, str(CHART), *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def template(*args: str) -> list[dict[str, Any]]:
    """The render without the policies' early copies and the policy gate: each object of the
    release once, as the release holds it (test_admission_policies_are_in_force_before_the_rights
    checks the copies, tests/k8s/test_policy_gate.py the gate)."""
    return [d for d in template_all(*args) if not (is_policy_hook(d) or is_gate(d))]


def chart_objects() -> list[dict[str, Any]]:
    """The default render, for tests/k8s/test_apiserver.py (its `manifests` fixture)."""
    return template()


def value_set(name: str) -> list[str]:
    return VALUE_SETS[name][0]


def normalise(docs: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    """The objects by key, without what Helm adds by design (HELM_LABELS, the policies' keep
    annotation), and with the containers, volumes and each container's mounts and variables
    in name order: the components' strategic merges put what they name first, and none of
    these orders means anything (the init containers' order does, and is kept)."""
    out = keyed(copy.deepcopy(docs))
    for d in out.values():
        labels = d["metadata"].get("labels", {})
        for k in HELM_LABELS:
            labels.pop(k, None)
        annotations = d["metadata"].get("annotations", {})
        if annotations.pop("helm.sh/resource-policy", None) == "keep" and not annotations:
            del d["metadata"]["annotations"]  # the policies', keepPoliciesOnUninstall
        if d["kind"] == "DaemonSet":
            spec = pod_spec(d)
            spec["containers"].sort(key=lambda c: c["name"])
            spec["volumes"].sort(key=lambda v: v["name"])
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                c.get("volumeMounts", []).sort(key=lambda m: m["mountPath"])
                c.get("env", []).sort(key=lambda e: e["name"])
    return out


# -- offline -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint(name: str) -> None:
    args = value_set(name)
    if "--api-versions" in args:  # a template option only: lint renders without a cluster
        i = args.index("--api-versions")
        args = args[:i] + args[i + 2 :]
    r = helm("lint", "--strict", str(CHART), *args, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_default_render_is_the_kustomize_base() -> None:
    from tests.k8s.test_dra_manifests import render

    assert normalise(template()) == normalise(render([K8S], []))
    # and the normalisation hides only what it says: the labels are there
    docs = template()
    for ds in daemonsets(docs):
        assert set(HELM_LABELS) <= set(ds["metadata"]["labels"])
    for ds in daemonsets(docs):  # no checksum: a new resources file is reloaded, not rolled
        assert CHECKSUM not in json.dumps(ds["spec"]["template"]["metadata"])


@pytest.mark.parametrize("name", [n for n, (_, c) in VALUE_SETS.items() if c], ids=str)
def test_option_is_its_component(name: str) -> None:
    from tests.k8s.test_dra_manifests import render

    args = value_set(name)
    components = VALUE_SETS[name][1] or ()
    kustomized = render([K8S], overlay_dirs(components))
    assert normalise(template(*args)) == normalise(kustomized)


RIGHTS = ("ClusterRoleBinding", "RoleBinding")


@pytest.mark.parametrize("name", VALUE_SETS)
def test_admission_policies_are_in_force_before_the_rights(name: str) -> None:
    """Issue 30 item 9: Helm applies kinds it does not know last, so the policies came after
    the RBAC bindings they restrict (and the DaemonSets using them). Every policy and binding
    of the release is also a pre-install, pre-upgrade and pre-rollback hook, the same object:
    Helm applies hooks before any object of the release (each policy before its binding); none
    is deleted before it is created again (a gap at every upgrade), and no right is a hook
    (which would come first, or outlive `helm uninstall`)."""
    docs = template_all(*value_set(name))
    hooks = [d for d in docs if is_policy_hook(d)]
    release = [d for d in docs if not (d["metadata"].get("annotations") or {}).get(HOOK)]
    policies = [d for d in release if d["kind"].startswith("ValidatingAdmissionPolicy")]
    keyed_hooks = keyed(copy.deepcopy(hooks))
    for key, hook in keyed_hooks.items():
        ann = hook["metadata"]["annotations"]  # the hook's, then the object's own (keep)
        assert ann.pop("helm.sh/hook-delete-policy") == "hook-failed"
        weight = int(ann.pop("helm.sh/hook-weight"))
        assert weight == (-20 if key[0] == "ValidatingAdmissionPolicy" else -10)
        assert ann.pop(HOOK) == POLICY_HOOK
        if not ann:
            del hook["metadata"]["annotations"]
    assert keyed_hooks == keyed(copy.deepcopy(policies))
    # client-side installs (which cannot take the hook copies over) turn them off
    off = template_all(*value_set(name), *s("policiesFirst=false"))
    gate = [d for d in docs if is_gate(d)]  # it needs the hooks: gone with them
    assert not [d for d in off if is_policy_hook(d) or is_gate(d)]
    assert len(off) == len(docs) - len(hooks) - len(gate)
    for d in docs:
        if is_gate(d):  # its own account's right to dry-run a ConfigMap: test_policy_gate.py
            continue
        if d["kind"] in RIGHTS or d["kind"] in ("Role", "ClusterRole", "DaemonSet"):
            hook = (d["metadata"].get("annotations") or {}).get(HOOK, "")
            assert "pre-install" not in hook and "pre-upgrade" not in hook, d["metadata"]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_render_is_valid_and_least_privilege(name: str) -> None:
    docs = template(*value_set(name))
    for d in docs:
        if d["kind"] not in ("DeviceClass", "PodMonitor", "PrometheusRule"):  # no client model
            assert schema_errors(d) is None, (d["kind"], d["metadata"]["name"])
    assert daemonsets(docs)
    for ds in daemonsets(docs):
        # the keeper by its own rule (tests/k8s/test_device_keeper_manifests.py)
        violations = set(pod_violations(ds))
        if "dra" in name:  # its host paths: tests/k8s/test_dra_manifests.py
            violations = {v for v in violations if "/plugins_registry" not in v
                          and "/plugins/edgefd.io" not in v
                          and "/var/run/cdi" not in v}  # fmt: skip
        assert violations == ({"pod uses hostNetwork"} if "hostnetwork" in name else set())
    tokens = {c["name"] for c in every_container(docs) for m in c.get("volumeMounts", [])
              if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"}  # fmt: skip
    want = {"feature-sink"} if "only" not in name else set()
    assert tokens == want | ({"devplugin"} if "dra" in name else set())
    # one ServiceAccount per DaemonSet: no token of one pod is the other's identity
    accounts = [pod_spec(ds)["serviceAccountName"] for ds in daemonsets(docs)]
    assert len(set(accounts)) == len(accounts)
    # one pod by default; two, split by identity, when asked (or one of them without labels)
    want = 2 if "split" in name and "no-devplugin" not in name else 1
    assert len(daemonsets(docs)) == want


def test_values_reach_the_objects() -> None:
    docs = template(*value_set("tuned"))
    images = {c["image"] for c in every_container(docs)}
    assert images == {f"registry.example.com/edgefd@sha256:{'ab' * 32}"}
    assert {c["imagePullPolicy"] for c in every_container(docs)} == {"Always"}
    assert len(daemonsets(docs)) == 1
    split = template(*value_set("tuned"), *s("splitByIdentity=true"))
    assert len(daemonsets(split)) == 2
    for ds in daemonsets(docs) + daemonsets(split):
        spec = pod_spec(ds)
        assert "priorityClassName" not in spec
        want = [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["tolerations"] == want
        # Helm merges maps into the defaults: the linux selector stays unless set to null
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert "nodeAffinity" in spec["affinity"]
        assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    spec = pod_spec(daemonset(docs))
    assert "--removal-grace=30m" in container(spec, "feature-sink")["command"]
    plugin = container(pod_spec(daemonset(docs, DEVPLUGIN_DS)), "devplugin")["resources"]
    assert plugin == {"requests": {"cpu": "10m", "memory": "64Mi"},
                      "limits": {"cpu": "1", "memory": "128Mi"}}  # fmt: skip


def test_api_both_renders_both_apis() -> None:
    """Issue 32 item 10: devicePlugin.api=both (the CLI's third --api) is the dra render plus
    the kubelet's device-plugin directory, in the variable and the mounts."""

    def plugin(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = pod_spec(daemonset(docs, DEVPLUGIN_DS))
        return spec, container(spec, "devplugin")

    both, dra = template(*value_set("dra+both")), template(*s("devicePlugin.api=dra"))
    (spec, c), (dra_spec, dra_c) = plugin(both), plugin(dra)
    assert setting(c, "--api") == "both" and setting(c, "--evict-after") == "5m"
    assert setting(c, "--plugin-dir") == "/var/lib/kubelet/device-plugins"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    dra_mounts = {m["name"]: m["mountPath"] for m in dra_c["volumeMounts"]}
    assert mounts == {**dra_mounts, "device-plugins": "/var/lib/kubelet/device-plugins"}
    volumes = {v["name"] for v in spec["volumes"]}
    assert volumes == {v["name"] for v in dra_spec["volumes"]} | {"device-plugins"}
    others = lambda docs: sorted((d["kind"], d["metadata"]["name"]) for d in docs)  # noqa: E731
    assert others(both) == others(dra)  # DeviceClasses, DRA rights and policy: as with dra


DURATION_SAMPLES = ("", "30", "30s", "1.5m", "250ms", ".5s", "5.", "24h", "1d", "-1s", "1e3",
                    "nan", "5 m", "s", "1.2.3s")  # fmt: skip


def test_duration_values_have_the_tools_one_grammar() -> None:
    """Issue 32 item 10: the schema's duration patterns were two; now one, accepting exactly
    what edgefd.core.duration does (digits, an optional fraction, ms|s|m|h) or '' (unset)."""
    import re

    from edgefd.core.duration import parse_duration

    def durations(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
        if isinstance(node, dict):
            if "pattern" in node and "(ms|s|m|h)" in node["pattern"]:
                yield path, node["pattern"]
            for k, v in node.items():
                yield from durations(v, f"{path}.{k}")

    schema = json.loads((CHART / "values.schema.json").read_text())
    found = dict(durations(schema))
    assert {p.split(".")[-1] for p in found} >= {"removalGrace", "evictAfter"}
    (pattern,) = set(found.values())
    for text in DURATION_SAMPLES:
        try:
            parse_duration(text)
            ok = text != "5 m"  # the flags allow blanks around; a value has none
        except ValueError:
            ok = text == ""
        assert bool(re.fullmatch(pattern, text)) == ok, text


def notes(*args: str) -> str:
    out = helm("install", RELEASE, str(CHART), "--dry-run=client", "-n", "default", *args).stdout
    return out.split("NOTES:\n", 1)[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "`helm uninstall` keeps the labels on the nodes (labels.pruneOnUninstall=false)"),
        (s("labels.pruneOnUninstall=true"), "`helm uninstall` also removes edgefd's labels from "
         "the nodes: a post-delete Job in namespace default runs `feature-sink --prune"),
        (s("labels.mode=nodefeature"), "`helm uninstall` deletes the NodeFeatures with namespace "
         "edgefd; nfd-master then removes their labels."),
    ],
)  # fmt: skip
def test_notes_say_what_the_uninstall_does(args: list[str], says: str) -> None:
    """Issue 32 item 10: the notes said "keeps the labels" whatever pruneOnUninstall was."""
    text = notes(*args)
    assert says in text and text.count("helm uninstall") == 1 + ("--cascade" in text), text


def test_the_chart_says_what_it_renders() -> None:
    """Issue 32 item 10 said "one DaemonSet" where it rendered two; issue 34 item 3 made the
    default one pod, with two split by identity as an option: each text says so."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert len(daemonsets(template())) == 1 and "one DaemonSet pod" in chart["description"]
    for f in ("Chart.yaml", "README.md", "values.yaml", "templates/NOTES.txt"):
        assert "two DaemonSets" not in (CHART / f).read_text(), f
    assert "DaemonSet edgefd/edgefd: one pod with the labels and the devices" in notes()
    split = notes(*s("splitByIdentity=true"))
    assert "edgefd/edgefd (labels) and DaemonSet edgefd/edgefd-devplugin" in split
    # the one-pod trade-off, said where it applies (DRA), with the way out
    assert "identity:" not in notes() and "identity:" not in notes(
        *s("devicePlugin.api=dra", "splitByIdentity=true")
    )
    assert "splitByIdentity=true" in notes(*s("devicePlugin.api=dra"))
    both = notes(*s("devicePlugin.api=both"))
    assert "kubectl get resourceslices" in both and "ALLOCATABLE" in both


def test_allow_namespaces_reach_the_sink() -> None:
    """labels.allowNamespaces: the sink's --allow-namespace flags, nothing else changes."""
    docs = template(*value_set("allow-namespaces"))
    command = container(pod_spec(daemonset(docs)), "feature-sink")["command"]
    flags = [a for a in command if a.startswith("--allow-namespace")]
    assert flags == ["--allow-namespace=example.com",
                     "--allow-namespace=profile.node.kubernetes.io"]  # fmt: skip
    default = container(pod_spec(daemonset(template())), "feature-sink")["command"]
    assert [a for a in command if a not in flags] == default


def test_api_server_goes_to_the_containers_with_a_token() -> None:
    want = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.10"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    docs = template(*value_set("hostnetwork+apiserver"))
    assert container(pod_spec(daemonset(docs)), "feature-sink")["env"][-2:] == want
    plugin = container(pod_spec(daemonset(docs, DEVPLUGIN_DS)), "devplugin")
    assert not [e for e in plugin["env"] if e["name"].startswith("KUBER")]
    docs = template(*value_set("hostnetwork+dra+apiserver"))
    assert container(pod_spec(daemonset(docs, DEVPLUGIN_DS)), "devplugin")["env"][-2:] == want


def test_namespace_is_the_release_setting_everywhere() -> None:
    docs = template(*value_set("namespace"))
    # no ServiceAccount name in any policy: they follow the mark in the roles
    assert "system:serviceaccount:edgefd" not in yaml.safe_dump_all(docs)
    for d in docs:
        assert d["metadata"].get("namespace") in (None, "edgefd-helm"), d["metadata"]
        for subject in d.get("subjects", []):
            assert subject["namespace"] == "edgefd-helm"
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["edgefd-helm"]
    assert not [d for d in template(*value_set("existing-namespace")) if d["kind"] == "Namespace"]


def test_a_new_resources_file_changes_only_the_configmap(tmp_path: Path) -> None:
    config = tmp_path / "resources.yaml"
    config.write_text("resources:\n  - name: example.com/tpu\n    accelerator: coral-usb\n")
    docs = template("--set-file", f"devicePlugin.config={config}")
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["data"]["resources.yaml"] == config.read_text()
    # no pod rolls with it: devplugin reloads the mounted file (issue 25 item 4)
    assert daemonsets(docs) == daemonsets(template())


def test_podmonitor_only_when_the_kind_is_served() -> None:
    for name in ("default", "podmonitor+hostnetwork"):
        assert not [d for d in template(*value_set(name)) if d["kind"] == "PodMonitor"], name
    docs = template(*value_set("podmonitor"))
    (pm,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert pm["metadata"]["namespace"] == NAMESPACE and pm["metadata"]["labels"]["release"] == "p"
    selector = pm["spec"]["selector"]["matchLabels"].items()
    for ds in daemonsets(docs):  # both pods
        assert selector <= ds["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in every_container(docs) for p in c.get("ports", [])}
    scraped = [e["port"] for e in pm["spec"]["podMetricsEndpoints"]]
    assert sorted(scraped) == sorted(ports) and all(
        e["path"] == "/metrics" for e in pm["spec"]["podMetricsEndpoints"]
    )
    # every series says its node (the alerts name it: a pod's name says nothing on a fleet)
    node = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    assert all(e["relabelings"] == node for e in pm["spec"]["podMetricsEndpoints"])
    docs = template(*value_set("podmonitor+devplugin-only"))
    (pm,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert [e["port"] for e in pm["spec"]["podMetricsEndpoints"]] == ["plugin-http", "keeper-http"]
    # the keeper lives in devplugin's pod: without devplugin, nothing of it is scraped
    docs = template("--api-versions", PODMONITOR_API, *s("devicePlugin.enabled=false"))
    (pm,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert [e["port"] for e in pm["spec"]["podMetricsEndpoints"]] == ["scan-http", "sink-http"]


def test_prometheusrule_only_when_the_kind_is_served_and_as_its_source_says() -> None:
    """The rules' one source (charts/edgefd/alerts/prometheusrule.yaml, also the component's):
    its spec as it is, in the release's namespace; rendered only where the kind is served and
    the value is on; the object's own labels and the labels added to each alert reach it, an
    alert's own severity winning."""
    from tests.alerts.rules import rule_object

    def rules(*args: str) -> list[dict[str, Any]]:
        return [d for d in template(*args) if d["kind"] == "PrometheusRule"]

    for name in ("default", "prometheusrule-off"):
        assert not rules(*value_set(name)), name
    (pr,) = rules(*value_set("prometheusrule"))
    source = rule_object()
    assert pr["spec"] == source["spec"] and pr["metadata"]["name"] == source["metadata"]["name"]
    assert pr["metadata"]["namespace"] == NAMESPACE
    (moved,) = rules(*value_set("prometheusrule"), *s("namespace.name=edgefd-helm"))
    assert moved["metadata"]["namespace"] == "edgefd-helm" and moved["spec"] == source["spec"]
    (labelled,) = rules(*value_set("prometheusrule+labels"))
    assert labelled["metadata"]["labels"]["release"] == "p"
    every = [r for g in labelled["spec"]["groups"] for r in g["rules"]]
    assert every and all(r["labels"] == {**r_src, "team": "edge"} for r, r_src in zip(
        every, (r["labels"] for g in source["spec"]["groups"] for r in g["rules"]), strict=True
    ))  # fmt: skip
    (kept,) = rules(
        *value_set("prometheusrule"), *s("metrics.prometheusRule.ruleLabels.severity=page")
    )
    assert {r["labels"]["severity"] for g in kept["spec"]["groups"] for r in g["rules"]} == {
        "warning"
    }
    # the alerts' own templates are the alerts', not Helm's: read as a file, never rendered
    assert "{{ $labels.pod }}" in json.dumps(pr["spec"])


@pytest.mark.parametrize(
    "args, message",
    [
        (s("labels.mode=patch"), "labels/mode"),
        (s("devicePlugin.api=csi"), "devicePlugin/api"),
        (s("labels.removalGrace=10 minutes"), "removalGrace"),
        (s("hostNetwrok=true"), "hostNetwrok"),
        (s("labels.enabled=false", "devicePlugin.enabled=false"), "nothing would run"),
        (s("apiServer.host=10.0.0.1"), "apiServer.port"),
        (s("image.digest=latest"), "digest"),
        (["--set-json", 'labels.allowNamespaces=["Example.COM"]'], "allowNamespaces"),
        (["--set-json", 'labels.allowNamespaces=["topology.kubernetes.io"]'], "Kubernetes"),
        (["--set-json", 'labels.allowNamespaces=["k8s.io"]'], "Kubernetes"),
        (["--set-string", "devicePlugin.config=resources: [oops"], "not a YAML mapping"),
        (["--set-string", "devicePlugin.config=- coral"], "not a YAML mapping"),
        (["--set-string", "devicePlugin.config=resources: 3"], "must be a list"),
        (s("metrics.prometheusRule.ruleLabels.bad-name=x"), "'bad-name' does not match"),
        (s("metrics.prometheusRule.enable=true"), "enable"),
    ],
    ids=[
        "mode",
        "api",
        "grace",
        "typo",
        "nothing",
        "host-without-port",
        "digest",
        "namespace-not-dns",
        "namespace-kubernetes",
        "namespace-k8s",
        "config-not-yaml",
        "config-a-list",
        "config-resources-not-a-list",
        "alert-label-name",
        "rule-typo",
    ],
)
def test_bad_values_are_refused(args: list[str], message: str) -> None:
    r = helm("template", RELEASE, str(CHART), *args, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


# -- the real API server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def monitoring_crds(kube_apiserver: Any) -> Iterator[None]:
    with served(kube_apiserver, PODMONITOR_API, PROMETHEUSRULE_API):
        yield


@pytest.mark.realpeer
@pytest.mark.parametrize("api", [PODMONITOR_API, PROMETHEUSRULE_API], ids=lambda a: a[-13:])
def test_the_monitoring_objects_follow_the_served_kinds(kube_apiserver: Any, api: str) -> None:
    """`.Capabilities.APIVersions` from the live API server (`--dry-run=server`): the
    PodMonitor and the PrometheusRule are each rendered once, and only once, their kind is
    served."""
    # the device plugin alone, in a namespace of its own: no object of this release exists yet
    # (Helm checks that too), so the answer depends on the served kinds only
    args = [f"--kubeconfig={kube_apiserver.kubeconfig}", "--dry-run=server",
            *s("labels.enabled=false", "namespace.name=edgefd-pm")]  # fmt: skip
    kind = api.rsplit("/", 1)[1]

    def rendered_kinds() -> str:
        return helm("template", "edgefd-pm", str(CHART), *args).stdout

    uninstall(kube_apiserver, api)
    assert f"kind: {kind}" not in rendered_kinds()
    with served(kube_apiserver, api):
        assert f"kind: {kind}" in rendered_kinds()


@pytest.mark.realpeer
@pytest.mark.parametrize("name", VALUE_SETS)
def test_server_side_dry_run(kube_apiserver: Any, monitoring_crds: None, name: str) -> None:
    docs = template(*value_set(name))
    # namespaced objects cannot even be dry-run without their namespace
    namespaces = {d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}
    for ns in namespaces:
        kube_apiserver.ensure_namespace(ns)
    # --force-conflicts: earlier tests applied these names with other field managers
    r = kubectl(kube_apiserver, "apply", "--server-side", "--dry-run=server", "--force-conflicts",
                "--field-manager=edgefd-helm-test", "--validate=strict", "-f", "-",
                stdin=yaml.safe_dump_all(docs))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("serverside-applied (server dry run)") == len(docs), r.stdout


# What a release in its own namespace has in common with the base and the other tests' objects
# of the shared API server: these cluster-wide names.
SHARED = [
    ("clusterrolebinding", None, "edgefd-nodes"),
    ("clusterrole", None, "edgefd-nodes"),
    ("clusterrolebinding", None, "edgefd-feature-sink"),
    ("clusterrole", None, "edgefd-feature-sink"),
    *(("validatingadmissionpolicybinding", None, p) for p in POLICIES),
    *(("validatingadmissionpolicy", None, p) for p in POLICIES),
]
# the release's own namespace (the API server runs no namespace controller: deleted, it stays)
HELM_NS = "edgefd-release"


_created: dict[str, dict[tuple[str, str], int]] = {}


def _listers(kube_apiserver: Any) -> dict[str, Any]:
    from kubernetes import client

    api = kube_apiserver.admin_api()
    adm, rbac = client.AdmissionregistrationV1Api(api), client.RbacAuthorizationV1Api(api)
    return {
        "ValidatingAdmissionPolicy": adm.list_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": adm.list_validating_admission_policy_binding,
        "ClusterRoleBinding": rbac.list_cluster_role_binding,
        "RoleBinding": rbac.list_role_binding_for_all_namespaces,
        "DaemonSet": client.AppsV1Api(api).list_daemon_set_for_all_namespaces,
    }


def _revisions(kube_apiserver: Any) -> dict[str, str]:
    return {
        kind: lister(limit=1).metadata.resource_version
        for kind, lister in _listers(kube_apiserver).items()
    }


def _creations(kube_apiserver: Any, since: dict[str, str]) -> dict[tuple[str, str], int]:
    """(kind, name) -> the etcd revision that created it, for what was created after `since`
    (one revision counter for every kind: the order the API server stored them in)."""
    from kubernetes import watch

    out: dict[tuple[str, str], int] = {}
    for kind, lister in _listers(kube_apiserver).items():
        w = watch.Watch()
        for ev in w.stream(lister, resource_version=since[kind], timeout_seconds=2):
            md = ev["object"].metadata
            if ev["type"] == "ADDED":
                out.setdefault((kind, md.name), int(md.resource_version))
    return out


@pytest.fixture(scope="module")
def release(kube_apiserver: Any) -> Iterator[list[str]]:
    """A fresh `helm install` (what was there from other tests' applies is deleted first: a
    user's cluster has none of it), removed with `helm uninstall` at the end."""
    for kind, ns, name in SHARED:
        kubectl(kube_apiserver, "delete", kind, name, "--ignore-not-found",
                *(["-n", ns] if ns else []))  # fmt: skip
    args = [f"--kubeconfig={kube_apiserver.kubeconfig}", "--namespace=default"]
    before = _revisions(kube_apiserver)
    helm("install", RELEASE, str(CHART), *args, *s(f"namespace.name={HELM_NS}", NO_GATE))
    _created[RELEASE] = _creations(kube_apiserver, before)
    yield args
    helm_uninstall(kube_apiserver, RELEASE, *args, check=False)


@pytest.mark.realpeer
def test_helm_install_applies_server_side(kube_apiserver: Any, release: list[str]) -> None:
    ds = json.loads(kubectl(kube_apiserver, "get", "daemonset", "edgefd", "-n", HELM_NS,
                            "-o", "json", "--show-managed-fields").stdout)  # fmt: skip
    assert ds["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert ds["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    managers = {(m["manager"], m["operation"]) for m in ds["metadata"]["managedFields"]}
    assert ("helm", "Apply") in managers, managers
    status = json.loads(helm("status", RELEASE, *release, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    for kind, ns, name in [("namespace", None, HELM_NS), *SHARED]:
        r = kubectl(kube_apiserver, "get", kind, name, *(["-n", ns] if ns else []))
        assert r.returncode == 0, r.stderr


@pytest.mark.realpeer
def test_helm_install_stores_the_policies_before_the_rights(
    kube_apiserver: Any, release: list[str]
) -> None:
    """Issue 30 item 9: every policy and its binding were stored after the RBAC bindings and
    DaemonSets (Helm applies kinds it does not know last); now before any of them, and still
    objects of the release (without the hook's annotations: `helm uninstall` deletes them)."""
    created = _created[RELEASE]
    policies = {k: v for k, v in created.items() if k[0].startswith("ValidatingAdmission")}
    rights = {k: v for k, v in created.items() if not k[0].startswith("ValidatingAdmission")}
    assert {name for _, name in policies} == set(POLICIES)
    assert ("ClusterRoleBinding", "edgefd-nodes") in rights and len(rights) >= 3, rights
    assert max(policies.values()) < min(rights.values()), created
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        for name in POLICIES:
            got = json.loads(kubectl(kube_apiserver, "get", kind, name, "-o", "json").stdout)
            ann = got["metadata"].get("annotations") or {}
            assert ann.get("meta.helm.sh/release-name") == RELEASE, (kind, name, ann)
            assert HOOK not in ann, (kind, name, ann)


@pytest.mark.realpeer
def test_policy_binds_the_releases_service_account(kube_apiserver: Any, release: list[str]) -> None:
    """The policy follows the release's ServiceAccount (by the mark in its role, not by name):
    the release's pod-bound token may label its own node and nothing else."""
    import kubernetes

    own, other = "edgefd-release-node-a", "edgefd-release-node-b"
    for n in (own, other):
        kube_apiserver.create_node(n, {"kubernetes.io/hostname": n})
    token = kube_apiserver.mint_pod_token(HELM_NS, SERVICE_ACCOUNT, "edgefd-release-pod", own)
    core = kubernetes.client.CoreV1Api(kube_apiserver.api_for_token(token))
    patch = [{"op": "add", "path": "/metadata/labels/feature.node.kubernetes.io~1x", "value": "1"}]
    deadline = time.monotonic() + 60
    while True:  # the policy becomes active asynchronously
        try:
            core.patch_node(other, patch, _content_type="application/json-patch+json")
        except kubernetes.client.exceptions.ApiException as e:
            assert e.status == 403, e
            if "edgefd-node-restriction" in (e.body or ""):
                break
        else:
            undo = {"metadata": {"labels": {"feature.node.kubernetes.io/x": None}}}
            kubernetes.client.CoreV1Api(kube_apiserver.admin_api()).patch_node(other, undo)
        assert time.monotonic() < deadline, "the policy never refused the other node"
        time.sleep(0.5)
    core.patch_node(own, patch, _content_type="application/json-patch+json")


@pytest.mark.realpeer
def test_helm_upgrade_to_nodefeature_drops_the_node_rights(
    kube_apiserver: Any, release: list[str]
) -> None:
    helm("upgrade", RELEASE, str(CHART), *release,
         *s(f"namespace.name={HELM_NS}", "labels.mode=nodefeature", NO_GATE))  # fmt: skip
    for kind in ("clusterrole", "clusterrolebinding"):
        r = kubectl(kube_apiserver, "get", kind, "edgefd-nodes")
        assert r.returncode != 0 and "NotFound" in r.stderr, (kind, r.stdout)
    ds = json.loads(kubectl(kube_apiserver, "get", "daemonset", "edgefd", "-n", HELM_NS,
                            "-o", "json").stdout)  # fmt: skip
    assert setting(container(pod_spec(ds), "feature-sink"), "--mode") == "nodefeature"


@pytest.mark.realpeer
def test_helm_upgrade_to_dra_adds_rights_and_no_policy(
    kube_apiserver: Any, release: list[str]
) -> None:
    """An upgrade that adds a mode adds rights, never a policy: the policies restricting them
    came with the install (every one, whatever the values), in force long before (stored with
    the rights, a running pod's token wrote for other nodes for about a second:
    tests/k8s/test_helm_windows.py)."""
    # the DRA mode's cluster-wide objects, as other tests' applies left them: a user's
    # cluster has none of them (helm would refuse to take them over)
    base = {(d["kind"], d["metadata"]["name"]) for d in template()}
    for d in template(*s("devicePlugin.api=dra")):
        if "namespace" not in d["metadata"] and (d["kind"], d["metadata"]["name"]) not in base:
            kubectl(kube_apiserver, "delete", d["kind"].lower(), d["metadata"]["name"],
                    "--ignore-not-found")  # fmt: skip
    # (the hooks' annotations come and go: the spec, and so its generation, stays)
    stored = {name: json.loads(kubectl(kube_apiserver, "get", "validatingadmissionpolicy",
                                       name, "-o", "json").stdout)["metadata"]["generation"]
              for name in DRA_POLICIES}  # fmt: skip
    before = _revisions(kube_apiserver)
    helm("upgrade", RELEASE, str(CHART), *release,
         *s(f"namespace.name={HELM_NS}", "devicePlugin.api=dra", NO_GATE))  # fmt: skip
    created = _creations(kube_apiserver, before)
    assert not [k for k in created if k[0].startswith("ValidatingAdmission")], created
    assert ("ClusterRoleBinding", "edgefd-dra") in created, created
    for name, version in stored.items():  # the same objects, unchanged by the upgrade
        got = json.loads(kubectl(kube_apiserver, "get", "validatingadmissionpolicy", name,
                                 "-o", "json").stdout)  # fmt: skip
        assert got["metadata"]["generation"] == version, name
        assert got["metadata"]["annotations"].get("meta.helm.sh/release-name") == RELEASE
        assert HOOK not in got["metadata"]["annotations"]


@pytest.mark.realpeer
def test_helm_uninstall_removes_the_release_and_leaves_the_policies(
    kube_apiserver: Any, release: list[str]
) -> None:
    """Issue 46 item 3: the policies never go before the rights they restrict, so the uninstall
    leaves them (keepPoliciesOnUninstall); an install of the release again takes them over, and
    the values' command removes them."""
    helm("uninstall", RELEASE, *release)
    for kind, ns, name in SHARED:
        r = kubectl(kube_apiserver, "get", kind, name, *(["-n", ns] if ns else []))
        if kind.startswith("validatingadmissionpolicy"):
            assert r.returncode == 0, (kind, name, r.stderr)
        else:
            assert r.returncode != 0 and "NotFound" in r.stderr, (kind, name)
    r = kubectl(kube_apiserver, "get", "daemonset", "edgefd", "-n", HELM_NS)
    assert "NotFound" in r.stderr
    kept = kept_policies(kube_apiserver, RELEASE)
    names = sorted((o["kind"], o["metadata"]["name"]) for o in kept)
    assert names == sorted((k, p) for p in POLICIES for k in (
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))  # fmt: skip
    assert all(o["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
               for o in kept)  # fmt: skip

    # the release installed again takes them over, unchanged
    generations = {(o["kind"], o["metadata"]["name"]): o["metadata"]["generation"]
                   for o in kept}  # fmt: skip
    # (another namespace: this API server runs no namespace controller, the first stays)
    again = s(f"namespace.name={HELM_NS}-again", NO_GATE)
    helm("install", RELEASE, str(CHART), *release, *again)
    again = kept_policies(kube_apiserver, RELEASE)
    assert {(o["kind"], o["metadata"]["name"]): o["metadata"]["generation"]
            for o in again} == generations  # fmt: skip
    assert json.loads(helm("status", RELEASE, *release, "-o", "json").stdout)["info"][
        "status"] == "deployed"  # fmt: skip

    # gone with the values' command, once the release is
    helm_uninstall(kube_apiserver, RELEASE, *release)
    for p in POLICIES:
        for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
            r = kubectl(kube_apiserver, "get", kind, p)
            assert "NotFound" in r.stderr, (kind, p)


def test_the_policies_go_with_the_release_when_asked() -> None:
    """keepPoliciesOnUninstall=false: no policy is kept (the uninstall deletes them after the
    rights, as Helm orders kinds; values.yaml says what that risks)."""
    kept = [d for d in template() if d["metadata"].get("annotations", {}).get(
        "helm.sh/resource-policy") == "keep"]  # fmt: skip
    assert {d["kind"] for d in kept} == {
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    assert {d["metadata"]["name"] for d in kept} == set(POLICIES)
    assert not [d for d in template(*s("keepPoliciesOnUninstall=false"))
                if "helm.sh/resource-policy" in d["metadata"].get("annotations", {})]  # fmt: skip


def test_the_packaged_chart_renders_what_the_checkout_does(tmp_path: Path) -> None:
    """Issue 45 item 1: the chart installs from a package (`helm package`, what the release
    workflow pushes as oci://ghcr.io/<owner>/charts/edgefd), not only from a checkout: the
    archive holds every file the render needs and nothing of the tests."""
    import tarfile

    helm("package", str(CHART), "--destination", str(tmp_path))
    [tgz] = tmp_path.glob("edgefd-*.tgz")
    with tarfile.open(tgz) as t:
        names = t.getnames()
    assert "edgefd/Chart.yaml" in names and "edgefd/values.schema.json" in names
    assert not [n for n in names if "/tests/" in n or n.endswith((".pyc", ".orig"))]
    for args in ((), ("--set", "devicePlugin.api=dra")):
        packaged = helm("template", RELEASE, str(tgz), *args).stdout
        assert packaged == helm("template", RELEASE, str(CHART), *args).stdout
