"""A real systemd (the distribution's own: Debian's /lib/systemd/systemd) as the init of the
test node, for the nodes that use the systemd cgroup driver (layouts.py): the kubelet with
``cgroupDriver: systemd`` and containerd's runc with ``SystemdCgroup = true`` ask it for their
slices and scopes over its private D-Bus socket, as on a k3s or kubeadm node.

It must never reach the machine (/work/shared/real-node-recipe/systemd-node.md says what a
plain `systemd` in a PID namespace did here: it emptied the machine's /tmp with
`systemd-tmpfiles --remove`, remounted the host's /sys/fs/cgroup read-only and made cgroups at
the roots of its hierarchies). So it runs:

* in a mount namespace of its own, a copy of the node's (the node's scratch /var/lib,
  /var/log, /run and its /dev overlay), with private tmpfs /tmp and /var/tmp, and without the
  machine's /sys/fs/cgroup (it mounts its own, in its cgroup namespace); of the machine's
  /tmp it sees only the directories named in ``keep`` (the test's own: its node's files and
  the host tree), moved onto the new tmpfs at the same paths;
* in a cgroup namespace rooted at the node's own cgroup (cgroups.CgroupRoot), so every
  cgroup it makes is under the node's subtree and goes with it;
* in PID, UTS, IPC and network namespaces of its own (the kubelet and containerd join its
  mount, PID and cgroup namespaces but keep the machine's network: the control plane and the
  pods' host network are on its loopback);
* with a unit path whose first directory masks every tmpfiles unit and names a target that
  pulls in nothing (``node-min.target``), so it starts the manager alone.

`start` returns once `systemctl is-system-running` answers inside; `stop` kills it (PID 1 of
its namespace: every process in it goes too).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.peers.processes import kill, spawn, tail

SYSTEMD = "/lib/systemd/systemd"
TARGET = "node-min.target"
MASKED = (
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-setup-dev-early.service",
    "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer",
)


class NodeInitError(RuntimeError):
    pass


class NodeInit:
    """systemd as PID 1 of the node's namespaces, started from inside the node's mount
    namespace (``enter``: the argv prefix that joins it) and its cgroup ``cgroup_dirs`` (the
    node's root in every hierarchy, on the machine)."""

    def __init__(
        self,
        workdir: Path,
        enter: list[str],
        cgroup_dirs: list[Path],
        overrides: str = "",
        keep: tuple[Path, ...] = (),
        net: bool = False,
    ) -> None:
        self.dir = Path(workdir)
        self.net = net  # the node's processes join its network namespace (a second node)
        self.keep = keep
        self.enter = enter
        self.cgroup_dirs = cgroup_dirs
        self.overrides = overrides  # shell lines re-made after the new /proc (sysctl views)
        self.log = self.dir / "systemd.log"
        self._proc: subprocess.Popen | None = None
        self.pid: int | None = None  # systemd's, as the machine numbers it

    def _units(self) -> Path:
        units = self.dir / "units"
        units.mkdir(parents=True, exist_ok=True)
        (units / TARGET).write_text("[Unit]\nDescription=test node: the manager only\n")
        for u in MASKED:
            link = units / u
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        return units

    def _script(self, units: Path) -> str:
        held = [(k, f"/run/edgefd-node-keep/{n}") for n, k in enumerate(self.keep)]
        inner = "\n".join(
            [
                "set -eu",
                "mount --make-rprivate /",
                *[f"mkdir -p {h} && mount --rbind {k} {h}" for k, h in held],
                # never the machine's: systemd empties /tmp at boot (tmpfiles, masked anyway)
                "mount -t tmpfs -o mode=1777 tmpfs /tmp",
                "mount -t tmpfs -o mode=1777 tmpfs /var/tmp",
                *[f"mkdir -p {k} && mount --move {h} {k}" for k, h in held],
                # the machine's cgroup tree out of sight: systemd mounts its own, namespaced
                "umount -R /sys/fs/cgroup",
                # the views of the kernel's settings the kubelet checks (node.py), again over
                # this namespace's own /proc
                self.overrides,
                f"export container=other SYSTEMD_UNIT_PATH={units}:",
                f"exec {SYSTEMD} --system --unit={TARGET}",
            ]
        )
        join = " ; ".join(
            f"echo $$ > {d}/cgroup.procs 2>/dev/null || true" for d in self.cgroup_dirs
        )
        argv = "unshare --fork --pid --mount-proc --cgroup --net --uts --ipc -- sh -c"
        return f"{join} ; exec {argv} {_quote(inner)}"

    def start(self, timeout: float = 30.0) -> NodeInit:
        units = self._units()
        self._proc = spawn([*self.enter, "sh", "-c", self._script(units)], self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NodeInitError(f"the node's systemd exited:\n{tail(self.log)}")
            self.pid = self.pid or _child(self._proc.pid)
            if self.pid is not None:
                r = subprocess.run(
                    self.argv(["systemctl", "is-system-running"]),
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
                if r.stdout.strip() in ("running", "degraded"):
                    self._mount_missing()
                    if self.net:  # its loopback is the node's: the pods' host network
                        subprocess.run(self.argv(["ip", "link", "set", "lo", "up"]), timeout=10)
                    return self
            time.sleep(0.2)
        self.stop()
        raise NodeInitError(f"the node's systemd did not come up in {timeout}s:\n{tail(self.log)}")

    def _mount_missing(self) -> None:
        """The machine's v1 hierarchies that systemd did not mount in the node. It mounts
        `cpu,cpuacct` (and `net_cls,net_prio`) as one hierarchy; a kernel that has them apart
        (these machines: `cpu` and `cpuacct` are hierarchies of their own) cannot, and the
        kubelet refuses to start without cpu and cpuacct. So each is mounted at its own name
        in systemd's cgroup tmpfs (its own, in this mount namespace: never the machine's),
        in the node's cgroup namespace, as the machine has it."""
        names = sorted({d.parent.name for d in self.cgroup_dirs} - {"unified", "systemd"})
        lines = ["set -e", "mount -o remount,rw /sys/fs/cgroup"]
        for n in names:
            d = f"/sys/fs/cgroup/{n}"
            lines.append(
                f"mountpoint -q {d} || {{ rm -f {d}; mkdir -p {d}; "
                f"mount -t cgroup -o {n} cgroup {d}; }}"
            )
        lines.append("mount -o remount,ro /sys/fs/cgroup")
        r = subprocess.run(
            self.argv(["sh", "-c", "\n".join(lines)]), capture_output=True, text=True, timeout=30
        )
        if r.returncode != 0:
            self.stop()
            raise NodeInitError(f"mounting the node's cgroup hierarchies: {r.stderr.strip()}")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def ns_path(self) -> str:
        if self.pid is None or not self.running:
            raise NodeInitError("the node's systemd is not running")
        return f"/proc/{self.pid}/ns/mnt"

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run in the node: systemd's mount, PID and cgroup namespaces, the
        machine's network (``net``: systemd's)."""
        if self.pid is None:
            raise NodeInitError("the node's systemd is not running")
        net = ["-n"] if self.net else []
        return ["nsenter", "-t", str(self.pid), "-m", "-p", "-C", *net, "--", *argv]

    def systemctl(self, *args: str) -> str:
        r = subprocess.run(
            self.argv(["systemctl", *args]), capture_output=True, text=True, timeout=60
        )
        if r.returncode != 0:
            raise NodeInitError(f"systemctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def owns(self, pid: int) -> bool:
        """Whether `pid` is the init's own (the wrapper, systemd, a process of its units),
        not one the node's kubelet or runtime started."""
        if pid in (self.pid, self._proc.pid if self._proc is not None else None):
            return True
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return False
        return any("/init.scope" in ln or "/system.slice" in ln for ln in lines)

    def stop(self) -> None:
        """Kill it: PID 1 of its namespace, every process there goes with it."""
        kill(self._proc, grace=0.0)
        self._proc, self.pid = None, None


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def _child(pid: int) -> int | None:
    """systemd's PID, once it runs: the child that `unshare --fork` (the spawned process, by
    exec) made, once that child exec'd systemd."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        comm = Path(f"/proc/{kids[0]}/comm").read_text().strip() if kids else ""
    except OSError:
        return None
    return int(kids[0]) if comm == "systemd" else None
