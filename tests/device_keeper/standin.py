"""A stand-in for a running container: a process in a mount namespace of its own, chrooted
into a scratch root whose /dev is a private tmpfs holding `/dev/edgefd/<name>` (the node the
runtime made from the DeviceSpec or CDI spec), optionally in a cgroup and as another user.

    python -m tests.device_keeper.standin ROOT NAME MAJOR:MINOR [--uid N] [--cgroup-procs F]
                                          [--path /dev/bus/usb/002/005]

`--path`: where the node is instead (a device given without the bus mount, at its bus path;
a PCI device at its own name).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time

CLONE_NEWNS = 0x00020000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("name")
    p.add_argument("node")
    p.add_argument("--uid", type=int, default=0)
    p.add_argument("--cgroup-procs", action="append", default=[])
    p.add_argument("--path", default="")
    a = p.parse_args()
    for f in a.cgroup_procs:
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) != 0:
        sys.exit(f"unshare: {os.strerror(ctypes.get_errno())}")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    dev = os.path.join(a.root, "dev")
    os.makedirs(dev, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", dev], check=True)
    os.mkdir(os.path.join(dev, "edgefd"))
    major, minor = (int(x) for x in a.node.split(":"))
    path = (
        os.path.join(a.root, a.path.lstrip("/")) if a.path else os.path.join(dev, "edgefd", a.name)
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mknod(path, 0o20000 | 0o660, os.makedev(major, minor))
    os.chmod(path, 0o660)
    os.chroot(a.root)
    os.chdir("/")
    if a.uid:
        os.setgid(a.uid)
        os.setuid(a.uid)
    print("ready", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
