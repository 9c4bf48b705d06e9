"""k8s/ as a kustomize base and the components in k8s/overlays/, rendered by the real kustomize
(the harness's `kubectl kustomize`) and applied to the real API server.

Offline: the base is the plain files; each component changes exactly what its header says
(nodefeature: the sink's mode and no Node rights; no-devplugin: the plugin and what only it
used; hostnetwork: hostNetwork, loopback listeners and probes); the documented combinations
render, in any order, stay least-privilege and valid, and a base changed under a guarded
patch fails the build instead of going unpatched. Real API server: `kubectl apply
--server-side -k k8s/`, a server-side dry run of every combination, and the nodefeature rights
with a pod-bound token: the real sink publishes its NodeFeature and can no longer touch a Node.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.test_dra_manifests import render
from tests.k8s.test_manifests import (
    DEVPLUGIN_DS,
    INIT_CONTAINERS,
    K8S,
    LABELS_DS,
    MARK_DEVPLUGIN,
    NAMESPACE,
    POLICIES,
    PROFILES,
    SERVICE_ACCOUNT,
    SPLIT_DS,
    all_containers,
    container,
    daemonset,
    daemonsets,
    flag_env,
    load_manifests,
    manifest_files,
    pod_spec,
    pod_violations,
    schema_errors,
    setting,
    unknown_settings,
)
from tests.peers.processes import harness_binary

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = K8S / "overlays"
LEDGER = "KustomizeComponents"  # the components' ledger (its header says what it is for)
# The documented combinations; the components touch different flags and select the DaemonSet
# holding devplugin by its marks, so any order gives the same objects
# (test_order_does_not_matter).
COMBINATIONS = [
    ("nodefeature",),
    ("no-devplugin",),
    ("hostnetwork",),
    ("dra",),
    ("nodefeature", "no-devplugin"),
    ("hostnetwork", "nodefeature"),
    ("hostnetwork", "no-devplugin"),
    ("hostnetwork", "nodefeature", "no-devplugin"),
    ("nodefeature", "dra"),
    ("hostnetwork", "dra"),
    ("hostnetwork", "nodefeature", "dra"),
    ("dra", "hostnetwork"),
    ("dra", "nodefeature"),
    ("no-devplugin", "hostnetwork"),
    ("host-features",),
    ("nodefeature", "host-features", "dra"),
    ("dra", "host-features"),  # its merge patch names feature-sink first: any order works
    ("dra", "dra-evict"),
    ("hostnetwork", "host-features", "no-devplugin"),
    ("no-device-keeper",),
    ("dra", "no-device-keeper", "dra-evict"),
    ("no-device-keeper", "dra", "dra-evict"),
    ("hostnetwork", "no-device-keeper"),
    ("nodefeature", "hostnetwork", "no-devplugin", "host-features"),
    # two DaemonSets split by identity (issue 34 item 3): after every component that patches
    # devplugin (SPLIT_LAST), before or after the others
    ("split-identity",),
    ("dra", "split-identity"),
    ("dra", "dra-evict", "split-identity"),
    ("hostnetwork", "host-features", "split-identity", "nodefeature"),
    ("split-identity", "no-device-keeper", "nodefeature"),
    ("no-device-keeper", "hostnetwork", "split-identity"),
    ("no-device-keeper", "dra", "split-identity"),
    # the alerting rules (issue 45 item 2): one object added, nothing patched
    ("alerts",),
    ("alerts", "nodefeature", "no-devplugin"),
    ("dra", "alerts", "split-identity"),
    ("hostnetwork", "alerts", "no-device-keeper"),
    ("split-identity", "host-features", "alerts"),
]
# The components that patch devplugin, written for edgefd's init container: split-identity
# makes it an ordinary container of its own pod, so it must come after them (k0s and microk8s
# patch it in DRA mode only); in another order kustomize stops, naming the rule
# SPLIT_REFUSAL (each one's after-split.yaml).
SPLIT_LAST = ("dra", "dra-evict", "hostnetwork")
SPLIT_LAST_WITH_DRA = ("k0s", "microk8s")
SPLIT_REFUSAL = "edgefd.io~1list-split-identity-after-this-component"
# Every rule a component refuses by (k8s/README.md lists them): a JSON patch's `test` of an
# annotation no object has, whose key is the rule, so kustomize's one-line refusal names it.
RULES = (
    "list-split-identity-after-this-component",
    "list-one-distribution-only",
    "list-dra-before-dra-evict",
    "list-dra-or-no-devplugin-not-both",
    "list-split-identity-or-no-devplugin-not-both",
)


def rule_of(component: str, before: list[str]) -> str | None:
    """The rule `component` refuses by, listed after `before` (each component's patches in
    their order: the first rule that fails stops the build)."""
    split, dra = "split-identity" in before, "dra" in before
    if component in DISTRIBUTIONS and any(b in DISTRIBUTIONS for b in before):
        return "list-one-distribution-only"
    if component == "dra" and "no-devplugin" in before:
        return "list-dra-or-no-devplugin-not-both"
    if split and (component in SPLIT_LAST or (component in SPLIT_LAST_WITH_DRA and dra)):
        return SPLIT_REFUSAL.removeprefix("edgefd.io~1")
    if component == "dra-evict" and not dra:
        return "list-dra-before-dra-evict"
    if component == "no-devplugin" and dra:
        return "list-dra-or-no-devplugin-not-both"
    if component == "no-devplugin" and split:
        return "list-split-identity-or-no-devplugin-not-both"
    if component == "split-identity" and "no-devplugin" in before:
        return "list-split-identity-or-no-devplugin-not-both"
    return None


def refusal(components: tuple[str, ...]) -> tuple[str, str] | None:
    """(the component that stops the build, the rule it names) for these components in this
    order; None when it builds."""
    for i, c in enumerate(components):
        if (rule := rule_of(c, list(components[:i]))) is not None:
            return c, rule
    return None


# The distribution components (issue 34 item 1) are a dimension of their own: each one alone
# and with each other component in both orders (with dra-evict, which needs dra, as dra's
# third), not the whole product; tests/k8s/test_profiles.py checks their paths and the chart.
DISTRIBUTIONS = ("k3s", "microk8s", "k0s")
OTHERS = ("nodefeature", "no-devplugin", "hostnetwork", "dra", "host-features",
          "no-device-keeper", "split-identity", "alerts")  # fmt: skip
DIST_COMBINATIONS = [
    *((d,) for d in DISTRIBUTIONS),
    *((d, o) for d in DISTRIBUTIONS for o in OTHERS),
    *((o, d) for d in DISTRIBUTIONS for o in OTHERS),
    *((d, "dra", "dra-evict") for d in DISTRIBUTIONS),
    *(("dra", "dra-evict", d) for d in DISTRIBUTIONS),
    *(("no-device-keeper", d, "dra") for d in DISTRIBUTIONS),
]
DRA_HOSTPATHS = (
    *(f"{p.kubelet_dir}/plugins_registry" for p in PROFILES.values()),
    *(f"{p.kubelet_dir}/plugins/edgefd.io" for p in PROFILES.values()),
    "/var/run/cdi",
)


def overlay_dirs(components: tuple[str, ...]) -> list[Path]:
    """The components' directories. Every documented component ships, so one that is not there
    was deleted or renamed by mistake: the test naming it fails, saying which (a skip would
    let its tests go quiet, and kustomize's own error does not say that the tree changed)."""
    missing = [c for c in components if not (OVERLAYS / c / "kustomization.yaml").is_file()]
    if missing:
        gone = ", ".join(f"k8s/overlays/{c}/kustomization.yaml" for c in missing)
        pytest.fail(f"a documented component is gone: no {gone}")
    return [OVERLAYS / c for c in components]


def combo(components: tuple[str, ...]) -> list[dict[str, Any]]:
    return render([K8S], overlay_dirs(components))


def take_env(c: dict[str, Any], name: str) -> str:
    """Remove a container's variable, giving its value (where a merge put it means nothing)."""
    (e,) = [e for e in c.get("env", []) if e["name"] == name]
    c["env"].remove(e)
    return str(e["value"])


def sorted_env(d: dict[str, Any]) -> dict[str, Any]:
    """A copy with each container's variables, and the containers and volumes, in name order:
    a merge by name puts what it adds where the order of the components says, and none of
    these orders means anything (no variable refers to another; the init containers' order
    does mean something and is kept)."""

    out = copy.deepcopy(d)
    if out["kind"] == "DaemonSet":
        spec = pod_spec(out)
        spec["containers"].sort(key=lambda c: c["name"])
        spec.get("volumes", []).sort(key=lambda v: v["name"])
        for _, c in all_containers(spec):
            c.get("env", []).sort(key=lambda e: e["name"])
            # a mount a distribution moves is deleted and added again, at the end; the runtime
            # orders mounts by their path's depth, not by the list (containerd's CRI)
            c.get("volumeMounts", []).sort(key=lambda m: m["mountPath"])
    return out


def keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    out = {}
    for d in docs:
        key = (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        assert key not in out, f"duplicate {key}"
        out[key] = d
    return out


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render([K8S], [])


# -- the base ----------------------------------------------------------------------------------


def test_base_is_the_plain_files(base: list[dict[str, Any]]) -> None:
    """`kubectl apply -k k8s/` and `kubectl apply -f k8s/` send the same objects."""
    assert keyed(base) == keyed(load_manifests())


def test_kustomization_names_every_manifest() -> None:
    """A new file in k8s/ that the Kustomization forgets would exist only for `-f`; the one
    resource more is the components' ledger, which kustomize drops from its output
    (test_base_is_the_plain_files) and `-f` never reads (not *.yaml)."""
    doc = yaml.safe_load((K8S / "Kustomization").read_text())
    assert sorted(doc["resources"]) == sorted([p.name for p in manifest_files()] + [LEDGER])
    (ledger,) = yaml.safe_load_all((K8S / LEDGER).read_text())
    assert ledger["metadata"]["annotations"] == {"config.kubernetes.io/local-config": "true"}
    assert not (K8S / "kustomization.yaml").exists(), "kubectl apply -f k8s/ would send it"


def test_every_overlay_is_a_component() -> None:
    """Under k8s/ only a Component works (kustomize refuses a base that contains its
    overlay), and each says how to use it."""
    dirs = sorted(p for p in OVERLAYS.iterdir() if p.is_dir())
    assert {"hostnetwork", "nodefeature", "no-devplugin"} <= {p.name for p in dirs}
    for d in dirs:
        text = (d / "kustomization.yaml").read_text()
        doc = yaml.safe_load(text)
        assert doc["kind"] == "Component", d.name
        assert doc["apiVersion"] == "kustomize.config.k8s.io/v1alpha1", d.name
        assert f"k8s/overlays/{d.name}" in text, f"{d.name}: no usage example"


def test_shipped_components_hold_no_test_settings() -> None:
    for name in ("hostnetwork", "nodefeature", "no-devplugin", "host-features", "dra-evict",
                 "split-identity", "alerts"):  # fmt: skip
        for f in (p for p in (OVERLAYS / name).rglob("*") if p.is_file()):
            text = f.read_text()
            for test_only in ("16443", "edgefd-sample-node", "KUBERNETES_SERVICE_PORT:"):
                assert test_only not in text, f"{f}: {test_only}"


# -- each component changes what it says -------------------------------------------------------


def test_nodefeature(base: list[dict[str, Any]]) -> None:
    b, o = keyed(base), keyed(combo(("nodefeature",)))
    gone = {("ClusterRole", None, "edgefd-nodes"), ("ClusterRoleBinding", None, "edgefd-nodes")}
    added = {
        ("Role", NAMESPACE, "edgefd-nodefeatures"),
        ("RoleBinding", NAMESPACE, "edgefd-nodefeatures"),
    }
    assert set(b) - set(o) == gone and set(o) - set(b) == added
    for key in set(o) - added:
        if key[0] != "DaemonSet":
            assert o[key] == b[key], key
    ds_b, ds_o = b[("DaemonSet", NAMESPACE, "edgefd")], o[("DaemonSet", NAMESPACE, "edgefd")]
    sink = container(pod_spec(ds_o), "feature-sink")
    assert take_env(sink, "EDGEFD_MODE") == "nodefeature"
    assert ds_o == ds_b
    # what the sink's NodeFeature mode needs is still there (rights are tested for real below),
    # and so is the mark: the admission policies keep confining the account
    assert ("Role", NAMESPACE, "edgefd-nodefeatures") in o
    assert ("ClusterRole", None, "edgefd-feature-sink") in o


# what only devplugin and device-keeper mount (host-sys is the producers' too)
PLUGIN_VOLUMES = {"host-dev", "device-plugins", "devplugin-config", "host-proc", "host-cgroup",
                  "pod-resources", "cri-socket", "keeper-state", "host-systemd",
                  "devplugin-notices", "device-keeper-notices", "decisions"}  # fmt: skip


def test_no_devplugin(base: list[dict[str, Any]]) -> None:
    """devplugin and device-keeper go from the pod, with their volumes, ConfigMap and marks."""
    b, o = keyed(base), keyed(combo(("no-devplugin",)))
    assert set(b) - set(o) == {("ConfigMap", NAMESPACE, "edgefd-devplugin")}
    assert set(o) <= set(b)
    key = ("DaemonSet", NAMESPACE, LABELS_DS)
    for k in o:
        if k != key:
            assert o[k] == b[k], k
    want = copy.deepcopy(b[key])
    del want["metadata"]["annotations"]
    spec = pod_spec(want)
    spec["initContainers"] = [c for c in spec["initContainers"] if c["name"] != "devplugin"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] == "feature-sink"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in PLUGIN_VOLUMES]
    sink = spec["containers"][0]  # without devplugin's notices to read
    sink["volumeMounts"] = [m for m in sink["volumeMounts"] if m["name"] not in PLUGIN_VOLUMES]
    assert o[key] == want
    # nothing left mounts the device-plugins directory or /dev
    text = yaml.safe_dump_all(list(o.values()))
    assert "/var/lib/kubelet/device-plugins" not in text and "path: /dev\n" not in text


def test_hostnetwork(base: list[dict[str, Any]]) -> None:
    b, o = keyed(base), keyed(combo(("hostnetwork",)))
    assert set(b) == set(o)
    for key in o:
        if key[0] != "DaemonSet":
            assert o[key] == b[key], key
    probes = listeners = 0
    for name in (LABELS_DS,):
        ds_b, ds_o = b[("DaemonSet", NAMESPACE, name)], o[("DaemonSet", NAMESPACE, name)]
        spec = pod_spec(ds_o)
        assert spec.pop("hostNetwork") is True, name
        # the init containers keep their order: devplugin first, bus-scan (a native sidecar)
        # after dt-labeller
        assert [c["name"] for c in spec["initContainers"]] == list(INIT_CONTAINERS)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            for e in c.get("env", []):
                if e["name"] == "EDGEFD_LISTEN":
                    assert e["value"].startswith("127.0.0.1:"), (c["name"], e)
                    e["value"] = e["value"].replace("127.0.0.1:", ":")
                    listeners += 1
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if "httpGet" in c.get(probe, {}):
                    assert c[probe]["httpGet"].pop("host") == "127.0.0.1", (c["name"], probe)
                    probes += 1
        assert sorted_env(ds_o) == sorted_env(ds_b), name
    assert probes == 7  # the startup probes ask 127.0.0.1 from inside the container anyway
    assert listeners == 4  # bus-scan, feature-sink, devplugin, device-keeper


def only_the_daemonset_differs(
    base: list[dict[str, Any]], components: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The base's and the components' labels DaemonSet, once every other object is the base's."""
    b, o = keyed(base), keyed(combo(components))
    assert set(b) == set(o)
    key = ("DaemonSet", NAMESPACE, "edgefd")
    for k in o:
        if k != key:
            assert o[k] == b[k], k
    return b[key], o[key]


def test_host_features(base: list[dict[str, Any]]) -> None:
    """The host's features.d, read-only, in feature-sink alone, and the flag naming it."""
    ds_b, ds_o = only_the_daemonset_differs(base, ("host-features",))
    spec = pod_spec(ds_o)
    sink = container(spec, "feature-sink")
    inside = "/host/etc/kubernetes/node-feature-discovery/features.d"
    assert take_env(sink, "EDGEFD_HOST_FEATURES_DIR") == inside
    (mount,) = [m for m in sink["volumeMounts"] if m["name"] == "host-features-d"]
    assert mount == {"name": "host-features-d", "mountPath": inside, "readOnly": True}
    sink["volumeMounts"].remove(mount)
    (vol,) = [v for v in spec["volumes"] if v["name"] == "host-features-d"]
    assert vol["hostPath"] == {
        "path": "/etc/kubernetes/node-feature-discovery/features.d",
        "type": "DirectoryOrCreate",
    }
    spec["volumes"].remove(vol)
    assert ds_o == ds_b
    others = [c for c in [*spec["initContainers"], *spec["containers"]] if c is not sink]
    assert not [m for c in others for m in c.get("volumeMounts", []) if m["name"] == vol["name"]]


def test_alerts_adds_the_rules_as_their_source_has_them(base: list[dict[str, Any]]) -> None:
    """One object more, the PrometheusRule of the rules' one source (the chart's
    alerts/prometheusrule.yaml, which the chart renders too), and nothing else changed."""
    from tests.alerts.rules import rule_object

    b, o = keyed(base), keyed(combo(("alerts",)))
    source = rule_object()
    key = ("PrometheusRule", NAMESPACE, source["metadata"]["name"])
    assert set(o) - set(b) == {key} and set(b) <= set(o)
    assert o[key] == source
    for k in b:
        assert o[k] == b[k], k


def test_dra_component_renders_with_the_base() -> None:
    """Its content is tests/k8s/test_dra_manifests.py's; here: it combines with the others."""
    spec = pod_spec(daemonset(combo(("dra",)), DEVPLUGIN_DS))
    assert setting(container(spec, "devplugin"), "--api") == "dra"


POLICY_STEP = ("app.kubernetes.io/component", "admission-policy")


@pytest.mark.parametrize("components", [(), ("dra",), ("nodefeature",)],
                         ids=["base", "dra", "nodefeature"])  # fmt: skip
def test_the_policy_step_selects_every_policy_and_nothing_else(
    components: tuple[str, ...],
) -> None:
    """k8s/README.md, "Policies first" (issue 30 item 9): `kubectl apply -k ... -l
    app.kubernetes.io/component=admission-policy` applies the policies and their bindings,
    all of them and nothing else (no right), before the rest."""
    key, value = POLICY_STEP
    docs = render([K8S], overlay_dirs(components))
    selected = [d for d in docs if (d["metadata"].get("labels") or {}).get(key) == value]
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    # every policy, whatever the options: a component adds rights, never a policy
    assert selected == policies and len(policies) == 2 * len(POLICIES)


def test_dra_evict_adds_only_the_flag() -> None:
    """On top of dra (listed after it): one flag more for devplugin, nothing else."""
    with_dra = daemonset(combo(("dra",)), DEVPLUGIN_DS)
    evicting = daemonset(combo(("dra", "dra-evict")), DEVPLUGIN_DS)
    assert take_env(container(pod_spec(evicting), "devplugin"), "EDGEFD_EVICT_AFTER") == "5m"
    assert sorted_env(evicting) == sorted_env(with_dra)


def test_dra_evict_without_dra_is_refused_by_devplugin_in_one_line(tmp_path: Path) -> None:
    """What kustomize now refuses at render time (test_refusals.py), devplugin still refuses at
    start, for a patch of one's own setting the variable: the device-plugin API cannot evict;
    one line, exit 2."""
    flag = yaml.safe_load((OVERLAYS / "dra-evict" / "flag.yaml").read_text())
    c = container(pod_spec(flag), "devplugin")
    assert setting(c, "--evict-after") == "5m" and setting(c, "--api") is None
    r = subprocess.run([sys.executable, "-m", "edgefd.devplugin", "--dry-run",
                        f"--host-root={tmp_path}", "--node-name=n1"],
                       env=flag_env(c), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--evict-after needs --api dra" in r.stderr


# -- combinations ----------------------------------------------------------------------------


@pytest.mark.parametrize("components", COMBINATIONS + DIST_COMBINATIONS, ids=lambda c: "+".join(c))
def test_combination_is_valid_and_least_privilege(components: tuple[str, ...]) -> None:
    docs = combo(components)
    for d in docs:
        # DeviceClass (resource.k8s.io/v1) is newer than the client's models; PrometheusRule
        # is no Kubernetes kind (promtool checks the rules: tests/alerts)
        if d["kind"] not in ("DeviceClass", "PrometheusRule"):
            assert schema_errors(d) is None, (d["kind"], d["metadata"]["name"])
    for ds in daemonsets(docs):
        # the keeper by its own rule (tests/k8s/test_device_keeper_manifests.py)
        violations = pod_violations(ds)
        allowed = {"pod uses hostNetwork"} if "hostnetwork" in components else set()
        if "dra" in components:  # its host paths are checked by test_dra_manifests.py
            violations = [v for v in violations if not any(p in v for p in DRA_HOSTPATHS)]
        assert set(violations) == allowed, violations
    spec = pod_spec(daemonset(docs))
    # one pod, or two split by identity; each container in one of them, none added by a patch
    plugin = [] if "no-devplugin" in components else ["devplugin", "device-keeper"]
    if "no-device-keeper" in components:
        plugin = plugin[:1]
    split = "split-identity" in components
    # devplugin first, as a native sidecar, in the one pod; the first container of its own
    sidecar = ["devplugin"] if plugin and not split else []
    assert [c["name"] for c in spec["initContainers"]] == [*sidecar, "dt-labeller", "bus-scan"]
    want = {LABELS_DS: sorted(["feature-sink", *plugin[len(sidecar) :]])}
    if split:
        want = {LABELS_DS: ["feature-sink"], SPLIT_DS: sorted(plugin)}
    held = {ds["metadata"]["name"]: sorted(c["name"] for c in pod_spec(ds)["containers"])
            for ds in daemonsets(docs)}  # fmt: skip
    assert held == want
    assert all("image" in c for ds in daemonsets(docs) for _, c in all_containers(pod_spec(ds)))
    if "nodefeature" in components:
        assert setting(container(spec, "feature-sink"), "--mode") == "nodefeature"
    for ds in daemonsets(docs):
        for c in [*pod_spec(ds).get("initContainers", []), *pod_spec(ds)["containers"]]:
            assert unknown_settings(c) == [], c["name"]
    # the marks: on the DaemonSet holding devplugin, and only there
    marked = [ds["metadata"]["name"] for ds in daemonsets(docs)
              if MARK_DEVPLUGIN in ds["metadata"].get("annotations", {})]  # fmt: skip
    assert marked == ([] if not plugin else [SPLIT_DS if SPLIT_DS in held else LABELS_DS])


@pytest.mark.parametrize(
    "components",
    [
        ("hostnetwork", "dra"),
        ("hostnetwork", "nodefeature", "dra"),
        ("hostnetwork", "no-devplugin"),
        ("dra", "no-device-keeper", "dra-evict"),
        ("hostnetwork", "no-device-keeper", "dra"),
        ("nodefeature", "host-features", "no-devplugin"),
        ("k0s", "dra", "no-device-keeper"),
        ("microk8s", "dra", "hostnetwork"),
        ("k3s", "no-device-keeper", "nodefeature"),
        ("dra", "hostnetwork", "no-device-keeper", "split-identity"),
        ("k0s", "dra", "dra-evict", "split-identity"),
        ("microk8s", "dra", "split-identity"),
        ("split-identity", "host-features", "nodefeature"),
        ("alerts", "dra", "split-identity"),
        ("k0s", "alerts", "no-devplugin"),
    ],
    ids=lambda c: "+".join(c),
)
def test_order_does_not_matter(components: tuple[str, ...], tmp_path: Path) -> None:
    """No component patches what another one moved: every order gives the same objects, but
    an order breaking one of the order rules (split-identity after every component that
    patches devplugin, dra before dra-evict), which both kubectls refuse, naming the rule and
    the component that refused (`refusal`), in kustomize's one line and no other words."""
    import itertools

    first = keyed([sorted_env(d) for d in combo(components)])
    for i, order in enumerate(itertools.permutations(components)):
        refused = refusal(order)
        if refused is None:
            assert keyed([sorted_env(d) for d in combo(order)]) == first, order
            continue
        write_kustomization(tmp_path / str(i), order)
        for kubectl in (system_kubectl(), str(harness_binary("kubectl"))):
            r = subprocess.run([kubectl, "kustomize", str(tmp_path / str(i))],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
            assert_refused(r, *refused)


def assert_refused(r: subprocess.CompletedProcess, component: str, rule: str) -> None:
    """kustomize stopped in one line at `component`, naming `rule` and nothing of its own: no
    source field missing, no test of a value but the rule's key, which no object has."""
    import re

    assert r.returncode != 0 and not r.stdout, (component, rule, r.stdout[:200])
    line = r.stderr.strip()
    assert "\n" not in line, line
    assert set(re.findall(r"k8s/overlays/([a-z0-9-]+)", line)) == {component}, line
    assert re.findall(r"edgefd\.io~1([a-z-]+)", line) == [rule], line
    tests = re.findall(r"testing value (\S+) failed", line)
    assert tests == [f"/metadata/annotations/edgefd.io~1{rule}"], line
    assert "fieldPath" not in line and "is missing" not in line, line


@pytest.mark.parametrize(
    ("component", "file", "name"),
    [
        ("hostnetwork", "pod-template.yaml", "devplugin"),
        ("hostnetwork", "pod-template.yaml", "feature-sink"),
        ("dra", "pod-template.yaml", "devplugin"),
        ("nodefeature", "pod-template.yaml", "feature-sink"),
    ],
)
def test_a_renamed_container_leaves_an_unapplicable_stub(
    component: str, file: str, name: str, tmp_path: Path
) -> None:
    """The components patch containers by name: under a base whose container was renamed,
    the patch makes a container of that name with no image, one no pod can run (the API server
    takes a template without an image, for a controller to fill in), which
    test_combination_is_valid_and_least_privilege refuses for every shipped combination."""
    changed = render_changed_base(tmp_path, component, file, name)
    stubs = [c for ds in daemonsets(changed) for _, c in all_containers(pod_spec(ds))
             if "image" not in c]  # fmt: skip
    assert [c["name"] for c in stubs] == [name]


def render_changed_base(tmp_path: Path, component: str, file: str, name: str) -> list[dict]:
    import shutil

    copy_ = tmp_path / "k8s"
    shutil.copytree(K8S, copy_)
    text = (copy_ / file).read_text()
    assert f"- name: {name}\n" in text
    (copy_ / file).write_text(text.replace(f"- name: {name}\n", f"- name: {name}-renamed\n"))
    return render([copy_], [OVERLAYS / component])


def system_kubectl() -> str:
    """The `kubectl` on PATH: what an operator builds with (here and in CI, v1.32 with
    kustomize 5.5.0, older than the harness's)."""
    import shutil

    found = shutil.which("kubectl")
    assert found, "no kubectl on PATH: the components must build with the system's kubectl"
    return found


@pytest.mark.parametrize("components", COMBINATIONS + DIST_COMBINATIONS, ids=lambda c: "+".join(c))
def test_the_system_kubectl_builds_the_same_objects(
    components: tuple[str, ...], tmp_path: Path
) -> None:
    """kubectl 1.32's kustomize (5.5.0) failed on several `$patch: delete` documents in one
    file and on positional JSON patches in some orders; now every combination builds with it,
    and to the objects the harness's newer kustomize builds."""
    write_kustomization(tmp_path, components)
    r = subprocess.run([system_kubectl(), "kustomize", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    ours = keyed([sorted_env(d) for d in docs])
    assert ours == keyed([sorted_env(d) for d in combo(components)])


def test_the_system_kubectl_is_the_old_kustomize() -> None:
    """What the test above is worth: the kustomize it ran is the one operators have."""
    r = subprocess.run([system_kubectl(), "version", "--client"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "Kustomize Version: v5." in r.stdout, r.stdout


def write_kustomization(d: Path, components: tuple[str, ...]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(K8S, d)],
        "components": [os.path.relpath(OVERLAYS / c, d) for c in components],
    }
    (d / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return d


# -- the real API server -----------------------------------------------------------------------


# Server-side apply as edgefd's own field manager. --force-conflicts: other tests on the shared
# API server applied the same names with other managers (a user's fresh cluster has none).
SSA = ("--field-manager=edgefd-kustomize", "--force-conflicts")


def kubectl(kube_apiserver: Any, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(harness_binary("kubectl")), f"--kubeconfig={kube_apiserver.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def applied(kube_apiserver: Any) -> Iterator[Any]:
    """`kubectl apply --server-side -k k8s/`, for real; the admission policies are removed
    afterwards (they would bind any other test's edgefd ServiceAccount)."""
    r = kubectl(kube_apiserver, "apply", "--server-side", *SSA,
                "-k", str(K8S))  # fmt: skip
    assert r.returncode == 0, r.stderr
    yield r
    # what the nodefeature test removed, back as the base has it, and what it added, gone;
    # then the policies go (this apply brings them back too, and they would hold a relocated
    # copy's tokens, refusing in their own name: tests/k8s/test_relocation.py)
    kubectl(kube_apiserver, "apply", "--server-side", *SSA,
            "-k", str(K8S))  # fmt: skip
    for kind in ("rolebinding", "role"):
        kubectl(kube_apiserver, "delete", kind, "-n", NAMESPACE, "edgefd-nodefeatures",
                "--ignore-not-found")  # fmt: skip
    for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
        kubectl(kube_apiserver, "delete", kind, *POLICIES, "--ignore-not-found")


@pytest.fixture(scope="module")
def prometheusrule_kind(kube_apiserver: Any) -> Iterator[None]:
    """The Prometheus Operator's kind, which the alerts component's object is (a stand-in CRD:
    tests/k8s/monitoring.py)."""
    from tests.k8s.monitoring import PROMETHEUSRULE_API, served

    with served(kube_apiserver, PROMETHEUSRULE_API):
        yield


@pytest.mark.realpeer
def test_apply_k_server_side(applied: Any, kube_apiserver: Any) -> None:
    applied_lines = applied.stdout.splitlines()
    assert len(applied_lines) == len(load_manifests()), applied.stdout
    assert all(line.endswith("serverside-applied") for line in applied_lines), applied.stdout
    # idempotent: a second apply changes nothing and conflicts with nothing
    again = kubectl(kube_apiserver, "apply", "--server-side",
                    *SSA, "-k", str(K8S))  # fmt: skip
    assert again.returncode == 0, again.stderr


@pytest.mark.realpeer
def test_the_policy_step_applies_only_the_policies(kube_apiserver: Any) -> None:
    """The first of k8s/README.md's two steps, as written there (a server-side dry run)."""
    key, value = POLICY_STEP
    r = kubectl(kube_apiserver, "apply", "-k", str(K8S), "-l", f"{key}={value}",
                "--dry-run=server", "-o", "name")  # fmt: skip
    assert r.returncode == 0, r.stderr
    kinds = {line.split("/")[0] for line in r.stdout.split()}
    assert kinds == {
        "validatingadmissionpolicy.admissionregistration.k8s.io",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io",
    }, r.stdout
    assert len(r.stdout.split()) == 2 * len(POLICIES), r.stdout


@pytest.mark.realpeer
def test_the_first_removal_step_deletes_all_but_the_policies(
    applied: Any, kube_apiserver: Any
) -> None:
    """The first of k8s/README.md's two removal steps, as written there (a server-side dry
    run): everything of the base but the policies and their bindings."""
    key, value = POLICY_STEP
    r = kubectl(kube_apiserver, "delete", "-k", str(K8S), "-l", f"{key}!={value}",
                "--dry-run=server", "--ignore-not-found", "-o", "name")  # fmt: skip
    assert r.returncode == 0, r.stderr
    readme = (K8S / "README.md").read_text()
    assert f"kubectl delete -k <your kustomization> -l '{key}!={value}' --wait\n" in readme
    names = r.stdout.split()
    assert not [n for n in names if n.startswith("validatingadmissionpolicy")], names
    policies = [d for d in load_manifests() if d["kind"].startswith("ValidatingAdmission")]
    assert len(names) == len(load_manifests()) - len(policies) > 0, names


@pytest.mark.realpeer
@pytest.mark.parametrize(
    "components",
    COMBINATIONS + [(d, "dra") for d in DISTRIBUTIONS],
    ids=lambda c: "+".join(c),
)
def test_combination_server_side_dry_run(
    applied: Any,
    prometheusrule_kind: None,
    kube_apiserver: Any,
    components: tuple[str, ...],
    tmp_path: Path,
) -> None:
    overlay_dirs(components)
    write_kustomization(tmp_path, components)
    r = kubectl(kube_apiserver, "apply", "--server-side", "--dry-run=server",
                *SSA, "-k", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "serverside-applied (server dry run)" in r.stdout


@pytest.mark.realpeer
def test_nodefeature_rights_with_a_pod_token(
    applied: Any, kube_apiserver: Any, tmp_path: Path
) -> None:
    """The nodefeature set for real: the sink, with a pod-bound token and nothing but these
    rights, publishes its NodeFeature; the token can no longer read or patch any Node."""
    import kubernetes

    from tests.peers.nfd import install_nfd_crds

    write_kustomization(tmp_path, ("nodefeature",))
    r = kubectl(kube_apiserver, "apply", "--server-side", *SSA,
                "-k", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    # what a fresh install of this set has: no Node rights at all (apply adds, never removes)
    for kind in ("clusterrolebinding", "clusterrole"):
        kubectl(kube_apiserver, "delete", kind, "edgefd-nodes")
    admin = kube_apiserver.admin_api()
    install_nfd_crds(kube_apiserver)  # NFD's own, from the pinned module
    node = "edgefd-kustomize-nf"
    kube_apiserver.create_node(node)
    token = kube_apiserver.mint_pod_token(NAMESPACE, SERVICE_ACCOUNT, "edgefd-kustomize-nf", node)
    authz = kubernetes.client.AuthorizationV1Api(kube_apiserver.api_for_token(token))

    def can(verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
        attrs = {"verb": verb, "resource": resource, "namespace": namespace, "group": group}
        review = {"spec": {"resourceAttributes": attrs}}
        return bool(authz.create_self_subject_access_review(review).status.allowed)

    for verb in ("get", "patch", "update", "list"):
        assert not can(verb, "nodes"), verb
    assert can("create", "nodefeatures", NAMESPACE, "nfd.k8s-sigs.io")
    features = tmp_path / "features.d"
    features.mkdir()
    (features / "usb-scan").write_text("feature.node.kubernetes.io/usb-fe_1a6e_089a.present=1\n")
    cmd = [
        sys.executable, "-m", "edgefd.feature_sink", "--once", "--listen=",
        f"--kubeconfig={kube_apiserver.kubeconfig_for_token(token)}", f"--node-name={node}",
        f"--features-dir={features}", "--mode=nodefeature", f"--namespace={NAMESPACE}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "NODE_NAME"))}
    for _ in range(60):  # a new CRD takes a moment to be served
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        if p.returncode == 0 or "not found" not in p.stderr:
            break
        time.sleep(0.5)
    assert p.returncode == 0, p.stderr
    obj = kubernetes.client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "nfd.k8s-sigs.io", "v1alpha1", NAMESPACE, "nodefeatures", node
    )
    assert obj["spec"]["labels"] == {"feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "1"}


def test_the_documented_allow_namespace_patch(tmp_path: Path) -> None:
    """k8s/README.md's patch widening the sink's label namespaces, as a user copies it: the
    sink's command gains the flag, nothing else changes, and the real CLI takes it."""
    import re

    text = (K8S / "README.md").read_text()
    (snippet,) = re.findall(r"```yaml\n(patches:.*?)```", text, re.S)
    doc = yaml.safe_load(snippet)
    doc.update(resources=[os.path.relpath(K8S, tmp_path)])
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    r = subprocess.run([str(harness_binary("kubectl")), "kustomize", str(tmp_path)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    b, o = keyed(render([K8S], [])), keyed(docs)
    sink = container(pod_spec(daemonset(docs)), "feature-sink")
    assert take_env(sink, "EDGEFD_ALLOW_NAMESPACE") == "example.com"
    assert o == b
    p = subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", "--dry-run", "--node-name=n1",
         "--features", "-", "--kubeconfig=/none"],
        input="example.com/rack=r1\n", capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**flag_env({}), "EDGEFD_ALLOW_NAMESPACE": "example.com"},
    )  # fmt: skip
    assert p.returncode == 0 and p.stdout == "add     example.com/rack=r1\n", p.stderr
