"""What a file is, beyond its name: the filesystem it lives on (inotify sees nothing on sysfs),
and its identity (a socket deleted and created again is another socket, even at the same
inode number)."""

from __future__ import annotations

import os

FileIdentity = tuple[int, int]


def filesystem_type(path: str | os.PathLike[str]) -> str | None:
    """The type of the filesystem `path` is on (`sysfs`, `ext4` ...), from /proc/self/mountinfo,
    or None when it cannot be told. Decides whether inotify can see anything there."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, fstype = mount, right.split()[0]
    return fstype


def file_identity(path: str) -> FileIdentity | None:
    """(inode, ctime) of a file, or None: a recreated file differs even if its inode number
    was reused, which filesystems do readily for a file deleted and created again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)
