"""What a resource's mount may reach: the host paths through which every pod given the
resource could take the node, refused by the resources config unless a mount allows it in
so many words."""

from __future__ import annotations

import posixpath
import re

# What a resource's mount may not reach without `allow_sensitive: true` (the mount then says
# plainly that the operator means it): the host's root, its kernel's views and memory, and the
# node's runtime, kubelet and systemd state and sockets, through which any pod given the
# resource could take the node. A mount of one of these, of a path under one, or of a directory
# above one is refused (a symlink on the host is not followed here: name the real path).
SENSITIVE = (
    "/proc",
    "/sys",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/boot",
    "/etc/kubernetes",
    "/var/lib/kubelet",
    "/var/lib/rancher",
    "/var/lib/k0s",
    "/var/snap/microk8s",
    "/run/containerd",
    "/run/crio",
    "/run/k3s",
    "/run/k0s",
    "/run/docker.sock",
    "/run/systemd",
    "/var/run",
    "/var/lib/containerd",
)


def sensitive(host_path: str) -> str | None:
    """`is P` or `reaches P` for the sensitive path P that `host_path` is, is under, or holds;
    None for any other path."""
    p = posixpath.normpath(re.sub("/+", "/", host_path))
    for s in SENSITIVE:
        if p == s:
            return f"is {s}"
        if p.startswith(s + "/") or s.startswith(p.rstrip("/") + "/"):
            return f"reaches {s}"
    return None
