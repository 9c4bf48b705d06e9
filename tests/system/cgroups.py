"""The node's own cgroup subtree.

The kubelet (cgroupfs driver, ``cgroupRoot``) puts every pod under one cgroup of our choosing
instead of the machine's ``/kubepods``, and containerd, its shims and the kubelet are moved into
it too. So everything the node started is found, killed and removed by walking one subtree,
also after a crash, and several checkouts on one machine never share pod cgroups.
Only cgroup v1 (the machines' kind) and hybrid layouts are handled.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
# The hierarchy used to find every process of the node (each v1 hierarchy lists them all).
PIDS = "pids"


class CgroupRoot:
    """``/<name>`` in every mounted cgroup v1 hierarchy (``cpu``, ``memory``, ...); with
    ``unified``, in the v2 hierarchy of a hybrid layout too (a node whose init is systemd: its
    cgroup namespace is rooted here in every hierarchy, so all it makes is below)."""

    def __init__(self, name: str, fs: Path = CGROUP_FS, unified: bool = False) -> None:
        self.name = name.strip("/")
        self.fs = fs
        self.unified = unified

    @property
    def path(self) -> str:
        """The kubelet's ``cgroupRoot``."""
        return f"/{self.name}"

    def hierarchies(self) -> list[Path]:
        """The v1 hierarchies: directories of the cgroup fs holding a ``cgroup.procs`` (and
        with ``unified``, the hybrid layout's v2 one)."""
        return sorted(
            h
            for h in self.fs.iterdir()
            if not h.is_symlink()
            and (h / "cgroup.procs").exists()
            and (self.unified or h.name != "unified")
        )

    def dirs(self) -> list[Path]:
        """The root in every hierarchy."""
        return [h / self.name for h in self.hierarchies()]

    def create(self) -> CgroupRoot:
        for h in self.hierarchies():
            d = h / self.name
            d.mkdir(exist_ok=True)
            if h.name == "cpuset":  # a new cpuset is empty: no process could run in it
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((h / f).read_text())
        return self

    def adopt(self, pid: int, child: str = "node") -> None:
        """Move ``pid`` (and so its future children) into ``<root>/<child>``."""
        for h in self.hierarchies():
            d = h / self.name / child
            d.mkdir(exist_ok=True)
            if h.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((h / self.name / f).read_text())
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        base = self.fs / PIDS / self.name
        if not base.is_dir():
            return found
        for dirpath, _, files in os.walk(base):
            if "cgroup.procs" in files:
                try:
                    text = (Path(dirpath) / "cgroup.procs").read_text()
                except OSError:
                    continue
                found.update(int(p) for p in text.split())
        return found

    def kill_all(self, timeout: float = 10.0) -> set[int]:
        """SIGKILL every process in the subtree until none is left; returns the pids killed."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return killed

    def remove(self) -> list[str]:
        """rmdir the subtree, deepest first, in every hierarchy; returns what could not go."""
        stuck: list[str] = []
        for h in self.hierarchies():
            base = h / self.name
            if not base.is_dir():
                continue
            for dirpath, _, _ in sorted(os.walk(base), key=lambda w: -w[0].count("/")):
                for _ in range(20):  # a cgroup whose last task just died may be busy briefly
                    try:
                        os.rmdir(dirpath)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.05)
                else:
                    stuck.append(dirpath)
        return stuck


def stale_roots(prefix: str, fs: Path = CGROUP_FS) -> list[CgroupRoot]:
    """Roots named ``<prefix>*`` left by an earlier run that died without cleaning up."""
    base = fs / PIDS
    if not base.is_dir():
        return []
    return [CgroupRoot(d.name, fs) for d in sorted(base.iterdir()) if d.name.startswith(prefix)]
