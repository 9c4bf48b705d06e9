"""Every series edgefd's alerting rules read is on a live /metrics of the real tools: its name,
each label a rule matches on, and each value a rule matches with `=`. A rule on a name no tool
exports (a typo, a metric renamed or gone) would stay silent for ever; this is where it fails.

The tools run as the pods run them: each container's command line and environment from the
manifests (k8s/ and the dra component), against a sample node with only what that container
mounts (tests/k8s/test_pipeline.py's Pod), each listening on a loopback port. Around them, what
makes each series a rule selects appear: the real API server (feature-sink's successful syncs;
a second sink with an unreachable one fails), the kubelet's own device manager (kubelet-devices,
started after devplugin has failed to find it: errors, then a registration), and the
kubelet's two calls to the DRA plugin's registration socket (a success and a refusal)."""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.alerts.rules import Selector, rule_object, rule_selectors
from tests.helpers import free_port, wait_until
from tests.peers.processes import kill, spawn, tail

pytestmark = pytest.mark.realpeer

NODE = "x86-coral-pcie"  # a device with a temperature, so every inventory series has samples
START_S = 30.0  # a tool's /metrics up, on a loaded 2-core machine


@dataclass
class Live:
    """What the running tools' /metrics say: every metric name (declared or sampled), and per
    name the label sets of its samples."""

    names: set[str] = field(default_factory=set)
    samples: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    def add(self, text: str) -> None:
        for family in text_string_to_metric_families(text):
            # a counter without samples yet is declared as `<name>_total` (its TYPE line)
            self.names.add(family.name + ("_total" if family.type == "counter" else ""))
            for s in family.samples:
                self.names.add(s.name)
                self.samples.setdefault(s.name, []).append(dict(s.labels))


def problems(selected: dict[str, list[Selector]], live: Live) -> list[str]:
    """Each selector of each alert that no live series matches: an unknown name; a label no
    sample of the name has; a value no sample has for an `=` matcher."""
    out = []
    for alert, sels in selected.items():
        for sel in sels:
            if sel.name not in live.names:
                out.append(f"{alert}: {sel.name}: no tool exports it")
                continue
            samples = live.samples.get(sel.name, [])
            for label, op, value in sel.matchers:
                seen = {s[label] for s in samples if label in s}
                if not seen:
                    out.append(f"{alert}: {sel.name}: no label {label!r} on any sample")
                elif op == "=" and value not in seen:
                    out.append(f"{alert}: {sel.name}{{{label}={value!r}}}: only {sorted(seen)}")
    return out


class Tools:
    """The pod's containers as processes (each with its log and loopback port), stopped at
    the end whatever happened."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[Any] = []
        self.ports: dict[str, int] = {}
        self.logs: dict[str, Path] = {}

    def start(self, pod: Any, container: str, *extra: str, as_: str = "") -> int:
        """`container` of `pod` with its manifest's argv and env (paths under its root), the
        listener moved to a free loopback port, `extra` flags last (they win)."""
        key = as_ or container
        if not pod.root_of(container).exists():
            pod.prepare(container)
        port = free_port()
        argv = [a for a in pod.argv(container) if not a.startswith("--listen")]
        argv += [f"--listen=127.0.0.1:{port}", *extra]
        self.logs[key] = self.work / f"{key}.log"
        self.procs.append(spawn(argv, self.logs[key], cwd=ROOT, env=pod.env(container)))
        self.ports[key] = port
        wait_until(lambda: self.metrics(key), START_S, 0.1, f"{key}'s /metrics")
        return port

    def metrics(self, key: str) -> str:
        proc = self.procs[list(self.ports).index(key)]
        if proc.poll() is not None:
            raise AssertionError(f"{key} exited {proc.returncode}:\n{tail(self.logs[key])}")
        url = f"http://127.0.0.1:{self.ports[key]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        for proc in self.procs:
            kill(proc)


ROOT = Path(__file__).resolve().parents[2]


def sample(text: str, name: str, **labels: str) -> bool:
    """Whether `text` has a sample of `name` with these labels."""
    return any(
        s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        for f in text_string_to_metric_families(text)
        for s in f.samples
    )


@pytest.fixture(scope="module")
def live(kube_apiserver: Any) -> Iterator[Live]:
    from tests.feature_sink.peer import dead_kubeconfig
    from tests.fixturegen import build_host
    from tests.k8s.test_dra_manifests import render
    from tests.k8s.test_manifests import K8S
    from tests.k8s.test_pipeline import Pod
    from tests.peers.kubelet import KubeletDevices

    class ShortPod(Pod):
        """Each container's root one level up: a unix socket's path has 107 bytes at most,
        and the DRA registration socket's name alone takes 36."""

        def root_of(self, name: str) -> Path:
            return self.tmp / name

    # short paths: the unix sockets under the pods' roots are limited to 107 bytes
    work = Path(tempfile.mkdtemp(prefix="al-"))
    tools = Tools(work)
    kubelet = None
    node = f"alerts-{uuid.uuid4().hex[:8]}"
    kube_apiserver.create_node(node)
    config = f"--kubeconfig={kube_apiserver.kubeconfig}"
    try:
        host = build_host(NODE, work / "node", devicetree=False)
        pod = ShortPod(work / "p", host)
        tools.start(pod, "bus-scan")
        tools.start(pod, "feature-sink", config, f"--node-name={node}")
        unreachable = f"--kubeconfig={dead_kubeconfig(work)}"
        tools.start(pod, "feature-sink", unreachable, f"--node-name={node}", "--max-backoff=1s",
                    as_="feature-sink-unreachable")  # fmt: skip
        tools.start(pod, "devplugin")
        tools.start(pod, "device-keeper")
        # no kubelet yet: devplugin's registrations fail; then the kubelet's device manager
        wait_until(
            lambda: sample(tools.metrics("devplugin"), "edgefd_devplugin_registrations_total",
                           result="error"), 20, 0.1, "a failed registration",
        )  # fmt: skip
        plugin_dir = pod.root_of("devplugin") / "var/lib/kubelet/device-plugins"
        kubelet = KubeletDevices(plugin_dir, log_dir=work).start()
        wait_until(
            lambda: sample(tools.metrics("devplugin"), "edgefd_devplugin_registrations_total",
                           result="ok"), 30, 0.1, "devplugin registered with the kubelet",
        )  # fmt: skip
        wait_until(
            lambda: sample(tools.metrics("feature-sink"), "edgefd_sink_syncs_total",
                           result="success"), 30, 0.1, "a successful sync",
        )  # fmt: skip
        wait_until(
            lambda: sample(tools.metrics("feature-sink-unreachable"), "edgefd_sink_syncs_total",
                           result="failure"), 30, 0.1, "a failed sync",
        )  # fmt: skip

        dra = ShortPod(work / "d", host)
        dra.docs = render([K8S], [K8S / "overlays" / "dra"])
        tools.start(dra, "devplugin", config, f"--node-name={node}", as_="devplugin-dra")
        registry = dra.root_of("devplugin") / "var/lib/kubelet/plugins_registry"
        socket = wait_until(lambda: next(registry.glob("edgefd.io-reg*.sock"), None), 20, 0.1)
        kubelet_registers(socket)
        wait_until(
            lambda: sample(tools.metrics("devplugin-dra"),
                           "edgefd_devplugin_dra_registrations_total", result="error"),
            10, 0.1, "the DRA registration statuses",
        )  # fmt: skip

        found = Live()
        for key in tools.ports:
            found.add(tools.metrics(key))
        yield found
    finally:
        if kubelet is not None:
            kubelet.stop()
        tools.stop()
        shutil.rmtree(work, ignore_errors=True)


def kubelet_registers(socket: Path) -> None:
    """What the kubelet's plugin watcher does with a DRA plugin's registration socket: asks
    what it is, then tells it the outcome; here once taken, once refused."""
    from edgefd.devplugin.dra.api import pluginregistration_pb2 as reg
    from edgefd.devplugin.dra.api import pluginregistration_pb2_grpc as reg_grpc
    from tests.devplugin.kubelet import channel

    with channel(str(socket)) as ch:
        stub = reg_grpc.RegistrationStub(ch)
        assert stub.GetInfo(reg.InfoRequest(), timeout=10).name == "edgefd.io"
        stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=10)
        stub.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="refused by the test"),
            timeout=10,
        )


def test_every_series_a_rule_reads_is_on_a_live_metrics(live: Live) -> None:
    assert problems(rule_selectors(), live) == []


def test_a_rule_on_what_no_tool_exports_fails_the_check(live: Live) -> None:
    """What the test above is worth: a misspelt name, a label no sample has and a value no
    sample takes are each reported, naming the alert."""
    obj = rule_object()
    rules = obj["spec"]["groups"][0]["rules"]
    (unavailable,) = [r for r in rules if r["alert"] == "EdgefdDeviceUnavailable"]
    unavailable["expr"] = unavailable["expr"].replace(
        "edgefd_inventory_devices{", "edgefd_inventory_device{"
    )
    (hot,) = [r for r in rules if r["alert"] == "EdgefdDeviceTooHot"]
    hot["expr"] = 'edgefd_inventory_device_temperature_celsius{kind="coral"} > 80'
    (sink,) = [r for r in rules if r["alert"] == "EdgefdLabelsNotApplied"]
    sink["expr"] = sink["expr"].replace('result="failure"', 'result="failed"')
    assert problems(rule_selectors(obj), live) == [
        "EdgefdDeviceUnavailable: edgefd_inventory_device: no tool exports it",
        "EdgefdDeviceTooHot: edgefd_inventory_device_temperature_celsius: no label 'kind' on any "
        "sample",
        "EdgefdLabelsNotApplied: edgefd_sink_syncs_total{result='failed'}: only ['failure', "
        "'success']",
    ]
