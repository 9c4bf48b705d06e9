"""The end-to-end node laid out as each distribution lays a node out (layouts.py), checked
without root: containerd's configuration files, the scenario syntax that names a layout, how a
run groups scenarios into nodes, and what edgefd is installed with on each."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.peers.processes import REPO_ROOT, harness_binary

from .e2e import layout_groups
from .images import PAUSE_REF
from .install import chart_values, kustomization
from .layouts import LAYOUTS, containerd_argv
from .runtime import Containerd
from .scenario import OVERLAY, Scenario
from .session import node_state


def _config(layout: str, tmp_path: Path) -> tuple[dict, dict[str, dict]]:
    """(the file containerd is started with, every file parsed) for a layout."""
    c = Containerd(tmp_path, tmp_path, None, None, PAUSE_REF, LAYOUTS[layout])  # type: ignore[arg-type]
    files = {path: tomllib.loads(text) for path, text in c.files().items()}
    return files[LAYOUTS[layout].config], files


def _merged_runtime(files: dict[str, dict]) -> dict:
    """The CRI runtime settings of every file (k0s imports its drop-ins), v2 or v3 names."""
    out: dict = {}
    for cfg in files.values():
        plugins = cfg.get("plugins", {})
        out |= plugins.get("io.containerd.cri.v1.runtime", {})
        out |= plugins.get("io.containerd.grpc.v1.cri", {})
    return out


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_containerd_has_the_distributions_paths(layout: str, tmp_path: Path) -> None:
    """Socket, root and state where the distribution puts them: in the file, or on the
    command line for MicroK8s and k0s (as their own start scripts pass them)."""
    lay = LAYOUTS[layout]
    main, files = _config(layout, tmp_path)
    argv = containerd_argv(lay)
    flags = dict(zip(argv[::2], argv[1::2], strict=True))
    assert flags["--config"] == lay.config
    socket = flags.get("--address") or main["grpc"]["address"]
    root = flags.get("--root") or main["root"]
    state = flags.get("--state") or main["state"]
    assert (socket, root, state) == (lay.socket, lay.root, lay.state)
    assert lay.endpoint == f"unix://{lay.socket}"
    runtime = _merged_runtime(files)
    # stock (non-root workloads get their devices through CDI), and what this machine needs
    assert "device_ownership_from_security_context" not in runtime
    assert runtime["restrict_oom_score_adj"] is True
    asked = lay.files(PAUSE_REF, "/run/x/runc", ownership=True)
    owned = _merged_runtime({p: tomllib.loads(t) for p, t in asked.items()})
    assert owned["device_ownership_from_security_context"] is True
    # no `cdi_spec_dirs` but kubeadm's: containerd's default (/etc/cdi, /var/run/cdi)
    assert ("cdi_spec_dirs" in runtime) == (layout == "kubeadm")


def test_the_distributions_facts() -> None:
    """The paths as each distribution's source has them (cited in layouts.py)."""
    got = {n: (lay.kubelet_root, lay.socket) for n, lay in LAYOUTS.items()}
    assert got == {
        "kubeadm": ("/var/lib/kubelet", "/run/containerd/containerd.sock"),
        "k3s": ("/var/lib/kubelet", "/run/k3s/containerd/containerd.sock"),
        "microk8s": (
            "/var/snap/microk8s/common/var/lib/kubelet",
            "/var/snap/microk8s/common/run/containerd.sock",
        ),
        "k0s": ("/var/lib/k0s/kubelet", "/run/k0s/containerd.sock"),
    }
    assert LAYOUTS["k3s"].config == "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    assert LAYOUTS["microk8s"].config == "/var/snap/microk8s/current/args/containerd.toml"
    assert LAYOUTS["k0s"].config == "/etc/k0s/containerd.toml"
    # MicroK8s' install hook links /var/lib/kubelet to its root dir; nobody else links
    assert {n: lay.links for n, lay in LAYOUTS.items() if lay.links} == {
        "microk8s": (("/var/lib/kubelet", "/var/snap/microk8s/common/var/lib/kubelet"),)
    }


def test_k0s_imports_its_drop_ins_and_microk8s_writes_version_2(tmp_path: Path) -> None:
    main, files = _config("k0s", tmp_path)
    assert main["version"] == 3 and main["imports"] == ["/etc/k0s/containerd.d/*.toml"]
    (drop_in,) = set(files) - {LAYOUTS["k0s"].config}
    assert Path(drop_in).parent == Path("/etc/k0s/containerd.d") and drop_in.endswith(".toml")
    # k0s warns of a v1 CRI table in its files; none here
    assert all("io.containerd.grpc.v1.cri" not in f.get("plugins", {}) for f in files.values())
    assert _config("microk8s", tmp_path)[0]["version"] == 2


def test_the_device_plugin_dir_does_not_follow_the_root_dir() -> None:
    """The kubelet's own constant (k8s.io/kubelet, the version the harness builds): a device
    plugin registers under /var/lib/kubelet/device-plugins on every layout."""
    mod = re.search(
        r"^\s*k8s\.io/kubelet (v\S+)$", (REPO_ROOT / "tests/harness/go.mod").read_text(), re.M
    )
    assert mod
    cache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    src = Path(cache) / f"k8s.io/kubelet@{mod.group(1)}/pkg/apis/deviceplugin/v1beta1/constants.go"
    if not src.is_file():
        pytest.skip(f"{src} not downloaded (scripts/build-harness peers downloads it)")
    path = re.search(r'DevicePluginPath = "([^"]+)"', src.read_text())
    assert path
    assert {lay.device_plugin_dir + "/" for lay in LAYOUTS.values()} == {path.group(1)}


def test_a_scenario_names_its_layout() -> None:
    sc = Scenario.parse("helm@rpi4-two-corals%k3s")
    assert (sc.helm, sc.tree, sc.layout, sc.name) == (True, "rpi4-two-corals", "k3s", sc.name)
    assert Scenario.parse("dra%microk8s").layout == "microk8s"
    # the run's layout for a spec that names none, and the name says it
    assert Scenario.parse("device-plugin", "k0s") == Scenario("device-plugin%k0s", layout="k0s")
    assert Scenario.parse("device-plugin") == Scenario("device-plugin")
    for bad in ("helm%", "helm%openshift", "helm@%k3s"):
        with pytest.raises(ValueError):
            Scenario.parse(bad)


def test_one_node_per_layout_in_the_order_given() -> None:
    specs = ["device-plugin", "helm%k3s", "dra", "dra%microk8s", "device-plugin%k3s"]
    groups = layout_groups([Scenario.parse(s) for s in specs])
    assert [(lay, [s.name for s in g]) for lay, g in groups] == [
        ("kubeadm", ["device-plugin", "dra"]),
        ("k3s", ["helm%k3s", "device-plugin%k3s"]),
        ("microk8s", ["dra%microk8s"]),
    ]


def test_the_profile_is_what_an_operator_of_that_distribution_installs(tmp_path: Path) -> None:
    assert "distribution=k3s" in chart_values(1, "/sys", "dra", "k3s")
    assert not any(v.startswith("distribution=") for v in chart_values(1, "/sys"))
    # kubeadm: the e2e overlay itself; k0s: that overlay plus k8s/overlays/k0s
    assert Scenario.parse("device-plugin").overlay(tmp_path) == OVERLAY
    k0s = yaml.safe_load(
        (Scenario.parse("dra%k0s").overlay(tmp_path) / "kustomization.yaml").read_text()
    )
    assert [Path(p).name for p in (*k0s["resources"], *k0s["components"])] == ["overlay-dra", "k0s"]
    # the composed kustomization: the e2e overlay plus a shipped component, relative paths
    dest = kustomization(tmp_path / "k", OVERLAY, [REPO_ROOT / "k8s" / "overlays" / "dra"])
    doc = yaml.safe_load((dest / "kustomization.yaml").read_text())
    assert not any(os.path.isabs(p) for p in (*doc["resources"], *doc["components"]))
    out = subprocess.run(
        [str(harness_binary("kubectl")), "kustomize", str(dest)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert "DeviceClass" in kinds  # the dra component's


def test_node_state_is_cleaned_where_the_layout_keeps_it() -> None:
    line = node_state(LAYOUTS["k0s"])
    assert "cd /var/lib/kubelet/device-plugins " in line
    assert "/var/lib/k0s/kubelet/plugins_registry/edgefd*" in line
    assert "/var/lib/k0s/kubelet/plugins/edgefd.io" in line


def test_ci_runs_every_layout_with_both_apis_and_reads_results_in_order() -> None:
    """test_e2e.py pairs its labels with the result lines in order: one node per layout
    keeps the order given when each layout's scenarios are together."""
    from .test_e2e import SCENARIOS

    scenarios = [Scenario.parse(spec.format(snapshot="s")) for spec, _ in SCENARIOS.values()]
    flat = [s.name for _, group in layout_groups(scenarios) for s in group]
    assert flat == [s.name for s in scenarios]
    apis = {(s.layout, s.api) for s in scenarios}
    assert {lay for lay, _ in apis} == set(LAYOUTS)
    others = {api for lay, api in apis if lay != "kubeadm"}
    assert others == {"device-plugin", "dra"}


def test_the_first_use_check_fails_without_the_keeper() -> None:
    """Check 6k asserts the default install's keeper before anything: absent or not ready,
    it fails with the reason (it never skips)."""
    from .keeper_install import keeper_problem

    def pod(*names: str, ready: bool = True) -> dict:
        return {
            "metadata": {"name": "edgefd-devplugin-x"},
            "spec": {"containers": [{"name": n} for n in names]},
            "status": {"containerStatuses": [{"name": n, "ready": ready} for n in names]},
        }

    assert keeper_problem([pod("feature-sink"), pod("devplugin", "device-keeper")]) is None
    assert "no device-keeper" in str(keeper_problem([pod("devplugin"), pod("feature-sink")]))
    assert "not ready" in str(keeper_problem([pod("devplugin", "device-keeper", ready=False)]))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_runtime_root_and_state_are_on_scratch_binds(layout: str) -> None:
    """containerd mounts each container's overlay with its upper layer under its root and the
    mount point under its state: neither may sit on the node's own overlay (of /var for
    MicroK8s, /etc for k0s), which cannot be an overlay's upper layer."""
    lay = LAYOUTS[layout]
    binds = ("/var/lib/", "/run/", *(f"{d}/" for d in lay.scratch))
    assert lay.root.startswith(binds) and lay.state.startswith(binds)
    assert lay.kubelet_root.startswith(binds)
    assert all(d.startswith(tuple(f"{w}/" for w in lay.writable)) for d in lay.scratch)


def test_a_split_scenario_installs_split_identity(tmp_path: Path) -> None:
    """``+split`` (issue 34 item 3): the overlay plus k8s/overlays/split-identity (after the
    layout's component, as it must be), or the chart's splitByIdentity; two DaemonSets
    render, devplugin's with the node's settings copied from the one pod."""
    sc = Scenario.parse("dra+split%microk8s")
    assert (sc.dra, sc.split, sc.layout, sc.helm) == (True, True, "microk8s", False)
    assert sc.way != Scenario.parse("dra%microk8s").way
    doc = yaml.safe_load((sc.overlay(tmp_path) / "kustomization.yaml").read_text())
    names = [Path(p).name for p in (*doc["resources"], *doc["components"])]
    assert names == ["overlay-dra", "microk8s", "split-identity"]
    assert "splitByIdentity=true" in chart_values(1, "/sys", "dra", "kubeadm", split=True)
    assert "splitByIdentity=true" not in chart_values(1, "/sys", "dra")
    out = subprocess.run([str(harness_binary("kubectl")), "kustomize", str(sc.overlay(tmp_path))],
                         capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    docs = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d["kind"] == "DaemonSet"
    }
    plugin = docs["edgefd-devplugin"]["spec"]["template"]["spec"]
    (sys_,) = [v for v in plugin["volumes"] if v["name"] == "host-sys"]
    assert sys_["hostPath"]["path"] == "/var/lib/edgefd-sample-node/sys"
    (dp,) = [c for c in plugin["containers"] if c["name"] == "devplugin"]
    assert {e["name"] for e in dp["env"]} >= {"KUBERNETES_SERVICE_HOST", "EDGEFD_API"}
    assert [c["name"] for c in docs["edgefd"]["spec"]["template"]["spec"]["containers"]] == [
        "feature-sink"
    ]
