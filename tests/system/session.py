"""The control plane and the one real node that the scenarios of a ``scripts/e2e`` run share.

Bringing a node up (etcd, the API server, controllers, scheduler, containerd with the images
imported, the kubelet registered and Ready) is the slowest part of a scenario that is not a
check, and nothing in it depends on how edgefd is installed or on which host tree it reads. So
it happens once per run. Between two scenarios the node is put back to what a fresh node looks
like to edgefd (``reset``): edgefd uninstalled and its pods gone, the test's workloads and
claims gone, the Node's labels and annotations as the kubelet registered them, no ResourceSlice,
none of edgefd's files left under the kubelet's directories or in /run/cdi; and when the next
scenario reads another host tree, the tree and its device nodes are replaced (``load_tree``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixturegen import build_host

from .hosttree import copy_host_tree, device_nodes
from .install import RELEASE, HelmInstall
from .kube import Api, Kubectl, KubeError, control_plane, start_control_plane, wait_for
from .layouts import LAYOUTS, Layout
from .node import Node, NodeSpec

log = logging.getLogger("e2e.session")
DEFAULT_NODE = "rpi4-coral"
DEFAULT_SECOND = "rpi4-coral-runtime"  # another Pi with a Coral USB (its runtime state)
NAMESPACE = "edgefd"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def node_state(layout: Layout) -> str:
    """What edgefd leaves on a node, inside its mount namespace (the DaemonSet's hostPaths),
    as a shell line that removes it."""
    root = layout.kubelet_root
    return (
        f"cd {layout.device_plugin_dir} && find . -mindepth 1 -maxdepth 1"
        " ! -name kubelet.sock ! -name kubelet_internal_checkpoint -exec rm -rf {} +;"
        f" rm -rf {root}/plugins/edgefd.io {root}/plugins_registry/edgefd* /run/cdi/edgefd.io-*"
    )


def fill_tree(source: str, dest: Path) -> None:
    """``dest`` made the host tree ``source`` names: a directory (copied) or a fixture node."""
    if Path(source).is_dir():
        copy_host_tree(Path(source), dest)
    else:
        build_host(source, dest)


def node_name_of(tree: Path) -> str:
    hostname = tree / "etc" / "hostname"
    return hostname.read_text().strip() if hostname.exists() else "e2e-node"


class Session:
    """One control plane and one node on ``work``; the host tree is ``work/host``."""

    def __init__(
        self,
        work: Path,
        bin_dir: Path,
        layout: Layout = LAYOUTS["kubeadm"],
        cgroup_driver: str = "",
    ) -> None:
        self.work = work
        self.bin = bin_dir
        self.layout = layout
        self.cgroup_driver = cgroup_driver or layout.cgroup_driver
        self.port = 0  # the API server's (the overlay names it)
        self.tree_inside = ""  # where the pod's hostPath finds the tree in the node
        self.host = work / "host"
        self.tree_source: str | None = None  # what the host tree was loaded from
        self.kubectl = Kubectl(bin_dir, str(work / "cp" / "admin.kubeconfig"))
        self.cp: Any = None
        self.node: Node | None = None
        self.second: Node | None = None  # a second node (twonodes.py), on ``work/host-2``
        self.keeper: Keeper | None = None
        self.baseline: dict[str, dict[str, str]] = {}  # the Node's metadata as registered
        self.timings: dict[str, float] = {}

    def start(self, tree: str | None, images: tuple[Path, ...], cache: Path, cgroup: str) -> Node:
        t0 = time.monotonic()
        self.load_tree(tree)
        self.cp = control_plane(self.work / "cp", self.bin, self.port)
        spec = self.node_spec(self.host, self.work / "node", images, cache, cgroup)
        self.node = node = Node(spec, self.cp)
        self.keeper = Keeper(lambda: start_control_plane(self.cp), self.cp.stop)
        node.start_runtime()
        self.keeper.wait_started()
        self.timings["control_plane_and_runtime_s"] = round(time.monotonic() - t0, 2)
        node.join()
        self.timings.update(node.timings)
        meta = Api(self.cp).get(f"/api/v1/nodes/{spec.name}")["metadata"]
        self.baseline = {k: dict(meta.get(k) or {}) for k in ("labels", "annotations")}
        self.timings["bring_up_s"] = round(time.monotonic() - t0, 2)
        return node

    def node_spec(
        self,
        host: Path,
        workdir: Path,
        images: tuple[Path, ...],
        cache: Path,
        cgroup: str,
        private_net: bool = False,
    ) -> NodeSpec:
        """A node of this session's layout and driver on ``host``, named by its tree."""
        return NodeSpec(
            name=node_name_of(host),
            workdir=workdir,
            bin_dir=self.bin,
            host_tree=host,
            host_tree_inside=self.tree_inside,
            images=images,
            cgroup_root=cgroup,
            cache=cache,
            layout=self.layout,
            cgroup_driver=self.cgroup_driver,
            private_net=private_net,
        )

    def add_node(
        self, tree: str | None, images: tuple[Path, ...], cache: Path, cgroup: str
    ) -> Node:
        """A second node joined to the same control plane: its own host tree, mount and
        network namespaces (its pods' loopback ports are its own), cgroups, runtime and
        kubelet; named by its tree's hostname, which must differ from the first node's."""
        assert self.node is not None
        t0 = time.monotonic()
        host = self.work / "host-2"
        host.mkdir(parents=True)
        source = tree or DEFAULT_SECOND
        fill_tree(source, host)
        spec = self.node_spec(host, self.work / "node-2", images, cache, cgroup, private_net=True)
        if spec.name == self.node.spec.name:
            raise ValueError(f"both host trees name their node {spec.name} (etc/hostname)")
        self.second = node = Node(spec, self.cp)
        node.start_runtime()
        node.join()
        self.timings["second_node_s"] = round(time.monotonic() - t0, 2)
        log.info("second node %s Ready (%s, %.1fs)", spec.name, source, time.monotonic() - t0)
        return node

    # ---- the host tree

    def load_tree(self, tree: str | None) -> Path:
        """Make ``work/host`` the tree named (a directory, a fixture node name, or the default
        sample node), with the node's device nodes to match. A no-op when it already is."""
        source = tree or DEFAULT_NODE
        if source == self.tree_source:
            return self.host
        running = self.node is not None and self.node.device_nodes
        if running:
            assert self.node is not None
            self.node.host.remove_nodes(self.node.device_nodes)
        if self.host.exists():  # emptied, not replaced: the node's bind mount holds the dir
            for child in self.host.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        self.host.mkdir(parents=True, exist_ok=True)
        fill_tree(source, self.host)
        if running:
            assert self.node is not None
            self.node.device_nodes = self.node.host.create_nodes()
        self.tree_source = source
        log.info("host tree: %s (%d device nodes)", source, len(device_nodes(self.host)))
        return self.host

    # ---- between scenarios

    def reset(self) -> list[str]:
        """Put the node back to a fresh one for edgefd; returns what could not be undone."""
        assert self.node is not None
        problems: list[str] = []
        api = Api(self.cp)
        name = self.node.spec.name
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("uninstall", lambda: self._uninstall(api)),
            ("workloads", lambda: self.delete_workloads(api)),
            ("slices", lambda: self._delete_slices(api, name)),
            (
                "node files",
                lambda: self.node and self.node.ns.run(["sh", "-c", node_state(self.layout)]),
            ),
            ("node metadata", lambda: self._restore_metadata(api, name)),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as e:  # the next steps still run; the next scenario reports it
                problems.append(f"reset {what}: {type(e).__name__}: {e}")
        return problems

    def _uninstall(self, api: Api) -> None:
        releases = self.helm("list", "--namespace=default", "--short")
        if RELEASE in releases.split():
            self.helm("uninstall", RELEASE, "--namespace=default", "--wait", "--timeout=150s")
        with contextlib.suppress(KubeError):
            self.kubectl(
                "delete", "-k", str(Path(__file__).parent / "overlay-dra"),
                "--ignore-not-found", "--wait=true", "--timeout=150s", timeout=180,
            )  # fmt: skip
        wait_for(
            "edgefd's namespace gone",
            lambda: api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None,
            timeout=150,
            interval=0.5,
        )

    def helm(self, *args: str) -> str:
        return HelmInstall(self.bin, self.kubectl, [])(*args)

    @staticmethod
    def delete_workloads(api: Api) -> None:
        with contextlib.suppress(KubeError):  # a controller would make its pods again
            api.request("DELETE", "/apis/apps/v1/namespaces/default/deployments")
        for kind in ("resourceclaimtemplates", "resourceclaims"):
            with contextlib.suppress(KubeError):
                api.request("DELETE", f"/apis/resource.k8s.io/v1/namespaces/default/{kind}")
        api.request("DELETE", "/api/v1/namespaces/default/pods?gracePeriodSeconds=0")
        wait_for(
            "the test's pods gone",
            lambda: not api.get("/api/v1/namespaces/default/pods")["items"],
            timeout=90,
            interval=0.2,
        )

    @staticmethod
    def _delete_slices(api: Api, node: str) -> None:
        api.request("DELETE", f"{SLICES}?fieldSelector=spec.nodeName%3D{node}")

    def _restore_metadata(self, api: Api, name: str) -> None:
        meta = api.get(f"/api/v1/nodes/{name}")["metadata"]
        patch: dict[str, dict[str, Any]] = {}
        for key in ("labels", "annotations"):
            now, then = meta.get(key) or {}, self.baseline[key]
            # back to the registered value; what the kubelet keeps up to date is left alone
            extra = {k: None for k in now if k not in then}
            if extra:
                patch[key] = extra
        if patch:
            merge = "application/merge-patch+json"
            api.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": patch}, merge)

    # ---- the end

    def stop(self) -> list[str]:
        problems: list[str] = []
        for what, step in (
            ("second node", self.second and self.second.stop),
            ("node", self.node and self.node.stop),
            ("control plane", self.keeper and self.keeper.release),
        ):
            try:
                problems += (step() or []) if step else []
            except Exception as e:  # the rest of the teardown still runs
                problems.append(f"{what}: {type(e).__name__}: {e}")
        return problems


class Keeper:
    """Runs ``start`` in a thread that then waits for ``release()`` and runs ``stop``. The
    processes ``start`` spawns are killed when the *thread* that spawned them ends
    (PR_SET_PDEATHSIG is per thread), so that thread lives exactly as long as they should."""

    def __init__(self, start: Callable[[], Any], stop: Callable[[], Any]) -> None:
        self._start, self._stop = start, stop
        self._started, self._released = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="control-plane", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._start()
        except BaseException as e:
            self.error = e
        self._started.set()
        self._released.wait()
        self._stop()

    def wait_started(self) -> None:
        self._started.wait()
        if self.error:
            raise self.error

    def release(self) -> None:
        self._released.set()
        self._thread.join(timeout=120)
