"""Offline checks of the DRA manifests: k8s/dra/ (DeviceClasses, RBAC, the ResourceSlice
admission policy) and the k8s/overlays/dra component, rendered by the real kustomize
(`kubectl kustomize`, from the harness) over the base k8s/.

What the component may change is exactly devplugin's DaemonSet (its command, the kubelet's
plugin registry, its own plugin directory, the CDI directory, an API token of its own
ServiceAccount) and nothing else: the labels DaemonSet, feature-sink's token and rights, and
the pod's privileges are the base's.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefd.bus.catalogue import load_catalogue
from edgefd.devplugin.dra.slices import DRIVER
from edgefd.devplugin.resources import default_config
from tests.k8s import test_manifests as base
from tests.k8s.test_manifests import (
    DEVPLUGIN_DS,
    DEVPLUGIN_SA,
    MARK_GRANT,
    NAMESPACE,
    SERVICE_ACCOUNT,
    SPLIT_DS,
    TOKEN_PATH,
    container,
    daemonset,
    find,
    flag_env,
    granted_to,
    mark_condition,
    pod_spec,
    schema_errors,
    setting,
)
from tests.peers.processes import harness_binary

ROOT = Path(__file__).resolve().parents[2]
DRA = ROOT / "k8s" / "dra"
COMPONENT = ROOT / "k8s" / "overlays" / "dra"
KUBELET_DIR = "/var/lib/kubelet"
DRA_HOSTPATHS = {
    "/var/lib/kubelet/plugins_registry": "Directory",  # the kubelet creates it
    "/var/lib/kubelet/plugins/edgefd.io": "DirectoryOrCreate",  # ours, absent on a new node
    "/var/run/cdi": "DirectoryOrCreate",  # the runtimes read it; nobody else creates it
}


def dra_docs() -> list[dict[str, Any]]:
    """k8s/dra/, as `kubectl apply -f k8s/dra/` reads it (lexical file order)."""
    docs = []
    for path in sorted(DRA.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def render(resources: list[Path], components: list[Path]) -> list[dict[str, Any]]:
    """`kubectl kustomize` of a kustomization naming these (relative paths, as kustomize
    requires)."""
    kubectl = harness_binary("kubectl")
    with tempfile.TemporaryDirectory() as d:
        rel = [os.path.relpath(p, d) for p in resources]
        comp = [os.path.relpath(p, d) for p in components]
        doc = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": rel,
            "components": comp,
        }
        Path(d, "kustomization.yaml").write_text(yaml.safe_dump(doc))
        out = subprocess.run(
            [str(kubectl), "kustomize", d], capture_output=True, text=True, timeout=60
        )
    assert out.returncode == 0, out.stderr
    return [x for x in yaml.safe_load_all(out.stdout) if x]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render([ROOT / "k8s"], [COMPONENT])


@pytest.fixture(scope="module")
def rendered_base() -> list[dict[str, Any]]:
    return render([ROOT / "k8s"], [])


def _key(d: dict[str, Any]) -> tuple[str, str, str]:
    return (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])


# -- k8s/dra


@pytest.mark.parametrize("doc", dra_docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_object_matches_kubernetes_schema(doc: dict[str, Any]) -> None:
    assert schema_errors(doc) is None, schema_errors(doc)
    assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "edgefd"


def test_not_applied_by_the_base() -> None:
    """`kubectl apply -f k8s/` reads only k8s/*.yaml: DRA is opt-in, and the kustomization
    files are not named *.yaml, so neither apply -f sends them as objects."""
    assert all(p.parent == ROOT / "k8s" for p in base.manifest_files())
    assert (DRA / "Kustomization").exists() and not list(DRA.glob("kustomization.y*ml"))


def test_one_device_class_per_catalogue_kind() -> None:
    classes = {d["metadata"]["name"]: d for d in dra_docs() if d["kind"] == "DeviceClass"}
    kinds = {a.kind for a in load_catalogue().accelerators}
    by_kind = {n for n in classes if not n.endswith(".resource.edgefd.io")}
    assert by_kind == {f"{k}.edgefd.io" for k in kinds}
    for kind in kinds:
        [sel] = classes[f"{kind}.edgefd.io"]["spec"]["selectors"]
        expr = " ".join(sel["cel"]["expression"].split())
        assert (
            expr
            == f'device.driver == "edgefd.io" && device.attributes["edgefd.io"].kind == "{kind}"'
        )


def test_one_device_class_per_device_plugin_resource() -> None:
    """Each extended resource of the device plugin's default configuration has a class that
    carries its name (KEP-5004), selecting exactly the catalogue models that resource serves:
    a pod asking `edgefd.io/coral-usb: 1` gets the same devices through DRA."""
    classes = [d for d in dra_docs() if d["kind"] == "DeviceClass"]
    extended = {
        d["spec"]["extendedResourceName"]: d for d in classes if "extendedResourceName" in d["spec"]
    }
    resources = {r.name for r in default_config().resources}
    assert set(extended) == resources
    for acc in load_catalogue().accelerators:
        if not acc.resource:
            continue
        d = extended[acc.resource]
        assert d["metadata"]["name"] == acc.resource.split("/")[1] + ".resource.edgefd.io"
        [sel] = d["spec"]["selectors"]
        expr = " ".join(sel["cel"]["expression"].split())
        assert expr == (
            f'device.driver == "edgefd.io" && device.attributes["edgefd.io"].model == "{acc.id}"'
        )


def _granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    granted = granted_to(docs, SERVICE_ACCOUNT)
    assert all(ns is None for ns, *_ in granted)
    return {(g, r, v) for _, g, r, v in granted - {MARK_GRANT}}


def test_rbac_is_what_the_dra_mode_calls() -> None:
    """Every verb the DRA code uses (kubeapi.py), and nothing else: no patch, no
    deletecollection, claims read-only and one at a time."""
    # the pod's account (split-identity binds devplugin's own: test_split_identity.py)
    assert MARK_GRANT in granted_to(dra_docs(), SERVICE_ACCOUNT)
    granted = _granted(dra_docs())
    slices = {("resource.k8s.io", "resourceslices", v) for v in ("get", "list", "watch")}
    slices |= {("resource.k8s.io", "resourceslices", v) for v in ("create", "update", "delete")}
    claims = {("resource.k8s.io", "resourceclaims", "get")}
    claims |= {("resource.k8s.io", "resourceclaims/status", "patch")}  # apply of status.devices
    claims |= {("resource.k8s.io", "resourceclaims/driver", "associated-node:patch")}
    assert granted == slices | claims | {("", "nodes", "get")}  # nodes: the slices' owner
    src = (ROOT / "tools" / "devplugin" / "dra" / "kubeapi.py").read_text()
    for verb in ('"POST"', '"PUT"', '"DELETE"', '"GET"'):
        assert verb in src
    assert src.count('"PATCH"') == 1 and "/status?" in src  # the claim status apply only


def _policy(docs: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    policy = find(docs, "ValidatingAdmissionPolicy", name)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    [cond] = spec["matchConditions"]
    assert mark_condition(cond["expression"])
    # in the base, whatever the options: in force before the dra component's rights
    assert name in base.DRA_POLICIES
    return spec, binding


def test_admission_policy_is_bound_denying_and_scoped() -> None:
    """DRA's policies are the base's (k8s/admission-policy.yaml): k8s/dra adds rights only."""
    assert not [d for d in dra_docs() if d["kind"].startswith("ValidatingAdmissionPolicy")]
    docs = base.load_manifests()
    spec, _ = _policy(docs, "edgefd-resourceslice-restriction")
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    text = yaml.safe_dump(spec)
    assert "authentication.kubernetes.io/node-name" in text
    assert "s.spec.driver == 'edgefd.io'" in text


def test_claim_status_policy_is_bound_denying_and_scoped() -> None:
    spec, _ = _policy(base.load_manifests(), "edgefd-resourceclaim-status-restriction")
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceclaims/status"] and rule["operations"] == ["UPDATE"]
    text = yaml.safe_dump(spec)
    assert "authentication.kubernetes.io/node-name" in text
    assert "nodeSelectorTerms" in text
    assert "variables.foreignAfter == variables.foreignBefore" in text


def test_the_policies_name_the_drivers_constant() -> None:
    """The manifests hold the driver's name literally (CEL has no import): every driver name
    they compare with, and the per-driver RBAC grant, is devplugin's DRIVER."""
    docs = [*dra_docs(), *base.load_manifests()]
    named: set[str] = set()
    for name in ("edgefd-resourceslice-restriction", "edgefd-resourceclaim-status-restriction"):
        text = json.dumps(_policy(docs, name)[0])
        named |= set(re.findall(r"driver [!=]= '([^']*)'", text))
    assert named == {DRIVER}
    names = {
        n
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        for r in d["rules"]
        if r["resources"] == ["resourceclaims/driver"]
        for n in r["resourceNames"]
    }
    assert names == {DRIVER}


# -- the component over the base


def test_component_adds_k8s_dra_and_changes_only_devplugins_daemonset(
    rendered: list[dict[str, Any]], rendered_base: list[dict[str, Any]]
) -> None:
    by_key = {_key(d): d for d in rendered}
    base_keys = {_key(d) for d in rendered_base}
    assert set(by_key) == base_keys | {_key(d) for d in dra_docs()}
    for d in rendered_base:
        if _key(d) != ("DaemonSet", NAMESPACE, DEVPLUGIN_DS):
            assert by_key[_key(d)] == d, _key(d)


def _devplugin(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return container(pod_spec(daemonset(docs, DEVPLUGIN_DS)), "devplugin")


def test_only_the_devplugin_container_changes(
    rendered: list[dict[str, Any]], rendered_base: list[dict[str, Any]]
) -> None:
    ds, ds0 = daemonset(rendered, DEVPLUGIN_DS), daemonset(rendered_base, DEVPLUGIN_DS)
    spec, spec0 = pod_spec(ds), pod_spec(ds0)
    assert [c["name"] for c in spec["containers"]] == ["feature-sink", "device-keeper"]
    assert [c["name"] for c in spec["initContainers"]] == ["devplugin", "dt-labeller", "bus-scan"]
    for other in ("dt-labeller", "bus-scan", "feature-sink", "device-keeper"):
        assert container(spec, other) == container(spec0, other)
    lists = ("initContainers", "containers", "volumes")
    rest = {k: v for k, v in spec.items() if k not in lists}
    assert rest == {k: v for k, v in spec0.items() if k not in lists}
    assert rest["serviceAccountName"] == SERVICE_ACCOUNT
    c, c0 = _devplugin(rendered), _devplugin(rendered_base)
    assert {k: v for k, v in c.items() if k not in ("env", "volumeMounts")} == {
        k: v for k, v in c0.items() if k not in ("env", "volumeMounts")
    }
    # the same command; in DRA mode by its variables (a merge by name, so the hostnetwork
    # component's EDGEFD_LISTEN holds in either order): --api=dra instead of --plugin-dir,
    # and the DRA directories
    env, env0 = ({e["name"]: e for e in x["env"]} for x in (c, c0))
    assert env0.pop("EDGEFD_PLUGIN_DIR")["value"] == "/var/lib/kubelet/device-plugins"
    added = {k: env.pop(k)["value"] for k in set(env) - set(env0)}
    assert added == {
        "EDGEFD_API": "dra",
        "EDGEFD_KUBELET_DIR": KUBELET_DIR,
        "EDGEFD_CDI_DIR": "/var/run/cdi",
    }
    assert env == env0
    assert setting(c, "--plugin-dir") is None


def test_dra_paths_are_mounted_at_the_host_paths(rendered: list[dict[str, Any]]) -> None:
    """The kubelet is told host paths (the service socket, CDI device IDs whose specs the
    runtime reads): each is at the same path in the container."""
    spec = pod_spec(daemonset(rendered, DEVPLUGIN_DS))
    volumes = {v["name"]: v for v in spec["volumes"]}
    c = _devplugin(rendered)
    mounts = {
        volumes[m["name"]]["hostPath"]["path"]: m
        for m in c["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    assert "/var/lib/kubelet/device-plugins" not in mounts
    assert "device-plugins" not in volumes
    kubelet_dir = setting(c, "--kubelet-dir")
    cdi_dir = setting(c, "--cdi-dir")
    expect = {f"{kubelet_dir}/plugins_registry", f"{kubelet_dir}/plugins/edgefd.io", cdi_dir}
    assert expect == set(DRA_HOSTPATHS)
    for path, kind in DRA_HOSTPATHS.items():
        assert mounts[path]["mountPath"] == path
        assert not mounts[path].get("readOnly")
        (vol,) = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == path]
        assert vol["hostPath"]["type"] == kind


def test_the_pod_keeps_least_privilege(rendered: list[dict[str, Any]], monkeypatch) -> None:
    """The base's privilege check, with the DRA host paths allowed for devplugin only."""
    allowed = dict(base.HOSTPATHS_ALLOWED)
    allowed.pop("/var/lib/kubelet/device-plugins")
    for path in DRA_HOSTPATHS:
        allowed[path] = ({"devplugin"}, False)
    monkeypatch.setattr(base, "HOSTPATHS_ALLOWED", allowed)
    ds = daemonset(rendered, DEVPLUGIN_DS)
    violations = base.pod_violations(ds)
    created = [
        v["name"]
        for v in pod_spec(ds)["volumes"]
        if DRA_HOSTPATHS.get(v.get("hostPath", {}).get("path", "")) == "DirectoryOrCreate"
    ]
    assert sorted(violations) == sorted(
        f"volume {n}: hostPath type must be Directory" for n in created
    )
    # and the check still bites: the DRA paths for another container are refused
    bad = copy.deepcopy(ds)
    sink = copy.deepcopy(container(pod_spec(daemonset(rendered)), "feature-sink"))
    sink["volumeMounts"].append({"name": "cdi-specs", "mountPath": "/var/run/cdi"})
    pod_spec(bad)["containers"].append(sink)
    assert "feature-sink may not mount /var/run/cdi" in base.privilege_violations(bad)


def _token_users(ds: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """container -> the projected token volume it mounts at the standard path."""
    spec = pod_spec(ds)
    assert spec["automountServiceAccountToken"] is False
    tokens = {
        v["name"]: v
        for v in spec["volumes"]
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    users = {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind, []):
            for m in c.get("volumeMounts", []):
                if m["name"] in tokens:
                    assert m["mountPath"] == TOKEN_PATH and m.get("readOnly") is True
                    users[c["name"]] = tokens[m["name"]]
    return users


def test_one_pod_one_account_a_token_where_the_api_is_called(rendered: list[dict[str, Any]]):
    """Issue 34 item 3: in one pod, feature-sink and devplugin mount a token each (of the
    pod's ServiceAccount), no other container any; the account holds the sink's rights and
    DRA's: the trade-off k8s/pod-template.yaml writes down (split-identity: the test below)."""
    spec = pod_spec(daemonset(rendered))
    users = _token_users(daemonset(rendered))
    assert set(users) == {"feature-sink", "devplugin"}
    assert users["feature-sink"]["name"] != users["devplugin"]["name"]
    assert users["devplugin"] == dict(users["feature-sink"], name=users["devplugin"]["name"])
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    rights = {r for _, _, r, _ in granted_to(rendered, SERVICE_ACCOUNT)}
    assert {"resourceslices", "nodes", "events"} <= rights
    assert [d["metadata"]["name"] for d in rendered if d["kind"] == "ServiceAccount"] == [
        SERVICE_ACCOUNT
    ]


def test_devplugin_and_feature_sink_tokens_are_two_identities() -> None:
    """Issue 22, item 12, with k8s/overlays/split-identity (listed last, as it must be:
    test_kustomize.py): the sink's token cannot write ResourceSlices and devplugin's cannot
    patch labels. Each DaemonSet's pod mounts a token of its own ServiceAccount only, and each
    ServiceAccount holds only its own rights (plus the mark, so every policy applies)."""
    split = COMPONENT.parent / "split-identity"
    two_identities(render([ROOT / "k8s"], [COMPONENT, split]))


def two_identities(rendered: list[dict[str, Any]]) -> None:
    labels, plugin = daemonset(rendered), daemonset(rendered, SPLIT_DS)
    assert set(_token_users(labels)) == {"feature-sink"}
    assert set(_token_users(plugin)) == {"devplugin"}
    assert pod_spec(labels)["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod_spec(plugin)["serviceAccountName"] == DEVPLUGIN_SA
    # the same pod-bound, short-lived token and in-cluster files as the sink's
    sink_token = _token_users(labels)["feature-sink"]
    assert _token_users(plugin)["devplugin"] == dict(
        sink_token, name=_token_users(plugin)["devplugin"]["name"]
    )
    sink = {(g, r, v) for _, g, r, v in granted_to(rendered, SERVICE_ACCOUNT)}
    plugin_rights = {(g, r, v) for _, g, r, v in granted_to(rendered, DEVPLUGIN_SA)}
    assert not {r for g, r, v in sink} & {"resourceslices", "resourceclaims"}
    assert not {r for g, r, v in plugin_rights} & {"events", "nodefeatures"}
    # devplugin reads Nodes (its slices' owner) and can change none
    assert {(g, r, v) for g, r, v in plugin_rights if r == "nodes"} == {("", "nodes", "get")}
    assert sink & plugin_rights == {MARK_GRANT[1:], ("", "nodes", "get")}


def test_the_component_command_runs(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    """The real CLI takes the component's command line (as a dry run on a sample host, with
    the ConfigMap's resources at the --config path)."""
    from tests.fixturegen import build_host

    c = _devplugin(rendered)
    cm = find(rendered, "ConfigMap")
    config = tmp_path / "resources.yaml"
    config.write_text(next(iter(cm["data"].values())))
    host = build_host("rpi4-coral", tmp_path / "host", devicetree=False)
    args = []
    for a in c["command"][1:]:
        if a.startswith("--host-root="):
            a = f"--host-root={host}"
        elif a.startswith("--config="):
            a = f"--config={config}"
        elif a.startswith("--notice-dir="):  # the pod's emptyDir
            (tmp_path / "notices").mkdir()
            a = f"--notice-dir={tmp_path / 'notices'}"
        args.append(a)
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--dry-run", "--node-name=n1"],
        env=flag_env(c),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["kind"] == "ResourceSlice"


def test_namespace_and_service_account_are_the_base_s() -> None:
    for d in dra_docs():
        assert d["metadata"].get("namespace") in (None, NAMESPACE)
        for s in d.get("subjects", []):  # the pod's (split-identity: devplugin's own)
            assert (s["name"], s["namespace"]) == (SERVICE_ACCOUNT, NAMESPACE)


def test_the_e2e_dra_overlay_gives_devplugin_the_sinks_api_address() -> None:
    """tests/system/overlay-dra (scripts/e2e --api dra): the component over the e2e overlay,
    devplugin on loopback and told the same API server as feature-sink."""
    kubectl = harness_binary("kubectl")
    out = subprocess.run(
        [str(kubectl), "kustomize", str(ROOT / "tests" / "system" / "overlay-dra")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    dp = container(pod_spec(daemonset(docs, DEVPLUGIN_DS)), "devplugin")
    sink = container(pod_spec(daemonset(docs)), "feature-sink")

    def api_env(c: dict[str, Any]) -> dict[str, str]:
        return {e["name"]: e.get("value") for e in c["env"] if e["name"].startswith("KUBERNETES_")}

    assert api_env(dp) == api_env(sink) and api_env(dp)
    assert setting(dp, "--listen") == "127.0.0.1:8082"
    assert setting(dp, "--api") == "dra"
