"""Offline checks of k8s/: schema validity and the least-privilege invariants of the pod.

Schema: every object is validated with the `kubernetes` client's models, which are generated
from the Kubernetes OpenAPI schema as pydantic models with unknown fields forbidden and strict
types. A round trip (validate, dump by JSON name) must give back the very same document, which
also catches fields spelled by their Python name (`read_only_root_filesystem`), accepted by the
models but not by the API server. tests/test_k8s_apiserver.py repeats this against a real API
server (server-side dry-run with strict field validation).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from edgefd.feature_sink.namespaces import SINK_POLICY, sink_policy

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"

NAMESPACE = "edgefd"
# One DaemonSet, one pod, one ServiceAccount (issue 34 item 3): feature-sink's token, and
# devplugin's in DRA mode only. k8s/overlays/split-identity splits it by identity: devplugin
# and device-keeper in DaemonSet edgefd-devplugin, as ServiceAccount edgefd-devplugin.
LABELS_DS = "edgefd"
DEVPLUGIN_DS = LABELS_DS  # the DaemonSet holding devplugin and device-keeper, by default
SPLIT_DS = "edgefd-devplugin"  # ... and with split-identity
SERVICE_ACCOUNT = "edgefd-feature-sink"
DEVPLUGIN_SA = "edgefd-devplugin"  # split-identity's
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# edgefd's mark (k8s/rbac.yaml): what the admission policies find edgefd's accounts by
MARK = {"apiGroups": ["admission.edgefd.io"], "resources": ["restrictions"], "verbs": ["subject"]}

# devplugin first, then the producers; devplugin and bus-scan are native sidecars
INIT_CONTAINERS = ("devplugin", "dt-labeller", "bus-scan")
SIDECARS = ("devplugin", "bus-scan")
PRODUCERS = ("dt-labeller", "bus-scan")  # the init containers of the labels' pod alone
LONG_RUNNING = ("feature-sink", "devplugin", "device-keeper")


class Profile(NamedTuple):
    """Where a distribution's kubelet keeps its directories (--root-dir) and its containerd
    listens (sources: k8s/overlays/<name>/kustomization.yaml, charts/edgefd/_helpers.tpl)."""

    kubelet_dir: str
    cri_socket: str


PROFILES = {
    "kubeadm": Profile("/var/lib/kubelet", "/run/containerd/containerd.sock"),
    "k3s": Profile("/var/lib/kubelet", "/run/k3s/containerd/containerd.sock"),
    "microk8s": Profile(
        "/var/snap/microk8s/common/var/lib/kubelet", "/var/snap/microk8s/common/run/containerd.sock"
    ),
    "k0s": Profile("/var/lib/k0s/kubelet", "/run/k0s/containerd.sock"),
}
# every distribution's: the kubelet does not derive it from --root-dir
# (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 DevicePluginPath)
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# container -> the DaemonSet that runs it (with split-identity: devplugin's are SPLIT_DS)
DAEMONSET_OF = {
    "dt-labeller": LABELS_DS,
    "bus-scan": LABELS_DS,
    "feature-sink": LABELS_DS,
    "devplugin": DEVPLUGIN_DS,
    "device-keeper": DEVPLUGIN_DS,
}
MARK_DEVPLUGIN = "edgefd.io/devplugin"


def holding(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The one DaemonSet that runs this container (edgefd, or split-identity's)."""
    (ds,) = [
        d for d in daemonsets(docs) if name in [c["name"] for _, c in all_containers(pod_spec(d))]
    ]
    return ds


# Containers allowed to run as uid 0, and why (see the comments in k8s/pod-template.yaml).
ROOT_ALLOWED = {
    "dt-labeller": "reads /sys/firmware/fdt (0400 root): as its owner, with no capabilities",
    "devplugin": "creates its socket in /var/lib/kubelet/device-plugins (0755 root)",
}
# hostPath -> (containers that may mount it, must every mount be read-only)
HOSTPATHS_ALLOWED = {
    "/sys": (set(INIT_CONTAINERS), True),
    "/dev": ({"devplugin"}, True),
    "/var/lib/kubelet/device-plugins": ({"devplugin"}, False),
    # k8s/overlays/host-features: the host's NFD features.d, read by the sink alone
    "/etc/kubernetes/node-feature-discovery/features.d": ({"feature-sink"}, True),
}
# hostPath types other than Directory (which fails the pod where the path is missing): the
# host's features.d is created empty on a node without NFD, so the pod runs on every node
HOSTPATH_TYPES = {"/etc/kubernetes/node-feature-discovery/features.d": "DirectoryOrCreate"}

# Kinds edgefd may create; anything else in k8s/ is a review item, not an accident.
NAMESPACED_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "DaemonSet"}
CLUSTER_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


# -- loading ----------------------------------------------------------------------------------


def manifest_files() -> list[Path]:
    """The files `kubectl apply -f k8s/` reads, in the order it reads them (lexical)."""
    return sorted(p for p in K8S.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def load_manifests() -> list[dict[str, Any]]:
    """Every object in k8s/, in apply order."""
    docs: list[dict[str, Any]] = []
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append(doc)
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def daemonset(docs: list[dict[str, Any]] | None = None, name: str = LABELS_DS) -> dict[str, Any]:
    return find(docs if docs is not None else load_manifests(), "DaemonSet", name)


def daemonsets(docs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [d for d in (docs if docs is not None else load_manifests()) if d["kind"] == "DaemonSet"]


def every_container(docs: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Every container of every DaemonSet (init containers first, within each)."""
    for ds in daemonsets(docs):
        for _, c in all_containers(pod_spec(ds)):
            yield c


def pod_spec(ds: dict[str, Any]) -> dict[str, Any]:
    return ds["spec"]["template"]["spec"]


def all_containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for c in spec.get("initContainers", []):
        yield "init", c
    for c in spec.get("containers", []):
        yield "main", c


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    for _, c in all_containers(spec):
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name}")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value` in a command line, else None."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def setting(c: dict[str, Any], flag: str) -> str | None:
    """What a container's tool runs with for `--flag`: its command line, else its
    `EDGEFD_<FLAG>` variable (edgefd.cli.env_name), as the tool itself reads them."""
    from edgefd.cli import env_name

    given = flag_value(c.get("command", []) + c.get("args", []), flag)
    if given is not None:
        return given
    for e in c.get("env", []):
        if e["name"] == env_name(flag) and "value" in e:
            return str(e["value"])
    return None


def flag_env(c: dict[str, Any]) -> dict[str, str]:
    """An environment for running a container's tool here: this process's, less any EDGEFD_
    variable of our own, plus the container's literal EDGEFD_ variables (its flags, as the pod
    gives them)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEFD_")}
    env |= {e["name"]: e["value"] for e in c.get("env", []) if e["name"].startswith("EDGEFD_")}
    return env


def unknown_settings(c: dict[str, Any]) -> list[str]:
    """The container's EDGEFD_ variables that no flag of its tool reads: a typo there would be
    ignored by the tool, silently."""
    import importlib

    import click

    argv = c.get("command", []) + c.get("args", [])
    cmd = importlib.import_module(f"edgefd.{argv[0].replace('-', '_')}.cli").main
    if isinstance(cmd, click.Group):
        cmd = cmd.commands[argv[1]]
    known = {v for p in cmd.params if isinstance(p, click.Option) for v in (p.envvar or [])}
    return [e["name"] for e in c.get("env", [])
            if e["name"].startswith("EDGEFD_") and e["name"] not in known]  # fmt: skip


# -- schema -----------------------------------------------------------------------------------


def model_for(doc: dict[str, Any]) -> type:
    from kubernetes import client

    version = doc["apiVersion"].rpartition("/")[2]
    name = version[0].upper() + version[1:] + doc["kind"]
    model = getattr(client, name, None)
    assert model is not None, f"no kubernetes client model {name} for {doc['kind']}"
    return model


def schema_errors(doc: dict[str, Any]) -> str | None:
    """Why `doc` does not match the Kubernetes schema, else None."""
    import pydantic

    model = model_for(doc)
    try:
        obj = model.model_validate(doc)
    except pydantic.ValidationError as e:
        return str(e)
    back = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    if back != doc:
        return f"does not round-trip through {model.__name__} (a field spelled wrongly?)"
    return None


def test_files_and_apply_order() -> None:
    files = manifest_files()
    assert files, "k8s/ holds no manifests"
    assert (K8S / "pod-template.yaml") in files
    docs = load_manifests()
    # kubectl apply -f k8s/ reads files in lexical order: the Namespace must come first.
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == NAMESPACE
    assert files[0].name.startswith("00-")


@pytest.mark.parametrize(
    "doc",
    load_manifests(),
    ids=lambda d: f"{d.get('kind')}/{d.get('metadata', {}).get('name')}",
)
def test_object_matches_kubernetes_schema(doc: dict[str, Any]) -> None:
    for field in ("apiVersion", "kind", "metadata"):
        assert field in doc, f"missing {field}"
    assert doc["metadata"].get("name"), "metadata.name is required"
    kind = doc["kind"]
    assert kind in NAMESPACED_KINDS | CLUSTER_KINDS, f"unexpected kind {kind}"
    if kind in CLUSTER_KINDS:
        assert "namespace" not in doc["metadata"], f"{kind} is cluster-scoped"
    else:
        assert doc["metadata"].get("namespace"), f"{kind} needs an explicit namespace"
    assert schema_errors(doc) is None, schema_errors(doc)


def test_object_names_are_unique() -> None:
    seen = set()
    for d in load_manifests():
        key = (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (
            lambda c: c["securityContext"].update(readOnlyRootFileSystem=True),
            "securityContext.readOnlyRootFileSystem\n  Extra inputs are not permitted",
        ),
        (lambda c: c.pop("name"), "containers.0.name\n  Field required"),
        (
            lambda c: c["securityContext"].update(runAsUser="0"),
            "securityContext.runAsUser\n  Input should be a valid integer",
        ),
        (
            lambda c: c["securityContext"].update(
                read_only_root_filesystem=c["securityContext"].pop("readOnlyRootFilesystem")
            ),
            "does not round-trip through V1DaemonSet",
        ),  # Python spelling, not the API's
    ],
    ids=["typo", "missing-required", "wrong-type", "python-field-name"],
)
def test_schema_check_catches_mistakes(mutate: Any, error: str) -> None:
    """Each mistake is caught for what it is (not merely "some error")."""
    ds = copy.deepcopy(daemonset())
    mutate(pod_spec(ds)["containers"][0])
    assert error in (schema_errors(ds) or "")


# -- the pod: least privilege ------------------------------------------------------------------


def effective_security(spec: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """The container's security settings with the pod-level ones it inherits."""
    pod = spec.get("securityContext", {})
    ctx = c.get("securityContext", {})
    out = {
        k: pod[k] for k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile") if k in pod
    }
    out.update(ctx)
    return out


def test_container_set() -> None:
    """One DaemonSet, one pod (issue 34 item 3): devplugin, then the producers, as init
    containers (devplugin and bus-scan native sidecars), the sink and the keeper as
    containers."""
    assert [ds["metadata"]["name"] for ds in daemonsets()] == [LABELS_DS]
    spec = pod_spec(daemonset())
    assert [c["name"] for c in spec["initContainers"]] == list(INIT_CONTAINERS)
    # device-keeper is in the base (issue 34 item 3): k8s/overlays/no-device-keeper removes it
    assert [c["name"] for c in spec["containers"]] == ["feature-sink", "device-keeper"]
    for _, c in all_containers(spec):
        assert DAEMONSET_OF[c["name"]] == LABELS_DS
    # the marks the components select the DaemonSet holding devplugin by
    assert daemonset()["metadata"]["annotations"] == {
        MARK_DEVPLUGIN: "true",
        "edgefd.io/devplugin-account": SERVICE_ACCOUNT,
        "edgefd.io/distribution": "kubeadm",
        "edgefd.io/device-api": "device-plugin",
        "edgefd.io/device-keeper": "on",
    }


def test_bus_scanners_are_one_native_sidecar_gating_the_sink() -> None:
    """The bus scanners follow hot-plug (--watch) as a native sidecar (an init container with
    restartPolicy Always); the kubelet starts the containers (feature-sink) only once its
    startup probe passed, and that probe (/readyz) passes only after both feature files were
    written completely once (tests/scan/test_session.py checks /readyz). dt-labeller, before
    it, stays a one-shot init container: the devicetree does not change at run time."""
    spec = pod_spec(daemonset())
    inits = {c["name"]: c for c in spec["initContainers"]}
    assert "restartPolicy" not in inits["dt-labeller"]
    sidecar = inits["bus-scan"]
    assert sidecar["restartPolicy"] == "Always"
    cmd = sidecar["command"]
    assert cmd[0] == "usb-scan" and "--watch" in cmd
    assert flag_value(cmd, "--also") == "pci-scan"
    listen = setting(sidecar, "--listen")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    probe = sidecar["startupProbe"]["exec"]["command"]
    assert probe[1:4] == ["-m", "edgefd.probe", listen.lstrip(":")]  # its /readyz, strictly
    assert not [a for a in probe if a.startswith("--or-alive")]  # it gates feature-sink
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ports[sidecar["livenessProbe"]["httpGet"]["port"]] == int(listen.lstrip(":"))
    assert "readinessProbe" not in sidecar  # a sidecar's readiness would gate nothing useful
    # the sink reads what the sidecar writes, and starts after it
    assert spec["containers"][0]["name"] == "feature-sink"


def test_devplugin_starts_first_and_holds_nothing_back() -> None:
    """devplugin is the first init container, a native sidecar with no startup probe: the
    kubelet starts it with the pod's sandbox, and goes on to dt-labeller as soon as it runs,
    so the plugin registers (and the node's workloads start) without waiting for the labels,
    and the labels do not wait for the plugin or its peer (a startup probe on an init
    container holds the next one back until it passes)."""
    spec = pod_spec(daemonset())
    first = spec["initContainers"][0]
    assert first["name"] == "devplugin"
    assert first["restartPolicy"] == "Always"
    assert "startupProbe" not in first


def privilege_violations(ds: dict[str, Any]) -> list[str]:
    """Every way the pod exceeds the least privilege edgefd needs (empty: none)."""
    spec = pod_spec(ds)
    out: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"pod uses {key}")
    # Root in the container must be the host's root for dt-labeller/devplugin to own their
    # files; a user namespace (hostUsers: false) would silently break them.
    if spec.get("hostUsers", True) is not True:
        out.append("hostUsers must stay true")
    for _, c in all_containers(spec):
        n = c["name"]
        sec = effective_security(spec, c)
        if sec.get("privileged") is not False:
            out.append(f"{n}: privileged must be false")
        if sec.get("allowPrivilegeEscalation") is not False:
            out.append(f"{n}: allowPrivilegeEscalation must be false")
        if sec.get("readOnlyRootFilesystem") is not True:
            out.append(f"{n}: readOnlyRootFilesystem must be true")
        caps = sec.get("capabilities", {})
        if caps.get("drop") != ["ALL"]:
            out.append(f"{n}: must drop ALL capabilities")
        if caps.get("add"):
            out.append(f"{n}: adds capabilities {caps['add']}")
        if sec.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            out.append(f"{n}: seccompProfile must be RuntimeDefault")
        if sec.get("procMount", "Default") != "Default":
            out.append(f"{n}: procMount must be Default")
        uid = sec.get("runAsUser")
        if uid is None:
            out.append(f"{n}: set runAsUser explicitly")
        elif n not in ROOT_ALLOWED and (uid == 0 or sec.get("runAsNonRoot") is not True):
            out.append(f"{n}: must run as non-root (runAsNonRoot, uid != 0)")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for v in volumes.values():
        kinds = set(v) - {"name"}
        if not kinds <= {"hostPath", "emptyDir", "configMap", "projected"}:
            out.append(f"volume {v['name']}: kind {kinds} not allowed")
        if "hostPath" in v:
            if v["hostPath"]["path"] not in HOSTPATHS_ALLOWED:
                out.append(f"volume {v['name']}: hostPath {v['hostPath']['path']} not allowed")
            else:
                want = HOSTPATH_TYPES.get(v["hostPath"]["path"], "Directory")
                if v["hostPath"].get("type") != want:
                    out.append(f"volume {v['name']}: hostPath type must be {want}")
    for _, c in all_containers(spec):
        for m in c.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            path = vol.get("hostPath", {}).get("path")
            if path not in HOSTPATHS_ALLOWED:
                continue
            users, read_only = HOSTPATHS_ALLOWED[path]
            if c["name"] not in users:
                out.append(f"{c['name']} may not mount {path}")
            if read_only and m.get("readOnly") is not True:
                out.append(f"{c['name']}: {m['mountPath']} must be read-only")
            if m.get("mountPropagation", "None") != "None":
                out.append(f"{c['name']}: {m['mountPath']} must not propagate mounts")
    return out + notice_violations(spec)


SHARED_EMPTYDIRS = {"features-d"}  # each producer writes its own file; the sink reads them all
NOTICES = "/run/edgefd/notices"


DECISIONS = "decisions"


def decisions_violations(here: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """devplugin's decisions (edgefd.inventory.decisions): devplugin alone writes them, where
    its --decisions names, and device-keeper alone reads them, read-only, at the same path."""
    out = []
    for c, m in here:
        argv = c.get("command", []) + c.get("args", [])
        flag = f"--decisions={m['mountPath']}/decisions.json"
        ro = m.get("readOnly") is True
        if c["name"] not in ("devplugin", "device-keeper"):
            out.append(f"{c['name']}: mounts devplugin's decisions")
        elif flag not in argv:
            out.append(f"{c['name']}: the decisions it mounts are not its --decisions")
        elif ro != (c["name"] == "device-keeper"):
            out.append(f"{c['name']}: decisions {'read-only' if ro else 'writable'}")
    return out


def notice_violations(spec: dict[str, Any]) -> list[str]:
    """Issue 46 item 4: a writer can write only its own notice, and feature-sink knows whose
    a notice is by where it is (edgefd.core.notices). So every emptyDir but features.d has at
    most one writer, which names it in --notice-dir; feature-sink alone reads it, read-only,
    at /run/edgefd/notices/<that writer>, and nothing else is mounted there."""
    out: list[str] = []
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = [(c, m) for _, c in all_containers(spec) for m in c.get("volumeMounts", [])]
    for name, v in volumes.items():
        if "emptyDir" not in v or name in SHARED_EMPTYDIRS:
            continue
        here = [(c, m) for c, m in mounts if m["name"] == name]
        writers = [c for c, m in here if m.get("readOnly") is not True]
        if name == DECISIONS:
            out += decisions_violations(here)
            continue
        if len(writers) > 1:
            who = ", ".join(c["name"] for c in writers)
            out.append(f"emptyDir {name}: written by {who}: a notices directory has one writer")
            continue
        for c, m in here:
            if c in writers:
                argv = c.get("command", []) + c.get("args", [])
                if f"--notice-dir={m['mountPath']}" not in argv:
                    out.append(f"{c['name']}: {name} is not its --notice-dir")
            elif c["name"] != "feature-sink":
                out.append(f"{c['name']}: reads {name}; only feature-sink reads notices")
            elif not writers or m["mountPath"] != f"{NOTICES}/{writers[0]['name']}":
                where = m["mountPath"]
                out.append(f"feature-sink: reads {name} at {where}, not {NOTICES}/<writer>")
    for c, m in mounts:
        vol = volumes.get(m["name"], {})
        if (
            c["name"] == "feature-sink"
            and m["mountPath"].startswith(NOTICES + "/")
            and ("emptyDir" not in vol or m["name"] in SHARED_EMPTYDIRS)
        ):
            out.append(f"feature-sink: {m['mountPath']} is not a writer's notices directory")
    return out


def pod_violations(ds: dict[str, Any]) -> list[str]:
    """privilege_violations of a DaemonSet whose device-keeper, the one container with added
    capabilities, answers to its own rule instead (test_device_keeper_manifests.py: exactly
    what it needs, and nothing of it for the rest of the pod)."""
    from tests.k8s.test_device_keeper_manifests import KEEPER, keeper_violations, without_keeper

    if KEEPER not in [c["name"] for _, c in all_containers(pod_spec(ds))]:
        return privilege_violations(ds)
    return keeper_violations(ds) + privilege_violations(without_keeper(ds))


def test_pod_has_least_privilege() -> None:
    assert pod_violations(daemonset()) == []


def test_each_writer_alone_writes_its_notices_and_the_sink_reads_them_by_where() -> None:
    """Issue 46 item 4: one shared notices directory let bus-scan (uid 65532, no token)
    replace devplugin's notice, delete the keeper's and post one in any name. Now each writer
    has its own, mounted into it alone; the sink reads each read-only, named for its writer."""
    spec = pod_spec(daemonset())
    sink = container(spec, "feature-sink")
    read = {m["mountPath"]: m["name"] for m in sink["volumeMounts"]}
    assert {p: n for p, n in read.items() if p.startswith(NOTICES)} == {
        f"{NOTICES}/bus-scan": "bus-scan-notices",
        f"{NOTICES}/devplugin": "devplugin-notices",
        f"{NOTICES}/device-keeper": "device-keeper-notices",  # a refused grant (issue 43)
    }
    assert "--notice-dir=/run/edgefd/notices" in sink["command"]
    for writer in ("bus-scan", "devplugin", "device-keeper"):
        (m,) = [m for m in container(spec, writer)["volumeMounts"] if m["mountPath"] == NOTICES]
        assert m["name"] == f"{writer}-notices" and not m.get("readOnly")
    assert notice_violations(spec) == []
    # what the rule refuses: the old shared directory, and a sink reading under a wrong name
    old = copy.deepcopy(spec)
    old["volumes"].append({"name": "shared", "emptyDir": {}})
    for writer in ("bus-scan", "devplugin"):
        for m in container(old, writer)["volumeMounts"]:
            if m["mountPath"] == NOTICES:
                m["name"] = "shared"
    assert "emptyDir shared: written by devplugin, bus-scan: a notices directory has one " \
        "writer" in notice_violations(old)  # fmt: skip
    bad = copy.deepcopy(spec)
    for m in container(bad, "feature-sink")["volumeMounts"]:
        if m["name"] == "bus-scan-notices":
            m["mountPath"] = f"{NOTICES}/kubelet"
    assert notice_violations(bad) == [
        f"feature-sink: reads bus-scan-notices at {NOTICES}/kubelet, not {NOTICES}/<writer>"
    ]


def test_feature_sink_is_non_root() -> None:
    spec = pod_spec(daemonset())
    sink = effective_security(spec, container(spec, "feature-sink"))
    assert sink["runAsNonRoot"] is True and sink["runAsUser"] >= 1000


def _c(ds: dict[str, Any], name: str) -> dict[str, Any]:
    return container(pod_spec(ds), name)


def _plugin_dir_in_sink(ds: dict[str, Any]) -> None:
    """The device-plugins directory, as a volume of the labels pod mounted into the sink."""
    pod_spec(ds)["volumes"].append(
        {
            "name": "device-plugins",
            "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
        }
    )
    _c(ds, "feature-sink")["volumeMounts"].append(
        {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}
    )


def _mount(ds: dict[str, Any], name: str, path: str) -> dict[str, Any]:
    return next(m for m in _c(ds, name)["volumeMounts"] if m["mountPath"] == path)


# name -> (the escalation, the one violation it must be reported as)
ESCALATIONS = {
    "privileged": (
        lambda ds: _c(ds, "bus-scan")["securityContext"].update(privileged=True),
        "bus-scan: privileged must be false",
    ),
    "sink-root": (
        lambda ds: _c(ds, "feature-sink")["securityContext"].update(runAsUser=0),
        "feature-sink: must run as non-root (runAsNonRoot, uid != 0)",
    ),
    "scanner-root": (
        lambda ds: _c(ds, "bus-scan")["securityContext"].update(runAsNonRoot=False, runAsUser=0),
        "bus-scan: must run as non-root (runAsNonRoot, uid != 0)",
    ),
    "added-cap": (
        lambda ds: _c(ds, "devplugin")["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "devplugin: adds capabilities ['SYS_ADMIN']",
    ),
    "escalation": (
        lambda ds: _c(ds, "dt-labeller")["securityContext"].update(allowPrivilegeEscalation=True),
        "dt-labeller: allowPrivilegeEscalation must be false",
    ),
    "writable-rootfs": (
        lambda ds: _c(ds, "devplugin")["securityContext"].update(readOnlyRootFilesystem=False),
        "devplugin: readOnlyRootFilesystem must be true",
    ),
    "host-network": (lambda ds: pod_spec(ds).update(hostNetwork=True), "pod uses hostNetwork"),
    "host-root-mount": (
        lambda ds: pod_spec(ds)["volumes"].append(
            {"name": "root", "hostPath": {"path": "/", "type": "Directory"}}
        ),
        "volume root: hostPath / not allowed",
    ),
    "writable-sys": (
        lambda ds: _mount(ds, "devplugin", "/host/sys").update(readOnly=False),
        "devplugin: /host/sys must be read-only",
    ),
    "plugin-dir-in-sink": (
        _plugin_dir_in_sink,
        "feature-sink may not mount /var/lib/kubelet/device-plugins",
    ),
    "plugin-host-network": (
        lambda ds: pod_spec(ds).update(hostNetwork=True),
        "pod uses hostNetwork",
    ),
}
# the DaemonSet each escalation is tried on: the one running the container it changes
ESCALATED_DS = {
    "added-cap": DEVPLUGIN_DS,
    "writable-rootfs": DEVPLUGIN_DS,
    "writable-sys": DEVPLUGIN_DS,
    "plugin-host-network": DEVPLUGIN_DS,
}


@pytest.mark.parametrize("name", sorted(ESCALATIONS))
def test_privilege_check_catches_escalations(name: str) -> None:
    """Each escalation is reported as itself, and as nothing else."""
    ds = copy.deepcopy(daemonset(name=ESCALATED_DS.get(name, LABELS_DS)))
    assert pod_violations(ds) == []
    escalate, violation = ESCALATIONS[name]
    escalate(ds)
    assert pod_violations(ds) == [violation]


def test_host_root_layout_matches_the_flags() -> None:
    """Tools that read the host get --host-root=/host and have host /sys at /host/sys."""
    for name in INIT_CONTAINERS:
        spec = pod_spec(daemonset(name=DAEMONSET_OF[name]))
        volumes = {v["name"]: v for v in spec["volumes"]}
        c = container(spec, name)
        root = setting(c, "--host-root")
        assert root == "/host", name
        mounted = {
            volumes[m["name"]]["hostPath"]["path"]: m["mountPath"]
            for m in c["volumeMounts"]
            if "hostPath" in volumes[m["name"]]
        }
        assert mounted.get("/sys") == "/host/sys", name
        for host, where in mounted.items():
            if host != "/var/lib/kubelet/device-plugins":
                assert where == root + host, f"{name}: {host} must be at {root}{host}"


def test_device_plugin_dir_is_mounted_at_the_host_path() -> None:
    """The plugin hands the kubelet host paths under --plugin-dir: same path both sides."""
    spec = pod_spec(daemonset(name=DEVPLUGIN_DS))
    volumes = {v["name"]: v for v in spec["volumes"]}
    c = container(spec, "devplugin")
    plugin_dir = setting(c, "--plugin-dir")
    (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == plugin_dir]
    assert volumes[m["name"]]["hostPath"]["path"] == plugin_dir == "/var/lib/kubelet/device-plugins"
    assert not m.get("readOnly")


def test_features_dir_is_shared_through_an_emptydir() -> None:
    spec = pod_spec(daemonset())
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name in (*PRODUCERS, "feature-sink"):
        c = container(spec, name)
        fdir = setting(c, "--features-dir")
        assert fdir, f"{name} must name its --features-dir"
        mounts = [m for m in c["volumeMounts"] if m["mountPath"] == fdir]
        assert len(mounts) == 1, f"{name}: nothing mounted at {fdir}"
        assert "emptyDir" in volumes[mounts[0]["name"]]
        # producers write it; the sink only reads
        assert mounts[0].get("readOnly", False) is (name == "feature-sink"), name


def test_only_feature_sink_gets_an_api_token() -> None:
    """In device-plugin mode only the sink calls the API: devplugin's peer is the kubelet,
    the keeper's the kubelet and the runtime (DRA mode: tests/k8s/test_dra_manifests.py)."""
    spec = pod_spec(daemonset())
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    token_volumes = {
        v["name"]
        for v in spec["volumes"]
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    assert len(token_volumes) == 1
    for _, c in all_containers(spec):
        mounted = {m["name"] for m in c.get("volumeMounts", [])} & token_volumes
        if c["name"] == "feature-sink":
            (m,) = [m for m in c["volumeMounts"] if m["name"] in token_volumes]
            assert m["mountPath"] == TOKEN_PATH and m.get("readOnly") is True
        else:
            assert not mounted, f"{c['name']} must not get the API token"
    (vol,) = [v for v in spec["volumes"] if v["name"] in token_volumes]
    sources = vol["projected"]["sources"]
    sat = next(s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s)
    assert sat["path"] == "token"
    assert 600 <= sat.get("expirationSeconds", 3607) <= 3607, "short-lived token"
    # in-cluster config needs the CA and the namespace next to the token
    paths = {
        i["path"]
        for s in sources
        for src in (s.get("configMap"), s.get("downwardAPI"))
        if src
        for i in src.get("items", [])
    }
    assert {"ca.crt", "namespace"} <= paths


def test_the_pod_has_one_identity() -> None:
    """One pod, one ServiceAccount: devplugin's own account (and DaemonSet) come only with
    k8s/overlays/split-identity (tests/k8s/test_split_identity.py)."""
    docs = load_manifests()
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"] == [
        SERVICE_ACCOUNT
    ]
    assert pod_spec(daemonset(docs))["serviceAccountName"] == SERVICE_ACCOUNT


def test_feature_sink_knows_its_node() -> None:
    spec = pod_spec(daemonset())
    env = {e["name"]: e for e in container(spec, "feature-sink").get("env", [])}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_containers_have_probes_on_their_listen_port(name: str) -> None:
    c = container(pod_spec(daemonset(name=DAEMONSET_OF[name])), name)
    listen = setting(c, "--listen")
    assert listen, f"{name} must say where it listens"
    port = int(listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] in ("/healthz", "/readyz"), f"{name} {probe}"
        target = ports.get(get["port"], get["port"])
        assert target == port, f"{name} {probe} probes {target}, the tool listens on {port}"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    if name in SIDECARS:
        return  # no startup probe: test_devplugin_starts_first_and_holds_nothing_back
    start = c["startupProbe"]["exec"]["command"]
    assert start[:4] == ["/opt/edgefd/bin/python", "-m", "edgefd.probe", str(port)], name


def startup_waits(c: dict[str, Any]) -> float:
    """How long a container's exec startup probe waits (its --within)."""
    return float(flag_value(c["startupProbe"]["exec"]["command"], "--within") or 25)


@pytest.mark.parametrize("name", [*LONG_RUNNING, "bus-scan"])
def test_a_healthy_start_fails_no_probe(name: str) -> None:
    """Issue 25 item 5. The kubelet (v1.37.2, pkg/kubelet/prober) posts a Warning Event for
    every failed probe, whatever its failureThreshold; readiness and liveness wait for the
    startup probe, and readiness runs right after it passes. So: no HTTP probe may run before
    the container is ready. Each long-running container's startup probe waits inside the
    container (tools/probe.py) for /readyz, and must end before the kubelet's timeout (or the
    wait itself would be a failure); its first run comes within a second of the start."""
    c = next(x for x in every_container() if x["name"] == name)
    if "startupProbe" not in c:  # devplugin, a sidecar that holds nothing back
        first_run_waits_for_a_healthy_start(c)
        return
    probe = c["startupProbe"]
    assert set(probe) == {"exec", "periodSeconds", "timeoutSeconds", "failureThreshold"}
    assert probe["periodSeconds"] == 1
    assert startup_waits(c) + 3 <= probe["timeoutSeconds"]
    assert "initialDelaySeconds" not in c.get("livenessProbe", {})
    for kind in ("livenessProbe", "readinessProbe"):
        assert "exec" not in c.get(kind, {}), "periodic exec probes cost a process each"


# how long devplugin takes to be ready after its container starts: 0.5-1.5 s on the e2e node
# (its registration, then its first ResourceSlice), so a probe may run from twice that on
READY_WITHIN_S = 3


def first_run_waits_for_a_healthy_start(c: dict[str, Any]) -> None:
    """A container without a startup probe: its HTTP probes wait out a healthy start
    themselves, readiness often enough that the pod is Ready soon after the container is."""
    ready, alive = c["readinessProbe"], c["livenessProbe"]
    assert ready["initialDelaySeconds"] >= READY_WITHIN_S
    assert ready["periodSeconds"] <= READY_WITHIN_S
    assert alive["initialDelaySeconds"] >= alive["periodSeconds"]
    for kind in ("livenessProbe", "readinessProbe"):
        assert "exec" not in c[kind], "periodic exec probes cost a process each"


def test_every_container_has_requests_and_limits() -> None:
    for c in every_container():
        res = c.get("resources", {})
        assert {"cpu", "memory"} <= set(res.get("requests", {})), c["name"]
        assert "memory" in res.get("limits", {}), c["name"]


def test_runs_on_every_node_and_rolls_gently(name: str = LABELS_DS) -> None:
    ds = daemonset(name=name)
    spec = pod_spec(ds)
    assert {"operator": "Exists"} in spec["tolerations"], "tolerate every taint"
    assert spec["priorityClassName"] == "system-node-critical"
    strategy = ds["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"]
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    # no DaemonSet's selector picks another's pods (split-identity's two)
    for other in daemonsets():
        if other["metadata"]["name"] != name:
            assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()


def test_everything_lives_in_the_edgefd_namespace() -> None:
    """Without exception: a kustomize `namespace:` moves every namespaced object, so one that
    had to stay elsewhere (a RoleBinding for Node Events in `default`) would lose its right
    (tests/k8s/test_relocation.py)."""
    for d in load_manifests():
        assert d["metadata"].get("namespace") in (None, NAMESPACE), d["metadata"]


# -- RBAC --------------------------------------------------------------------------------------


def rules_of(
    docs: list[dict[str, Any]], subject_sa: str, namespace: str = NAMESPACE
) -> list[tuple[str | None, dict]]:
    """(namespace or None for cluster-wide, rule) for every rule bound to the ServiceAccount."""
    out = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = b.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount"
            and s["name"] == subject_sa
            and s.get("namespace") == namespace
            for s in subjects
        ):
            continue
        ref = b["roleRef"]
        role = find(docs, ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == b["metadata"]["namespace"]
        ns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        out += [(ns, r) for r in role["rules"]]
    return out


def granted_to(
    docs: list[dict[str, Any]], subject_sa: str, namespace: str = NAMESPACE
) -> set[tuple[str | None, str, str, str]]:
    """(namespace or None, group, resource, verb) the ServiceAccount may use; no wildcards."""
    granted: set[tuple[str | None, str, str, str]] = set()
    for ns, rule in rules_of(docs, subject_sa, namespace):
        assert "resourceNames" not in rule or rule["resourceNames"]
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"no wildcards: {rule}"
        assert "nonResourceURLs" not in rule
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                for v in rule["verbs"]:
                    granted.add((ns, g, r, v))
    return granted


MARK_GRANT = (None, "admission.edgefd.io", "restrictions", "subject")


def test_rbac_grants_exactly_what_feature_sink_needs() -> None:
    docs = load_manifests()
    sa = find(docs, "ServiceAccount", SERVICE_ACCOUNT)
    assert sa["metadata"]["namespace"] == NAMESPACE
    assert sa.get("automountServiceAccountToken") is False
    from edgefd.feature_sink import nodeapi

    # node mode (the base): the Node (read, watched, patched), Events (confined by
    # admission-policy.yaml to its Node's in `default`) and the mark; NodeFeature rights come
    # only with the nodefeature option (k8s/overlays/nodefeature, tested in test_kustomize.py)
    expected = {
        (None, "", "nodes", "get"),
        (None, "", "nodes", "list"),
        (None, "", "nodes", "watch"),
        (None, "", "nodes", "patch"),
        (None, "", "events", "create"),
        MARK_GRANT,
    }
    granted = granted_to(docs, SERVICE_ACCOUNT)
    assert granted == expected
    assert not any(r == nodeapi.NFD_PLURAL for _, _, r, _ in granted)


def test_devplugin_has_no_rights_as_a_device_plugin() -> None:
    """DRA's rights come with the dra component (test_dra_manifests.py); the base binds none,
    and has no account of devplugin's own (split-identity adds it, test_split_identity.py)."""
    docs = load_manifests()
    assert granted_to(docs, DEVPLUGIN_SA) == set()
    assert not [d for d in docs if d["kind"] == "ServiceAccount" and
                d["metadata"]["name"] == DEVPLUGIN_SA]  # fmt: skip
    # nothing of DRA but the policies restricting its rights (in force before any is granted)
    rights = [d for d in docs if not d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert "resource.k8s.io" not in yaml.safe_dump_all(rights)


# -- ValidatingAdmissionPolicy -------------------------------------------------------------------

# Every policy is in the base, whatever the options (k8s/admission-policy.yaml says why):
# feature-sink's two (Nodes, Events), DRA's two (ResourceSlices, claim status) and the
# NodeFeature one.
SINK_POLICIES = ("edgefd-node-restriction", "edgefd-event-restriction")
DRA_POLICIES = ("edgefd-resourceslice-restriction", "edgefd-resourceclaim-status-restriction")
POLICIES = (*SINK_POLICIES, *DRA_POLICIES, "edgefd-nodefeature-restriction")


def mark_condition(expression: str) -> bool:
    """The policies' match condition: ServiceAccounts holding the mark and not every verb."""
    e = " ".join(expression.split())
    return (
        e.startswith("request.userInfo.username.startsWith('system:serviceaccount:') && ")
        and "authorizer.group('admission.edgefd.io').resource('restrictions')"
        ".check('subject').allowed()"
        in e
        and "&& !authorizer.group('admission.edgefd.io').resource('restrictions') "
        ".check('unassigned').allowed()"
        in e
    )


@pytest.mark.parametrize("name", POLICIES)
def test_admission_policy_is_bound_denying_and_scoped_by_the_mark(name: str) -> None:
    """No ServiceAccount name is written into a policy (a kustomize `namespace:` or
    `namePrefix:` would not rename it); the mark they match on is in the sink's role."""
    docs = load_manifests()
    policy = find(docs, "ValidatingAdmissionPolicy", name)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (cond,) = spec["matchConditions"]
    assert mark_condition(cond["expression"])
    assert "serviceaccount:edgefd" not in yaml.safe_dump(spec)
    assert "authentication.kubernetes.io/node-name" in yaml.safe_dump(spec)
    assert MARK_GRANT in granted_to(docs, SERVICE_ACCOUNT)


def test_every_policy_is_one_of_these() -> None:
    docs = load_manifests()
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    assert names == set(POLICIES)


def test_node_policy_scope() -> None:
    spec = find(load_manifests(), "ValidatingAdmissionPolicy", "edgefd-node-restriction")["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert {"UPDATE", "CREATE", "DELETE"} <= set(rule["operations"])
    assert "nodes" in rule["resources"] and "nodes/status" in rule["resources"]
    assert "object.spec == oldObject.spec" in yaml.safe_dump(spec)


def test_event_policy_confines_events_to_the_sinks_node() -> None:
    """What the sink creates: Events in nodeapi.EVENT_NAMESPACE, about its Node, named
    `<node>.<digest>` (the real API server holds it to that: test_apiserver.py)."""
    from edgefd.feature_sink.nodeapi import EVENT_NAMESPACE

    spec = find(load_manifests(), "ValidatingAdmissionPolicy", "edgefd-event-restriction")["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["events"] and rule["apiGroups"] == [""]
    assert {"UPDATE", "CREATE", "DELETE"} <= set(rule["operations"])
    text = " ".join(" ".join(v["expression"] for v in spec["validations"]).split())
    assert f"request.namespace == '{EVENT_NAMESPACE}'" in text
    assert "object.involvedObject.name == variables.nodeName" in text
    assert "startsWith(variables.nodeName + '.')" in text


def test_admission_policy_names_the_sinks_ownership_annotation() -> None:
    from edgefd.feature_sink.ownership import ANNOTATION

    policy = find(load_manifests(), "ValidatingAdmissionPolicy", "edgefd-node-restriction")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["ownershipAnnotation"] == repr(ANNOTATION)


def policy_forbids_label(key: str) -> bool:
    """The policy's label rule, evaluated in Python from the CEL's own regular expressions.

    The expression is `!k.contains('/') || (k.matches(R) && !k.matches(E))`; RE2 and Python
    agree on these simple patterns (CEL's matches() is a search, like re.search).
    """
    policy = find(load_manifests(), "ValidatingAdmissionPolicy", "edgefd-node-restriction")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    expr = " ".join(variables["forbiddenLabels"].split())
    reserved, exception = re.findall(r"k\.matches\('([^']*)'\)", expr)
    assert "!k.contains('/') ||" in expr and f"!k.matches('{exception}')" in expr
    return "/" not in key or (
        re.search(reserved, key) is not None and re.search(exception, key) is None
    )


LABEL_SAMPLES = [
    "feature.node.kubernetes.io/usb-fe_1a6e_089a.present",
    "sub.feature.node.kubernetes.io/x",
    "profile.node.kubernetes.io/edge",
    "beta.devicetree.org/brcm-bcm2711",
    "edgefd.io/edgetpu.present",
    "nvidia.com/gpu.present",
    "kubernetes.io/hostname",
    "node-role.kubernetes.io/control-plane",
    "node-restriction.kubernetes.io/x",
    "topology.kubernetes.io/zone",
    "k8s.io/x",
    "sub.k8s.io/x",
    "notkubernetes.io/x",
    "feature.node.kubernetes.io.evil.com/x",
    "evilfeature.node.kubernetes.io/x",
    "node.kubernetes.io/exclude-from-external-load-balancers",
    "team",
    "zone",
]


@pytest.mark.parametrize("key", LABEL_SAMPLES)
def test_admission_policy_label_rule_matches_the_tools_policy(key: str) -> None:
    """The API server's ceiling is exactly what a producer may emit at all (no namespace
    Kubernetes reserves, none missing); the sink's default, and any policy its
    --allow-namespace can make, stays within it."""
    from edgefd.core.labels import PRODUCER_POLICY

    assert policy_forbids_label(key) == (PRODUCER_POLICY.check(key) is not None)
    widest = sink_policy(
        allowed=["nvidia.com", "notkubernetes.io", "evil.com", "profile.node.kubernetes.io"]
    )
    for policy in (SINK_POLICY, widest):
        if policy.check(key) is None:
            assert not policy_forbids_label(key)


def test_admission_policy_refuses_unqualified_labels() -> None:
    assert policy_forbids_label("hostname")


# -- the device plugin's ConfigMap --------------------------------------------------------------


def test_devplugin_config_is_valid_and_mounted_where_the_flag_points() -> None:
    from edgefd.devplugin.resources import parse_config

    docs = load_manifests()
    spec = pod_spec(daemonset(docs, DEVPLUGIN_DS))
    c = container(spec, "devplugin")
    path = setting(c, "--config")
    assert path, "devplugin must be given --config"
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mount.get("readOnly") is True
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    cm = find(docs, "ConfigMap", cm_name)
    key = path[len(mount["mountPath"].rstrip("/")) + 1 :]
    config = parse_config(yaml.safe_load(cm["data"][key]), f"ConfigMap {cm_name}/{key}")
    assert config.resources, "the ConfigMap should advertise at least one resource"
