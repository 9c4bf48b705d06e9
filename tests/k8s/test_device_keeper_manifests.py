"""device-keeper in the base (k8s/devplugin.yaml, on by default since issue 34 item 3), rendered
by the real kustomize: exactly the capabilities and host mounts the keeper needs (each with its
reason; measured, see the README), nothing more for it and nothing at all for the rest of the
pod, which keeps the base's least privilege; no API token; its flags point where its mounts
are, on every distribution. k8s/overlays/no-device-keeper removes exactly it. Escalations of the
keeper are caught by the same check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.k8s.test_dra_manifests import render
from tests.k8s.test_kustomize import SSA, applied, kubectl, write_kustomization
from tests.k8s.test_manifests import (
    DEVPLUGIN_DS,
    K8S,
    PROFILES,
    SPLIT_DS,
    TOKEN_PATH,
    all_containers,
    container,
    daemonset,
    effective_security,
    flag_value,
    pod_spec,
    privilege_violations,
    schema_errors,
    setting,
)

OVERLAYS = K8S / "overlays"
__all__ = ["applied"]  # a fixture of test_kustomize's, used here too
KEEPER = "device-keeper"
CAPS = {
    "SYS_ADMIN": "bpf(2) on the container's cgroup v2 device program; v1 devices.allow/deny",
    "SYS_PTRACE": "opening /proc/<pid>/root of a workload process (ptrace access check)",
    "MKNOD": "creating the new node in the workload's own /dev",
    "CHOWN": "giving the new node the old one's owner and group (plugdev, the container user)",
}
# hostPath -> (type, read-only): the kubelet's pod-resources and the runtime's socket of each
# distribution (tests/k8s/test_profiles.py)
HOSTPATHS = {
    "/proc": ("Directory", True),
    "/sys/fs/cgroup": ("Directory", False),  # v1 devices files are written
    **{f"{p.kubelet_dir}/pod-resources": ("Directory", True) for p in PROFILES.values()},
    # a socket: ro would not matter
    **{p.cri_socket: ("Socket", False) for p in PROFILES.values()},
    "/var/run/crio/crio.sock": ("Socket", False),  # CRI-O's (chart: criSocket)
    "/var/lib/edgefd/device-keeper": ("DirectoryOrCreate", False),  # what it granted
    # systemd's private socket (the systemd cgroup driver's grants): made by systemd at boot
    "/run/systemd": ("DirectoryOrCreate", True),
}
COMBINATIONS = [
    (),
    ("hostnetwork",),
    ("dra",),
    ("hostnetwork", "nodefeature", "dra"),
    ("k3s",),
    ("microk8s", "dra"),
    ("dra", "k0s", "hostnetwork"),
]
DRA_HOSTPATHS = (
    *(f"{p.kubelet_dir}/plugins_registry" for p in PROFILES.values()),
    *(f"{p.kubelet_dir}/plugins/edgefd.io" for p in PROFILES.values()),
    "/var/run/cdi",
)


def keeper_violations(ds: dict[str, Any]) -> list[str]:
    """Every way the keeper exceeds what it needs, or the pod grants it more (empty: none)."""
    spec = pod_spec(ds)
    out: list[str] = []
    for key in ("hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"pod uses {key}")
    c = container(spec, KEEPER)
    sec = effective_security(spec, c)
    if sec.get("privileged") is not False:
        out.append("privileged must be false")
    if sec.get("allowPrivilegeEscalation") is not False:
        out.append("allowPrivilegeEscalation must be false")
    if sec.get("readOnlyRootFilesystem") is not True:
        out.append("readOnlyRootFilesystem must be true")
    if sec.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        out.append("seccompProfile must be RuntimeDefault")
    if sec.get("runAsUser") != 0:
        out.append("runAsUser 0, explicitly (the host's root owns /proc/<pid>/root and cgroupfs)")
    caps = sec.get("capabilities", {})
    if caps.get("drop") != ["ALL"]:
        out.append("must drop ALL capabilities")
    if sorted(caps.get("add", [])) != sorted(CAPS):
        out.append(f"adds {caps.get('add')}, needs exactly {sorted(CAPS)}")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        if m["mountPath"] == TOKEN_PATH or "projected" in v:
            out.append("must have no API token")
        if "emptyDir" in v:  # devplugin's decisions, read-only: the devices it follows;
            # and its own notice (a refused grant), writable, which feature-sink reads
            own = m["name"] == f"{KEEPER}-notices" and m["mountPath"] == "/run/edgefd/notices"
            if own and m.get("readOnly") is not True:
                continue
            if m.get("readOnly") is not True or m["name"] != "decisions":
                out.append(f"{m['mountPath']}: only devplugin's decisions, read-only")
            continue
        if "hostPath" not in v:
            out.append(f"{m['mountPath']}: not a hostPath or emptyDir")
            continue
        path, kind = v["hostPath"]["path"], v["hostPath"].get("type")
        if path in DRA_HOSTPATHS or path not in HOSTPATHS:
            out.append(f"may not mount {path}")
            continue
        want_kind, read_only = HOSTPATHS[path]
        if kind != want_kind:
            out.append(f"{path}: hostPath type must be {want_kind}")
        if read_only and m.get("readOnly") is not True:
            out.append(f"{m['mountPath']} must be read-only")
        if m.get("mountPropagation", "None") != "None":
            out.append(f"{m['mountPath']} must not propagate mounts")
        if m["mountPath"] != "/host" + path:
            out.append(f"{path} must be at /host{path} (--host-root=/host)")
    for _, other in all_containers(spec):
        if other["name"] == KEEPER:
            continue
        for m in other.get("volumeMounts", []):
            path = volumes.get(m["name"], {}).get("hostPath", {}).get("path")
            if path in HOSTPATHS:
                out.append(f"{other['name']} may not mount {path}")
    return out


def without_keeper(ds: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet less the keeper container, the volumes only it mounts, and its notice
    (the emptyDir it writes, which feature-sink reads)."""
    ds = copy.deepcopy(ds)
    spec = pod_spec(ds)
    c = container(spec, KEEPER)
    spec["containers"].remove(c)
    written = {m["name"] for m in c.get("volumeMounts", []) if m["name"] == f"{KEEPER}-notices"}
    for _, o in all_containers(spec):
        if "volumeMounts" in o:
            o["volumeMounts"] = [m for m in o["volumeMounts"] if m["name"] not in written]
    mine = {m["name"] for m in c.get("volumeMounts", [])}
    used = {m["name"] for _, o in all_containers(spec) for m in o.get("volumeMounts", [])}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in mine - used]
    return ds


@pytest.fixture(scope="module")
def keeper_ds() -> dict[str, Any]:
    return daemonset(None, DEVPLUGIN_DS)  # the plain files: it is in the base


def test_on_by_default_in_devplugins_pod_only() -> None:
    """Issue 34 item 3: a Coral's first open (libedgetpu loads its firmware, the device
    re-enumerates) works in the default install; the keeper runs next to devplugin, in the
    one pod (with split-identity in devplugin's, and the labels pod has none of it)."""
    names = [c["name"] for _, c in all_containers(pod_spec(daemonset(None, DEVPLUGIN_DS)))]
    assert names == ["devplugin", "dt-labeller", "bus-scan", "feature-sink", KEEPER]
    split = render([K8S], [OVERLAYS / "split-identity"])
    names = [c["name"] for _, c in all_containers(pod_spec(daemonset(split, SPLIT_DS)))]
    assert names == ["devplugin", KEEPER]
    assert KEEPER not in [c["name"] for _, c in all_containers(pod_spec(daemonset(split)))]


def test_no_device_keeper_removes_exactly_it(keeper_ds: dict[str, Any]) -> None:
    """The one-value opt-out: the container and the volumes only it mounted go, and the mark
    a distribution component listed later reads; nothing else changes."""
    off = render([K8S], [OVERLAYS / "no-device-keeper"])
    ds = daemonset(off, DEVPLUGIN_DS)
    assert ds["metadata"]["annotations"].pop("edgefd.io/device-keeper") == "off"
    want = without_keeper(keeper_ds)
    assert want["metadata"]["annotations"].pop("edgefd.io/device-keeper") == "on"
    assert ds == want
    assert {v["name"] for v in pod_spec(ds)["volumes"]} == {
        "host-sys", "host-dev", "device-plugins", "devplugin-config", "features-d",
        "feature-sink-token", "bus-scan-notices", "devplugin-notices", "decisions",
    }  # fmt: skip
    others = [d for d in off if d is not daemonset(off, DEVPLUGIN_DS)]
    assert others == [d for d in render([K8S], []) if d["metadata"]["name"] != DEVPLUGIN_DS
                      or d["kind"] != "DaemonSet"]  # fmt: skip


def test_exactly_what_the_keeper_needs(keeper_ds: dict[str, Any]) -> None:
    assert keeper_violations(keeper_ds) == []
    assert schema_errors(keeper_ds) is None


def test_the_rest_of_the_pod_has_the_base_privilege(keeper_ds: dict[str, Any]) -> None:
    assert privilege_violations(without_keeper(keeper_ds)) == []


@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c) or "base")
def test_flags_point_where_the_mounts_are(components: tuple[str, ...]) -> None:
    """Its variables name the distribution's paths (under --host-root), each mounted there."""
    ds = daemonset(render([K8S], [OVERLAYS / c for c in components]), DEVPLUGIN_DS)
    c = container(pod_spec(ds), KEEPER)
    cmd = c["command"]
    assert cmd[:2] == ["device-keeper", "serve"] and flag_value(cmd, "--host-root") == "/host"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    dist = next((PROFILES[x] for x in components if x in PROFILES), PROFILES["kubeadm"])
    assert setting(c, "--cri-socket") == dist.cri_socket
    assert setting(c, "--kubelet-dir") == dist.kubelet_dir
    assert "/host" + dist.cri_socket in mounts
    assert "/host" + dist.kubelet_dir + "/pod-resources" in mounts
    assert "/host/sys" not in mounts  # no inventory of its own: devplugin's decisions
    assert flag_value(cmd, "--state-dir") in mounts  # what it granted, kept across restarts
    # devplugin's decisions, where devplugin writes them: the same file, read-only here
    plugin = container(pod_spec(ds), "devplugin")
    assert flag_value(cmd, "--decisions") == flag_value(plugin["command"], "--decisions")
    [mine] = [m for m in c["volumeMounts"] if m["name"] == "decisions"]
    [theirs] = [m for m in plugin["volumeMounts"] if m["name"] == "decisions"]
    assert flag_value(cmd, "--decisions").startswith(mine["mountPath"] + "/")
    assert mine["mountPath"] == theirs["mountPath"] and mine["readOnly"] is True
    assert "readOnly" not in theirs and "--config" not in " ".join(cmd)
    assert not any("valueFrom" in e for e in c["env"])  # not even its node's name
    port = int((setting(c, "--listen") or "").rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert ports[c[probe]["httpGet"]["port"]] == port


@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c) or "base")
def test_combinations(components: tuple[str, ...]) -> None:
    ds = daemonset(render([K8S], [OVERLAYS / c for c in components]), DEVPLUGIN_DS)
    assert keeper_violations(ds) == []
    rest = privilege_violations(without_keeper(ds))
    rest = [v for v in rest if not any(p in v for p in DRA_HOSTPATHS)]
    assert set(rest) == ({"pod uses hostNetwork"} if "hostnetwork" in components else set())


ESCALATIONS = {
    "extra-cap": lambda s: container(s, KEEPER)["securityContext"]["capabilities"]["add"].append(
        "NET_ADMIN"
    ),
    "no-drop": lambda s: container(s, KEEPER)["securityContext"]["capabilities"].pop("drop"),
    "host-pid": lambda s: s.update(hostPID=True),
    "privileged": lambda s: container(s, KEEPER)["securityContext"].update(privileged=True),
    "writable-proc": lambda s: next(
        m for m in container(s, KEEPER)["volumeMounts"] if m["mountPath"] == "/host/proc"
    ).pop("readOnly"),
    "host-dev": lambda s: container(s, KEEPER)["volumeMounts"].append(
        {"name": "host-dev", "mountPath": "/host/dev"}
    ),
    "writable-decisions": lambda s: next(
        m for m in container(s, KEEPER)["volumeMounts"] if m["name"] == "decisions"
    ).pop("readOnly"),
    "host-sys": lambda s: container(s, KEEPER)["volumeMounts"].append(
        {"name": "host-sys", "mountPath": "/host/sys", "readOnly": True}
    ),
    "cgroup-in-devplugin": lambda s: container(s, "devplugin")["volumeMounts"].append(
        {"name": "host-cgroup", "mountPath": "/host/sys/fs/cgroup"}
    ),
    "token": lambda s: (
        s["volumes"].append(
            {"name": "keeper-token", "projected": {"sources": [{"serviceAccountToken": {}}]}}
        ),
        container(s, KEEPER)["volumeMounts"].append(
            {"name": "keeper-token", "mountPath": TOKEN_PATH, "readOnly": True}
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(ESCALATIONS))
def test_check_catches_escalations(keeper_ds: dict[str, Any], name: str) -> None:
    ds = copy.deepcopy(keeper_ds)
    ESCALATIONS[name](pod_spec(ds))
    assert keeper_violations(ds)


@pytest.mark.realpeer
@pytest.mark.parametrize("components", COMBINATIONS, ids=lambda c: "+".join(c) or "base")
@pytest.mark.usefixtures("applied")  # the base, applied once (tests/k8s/test_kustomize.py)
def test_server_side_dry_run(
    kube_apiserver: Any, components: tuple[str, ...], tmp_path: Any
) -> None:
    """The real API server validates the keeper's container and volumes (a Socket hostPath,
    added capabilities) in every documented combination."""

    write_kustomization(tmp_path, components)
    r = kubectl(kube_apiserver, "apply", "--server-side", "--dry-run=server",
                *SSA, "-k", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "serverside-applied (server dry run)" in r.stdout
