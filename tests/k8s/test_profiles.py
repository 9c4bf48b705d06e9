"""Distribution profiles (issue 34 item 1): the chart's `distribution` (kubeadm, k3s, microk8s,
k0s) and the components k8s/overlays/k3s, microk8s, k0s put every kubelet path edgefd mounts or
names (plugins_registry, plugins/edgefd.io, pod-resources, --kubelet-dir) and the CRI socket
where that distribution has them; the device-plugins directory stays the kubelet's constant.
The chart and the components give the same objects; overrides win; the schema refuses an
unknown distribution; two distribution components are refused; no kubeadm path is left in a
MicroK8s or k0s render. (Both kubectls building every distribution with every other component,
in both orders: tests/k8s/test_kustomize.py, DIST_COMBINATIONS.)"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.test_dra_manifests import render
from tests.k8s.test_helm import CHART, helm, normalise, notes, s, template
from tests.k8s.test_kustomize import (
    DISTRIBUTIONS,
    OVERLAYS,
    assert_refused,
    system_kubectl,
    write_kustomization,
)
from tests.k8s.test_manifests import (
    DEVICE_PLUGIN_DIR,
    DEVPLUGIN_DS,
    K8S,
    PROFILES,
    container,
    daemonset,
    pod_spec,
    setting,
)
from tests.peers.processes import harness_binary

APIS = ("device-plugin", "dra", "both")
MARK = "edgefd.io/distribution"


def chart(dist: str, *args: str) -> list[dict[str, Any]]:
    return template(*s(f"distribution={dist}"), *args)


def mounts_of(spec: dict[str, Any], name: str) -> dict[str, tuple[str, str]]:
    """A container's mounts: volume name -> (mountPath, the hostPath behind it)."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {
        m["name"]: (m["mountPath"], volumes[m["name"]].get("hostPath", {}).get("path", ""))
        for m in container(spec, name)["volumeMounts"]
    }


def check_paths(docs: list[dict[str, Any]], kubelet_dir: str, cri_socket: str, api: str) -> None:
    """devplugin and device-keeper name, mount and reach exactly the given paths."""
    spec = pod_spec(daemonset(docs, DEVPLUGIN_DS))
    keeper = container(spec, "device-keeper")
    assert setting(keeper, "--kubelet-dir") == kubelet_dir
    assert setting(keeper, "--cri-socket") == cri_socket
    kept = mounts_of(spec, "device-keeper")
    assert kept["pod-resources"] == (f"/host{kubelet_dir}/pod-resources",
                                     f"{kubelet_dir}/pod-resources")  # fmt: skip
    assert kept["cri-socket"] == (f"/host{cri_socket}", cri_socket)
    plugin, mounted = container(spec, "devplugin"), mounts_of(spec, "devplugin")
    if api == "device-plugin":
        assert setting(plugin, "--kubelet-dir") is None
    else:  # the kubelet is told host paths: the same path on both sides
        assert setting(plugin, "--kubelet-dir") == kubelet_dir
        for name, sub in (("plugins-registry", "plugins_registry"),
                          ("dra-plugin", "plugins/edgefd.io")):  # fmt: skip
            assert mounted[name] == (f"{kubelet_dir}/{sub}",) * 2, name
    if api == "dra":
        assert "device-plugins" not in mounted and setting(plugin, "--plugin-dir") is None
    else:  # the kubelet's constant, whatever its --root-dir
        assert mounted["device-plugins"] == (DEVICE_PLUGIN_DIR,) * 2
        assert setting(plugin, "--plugin-dir") == DEVICE_PLUGIN_DIR


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("dist", PROFILES)
def test_the_chart_puts_each_path_where_the_distribution_has_it(dist: str, api: str) -> None:
    docs = chart(dist, *s(f"devicePlugin.api={api}"))
    check_paths(docs, *PROFILES[dist], api)
    assert daemonset(docs, DEVPLUGIN_DS)["metadata"]["annotations"][MARK] == dist


@pytest.mark.parametrize("dist", PROFILES)
def test_overrides_win(dist: str) -> None:
    """kubeletDir and criSocket replace the distribution's, in every place it is used."""
    args = s("devicePlugin.api=both", "kubeletDir=/data/kubelet", "criSocket=/run/crio/crio.sock")
    check_paths(chart(dist, *args), "/data/kubelet", "/run/crio/crio.sock", "both")
    # one of them alone leaves the other the distribution's
    check_paths(chart(dist, *s("kubeletDir=/data/kubelet")), "/data/kubelet",
                PROFILES[dist].cri_socket, "device-plugin")  # fmt: skip


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("distribution=rke2", "at '/distribution': value must be one of 'kubeadm', 'k3s'"),
        ("distribution=K3s", "at '/distribution'"),
        ("kubeletDir=var/lib/kubelet", "at '/kubeletDir'"),
        ("criSocket=/run/containerd/", "at '/criSocket'"),
    ],
)
def test_the_schema_refuses_what_is_not_a_profile(value: str, says: str) -> None:
    r = helm("template", "edgefd", str(CHART), *s(value), check=False)
    assert r.returncode != 0 and says in r.stderr, r.stderr


# the kustomize counterparts of the chart's values, for every distribution
WITH = {
    "": ((), ()),
    "dra": (s("devicePlugin.api=dra"), ("dra",)),
    "dra-evict": (s("devicePlugin.api=dra", "devicePlugin.evictAfter=5m"), ("dra", "dra-evict")),
    "no-device-keeper": (s("deviceKeeper.enabled=false"), ("no-device-keeper",)),
    "hostnetwork": (s("hostNetwork=true"), ("hostnetwork",)),
    "no-devplugin": (s("devicePlugin.enabled=false"), ("no-devplugin",)),
    "split-identity": (s("splitByIdentity=true"), ("split-identity",)),
    "split-identity+dra": (
        s("splitByIdentity=true", "devicePlugin.api=dra"),
        ("dra", "split-identity"),
    ),
}


@pytest.mark.parametrize("extra", WITH, ids=lambda e: e or "alone")
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_each_component_is_the_charts_distribution(dist: str, extra: str) -> None:
    """The same objects, the distribution listed first and last (last before split-identity,
    which comes after every component that patches devplugin: test_kustomize.py)."""
    args, components = WITH[extra]
    want = normalise(chart(dist, *args))
    rest, last = components, ()
    if "split-identity" in components:
        rest, last = components[:-1], components[-1:]
    for order in ((dist, *rest, *last), (*rest, dist, *last)):
        assert normalise(render([K8S], [OVERLAYS / c for c in order])) == want, order


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


def kubeadm_paths(docs: list[dict[str, Any]]) -> list[str]:
    """Every value naming kubeadm's kubelet directory (on the host, or under /host), but the
    device-plugins directory, which every kubelet uses."""
    out = []
    for text in strings(docs):
        host = text.removeprefix("/host")
        kubeadm = host == "/var/lib/kubelet" or host.startswith("/var/lib/kubelet/")
        if kubeadm and not host.startswith(DEVICE_PLUGIN_DIR):
            out.append(text)
    return out


@pytest.mark.parametrize("api", APIS)
def test_no_kubeadm_kubelet_path_is_left_elsewhere(api: str) -> None:
    """The rendered objects of a distribution with another kubelet root hold no
    /var/lib/kubelet path but the device-plugins directory (kubeadm's render does, which shows
    the search finds them); nor k3s's, MicroK8s's or k0s's the kubeadm containerd socket."""
    assert kubeadm_paths(chart("kubeadm", *s(f"devicePlugin.api={api}")))
    for dist in ("microk8s", "k0s"):
        assert kubeadm_paths(chart(dist, *s(f"devicePlugin.api={api}"))) == [], dist
    for dist in DISTRIBUTIONS:
        text = yaml.safe_dump_all(chart(dist, *s(f"devicePlugin.api={api}")))
        assert PROFILES["kubeadm"].cri_socket not in text, dist


@pytest.mark.parametrize("dist", ("microk8s", "k0s"))
def test_no_kubeadm_kubelet_path_is_left_by_the_components(dist: str) -> None:
    for components in ((dist,), (dist, "dra"), ("dra", dist), ("hostnetwork", dist, "dra")):
        docs = render([K8S], [OVERLAYS / c for c in components])
        assert kubeadm_paths(docs) == [], components


@pytest.mark.parametrize("kubectl", ["system", "harness"])
def test_two_distributions_are_refused(kubectl: str, tmp_path: Path) -> None:
    """Their paths would pile up; kustomize stops at the second one, naming the rule, also
    with no-devplugin between them (which removes the marks on the DaemonSet; the rule reads
    the components' ledger). Every pair and order: tests/k8s/test_refusals.py."""
    binary = system_kubectl() if kubectl == "system" else str(harness_binary("kubectl"))
    for i, order in enumerate((("k3s", "k0s"), ("k0s", "no-devplugin", "microk8s"))):
        write_kustomization(tmp_path / str(i), order)
        r = subprocess.run([binary, "kustomize", str(tmp_path / str(i))],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert_refused(r, order[-1], "list-one-distribution-only")


@pytest.mark.parametrize("dist", ("microk8s", "k0s"))
def test_the_dra_components_copy_is_the_distributions(dist: str) -> None:
    """The DRA paths of a distribution are patched by whichever of the two components comes
    last, from the same text (kustomize loads no file from outside a component's directory)."""
    assert (OVERLAYS / "dra" / f"{dist}.yaml").read_text() == (
        OVERLAYS / dist / "dra.yaml"
    ).read_text()
    assert not (OVERLAYS / "k3s" / "dra.yaml").exists()  # kubeadm's kubelet root


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_each_profile_says_where_its_paths_come_from(dist: str) -> None:
    """The facts, with the source file each was read in, are where the paths are defined."""
    sources = {
        "k3s": ("pkg/agent/config/config_linux.go", "pkg/daemons/agent/agent_linux.go"),
        "microk8s": ("microk8s-resources/default-args/kubelet", "default-args/containerd"),
        "k0s": ("pkg/constant/constant_unix.go", "pkg/config/cfgvars.go"),
    }[dist]
    component = (OVERLAYS / dist / "kustomization.yaml").read_text()
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    for source in sources:
        assert source in component and source.split("/")[-1] in helpers, source
    assert "DevicePluginPath" in component and "DevicePluginPath" in helpers
    values = (CHART / "values.yaml").read_text()
    assert all(path in values for path in PROFILES[dist]), dist


def test_the_notes_say_whose_paths_and_whether_the_keeper_runs() -> None:
    """What an operator reads after the install: the paths in use, and the keeper's state."""
    text = notes(*s("distribution=microk8s"))
    assert (
        "microk8s's: kubelet /var/snap/microk8s/common/var/lib/kubelet, CRI socket "
        "/var/snap/microk8s/common/run/containerd.sock" in text
    ), text
    assert "with device-keeper" in text and "deviceKeeper.enabled=false turns it off" in text
    off = notes(*s("deviceKeeper.enabled=false"))
    assert "device-keeper is off: a Coral's first use" in off and "with device-keeper" not in off
