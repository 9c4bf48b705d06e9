"""The `kubectl-edgefd` command: `nodes` against the real API server (three nodes: the
device plugin with device-keeper, DRA with split identity and no keeper, no edgefd at all),
and the one-line failures with their exit codes (no cluster, an unreachable one, a pod that
does not exist, bad arguments), never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgefd.devplugin.dra.slices import TAINT_KEY
from tests.helpers import free_port

from .peer import EDGEFD_NS, IMAGE, ROOT, Cluster, host, labels_of, resources_of, slice_devices

EDGEFD = {"app.kubernetes.io/part-of": "edgefd"}
DIGEST = "ghcr.io/edgefd/edgefd@sha256:" + "ab12" * 16


def edgefd_pod(cluster: Cluster, name: str, node: str, **spec: Any) -> None:
    cluster.pod(name, {"nodeName": node, **spec}, ns=EDGEFD_NS, labels=EDGEFD)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    return subprocess.run(
        [sys.executable, "-m", "edgefd.kubectl_edgefd", *args],
        cwd=ROOT,
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.realpeer
def test_nodes(cluster: Cluster, hosts: Path) -> None:
    root = host("rpi4-coral", str(hosts))
    # pi-a: the device plugin, device-keeper beside it, one Coral held by a pod
    cluster.node("pi-a", labels_of(root), resources_of(root))
    plugin = {"name": "devplugin", "image": IMAGE, "restartPolicy": "Always"}
    keeper = {"name": "device-keeper", "image": IMAGE}
    edgefd_pod(cluster, "edgefd-a", "pi-a", initContainers=[plugin], containers=[keeper])
    cluster.pod(
        "detector",
        {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1",
                    "resources": {"limits": {"edgefd.io/coral-usb": "1"}},
                }
            ]
        },
    )
    assert cluster.wait_placed("detector") == "pi-a"
    # pi-b: DRA with split identity (devplugin in edgefd-devplugin's pod, keeper opted out),
    # its Coral unplugged, its NCS2 allocated
    cluster.node("pi-b", labels_of(root))
    devices = slice_devices(root)
    devices[0]["taints"] = [{"key": TAINT_KEY, "value": "unplugged", "effect": "NoSchedule"}]
    cluster.slice("pi-b", devices)
    sink = {"name": "feature-sink", "image": IMAGE}
    dra = {"name": "devplugin", "image": DIGEST, "args": ["--api", "dra"]}
    edgefd_pod(cluster, "edgefd-b", "pi-b", containers=[sink])
    edgefd_pod(cluster, "edgefd-devplugin-b", "pi-b", containers=[dra])
    cluster.claim(
        "ncs2",
        {
            "devices": {
                "requests": [{"name": "s", "exactly": {"deviceClassName": "myriadx.edgefd.io"}}]
            }
        },
    )
    cluster.pod(
        "counter",
        {
            "resourceClaims": [{"name": "s", "resourceClaimName": "ncs2"}],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1",
                    "resources": {"claims": [{"name": "s"}]},
                }
            ],
        },
    )
    assert cluster.wait_placed("counter") == "pi-b"
    # pi-c: a node without edgefd
    cluster.node("pi-c", {})

    proc = cluster.run("nodes")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert lines[0] == [
        "NODE",
        "ACCELERATORS",
        "API",
        "DEVICES",
        "HEALTHY",
        "IN",
        "USE",
        "VERSION",
        "KEEPER",
    ]
    assert lines[1:] == [
        ["pi-a", "edgetpu=1,myriadx=1", "device-plugin", "2", "2", "1", "0.1.0", "on"],
        ["pi-b", "edgetpu=1,myriadx=1", "dra", "2", "1", "1", "sha256:ab12ab12ab12", "off"],
        ["pi-c", "-", "-", "0", "0", "0", "-", "-"],
    ]
    proc = cluster.run("nodes", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = {n["node"]: n for n in json.loads(proc.stdout)["nodes"]}
    coral = next(r for r in doc["pi-a"]["resources"] if r["resource"] == "edgefd.io/coral-usb")
    assert coral == {
        "resource": "edgefd.io/coral-usb",
        "capacity": 1,
        "allocatable": 1,
        "in_use": 1,
        "pods": ["why-test/detector"],
    }
    assert doc["pi-a"]["devplugin_pod"] == "edgefd/edgefd-a"
    assert doc["pi-b"]["devplugin_pod"] == "edgefd/edgefd-devplugin-b"
    assert doc["pi-b"]["pods"] == ["edgefd/edgefd-b", "edgefd/edgefd-devplugin-b"]
    by_name = {d["name"]: d for d in doc["pi-b"]["dra_devices"]}
    assert by_name["coral-usb-2-1"]["taints"] == ["edgefd.io/unhealthy=unplugged:NoSchedule"]
    assert by_name["ncs2-1-1-1"]["claim"] == "why-test/ncs2"
    assert by_name["ncs2-1-1-1"]["pods"] == ["why-test/counter"]


@pytest.mark.realpeer
def test_a_pod_that_does_not_exist(cluster: Cluster) -> None:
    proc = cluster.run("why", "nobody", "-n", "why-test")
    assert proc.returncode == 3
    assert proc.stderr == "kubectl-edgefd: error: pod nobody not found in namespace why-test\n"
    assert proc.stdout == ""


def test_no_cluster_configured(tmp_path: Path) -> None:
    proc = cli("nodes", env={"HOME": str(tmp_path)})
    assert proc.returncode == 5
    assert proc.stderr == (
        "kubectl-edgefd: error: no cluster to ask: no kubeconfig (--kubeconfig, $KUBECONFIG, "
        "~/.kube/config) and not in a pod\n"
    )


def test_an_unreachable_cluster(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    port = free_port()  # nothing listens there
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    for args in (["nodes"], ["why", "some-pod"]):
        proc = cli(*args, f"--kubeconfig={kubeconfig}", "--api-timeout=2s")
        assert proc.returncode == 5, proc.stderr
        assert proc.stderr.startswith("kubectl-edgefd: error: ") and "unreachable" in proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "COMMAND [ARGS]..."),
        (["why"], "Missing argument 'POD'"),
        (["why", "Bad_Pod"], "'Bad_Pod' is not a valid pod name"),
        (["why", "p", "-n", "x/y"], "is not a valid namespace name"),
        (["nodes", "-o", "yaml"], "'yaml' is not one of 'text', 'json'"),
        (["status"], "No such command 'status'"),
    ],
)
def test_bad_arguments(args: list[str], says: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    if args:
        assert len(proc.stderr.splitlines()) == 1
