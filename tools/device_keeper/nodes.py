"""Making a running container's own path for a device node (devplugin's: `/dev/edgefd/<name>`
for a USB device beside the host's bus, the node's own path otherwise) name its new node, in
the container's mount namespace, and taking away a stale node the runtime or the keeper made
where the path moved with the number (a USB device given at its bus path).

The container's root is reached through `/proc/<pid>/root` of one of its processes, and every
path under it is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS): the container owns that tree, so a symlink it planted (`/dev/edgefd`
-> `/host/etc`) or a `..` cannot make the keeper create a node outside it. The new node is made
beside the old one under a temporary name with the old one's mode and owner, then renamed
over it: the path names the old node or the new one, never nothing. A path that is not a
device node, or that names a node other than the old or the new one, is left alone.

Whatever the container made of its own /dev (a directory at the temporary name, `chmod 000
/dev/edgefd`, a name swapped mid-way) is a NodeNotReplaced for that container, never an
exception that escapes: the keeper serves every container of the node from one worker, and
one container must not be able to stop it for the others.

No setns: a thread of a multi-threaded process cannot enter another mount namespace, and the
directory fd of the container's /dev is all mknodat/renameat need. Where a container has the
host's /dev/bus/usb bind-mounted read-only (a USB device given beside the bus, the default),
libusb's `/dev/bus/usb/BBB/DDD` needs nothing here: the new node exists there already. Without
the bind (`usb_bus_mount: false`) the node is the container's own, at its bus path, and moves
with the number: made at the new path, the old one removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from edgefd.core.errors import EdgefdError

from .rules import DeviceNumber

SYS_OPENAT2 = 437  # the same number on every architecture (new syscalls are unified)
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_IN_ROOT = 0x02, 0x04, 0x10
_libc = ctypes.CDLL(None, use_errno=True)


class NodeNotReplaced(EdgefdError):
    """The container's path was left as it is (said why)."""


@dataclass(frozen=True)
class Replaced:
    pid: int
    path: str
    old: DeviceNumber | None  # what the path named before (None: it did not exist)
    new: DeviceNumber

    @property
    def changed(self) -> bool:
        return self.old != self.new


def openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    how = struct.pack("<QQQ", flags | os.O_CLOEXEC, 0, resolve)
    buf = ctypes.create_string_buffer(how, len(how))
    fd = _libc.syscall(
        SYS_OPENAT2, ctypes.c_int(dirfd), os.fsencode(path), buf, ctypes.c_size_t(len(how))
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


@contextlib.contextmanager
def _fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def _node_of(st: os.stat_result) -> DeviceNumber | None:
    if stat.S_ISCHR(st.st_mode):
        return DeviceNumber("c", os.major(st.st_rdev), os.minor(st.st_rdev))
    if stat.S_ISBLK(st.st_mode):
        return DeviceNumber("b", os.major(st.st_rdev), os.minor(st.st_rdev))
    return None


@contextlib.contextmanager
def _parent(
    pid: int, path: str, proc: str, check: Callable[[], None] | None = None
) -> Iterator[tuple[int, str]]:
    """(fd of the directory of `path` in the container of `pid`, the file's name). `check`
    runs once the root is open (it raises if `pid` is not the process meant: a reused pid)."""
    parent, _, name = path.rstrip("/").rpartition("/")
    if not path.startswith("/") or not name or name in (".", ".."):
        raise NodeNotReplaced(f"{path!r} is not an absolute path to a file")
    resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
    try:
        root = os.open(f"{proc}/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise NodeNotReplaced(f"process {pid}: cannot open its root ({e.strerror})") from None
    with _fd(root):
        if check is not None:
            check()
        try:
            dfd = openat2(root, parent.lstrip("/") or ".", os.O_PATH | os.O_DIRECTORY, resolve)
        except OSError as e:
            why = "a symlink on the way" if e.errno == errno.ELOOP else e.strerror
            raise NodeNotReplaced(f"process {pid}: {parent}: {why}") from None
        with _fd(dfd):
            yield dfd, name


def replace(
    pid: int,
    path: str,
    new: DeviceNumber,
    old: DeviceNumber | None,
    proc: str = "/proc",
    check: Callable[[], None] | None = None,
    like: os.stat_result | None = None,
) -> Replaced:
    """Make `path` (absolute, inside the container of `pid`) the device node `new`, where it
    names `old` or is missing. Idempotent: a path already naming `new` is left as it is. A
    missing path gets the mode and owner of `like` (the node it replaces at another path)."""
    with _parent(pid, path, proc, check) as (dfd, name):
        return _swap(dfd, pid, path, name, new, old, like)


def node_stat(
    pid: int, path: str, proc: str = "/proc", check: Callable[[], None] | None = None
) -> os.stat_result | None:
    """The stat of the device node at `path` in the container of `pid` (None: missing, or not
    a device node)."""
    with _parent(pid, path, proc, check) as (dfd, name):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NodeNotReplaced(f"process {pid}: {path}: {e.strerror}; left alone") from None
        return st if _node_of(st) is not None else None


def remove(
    pid: int,
    path: str,
    numbers: set[DeviceNumber],
    proc: str = "/proc",
    check: Callable[[], None] | None = None,
) -> DeviceNumber | None:
    """Unlink `path` in the container of `pid` where it is a device node of one of `numbers`
    (a stale node the device left behind); what it named, or None when left alone."""
    with _parent(pid, path, proc, check) as (dfd, name):
        try:
            current = _node_of(os.stat(name, dir_fd=dfd, follow_symlinks=False))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NodeNotReplaced(f"process {pid}: {path}: {e.strerror}; left alone") from None
        if current is None or current not in numbers:
            return None
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NodeNotReplaced(f"process {pid}: {path}: cannot remove: {e.strerror}") from None
        return current


def current(
    pid: int, path: str, proc: str = "/proc", check: Callable[[], None] | None = None
) -> DeviceNumber | None:
    """The node `path` names in the container of `pid` (None: missing, or not a node)."""
    with _parent(pid, path, proc, check) as (dfd, name):
        try:
            return _node_of(os.stat(name, dir_fd=dfd, follow_symlinks=False))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NodeNotReplaced(f"process {pid}: {path}: {e.strerror}; left alone") from None


def _swap(
    dfd: int,
    pid: int,
    path: str,
    name: str,
    new: DeviceNumber,
    old: DeviceNumber | None,
    like: os.stat_result | None = None,
) -> Replaced:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise NodeNotReplaced(f"process {pid}: {path}: {e.strerror}; left alone") from None
    current = None if st is None else _node_of(st)
    if st is not None and current is None:
        raise NodeNotReplaced(f"process {pid}: {path} is not a device node; left alone")
    if current == new:
        return Replaced(pid, path, current, new)
    if current is not None and current != old:
        raise NodeNotReplaced(
            f"process {pid}: {path} names {current}, not the old node {old}; left alone"
        )
    template = st if st is not None else like
    mode = stat.S_IMODE(template.st_mode) if template is not None else 0o660
    kind = stat.S_IFCHR if new.type == "c" else stat.S_IFBLK
    tmp = f".{name}.edgefd-keeper"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)  # left by a keeper that stopped half-way
    except OSError as e:  # a directory there, an unsearchable /dev/edgefd: the container's
        raise NodeNotReplaced(
            f"process {pid}: {path}: cannot clear the temporary name {tmp}: {e.strerror}; "
            "left alone"
        ) from None
    try:
        # the old node's mode exactly: not narrowed by our umask (no fchmodat without
        # following symlinks on Linux, and the container could swap the name for one)
        mask = os.umask(0)
        try:
            os.mknod(tmp, kind | mode, new.rdev, dir_fd=dfd)
        finally:
            os.umask(mask)
        owner = (template.st_uid, template.st_gid) if template is not None else None
        if owner is not None and owner != (os.geteuid(), os.getegid()):
            os.chown(tmp, *owner, dir_fd=dfd, follow_symlinks=False)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise NodeNotReplaced(f"process {pid}: {path}: cannot create {new}: {e.strerror}") from None
    return Replaced(pid, path, current, new)
