"""Every console script's real code paths, as command lines over prepared inputs.

One list, run two ways: on the host under an import recorder (test_slim.py: nothing the image
drops is ever imported) and inside the built image (test_built_image.py: each path still runs
after the slimming, as the DaemonSet would run it). A path is one process: a dry run, a run
that writes, a sync against an API server that is down, or a long-running server probed over
HTTP (or until its output appears) and stopped with SIGTERM.

Paths in argv are written with placeholders, filled in by `Inputs.fill`:
  {host}  a generated Raspberry Pi 4 + Coral USB + NCS2 node (tests/fixtures/nodes/rpi4-coral)
  {x86}   a generated x86 server with PCI accelerators (x86-server)
  {dtb}   the Raspberry Pi 4 blob compiled from samples/devicetree/rpi4-model-b.dts
  {work}  a writable scratch directory; {features} a features.d with one producer's file
  {down}  a kubeconfig naming an API server that is not there
  {port}  a free loopback port for the tool's /healthz and /metrics
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DTS = ROOT / "samples" / "devicetree" / "rpi4-model-b.dts"
FEATURES = "edgefd.io/edgetpu.present=true\nedgefd.io/edgetpu.count=1\n"
# what devplugin decided (edgefd.inventory.decisions): a Coral at 189:5, as the keeper follows it
DECISIONS = (
    '{"version": 1, "time": 1.0, "handouts": [{"device": "coral-usb-1-1-3", "present": true,'
    ' "plugin": [["edgefd.io/coral-usb", ["coral-usb-1-1-3"]]], "dra": [], "nodes": [{"path":'
    ' "/dev/edgefd/coral-usb-1-1-3", "number": "c:189:5", "was": []}]}]}\n'
)


@dataclass(frozen=True)
class CodePath:
    name: str
    argv: tuple[str, ...]
    rc: int = 0
    stdin: str = ""
    # long-running: ready when this HTTP path answers 200 on {port}, or this file exists
    serve: str | None = None
    ready_file: str | None = None
    # what the output must contain (a cheap sign the path did its work)
    expect: tuple[str, ...] = ()
    # modules that must have been imported on the host (the path reached that code)
    reaches: tuple[str, ...] = ()
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def tool(self) -> str:
        return self.argv[0]


P = CodePath
CODE_PATHS: tuple[CodePath, ...] = (
    P("dt-dtb", ("dt-labeller", "--dtb", "{dtb}", "--dry-run"), expect=("arm-cortex-a72=4",)),
    P("dt-json", ("dt-labeller", "--dtb", "{dtb}", "--dry-run", "--output", "json")),
    P("dt-explain", ("dt-labeller", "--dtb", "{dtb}", "--explain"), expect=("<- /cpus/cpu@0",)),
    P("dt-host-write", ("dt-labeller", "--host-root", "{host}", "--features-dir", "{work}/fd")),
    P("usb-dry", ("usb-scan", "--host-root", "{host}", "--dry-run"), expect=("089a",)),
    P("usb-explain", ("usb-scan", "--host-root", "{host}", "--dry-run", "--explain")),
    P("usb-json", ("usb-scan", "--host-root", "{host}", "--dry-run", "--output", "json")),
    P("usb-write", ("usb-scan", "--host-root", "{host}", "--features-dir", "{work}/fd")),
    P(
        "usb-watch",
        ("usb-scan", "--host-root", "{host}", "--features-dir", "{work}/watch", "--watch"),
        ready_file="{work}/watch/usb-scan",
    ),
    # what the DaemonSet's bus-scan sidecar runs: both buses from one watcher, with probes
    P(
        "bus-scan-sidecar",
        (
            *("usb-scan", "--watch", "--also=pci-scan", "--host-root={x86}"),
            *("--features-dir={work}/watch", "--listen=127.0.0.1:{port}"),
        ),
        serve="/readyz",
    ),
    P("pci-dry", ("pci-scan", "--host-root", "{x86}", "--dry-run"), expect=("pci-",)),
    P("pci-json", ("pci-scan", "--host-root", "{x86}", "--dry-run", "--output", "json")),
    P("pci-write", ("pci-scan", "--host-root", "{x86}", "--features-dir", "{work}/fd")),
    P(
        "sink-stdin",
        ("feature-sink", "--dry-run", "--features", "-", "--node-name", "n1"),
        stdin=FEATURES,
        expect=("edgefd.io/edgetpu.present",),
    ),
    P(
        "sink-dir-json",
        (
            *("feature-sink", "--dry-run", "--output", "json", "--features-dir", "{features}"),
            *("--node-name", "n1"),
        ),
        expect=("owned-labels",),
    ),
    # The client is configured, and a request is sent and fails: kubernetes.config, the REST
    # layer, urllib3 and ssl all run. Exit 5: the peer is unreachable.
    P(
        "sink-once-api-down",
        (
            *("feature-sink", "--once", "--kubeconfig", "{down}", "--features-dir", "{features}"),
            *("--node-name", "n1", "--api-timeout", "2s", "--no-events"),
        ),
        rc=5,
        reaches=("kubernetes.config", "kubernetes.client.rest", "urllib3"),
    ),
    P(
        "sink-serve",
        (
            *("feature-sink", "--kubeconfig", "{down}", "--features-dir", "{features}"),
            *("--node-name", "n1", "--listen", "127.0.0.1:{port}"),
            *("--api-timeout", "1s", "--max-backoff", "1s"),
        ),
        serve="/metrics",
        reaches=("kubernetes.client.rest",),
    ),
    P("plugin-dry", ("devplugin", "--dry-run", "--host-root", "{host}"), expect=("coral-usb",)),
    P("plugin-json", ("devplugin", "--dry-run", "--host-root", "{host}", "--output", "json")),
    # Serves gRPC on its sockets and waits for a kubelet that is not there.
    P(
        "plugin-serve",
        (
            *("devplugin", "--host-root", "{host}", "--plugin-dir", "{work}/plugins"),
            *("--listen", "127.0.0.1:{port}"),
        ),
        serve="/metrics",
        reaches=("grpc",),
    ),
    P(
        "keeper-grant-missing",
        ("device-keeper", "grant", "--cgroup", "{work}/no-cgroup", "--allow", "c:189:5"),
        rc=3,
        reaches=("edgefd.device_keeper.grant",),
    ),
    # what it would grant now: no kubelet here, said with its code
    P(
        "keeper-dry-run",
        (
            *("device-keeper", "serve", "--dry-run", "--host-root", "{work}"),
            *("--decisions", "{work}/decisions.json"),
        ),
        rc=5,
        reaches=("edgefd.device_keeper.dryrun", "edgefd.device_keeper.moves"),
    ),
    # what the DaemonSet's device-keeper container runs: devplugin's decisions followed (here
    # nobody can be asked who holds the device: logged), its probes
    P(
        "keeper-serve",
        (
            *("device-keeper", "serve", "--host-root", "{work}", "--listen", "127.0.0.1:{port}"),
            *("--decisions", "{work}/decisions.json", "--state-dir", "{work}/keeper"),
        ),
        serve="/readyz",
        reaches=("edgefd.device_keeper.follow", "edgefd.device_keeper.service"),
    ),
    # the kubectl plugin (a workstation's tool; in the image too): the kubeconfig is read and
    # the first list fails, one line, exit 5
    P(
        "kubectl-nodes-api-down",
        ("kubectl-edgefd", "nodes", "--kubeconfig", "{down}", "--api-timeout", "2s"),
        rc=5,
        reaches=("kubernetes.config", "edgefd.kubectl_edgefd.snapshot"),
    ),
)


def by_name(name: str) -> CodePath:
    (p,) = [p for p in CODE_PATHS if p.name == name]
    return p


class Inputs:
    """The prepared inputs, as seen from where the tools run (`at`: the host path of a tree
    that the tools see as `seen_as`, e.g. the image's /work)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.host = base / "host"
        self.x86 = base / "x86"
        self.work = base / "work"

    @classmethod
    def make(cls, base: Path) -> Inputs:
        """Generate the sample nodes and the blob (needs dtc: scripts/bootstrap installs it)."""
        inp = cls(base)
        for node, dest in (("rpi4-coral", inp.host), ("x86-server", inp.x86)):
            subprocess.run(
                [sys.executable, "-m", "tests.fixturegen", node, str(dest)],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        inp.work.mkdir()
        dtc = shutil.which("dtc")
        assert dtc, "dtc not found (scripts/bootstrap installs device-tree-compiler)"
        subprocess.run(
            [dtc, "-q", "-I", "dts", "-O", "dtb", "-o", str(inp.work / "rpi4.dtb"), str(DTS)],
            check=True,
        )
        return inp

    def reset_work(self) -> None:
        """A fresh scratch area: features.d with one producer's file, the empty directories
        the producers write into (the pod's emptyDir: a producer makes none), a dead API's
        kubeconfig."""
        for p in self.work.iterdir():
            if p.name != "rpi4.dtb":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        (self.work / "features").mkdir()
        (self.work / "features" / "usb-scan").write_text(FEATURES)
        (self.work / "plugins").mkdir()
        (self.work / "fd").mkdir()
        (self.work / "watch").mkdir()
        (self.work / "decisions.json").write_text(DECISIONS)
        (self.work / "down.kubeconfig").write_text(down_kubeconfig(free_port()))

    def fill(self, argv: tuple[str, ...], port: int, host: str, x86: str, work: str) -> list[str]:
        """`argv` with its placeholders replaced by paths as the tool sees them."""
        values = {
            "host": host,
            "x86": x86,
            "work": work,
            "dtb": f"{work}/rpi4.dtb",
            "features": f"{work}/features",
            "down": f"{work}/down.kubeconfig",
            "port": str(port),
        }
        return [a.format(**values) for a in argv]


def down_kubeconfig(port: int) -> str:
    """A kubeconfig for an API server on a loopback port where nothing listens."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: down
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: not-a-real-token}}
contexts:
- name: down
  context: {{cluster: down, user: u}}
current-context: down
"""
