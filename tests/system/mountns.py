"""The node's private mount namespace.

The kubelet hard-codes ``/var/lib/kubelet`` (device-plugins socket, pod volumes) and writes
``/var/log/pods``; containerd puts shim sockets under ``/run/containerd``; the sample node's
device nodes must exist under ``/dev``. None of that may touch the machine, so containerd and
the kubelet run in a mount namespace of their own in which ``/var/lib``, ``/var/log`` and
``/run`` are bind mounts of empty scratch directories and ``/dev`` is an overlay of the machine's
``/dev`` whose writes land in scratch; so is any directory named ``writable`` (a distribution's
layout that writes under ``/var/snap`` or ``/etc/k0s``: layouts.py). The namespace is held by
one ``sleep`` process; every other process joins it with ``nsenter``. When the last process in
it exits, its mounts are gone.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tests.peers.processes import kill, spawn, tail

if TYPE_CHECKING:
    from .systemd import NodeInit

# Submounts of /dev that the overlay must carry over (a mount does not see through to them).
DEV_SUBMOUNTS = ("pts", "shm", "mqueue", "hugepages")
UW = ("upper", "work")  # an overlay's two scratch directories


def _name(target: str) -> str:
    """The scratch directory of a path inside the namespace (/var/snap: var-snap)."""
    return target.strip("/").replace("/", "-")


def tmp_dirs(*paths: Path) -> tuple[Path, ...]:
    """The directories right under the machine's /tmp or /var/tmp that hold `paths` (what a
    namespace with a private /tmp must still be shown of them)."""
    out = []
    for p in paths:
        parts = Path(p).resolve().parts
        for n in (2, 3):
            if len(parts) > n and "/".join(parts[1:n]) in ("tmp", "var/tmp"):
                out.append(Path(*parts[: n + 1]))
                break
    return tuple(dict.fromkeys(out))


class MountNamespaceError(RuntimeError):
    pass


class MountNamespace:
    """A private mount namespace with scratch ``/var/lib``, ``/var/log``, ``/run`` and an
    overlay ``/dev``. ``extra_binds`` maps a path inside the namespace (under one of those
    scratch directories) to a host directory bind-mounted there; ``file_overrides`` maps a
    file inside the namespace (such as one under /proc/sys) to the content it shows instead,
    read-only, so a process in the namespace sees that value and cannot change the machine's."""

    def __init__(
        self,
        workdir: Path,
        extra_binds: dict[str, Path] | None = None,
        file_overrides: dict[str, str] | None = None,
        writable: tuple[str, ...] = (),
        scratch: tuple[str, ...] = (),
        net: bool = False,
    ) -> None:
        self.dir = Path(workdir)
        # a network namespace of its own too (a second node on the machine: its pods' host
        # network, the kubelet's and the runtime's ports, are its own loopback)
        self.net = net
        self.extra_binds = dict(extra_binds or {})
        self.file_overrides = dict(file_overrides or {})
        self.writable = writable
        # scratch binds made inside a ``writable`` overlay (an overlay cannot be the upper
        # layer of the container runtime's own overlay mounts: runtime roots need a bind)
        self.scratch = scratch
        self.log = self.dir / "mountns.log"
        self._holder: subprocess.Popen | None = None
        self.init: NodeInit | None = None  # a systemd as the node's init (start_init)

    def _script(self) -> str:
        d = self.dir
        lines = ["set -eu"]
        if self.net:
            lines.append("ip link set lo up")
        # first, so that the scratch binds below land on top of them
        for target in self.writable:
            name = target.strip("/").replace("/", "-")
            lines.append(
                f"mount -t overlay overlay -o lowerdir={target},upperdir={d / name}-upper,"
                f"workdir={d / name}-work {target}"
            )
        for target in ("/var/lib", "/var/log", "/run"):
            lines.append(f"mount --bind {d / target.strip('/').replace('/', '-')} {target}")
        for target in self.scratch:
            lines.append(f"mkdir -p {target} && mount --bind {d / _name(target)} {target}")
        merged = d / "dev-merged"
        lines.append(
            f"mount -t overlay overlay -o lowerdir=/dev,upperdir={d / 'dev-upper'},"
            f"workdir={d / 'dev-work'} {merged}"
        )
        for sub in DEV_SUBMOUNTS:
            lines.append(
                f"if mountpoint -q /dev/{sub}; then mount --rbind /dev/{sub} {merged}/{sub}; fi"
            )
        lines.append(f"mount --move {merged} /dev")
        for inside, host in self.extra_binds.items():
            lines.append(f"mkdir -p {inside} && mount --bind {host} {inside}")
        for n, inside in enumerate(self.file_overrides):
            src = d / "overrides" / str(n)
            lines.append(f"mount --bind {src} {inside} && mount -o remount,bind,ro {inside}")
        lines += ["echo ready", "exec sleep infinity"]
        return "\n".join(lines)

    def start(self, timeout: float = 10.0) -> MountNamespace:
        overlays = [f"{_name(w)}-{s}" for w in self.writable for s in UW]
        scratch = [_name(t) for t in self.scratch]
        for sub in (
            "var-lib",
            "var-log",
            "run",
            "dev-upper",
            "dev-work",
            "dev-merged",
            *overlays,
            *scratch,
        ):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "overrides").mkdir(exist_ok=True)
        for n, content in enumerate(self.file_overrides.values()):
            (self.dir / "overrides" / str(n)).write_text(content)
        net = ["--net"] if self.net else []
        argv = ["unshare", "--mount", *net, "--propagation", "private", "--", "sh", "-c"]
        self._holder = spawn([*argv, self._script()], self.log, stdout=subprocess.PIPE)
        assert self._holder.stdout is not None
        ready, _, _ = select.select([self._holder.stdout], [], [], timeout)
        line = self._holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.stop()
            raise MountNamespaceError(f"mount namespace did not come up:\n{tail(self.log)}")
        return self

    def outside(self, inside: str) -> Path:
        """Where a path under one of the namespace's scratch directories is on the machine."""
        for target in ("/var/lib", "/var/log", "/run"):
            if inside == target or inside.startswith(target + "/"):
                rest = inside[len(target) :].lstrip("/")
                return self.dir / target.strip("/").replace("/", "-") / rest
        raise ValueError(f"{inside} is not under /var/lib, /var/log or /run")

    def start_init(self, cgroup_dirs: list[Path], keep: tuple[Path, ...] = ()) -> NodeInit:
        """A real systemd as the node's init (systemd.py), in a copy of this namespace; from
        then on every process of the node runs in its namespaces (`argv`). `keep`: the
        directories under the machine's /tmp it still sees (its own: the rest is hidden)."""
        from .systemd import NodeInit

        lines = [
            f"mount --bind {self.dir / 'overrides' / str(n)} {inside} && "
            f"mount -o remount,bind,ro {inside}"
            for n, inside in enumerate(self.file_overrides)
        ]
        init = NodeInit(
            self.dir.parent, self._enter(), cgroup_dirs, "\n".join(lines), keep, net=self.net
        )
        self.init = init.start()
        return init

    def stop_init(self) -> None:
        """The node's init killed (a power cut, the teardown): with it every process it holds
        and every mount its namespace had."""
        if self.init is not None:
            self.init.stop()
        self.init = None

    @property
    def _holder_pid(self) -> int:
        if self._holder is None or self._holder.poll() is not None:
            raise MountNamespaceError("the mount namespace is not running")
        return self._holder.pid

    def _enter(self) -> list[str]:
        pid = self._holder_pid
        net = [f"--net=/proc/{pid}/ns/net"] if self.net else []
        return ["nsenter", f"--mount=/proc/{pid}/ns/mnt", *net, "--"]

    @property
    def net_ns_path(self) -> str:
        """The network namespace the node's processes run in (``net``: its own; the init's
        when it has one)."""
        if not self.net:
            return "/proc/self/ns/net"
        if self.init is not None and self.init.pid:
            return f"/proc/{self.init.pid}/ns/net"
        return f"/proc/{self._holder_pid}/ns/net"

    @property
    def ns_path(self) -> str:
        if self.init is not None:
            return self.init.ns_path
        return f"/proc/{self._holder_pid}/ns/mnt"

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (nsenter execs it: same pid, same signals); with
        an init, in its namespaces."""
        if self.init is not None:
            return self.init.argv(argv)
        return [*self._enter(), *argv]

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise MountNamespaceError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")
        return r

    def write(self, inside: str, text: str) -> None:
        """Write a file inside the namespace (atomically: a temp file renamed over it), making
        its directory; for paths that are not under a scratch bind (an overlay's)."""
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1.tmp" && mv -f "$1.tmp" "$1"'
        r = subprocess.run(
            self.argv(["sh", "-c", script, "sh", inside]),
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise MountNamespaceError(f"writing {inside}: {r.stderr.strip() or r.returncode}")

    def unmount_under(self, prefixes: tuple[str, ...]) -> list[str]:
        """Detach every mount in the namespace whose mount point starts with one of
        ``prefixes`` (the newest first); returns their mount points."""
        if self._holder is None:
            return []
        points = []
        pid = self.init.pid if self.init is not None and self.init.pid else self._holder.pid
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point.startswith(prefixes):
                points.append(point)
        points.reverse()
        for i in range(0, len(points), 100):
            self.run(["umount", "--lazy", *points[i : i + 100]], check=False)
        return points

    def stop(self) -> None:
        """Stop holding the namespace; it and its mounts vanish with its last process."""
        self.stop_init()
        kill(self._holder, grace=2.0)
        self._holder = None

    def same_as_host(self) -> bool:
        """True if the namespace is, wrongly, the host's own (a safety check before writing)."""
        return os.stat(self.ns_path).st_ino == os.stat("/proc/self/ns/mnt").st_ino
