"""One real Kubernetes node on this machine: a kubelet and containerd in the node's private
mount namespace and cgroup subtree, running pods from locally imported images.

Settings these machines need are set in ``kubelet_config`` and say why. ``Node.stop`` undoes
everything ``Node.start`` did, in reverse, and works from any partial start: the kubelet first
(so nothing restarts pods), then every pod, containerd, every process left in the node's
cgroups, the mount namespace (and with it every mount), the cgroups.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import free_ports
from tests.peers.apiserver import KubeAPIServer
from tests.peers.processes import REPO_ROOT, kill, spawn, tail

from .cgroups import CgroupRoot
from .hosttree import DevNode, SampleHost
from .images import PAUSE_REF, pause_archive
from .kube import Api, wait_for
from .layouts import LAYOUTS, Layout
from .loopfwd import LoopbackForward
from .mountns import MountNamespace, tmp_dirs
from .runtime import Containerd

log = logging.getLogger("e2e.node")
# The kernel settings a kubelet insists on (pkg/kubelet/cm setupKernelTunables). It would write
# them to the machine (kernel.panic_on_oops=1 on a shared machine!); instead the node's mount
# namespace shows it these values and protectKernelDefaults makes it only check them.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    workdir: Path
    bin_dir: Path
    host_tree: Path
    host_tree_inside: str  # where the pod's hostPath finds the host tree (in the namespace)
    images: tuple[Path, ...]
    cgroup_root: str
    cache: Path  # kept between runs (the pause image)
    layout: Layout = LAYOUTS["kubeadm"]  # where the distribution puts kubelet and containerd
    cgroup_driver: str = ""  # systemd | cgroupfs; "" the layout's (its distribution's)
    # a network namespace of its own (a second node: loopfwd.py says why and how the API
    # server is reached from it)
    private_net: bool = False

    @property
    def driver(self) -> str:
        return self.cgroup_driver or self.layout.cgroup_driver


class Node:
    def __init__(self, spec: NodeSpec, cp: KubeAPIServer) -> None:
        self.spec = spec
        self.cp = cp
        self.dir = spec.workdir
        self.systemd = spec.driver == "systemd"
        self.cgroups = CgroupRoot(spec.cgroup_root, unified=self.systemd)
        self.ns = MountNamespace(
            self.dir / "ns",
            {spec.host_tree_inside: spec.host_tree},
            {f"/proc/sys/{k}": f"{v}\n" for k, v in KUBELET_SYSCTLS.items()},
            writable=spec.layout.writable,
            scratch=spec.layout.scratch,
            net=spec.private_net,
        )
        self.forward: LoopbackForward | None = None
        self.host = SampleHost(spec.host_tree, self.ns)
        self.layout = spec.layout
        self.runtime = Containerd(
            self.dir, spec.bin_dir, self.ns, self.cgroups, PAUSE_REF, spec.layout,
            systemd=self.systemd,
        )  # fmt: skip
        self.kubelet_log = self.dir / "kubelet.log"
        self.device_nodes: list[DevNode] = []
        self.timings: dict[str, float] = {}
        self._kubelet: subprocess.Popen | None = None
        self.port, self.healthz_port = free_ports(2)

    # ---- lifecycle

    def start_runtime(self) -> Node:
        """Everything but the kubelet (which needs the control plane): cgroups, namespace,
        device nodes, containerd with the images imported."""
        t0 = time.monotonic()
        self.cgroups.create()
        self.ns.start()
        self.start_init()
        self.start_forward()
        self.make_links()
        self.device_nodes = self.host.create_nodes()
        self.runtime.start()
        t1 = time.monotonic()
        for archive in (pause_archive(self.spec.cache), *self.spec.images):
            self.runtime.import_image(archive)
        self.timings["image_import_s"] = round(time.monotonic() - t1, 2)
        self.timings["runtime_s"] = round(time.monotonic() - t0, 2)
        return self

    def start_init(self) -> None:
        """The systemd cgroup driver's node: a real systemd as its init (systemd.py), every
        process of the node in its namespaces from now on."""
        if self.systemd:
            t = time.monotonic()
            # what the node's processes read under the machine's /tmp, if any: the session's
            # directory (its node, host tree, the control plane's kubeconfigs), the binaries
            # and images, the checkout (a clone there)
            spec = self.spec
            keep = tmp_dirs(spec.workdir.parent, spec.bin_dir, spec.cache, REPO_ROOT)
            self.ns.start_init(self.cgroups.dirs(), keep)
            self.timings["init_s"] = round(time.monotonic() - t, 2)

    def start_forward(self) -> None:
        """The API server's port on the node's own loopback (a node with ``private_net``),
        made again when its namespace is (the init's, after a power cut)."""
        if self.spec.private_net:
            self.stop_forward()
            self.forward = LoopbackForward(self.ns.net_ns_path, self.cp.port)

    def stop_forward(self) -> None:
        if self.forward is not None:
            self.forward.close()
            self.forward = None

    def proc(self, pid: int) -> Path:
        """Where the machine reads /proc of a pid as the node's runtime numbers it (the CRI's
        `info.pid`): the node's own PID namespace when its init is systemd."""
        init = self.ns.init
        if init is not None and init.pid:
            return Path(f"/proc/{init.pid}/root/proc/{pid}")
        return Path(f"/proc/{pid}")

    def systemctl(self, *args: str) -> str:
        """systemctl of the node's init (the systemd cgroup driver's node only)."""
        if self.ns.init is None:
            raise RuntimeError("this node's cgroup driver is cgroupfs: no systemd runs")
        return self.ns.init.systemctl(*args)

    def make_links(self) -> None:
        """The links the distribution's installer makes (MicroK8s: /var/lib/kubelet to its
        kubelet's root dir, when nothing is there yet), as it makes them."""
        for link, target in self.layout.links:
            self.ns.run(
                ["sh", "-c", f"mkdir -p {target} && {{ [ -e {link} ] || ln -s {target} {link}; }}"]
            )

    def join(self) -> Node:
        """Start the kubelet and wait until its Node is Ready."""
        self.start_kubelet()
        _, waited = wait_for("Node Ready", self.ready, timeout=90, interval=0.2)
        self.timings["kubelet_ready_s"] = round(waited, 2)
        return self

    def stop(self) -> list[str]:
        """Tear everything down; returns what could not be cleaned up (empty when clean)."""
        problems: list[str] = []
        t = time.monotonic()
        self.stop_kubelet()
        t_kubelet = time.monotonic()
        try:
            self.runtime.stop()
        except Exception as e:  # teardown goes on whatever failed
            problems.append(f"containerd: {e}")
        log.debug(
            "teardown: kubelet %.1fs, pods and containerd %.1fs",
            t_kubelet - t,
            time.monotonic() - t_kubelet,
        )
        init = self.ns.init
        expected = {p for p in self.cgroups.pids() if init is not None and init.owns(p)}
        left = {p: _comm(p) for p in self.cgroups.pids() - expected}  # named before the kill
        left = {p: c for p, c in left.items() if p in self.cgroups.kill_all()}
        if left:
            what = ", ".join(sorted(set(left.values())))
            problems.append(f"killed {len(left)} leftover process(es) of the node ({what})")
        self.stop_forward()
        self.ns.stop()
        if self.systemd:  # its init's processes are its cgroups' (and it made many)
            self.cgroups.kill_all()
        problems += [f"cgroup not removed: {d}" for d in self.cgroups.remove()]
        return problems

    # ---- kubelet

    def kubelet_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # loopback only; nobody dials the kubelet (the API server has no route to it)
            "address": "127.0.0.1",
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": self.cp.ca_file},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": self.runtime.endpoint,
            "imageServiceEndpoint": self.runtime.endpoint,
            # cgroup v1 here: kubelets from 1.35 refuse it unless told; the layout's driver:
            # with cgroupfs, pods under our own cgroup, not the machine's /kubepods; with
            # systemd, kubepods.slice of the node's systemd (its cgroup namespace's root is
            # our own cgroup)
            "failCgroupV1": False,
            "cgroupDriver": self.spec.driver,
            "cgroupRoot": "/" if self.systemd else self.cgroups.path,
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "protectKernelDefaults": True,  # check, never write (KUBELET_SYSCTLS)
            "makeIPTablesUtilChains": False,  # no rules in the machine's network namespace
            "localStorageCapacityIsolation": False,
            # a shared machine: never evict or garbage-collect images because of its load
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            # status changes (allocatable after a plugin registers) within a second
            "nodeStatusUpdateFrequency": "1s",
            "nodeStatusReportFrequency": "1s",
            "syncFrequency": "5s",
        }

    def start_kubelet(self) -> None:
        name = self.spec.name
        crt, key = self.cp.pki.client_cert(f"kubelet-{name}", f"system:node:{name}", "system:nodes")
        kubeconfig = self.cp.kubeconfig_for_cert(f"kubelet-{name}", crt, key)
        config = self.dir / "kubelet-config.json"
        config.write_text(json.dumps(self.kubelet_config(), indent=1))
        argv = [
            str(self.spec.bin_dir / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={name}",
            "--node-ip=127.0.0.1",
            f"--cert-dir={self.dir / 'kubelet-pki'}",
            f"--root-dir={self.layout.kubelet_root}",
            "--v=2",
        ]
        self._kubelet = spawn(self.ns.argv(argv), self.kubelet_log)
        self.cgroups.adopt(self._kubelet.pid)

    def stop_kubelet(self) -> None:
        kill(self._kubelet, grace=10.0)
        self._kubelet = None

    def restart_kubelet(self) -> float:
        """Stop and start the kubelet; returns time.monotonic() of the start."""
        self.stop_kubelet()
        t = time.monotonic()
        self.start_kubelet()
        return t

    def power_cut(self) -> None:
        """What a power cut leaves: every process of the node gone at once (the kubelet,
        containerd, the shims, the containers), with every mount they made and the volatile
        state (``/run``, the runtime's task state, the cgroups); what is on disk stays (the
        images, containerd's metadata of its sandboxes and containers, the kubelet's
        checkpoints and pod directories, stale sockets in its plugin directories)."""
        self.cgroups.kill_all()
        kill(self._kubelet, grace=0.0)  # reaped: it is dead already
        self._kubelet = None
        self.ns.stop_init()  # killed with the rest: its namespaces and their mounts are gone
        self.ns.unmount_under((*self.layout.scratch_roots, f"{self.layout.state}/"))
        self.runtime.power_cut()
        run = self.ns.outside("/run")
        for child in run.iterdir():  # emptied, not replaced: the namespace's /run is a bind
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        stuck = self.cgroups.remove()
        if stuck:
            raise RuntimeError(f"cgroups busy after the power cut: {stuck}")
        self.cgroups.create()

    def boot(self) -> float:
        """The node's init (systemd, for that driver), then containerd, then the kubelet, as a
        node's init starts them after a power cut; returns time.monotonic() of the kubelet's
        start."""
        self.start_init()
        self.start_forward()
        self.runtime.start()
        t = time.monotonic()
        self.start_kubelet()
        return t

    @property
    def kubelet_running(self) -> bool:
        return self._kubelet is not None and self._kubelet.poll() is None

    def ready(self) -> bool:
        if not self.kubelet_running:
            raise RuntimeError(f"the kubelet exited:\n{tail(self.kubelet_log)}")
        n = Api(self.cp).get_or_none(f"/api/v1/nodes/{self.spec.name}")
        conds = (n or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def plugin_sockets(self, where: str = "") -> list[str]:
        """The sockets in one of the kubelet's directories (default: device-plugins, whose
        own kubelet.sock is included); ``where`` relative to the kubelet's root dir."""
        d = f"{self.layout.kubelet_root}/{where}" if where else self.layout.device_plugin_dir
        r = self.ns.run(["find", d, "-maxdepth", "1", "-type", "s"], check=False)
        return sorted(Path(p).name for p in r.stdout.split())

    def file_identity(self, inside: str) -> str:
        """A file's inode and change time as the node sees it (a recreated file may get the
        freed inode number back; its ctime is new)."""
        return self.ns.run(["stat", "-L", "-c", "%i %z", inside]).stdout.strip()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
