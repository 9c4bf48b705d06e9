"""The node's container runtime: containerd v2 (harness-built) with Debian's runc, and crictl.

containerd runs where the node's distribution puts it (layouts.py): its socket, root, state and
configuration file at that distribution's paths inside the node's mount namespace, all of them
scratch there; its log, crictl's empty config and runc's root are in the node's own directory.
The clients (ctr, crictl) run inside the namespace too, so they dial the same path the kubelet
and edgefd's device-keeper do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.peers.processes import kill, spawn, tail

from .cgroups import CgroupRoot
from .layouts import LAYOUTS, Layout, containerd_argv
from .mountns import MountNamespace

CRI_NAMESPACE = "k8s.io"


class ContainerRuntimeError(RuntimeError):
    pass


class Containerd:
    """containerd + runc for one node, started inside the node's mount namespace."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path,
        ns: MountNamespace,
        cgroups: CgroupRoot,
        sandbox: str,
        layout: Layout = LAYOUTS["kubeadm"],
        device_ownership: bool = False,
        systemd: bool = False,
    ) -> None:
        self.dir = Path(workdir) / "containerd"
        self.bin_dir = Path(bin_dir)
        self.ns = ns
        self.cgroups = cgroups
        self.sandbox = sandbox
        self.layout = layout
        self.socket = layout.socket  # inside the namespace
        self.endpoint = layout.endpoint
        self.log = self.dir / "containerd.log"
        # stock, as a distribution ships it: non-root workloads get their devices without
        # it (checks_nonroot.py); True adds the setting docs/scheduling.md gives per distribution
        self.device_ownership = device_ownership
        self.systemd = systemd  # runc's SystemdCgroup: the systemd cgroup driver
        self._proc: subprocess.Popen | None = None

    def files(self) -> dict[str, str]:
        """containerd's configuration files by path inside the node (layouts.py)."""
        return self.layout.files(
            self.sandbox, str(self.dir / "runc"), self.device_ownership, self.systemd
        )

    def _write_files(self) -> None:
        for sub in ("runc",):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # Loopback only: the Node turns Ready (the runtime reports its network ready), while
        # pods have no network of their own; every pod of the test uses hostNetwork. It must
        # be in place before containerd starts: containerd v2 does not pick up a late one.
        conf = {"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}
        files = {f"{self.layout.cni_conf_dir}/99-loopback.conflist": json.dumps(conf)}
        for path, text in {**files, **self.files()}.items():
            self.ns.write(path, text)
        (self.dir / "crictl.yaml").write_text("")

    def start(self, timeout: float = 30.0) -> Containerd:
        self._write_files()
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        argv = [str(self.bin_dir / "containerd"), *containerd_argv(self.layout)]
        self._proc = spawn(self.ns.argv(argv), self.log, env=env)
        self.cgroups.adopt(self._proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ContainerRuntimeError(f"containerd exited:\n{tail(self.log)}")
            if self.crictl_ok("info"):
                return self
            time.sleep(0.2)
        raise ContainerRuntimeError(f"containerd not ready after {timeout}s:\n{tail(self.log)}")

    # ---- clients

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        argv = [str(self.bin_dir / "ctr"), "--address", self.socket, "-n", CRI_NAMESPACE]
        return _run(self.ns.argv([*argv, *args]), timeout)

    def crictl(self, *args: str, timeout: float = 60.0) -> str:
        argv = [
            str(self.bin_dir / "crictl"),
            "--config",  # none: the endpoints are given (else it looks in /etc and beside itself)
            str(self.dir / "crictl.yaml"),
            "--runtime-endpoint",
            self.endpoint,
            "--image-endpoint",
            self.endpoint,
            "--timeout",
            f"{int(timeout)}s",
        ]
        return _run(self.ns.argv([*argv, *args]), timeout + 5)

    def crictl_json(self, command: str, *args: str) -> Any:
        return json.loads(self.crictl(command, "-o", "json", *args))

    def crictl_ok(self, *args: str) -> bool:
        try:
            self.crictl(*args, timeout=5)
            return True
        except ContainerRuntimeError:
            return False

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    def tag(self, source: str, target: str) -> None:
        self.ctr("images", "tag", "--force", source, target)

    def image_size(self, ref: str) -> int:
        """The image's size as the runtime reports it to the kubelet (CRI ImageStatus)."""
        status = self.crictl_json("inspecti", ref)
        return int(status["status"]["size"])

    def containers(self, **labels: str) -> list[dict[str, Any]]:
        """CRI containers (running and exited) whose labels match, e.g. pod name/namespace."""
        found = self.crictl_json("ps", "-a").get("containers", [])
        return [c for c in found if all(c["labels"].get(k) == v for k, v in labels.items())]

    def inspect(self, container_id: str) -> dict[str, Any]:
        return self.crictl_json("inspect", container_id)

    def exec(self, container_id: str, *argv: str, timeout: float = 30.0) -> str:
        return self.crictl("exec", container_id, *argv, timeout=timeout)

    # ---- teardown

    def power_cut(self) -> None:
        """After a power cut killed containerd and its shims: the dead process reaped and
        runc's state gone (under /run on a real host; the node empties its /run, where most
        layouts keep containerd's state too; MicroK8s keeps it on disk, and so does this). The
        root (images, snapshots, the metadata of every sandbox and container) stays, so the
        next containerd reports them exited, as after a reboot."""
        kill(self._proc, grace=0.0)
        self._proc = None
        shutil.rmtree(self.dir / "runc", ignore_errors=True)

    def stop(self) -> None:
        """Stop every pod (so runc takes the containers down), then containerd."""
        if self._proc is not None and self._proc.poll() is None:
            for args in (("stopp",), ("rmp", "--force")):
                try:
                    pods = self.crictl("pods", "-q", timeout=20).split()
                    if pods:
                        self.crictl(*args, *pods, timeout=40)
                except ContainerRuntimeError:
                    pass
        kill(self._proc, grace=5.0)
        self._proc = None


def _run(argv: list[str], timeout: float) -> str:
    """``argv`` is an nsenter line: the client is the first word after its ``--``."""
    client = argv[argv.index("--") + 1 :] if "--" in argv else argv
    name = f"{Path(client[0]).name} {' '.join(client[1:4])}"
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise ContainerRuntimeError(f"{name}: timed out") from e
    if r.returncode != 0:
        raise ContainerRuntimeError(f"{name} … {argv[-1]}: {r.stderr.strip()[-2000:]}")
    return r.stdout
