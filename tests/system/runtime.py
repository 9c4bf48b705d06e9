"""The node's container runtime: containerd v2 (harness-built) with Debian's runc, and crictl.

Everything containerd keeps goes under its own scratch directory (root, state, socket, runc
root, the ``opt`` plugin's directory, which defaults to the machine's ``/opt/containerd``);
shim sockets go to ``/run/containerd``, which is scratch inside the node's mount namespace.
Settings that these machines need (see ``config()``) say why where they are set.
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
from .mountns import MountNamespace

CRI_NAMESPACE = "k8s.io"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins


class ContainerRuntimeError(RuntimeError):
    pass


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these paths


class Containerd:
    """containerd + runc for one node, started inside the node's mount namespace."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path,
        ns: MountNamespace,
        cgroups: CgroupRoot,
        sandbox: str,
        device_ownership: bool = False,
    ) -> None:
        self.dir = Path(workdir) / "containerd"
        self.bin_dir = Path(bin_dir)
        self.ns = ns
        self.cgroups = cgroups
        self.sandbox = sandbox
        self.socket = self.dir / "containerd.sock"
        self.endpoint = f"unix://{self.socket}"
        self.log = self.dir / "containerd.log"
        # stock, as a distribution ships it: non-root workloads get their devices without
        # it (checks_nonroot.py); True adds the setting docs/scheduling.md gives per distribution
        self.device_ownership = device_ownership
        self._proc: subprocess.Popen | None = None

    def config(self) -> str:
        d = self.dir
        ownership = (
            "  # a device spec's node belongs to the container's user and group, not the host's\n"
            "  device_ownership_from_security_context = true\n"
            if self.device_ownership
            else ""
        )
        runc = shutil.which("runc") or "/usr/sbin/runc"
        s = _toml_str
        return f"""version = 3
root = {s(str(d / "root"))}
state = {s(str(d / "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]
[grpc]
  address = {s(str(self.socket))}
[ttrpc]
  address = {s(str(self.socket) + ".ttrpc")}
[plugins."io.containerd.internal.v1.opt"]
  path = {s(str(d / "opt"))}
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {s(self.sandbox)}
[plugins."io.containerd.cri.v1.runtime"]
  # These machines lack CAP_SYS_RESOURCE: runc cannot set a negative oom_score_adj (the
  # sandbox's -998, system-node-critical pods), and fails with only "can't get final child's
  # PID from pipe: EOF". This clamps it to the runtime's own value instead.
  restrict_oom_score_adj = true
  # only the node's own /var/run/cdi (scratch /run in its mount namespace), never the
  # machine's /etc/cdi: where the DRA plugin writes each prepared claim's spec
  cdi_spec_dirs = ["/var/run/cdi"]
{ownership}  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {s(runc)}
        Root = {s(str(d / "runc"))}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{s(CNI_BIN_DIR)}]
    conf_dir = {s(str(d / "cni"))}
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def _write_files(self) -> Path:
        for sub in ("root", "state", "runc", "opt", "cni"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # Loopback only: the Node turns Ready (the runtime reports its network ready), while
        # pods have no network of their own; every pod of the test uses hostNetwork. It must
        # be in place before containerd starts: containerd v2 does not pick up a late one.
        conf = {"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}
        (self.dir / "cni" / "99-loopback.conflist").write_text(json.dumps(conf))
        cfg = self.dir / "config.toml"
        cfg.write_text(self.config())
        (self.dir / "crictl.yaml").write_text("")
        return cfg

    def start(self, timeout: float = 30.0) -> Containerd:
        cfg = self._write_files()
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        argv = self.ns.argv([str(self.bin_dir / "containerd"), "--config", str(cfg)])
        self._proc = spawn(argv, self.log, env=env)
        self.cgroups.adopt(self._proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ContainerRuntimeError(f"containerd exited:\n{tail(self.log)}")
            if self.socket.exists() and self.crictl_ok("info"):
                return self
            time.sleep(0.2)
        raise ContainerRuntimeError(f"containerd not ready after {timeout}s:\n{tail(self.log)}")

    # ---- clients

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        argv = [str(self.bin_dir / "ctr"), "--address", str(self.socket), "-n", CRI_NAMESPACE]
        return _run([*argv, *args], timeout)

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
        return _run([*argv, *args], timeout + 5)

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
        the task state (runc's and the shims', under /run on a real host) gone. The root
        (images, snapshots, the metadata of every sandbox and container) stays, so the next
        containerd reports them exited, as after a reboot."""
        kill(self._proc, grace=0.0)
        self._proc = None
        for sub in ("state", "runc"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)

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
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise ContainerRuntimeError(f"{Path(argv[0]).name} {' '.join(argv[1:4])}: timed out") from e
    if r.returncode != 0:
        raise ContainerRuntimeError(f"{Path(argv[0]).name} {argv[-1]}: {r.stderr.strip()[-2000:]}")
    return r.stdout
