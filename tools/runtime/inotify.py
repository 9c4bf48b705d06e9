"""A minimal inotify(7) binding shared by the tools that watch a directory.

The device plugin watches the kubelet's plugin directory and the feature sink watches
features.d. Both want the same thing, so it lives here once:

* no dependency: libc is reached through ctypes, nothing to install or build;
* a non-blocking, close-on-exec fd: callers put `fileno()` in their own select()/poll() next
  to their stop pipe and call `read()` when it is readable; `read()` never blocks;
* unsupported is an OSError: `Inotify()` raises OSError where inotify cannot be had (not
  Linux, no libc symbol, out of instances) and `add_watch()` raises OSError for a path that
  cannot be watched (missing, not a directory with IN_ONLYDIR). Callers catch it and fall
  back to polling the directory (the device plugin turns it into None, the sink into a
  warning; both then poll).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from typing import NamedTuple

# <sys/inotify.h>
IN_ACCESS = 0x00000001
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_CLOSE_NOWRITE = 0x00000010
IN_OPEN = 0x00000020
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (name follows, NUL-padded)
_READ_SIZE = 64 * 1024  # holds > 4,000 events; a full queue is drained over several reads


class Event(NamedTuple):
    wd: int  # the watch descriptor add_watch() returned (-1 for IN_Q_OVERFLOW)
    mask: int
    name: str  # entry name inside the watched directory; "" for events on the directory


_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL:
    """Our own CDLL handle (argtypes set on it cannot clash with anyone else's)."""
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        try:
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_init1.restype = ctypes.c_int
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_add_watch.restype = ctypes.c_int
        except AttributeError as e:  # a libc without inotify (not Linux)
            raise OSError(errno.ENOSYS, f"inotify unsupported: {e}") from None
        _libc = libc
    return _libc


class Inotify:
    """One inotify instance: a non-blocking fd with any number of watches on it.

    Raises OSError when inotify is unavailable; see the module docstring.
    """

    def __init__(self) -> None:
        libc = _load_libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._libc = libc
        self._fd = fd

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watch `path` for `mask`; return the watch descriptor. OSError if it cannot."""
        self._check_open()
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {os.fspath(path)}: {os.strerror(err)}")
        return wd

    def read(self) -> list[Event]:
        """The events one read() returns; [] when none are pending (never blocks).

        At most 64 KiB per call: a caller that wants everything calls again until [].
        """
        self._check_open()
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
                break
            except BlockingIOError:
                return []
            except InterruptedError:
                continue
        out: list[Event] = []
        off = 0
        while off + _EVENT_HEADER.size <= len(data):
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, off)
            start = off + _EVENT_HEADER.size
            raw = data[start : start + length]
            out.append(Event(wd, mask, os.fsdecode(raw.split(b"\0", 1)[0])))
            off = start + length
        return out

    def fileno(self) -> int:
        """The fd to select()/poll() on; -1 once closed."""
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        """Release the fd (and with it every watch). Idempotent."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _check_open(self) -> None:
        if self._fd < 0:
            raise OSError(errno.EBADF, "inotify instance is closed")

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Inotify fd={self._fd}>"
