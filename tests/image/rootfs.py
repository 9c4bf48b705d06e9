"""Run a command inside an image's root filesystem the way the DaemonSet's containers run:
as the container's uid with no capabilities, on a read-only root, with the image's environment.

No container engine: `unshare --mount` gives the process a private mount namespace (nothing
it mounts is seen outside, and it all goes away with it), the extracted root is bind-mounted
read-only over itself with /proc, /dev and the test's directories mounted in, then `chroot` and
the image's own `setpriv` drop to the uid and clear every capability set. A foreign
architecture's binaries run under qemu-user through binfmt_misc (registered with the F flag, so
no qemu is needed inside the root).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MOUNT = r"""
set -eu
root=$1; shift
mount --bind "$root" "$root"
while [ "$1" != -- ]; do
  mount --bind "$1" "$root$2"
  [ "$3" = ro ] && mount -o remount,bind,ro "$root$2"
  shift 3
done
shift
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -o remount,bind,ro "$root"
exec chroot "$root" "$@"
"""


@dataclass(frozen=True)
class Mount:
    host: Path
    at: str  # absolute path inside the image
    writable: bool = False


class ImageRoot:
    """An extracted image (`rootfs`) with its OCI image config (`config`)."""

    def __init__(self, rootfs: Path, config: dict[str, Any]) -> None:
        self.rootfs = rootfs
        self.config = config
        cfg = config.get("config", {})
        self.env = dict(e.split("=", 1) for e in cfg.get("Env", []))
        self.user = cfg.get("User", "0")
        self.workdir = cfg.get("WorkingDir") or "/"
        self.arch = config["architecture"]

    def argv(
        self,
        cmd: list[str],
        mounts: list[Mount] = (),  # type: ignore[assignment]
        uid: int | None = None,
        env: dict[str, str] | None = None,
    ) -> list[str]:
        """The host command line that runs `cmd` in the image."""
        user = str(uid) if uid is not None else self.user
        u, _, g = user.partition(":")
        g = g or u
        spec: list[str] = []
        for m in mounts:
            at = self.resolve(m.at)
            at.mkdir(parents=True, exist_ok=True)
            spec += [
                str(m.host),
                "/" + str(at.relative_to(self.rootfs)),
                "rw" if m.writable else "ro",
            ]
        full_env = {**self.env, **(env or {})}
        inner = [
            *("/usr/bin/setpriv", f"--reuid={u}", f"--regid={g}", "--clear-groups"),
            *("--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"),
            *("/usr/bin/env", "-i", *(f"{k}={v}" for k, v in full_env.items())),
            *("sh", "-c", f'cd {shlex.quote(self.workdir)} && exec "$@"', "sh", *cmd),
        ]
        return [
            *("unshare", "--mount", "--propagation", "private"),
            *("sh", "-c", _MOUNT, "sh", str(self.rootfs), *spec, "--", *inner),
        ]

    def resolve(self, path: str) -> Path:
        """Where `path` of the image is on the host, following the image's symlinks inside the
        root (Debian's /var/run -> /run would otherwise lead to the host's /run)."""
        here = self.rootfs
        todo = [p for p in path.split("/") if p]
        hops = 0
        while todo:
            part = todo.pop(0)
            if part == "..":
                here = here.parent if here != self.rootfs else here
                continue
            nxt = here / part
            if nxt.is_symlink():
                hops += 1
                assert hops < 40, f"symlink loop at {path}"
                target = str(nxt.readlink())
                if target.startswith("/"):
                    here = self.rootfs
                todo = [p for p in target.split("/") if p] + todo
                continue
            here = nxt
        return here

    def run(
        self,
        cmd: list[str],
        mounts: list[Mount] = (),  # type: ignore[assignment]
        uid: int | None = None,
        env: dict[str, str] | None = None,
        stdin: str = "",
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(cmd, mounts, uid, env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(
        self,
        cmd: list[str],
        mounts: list[Mount] = (),  # type: ignore[assignment]
        uid: int | None = None,
        env: dict[str, str] | None = None,
        **kw: Any,
    ) -> subprocess.Popen[str]:
        """Started in its own session: every process of it can be signalled as a group."""
        return subprocess.Popen(
            self.argv(cmd, mounts, uid, env), text=True, start_new_session=True, **kw
        )


def can_run_as_root() -> bool:
    return os.geteuid() == 0
