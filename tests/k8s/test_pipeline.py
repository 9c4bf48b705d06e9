"""The pods' own command lines, run against a sample node with only what each pod mounts.

Each container gets a private root holding exactly its volume mounts: the hostPath volumes
copied from a generated node (tests/fixturegen), the shared features.d emptyDir, and the
devplugin's ConfigMap. The init containers run in order with the manifest's argv and env
(paths re-rooted), then feature-sink and devplugin run the same argv with `--dry-run`. So a
mount the manifest forgets (e.g. host /dev for the device plugin's health check) or a flag it
gets wrong shows up here, without a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import free_port
from tests.k8s.test_manifests import (
    DAEMONSET_OF,
    container,
    daemonset,
    find,
    load_manifests,
    pod_spec,
)

ROOT = Path(__file__).resolve().parents[2]
NODE = "rpi4-coral"


def _module(script: str) -> str:
    from tests.image.test_dockerfile import console_scripts

    return console_scripts()[script].partition(":")[0].rpartition(".")[0]


class Pod:
    """Per-container roots on the local filesystem standing in for the pods' mount namespaces
    (the labels pod's and devplugin's: each container finds its own pod's volumes)."""

    def __init__(self, tmp: Path, host: Path) -> None:
        self.tmp = tmp
        self.host = host
        self.docs = load_manifests()
        self.spec = pod_spec(daemonset(self.docs))  # the labels pod: its init containers
        self.empty_dirs: dict[str, Path] = {}

    def spec_of(self, name: str) -> dict:
        return pod_spec(daemonset(self.docs, DAEMONSET_OF[name]))

    def root_of(self, name: str) -> Path:
        return self.tmp / "containers" / name

    def prepare(self, name: str) -> Path:
        """Lay out the container's mounts under its root; return the root."""
        root = self.root_of(name)
        if root.exists():  # a container restart starts from a fresh root, not the emptyDir
            shutil.rmtree(root)
        volumes = {v["name"]: v for v in self.spec_of(name)["volumes"]}
        for m in container(self.spec_of(name), name).get("volumeMounts", []):
            vol = volumes[m["name"]]
            where = root / m["mountPath"].lstrip("/")
            where.parent.mkdir(parents=True, exist_ok=True)
            if "hostPath" in vol:
                src = self.host / vol["hostPath"]["path"].lstrip("/")
                if src.exists():
                    shutil.copytree(src, where, symlinks=True)
                else:  # e.g. the kubelet's plugin dir: the kubelet creates it
                    where.mkdir(parents=True)
            elif "emptyDir" in vol:
                shared = self.empty_dirs.setdefault(m["name"], self.tmp / "emptydir" / m["name"])
                shared.mkdir(parents=True, exist_ok=True)
                where.symlink_to(shared, target_is_directory=True)
            elif "configMap" in vol:
                cm = find(self.docs, "ConfigMap", vol["configMap"]["name"])
                where.mkdir(parents=True)
                for key, text in cm["data"].items():
                    (where / key).write_text(text)
            # projected token: nothing to lay out (no API server here)
        return root

    def argv(self, name: str, extra: tuple[str, ...] = ()) -> list[str]:
        c = container(self.spec_of(name), name)
        root = self.root_of(name)
        args = []
        for a in c["command"][1:] + c.get("args", []):
            flag, eq, value = a.partition("=")
            if eq and value.startswith("/"):
                a = f"{flag}={root}{value}"
            args.append(a)
        return [sys.executable, "-m", _module(c["command"][0]), *args, *extra]

    def env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEFD_", "KUBE"))}
        env.pop("NODE_NAME", None)
        root = self.root_of(name)
        for e in container(self.spec_of(name), name).get("env", []):
            value = e.get("value", "node-a")
            if e["name"].startswith("EDGEFD_") and value.startswith("/"):
                value = f"{root}{value}"  # a flag's variable: its path under the pod's root
            env[e["name"]] = value
        return env

    def run(self, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        self.prepare(name)
        return subprocess.run(
            self.argv(name, extra),
            cwd=ROOT,
            env=self.env(name),
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Pod:
    if shutil.which("dtc") is None:  # scripts/bootstrap installs it: never skip on its absence
        pytest.fail("dtc (device-tree-compiler) builds the sample node: run scripts/bootstrap")
    from tests.fixturegen import build_host

    tmp = tmp_path_factory.mktemp("pod")
    host = build_host(NODE, tmp / "node")
    return Pod(tmp, host)


def start_sidecar(pod: Pod, name: str) -> tuple[subprocess.Popen[str], int]:
    """Start a native sidecar as the kubelet would, its listener on a free loopback port."""
    port = free_port()
    pod.prepare(name)
    argv = [a for a in pod.argv(name) if not a.startswith("--listen")]
    proc = subprocess.Popen(
        [*argv, f"--listen=127.0.0.1:{port}"],
        cwd=ROOT,
        env=pod.env(name),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, port


def startup_probe(port: int, features: Path, timeout: float = 30.0) -> set[str]:
    """Poll /readyz like the startup probe; return the feature files there when it passed."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return {p.name for p in features.iterdir() if not p.name.startswith(".")}
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise AssertionError("the sidecar's startup probe never passed")


@pytest.fixture(scope="module")
def after_init(pod: Pod) -> Path:
    """Run the init containers in order, as the kubelet does: one-shot ones to completion,
    native sidecars (restartPolicy Always) until their startup probe passes; return the
    features.d they filled. The sidecars keep running for the module's tests. A sidecar
    without a startup probe holds nothing back: devplugin, whose peer is a kubelet (its
    command line runs with --dry-run below)."""
    sidecars: list[subprocess.Popen[str]] = []
    features = pod.tmp / "emptydir" / "features-d"
    try:
        for c in pod.spec["initContainers"]:
            if c.get("restartPolicy") == "Always" and "startupProbe" not in c:
                assert c["name"] == "devplugin", c["name"]
                continue
            if c.get("restartPolicy") == "Always":
                proc, port = start_sidecar(pod, c["name"])
                sidecars.append(proc)
                present = startup_probe(port, features)
                # what the containers after it find at the moment it lets them start
                assert {"usb-scan", "pci-scan"} <= present, present
                continue
            proc = pod.run(c["name"])
            assert proc.returncode == 0, f"{c['name']}: {proc.stderr}"
        # features.d, and bus-scan's own notices directory: no notice (nothing reloaded)
        assert set(pod.empty_dirs) == {"features-d", "bus-scan-notices"}, pod.empty_dirs
        assert not list(pod.empty_dirs["bus-scan-notices"].iterdir())
        yield pod.empty_dirs["features-d"]
    finally:
        for proc in sidecars:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
            assert proc.returncode == 0 and "Traceback" not in err, err


def test_init_containers_fill_features_d(after_init: Path) -> None:
    files = {p.name: p.read_text() for p in after_init.iterdir() if not p.name.startswith(".")}
    assert set(files) == {"dt-labeller", "usb-scan", "pci-scan"}
    assert "beta.devicetree.org/raspberrypi-4-model-b=1" in files["dt-labeller"]
    assert "feature.node.kubernetes.io/usb-fe_1a6e_089a.present=true" in files["usb-scan"]
    for p in after_init.iterdir():
        # feature-sink runs as another uid: what the producers write must be world-readable
        assert p.stat().st_mode & 0o004, f"{p.name} is not readable by feature-sink"


def test_feature_sink_reads_what_the_producers_wrote(pod: Pod, after_init: Path) -> None:
    proc = pod.run("feature-sink", "--dry-run", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    ops = json.loads(proc.stdout)
    added = {op["path"].rpartition("/")[2].replace("~1", "/") for op in ops if op["op"] == "add"}
    assert "beta.devicetree.org/brcm-bcm2711" in added
    assert "feature.node.kubernetes.io/usb-fe_1a6e_089a.present" in added


def test_devplugin_sees_healthy_devices_through_its_mounts(pod: Pod) -> None:
    proc = pod.run("devplugin", "--dry-run", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    by_name = {r["resource"]: r for r in report["resources"]}
    coral = by_name["edgefd.io/coral-usb"]["devices"]
    assert coral, "the sample node's Coral USB was not found"
    # healthy only if the device node is visible: needs host /dev mounted at /host/dev
    assert all(d["health"] == "Healthy" for d in coral), coral
    # its socket goes into the kubelet's directory, as mounted
    plugin_dir = pod.root_of("devplugin") / "var/lib/kubelet/device-plugins"
    assert Path(by_name["edgefd.io/coral-usb"]["socket"]).parent == plugin_dir


def test_devplugin_without_host_dev_would_report_unhealthy(pod: Pod, tmp_path: Path) -> None:
    """Why /dev is mounted: the same run without it marks every device Unhealthy."""
    root = pod.prepare("devplugin")
    shutil.rmtree(root / "host" / "dev")
    try:
        proc = subprocess.run(
            pod.argv("devplugin", ("--dry-run", "-o", "json")),
            cwd=ROOT,
            env=pod.env("devplugin"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        pod.prepare("devplugin")
    assert proc.returncode == 0, proc.stderr
    devices = [d for r in json.loads(proc.stdout)["resources"] for d in r["devices"]]
    assert devices and all(d["health"] != "Healthy" for d in devices)


def test_the_config_map_is_what_devplugin_loaded(pod: Pod) -> None:
    cm = find(pod.docs, "ConfigMap", "edgefd-devplugin")
    expected = [r["name"] for r in yaml.safe_load(cm["data"]["resources.yaml"])["resources"]]
    proc = pod.run("devplugin", "--dry-run", "-o", "json")
    assert [r["resource"] for r in json.loads(proc.stdout)["resources"]] == expected
