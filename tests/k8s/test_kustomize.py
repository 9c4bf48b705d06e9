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
    DEVPLUGIN_SA,
    K8S,
    NAMESPACE,
    POLICIES,
    SERVICE_ACCOUNT,
    container,
    daemonset,
    daemonsets,
    load_manifests,
    manifest_files,
    pod_spec,
    privilege_violations,
    schema_errors,
)
from tests.peers.processes import harness_binary

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = K8S / "overlays"
# The documented combinations; the components touch different flags and select devplugin's
# DaemonSet by name, so any order gives the same objects (test_order_does_not_matter).
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
]
DRA_HOSTPATHS = (
    "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins/edgefd.io",
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
    """A new file in k8s/ that the Kustomization forgets would exist only for `-f`."""
    doc = yaml.safe_load((K8S / "Kustomization").read_text())
    assert sorted(doc["resources"]) == [p.name for p in manifest_files()]
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
    for name in ("hostnetwork", "nodefeature", "no-devplugin", "host-features", "dra-evict"):
        for f in (OVERLAYS / name).iterdir():
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
    assert sink["command"] == [*container(pod_spec(ds_b), "feature-sink")["command"],
                               "--mode=nodefeature"]  # fmt: skip
    sink["command"].pop()
    assert ds_o == ds_b
    # what the sink's NodeFeature mode needs is still there (rights are tested for real below),
    # and so is the mark: the admission policies keep confining the account
    assert ("Role", NAMESPACE, "edgefd-nodefeatures") in o
    assert ("ClusterRole", None, "edgefd-feature-sink") in o


def test_no_devplugin(base: list[dict[str, Any]]) -> None:
    b, o = keyed(base), keyed(combo(("no-devplugin",)))
    assert set(b) - set(o) == {
        ("ConfigMap", NAMESPACE, "edgefd-devplugin"),
        ("DaemonSet", NAMESPACE, DEVPLUGIN_DS),
        ("ServiceAccount", NAMESPACE, DEVPLUGIN_SA),
    }
    assert set(o) <= set(b)
    for key in o:
        assert o[key] == b[key], key
    # nothing left mounts the device-plugins directory or /dev
    text = yaml.safe_dump_all(list(o.values()))
    assert "/var/lib/kubelet/device-plugins" not in text and "path: /dev\n" not in text


def test_hostnetwork(base: list[dict[str, Any]]) -> None:
    b, o = keyed(base), keyed(combo(("hostnetwork",)))
    assert set(b) == set(o)
    for key in o:
        if key[0] != "DaemonSet":
            assert o[key] == b[key], key
    probes = 0
    for name in ("edgefd", DEVPLUGIN_DS):
        ds_b, ds_o = b[("DaemonSet", NAMESPACE, name)], o[("DaemonSet", NAMESPACE, name)]
        spec = pod_spec(ds_o)
        assert spec.pop("hostNetwork") is True, name
        if name == "edgefd":
            # the init containers keep their order: bus-scan, a native sidecar, after dt-labeller
            assert [c["name"] for c in spec["initContainers"]] == ["dt-labeller", "bus-scan"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            listen = [a for a in c["command"] if a.startswith("--listen=")]
            assert all(a.startswith("--listen=127.0.0.1:") for a in listen), (c["name"], listen)
            c["command"] = [a.replace("--listen=127.0.0.1:", "--listen=:") for a in c["command"]]
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if "httpGet" in c.get(probe, {}):
                    assert c[probe]["httpGet"].pop("host") == "127.0.0.1", (c["name"], probe)
                    probes += 1
        assert ds_o == ds_b, name
    assert probes == 5  # the startup probes ask 127.0.0.1 from inside the container anyway


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
    assert sink["command"].pop() == f"--host-features-dir={inside}"
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


def test_dra_component_renders_with_the_base() -> None:
    """Its content is tests/k8s/test_dra_manifests.py's; here: it combines with the others."""
    spec = pod_spec(daemonset(combo(("dra",)), DEVPLUGIN_DS))
    assert "--api=dra" in container(spec, "devplugin")["command"]


POLICY_STEP = ("app.kubernetes.io/component", "admission-policy")


@pytest.mark.parametrize("components", [(), ("dra",)], ids=["base", "dra"])
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
    assert selected == policies and len(policies) == (8 if components else 4)


def test_dra_evict_adds_only_the_flag() -> None:
    """On top of dra: one flag more in devplugin's command, nothing else."""
    with_dra = daemonset(combo(("dra",)), DEVPLUGIN_DS)
    evicting = daemonset(combo(("dra", "dra-evict")), DEVPLUGIN_DS)
    assert container(pod_spec(evicting), "devplugin")["command"].pop() == "--evict-after=5m"
    assert evicting == with_dra


# -- combinations ----------------------------------------------------------------------------


@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c))
def test_combination_is_valid_and_least_privilege(components: tuple[str, ...]) -> None:
    docs = combo(components)
    for d in docs:
        if d["kind"] != "DeviceClass":  # resource.k8s.io/v1: newer than the client's models
            assert schema_errors(d) is None, (d["kind"], d["metadata"]["name"])
    for ds in daemonsets(docs):
        violations = privilege_violations(ds)
        allowed = {"pod uses hostNetwork"} if "hostnetwork" in components else set()
        if "dra" in components:  # its host paths are checked by test_dra_manifests.py
            violations = [v for v in violations if not any(p in v for p in DRA_HOSTPATHS)]
        assert set(violations) == allowed, violations
    spec = pod_spec(daemonset(docs))
    assert [c["name"] for c in spec["initContainers"]] == ["dt-labeller", "bus-scan"]
    assert [c["name"] for c in spec["containers"]] == ["feature-sink"]
    if "nodefeature" in components:
        assert "--mode=nodefeature" in container(spec, "feature-sink")["command"]
    plugin = [ds for ds in daemonsets(docs) if ds["metadata"]["name"] == DEVPLUGIN_DS]
    assert bool(plugin) is ("no-devplugin" not in components)


@pytest.mark.parametrize(
    "components",
    [
        ("hostnetwork", "dra"),
        ("hostnetwork", "nodefeature", "dra"),
        ("hostnetwork", "no-devplugin"),
    ],
    ids=lambda c: "+".join(c),
)
def test_order_does_not_matter(components: tuple[str, ...]) -> None:
    """No component patches what another one moved: every order gives the same objects."""
    import itertools

    first = keyed(combo(components))
    for order in itertools.permutations(components):
        assert keyed(combo(order)) == first, order


@pytest.mark.parametrize(
    ("component", "file", "flag"),
    [
        ("hostnetwork", "devplugin.yaml", "--listen=:8082"),
        ("hostnetwork", "pod-template.yaml", "--listen=:8081"),
        ("dra", "devplugin.yaml", "--plugin-dir=/var/lib/kubelet/device-plugins"),
        ("nodefeature", "pod-template.yaml", "- name: feature-sink"),
    ],
)
def test_a_changed_base_fails_the_build(
    component: str, file: str, flag: str, tmp_path: Path
) -> None:
    """The guarded JSON patches test what they replace: a base whose command line moved on
    fails the build, instead of being patched at the wrong place or not at all."""
    import shutil

    copy_ = tmp_path / "k8s"
    shutil.copytree(K8S, copy_)
    text = (copy_ / file).read_text()
    assert flag in text
    # a renamed container (its name is what is tested), or another flag at that place
    changed = "- name: labels-sink" if flag.startswith("- name") else flag + "0"
    (copy_ / file).write_text(text.replace(flag, changed))
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["k8s"],
        "components": [os.path.relpath(OVERLAYS / component, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    r = subprocess.run([str(harness_binary("kubectl")), "kustomize", str(tmp_path)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode != 0 and "test" in r.stderr, r.stderr


def write_kustomization(d: Path, components: tuple[str, ...]) -> Path:
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
    for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
        kubectl(kube_apiserver, "delete", kind, *POLICIES, "--ignore-not-found")
    # what the nodefeature test removed, back as the base has it
    kubectl(kube_apiserver, "apply", "--server-side", *SSA,
            "-k", str(K8S))  # fmt: skip


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
    assert len(r.stdout.split()) == 4, r.stdout


@pytest.mark.realpeer
@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c))
def test_combination_server_side_dry_run(
    applied: Any, kube_apiserver: Any, components: tuple[str, ...], tmp_path: Path
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
    assert sink["command"][-1] == "--allow-namespace=example.com"
    sink["command"].pop()
    assert o == b
    p = subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", "--dry-run", "--node-name=n1",
         "--features", "-", "--allow-namespace=example.com", "--kubeconfig=/none"],
        input="example.com/rack=r1\n", capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0 and p.stdout == "add     example.com/rack=r1\n", p.stderr
