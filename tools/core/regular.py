"""Reading a file that lives where others can write: the one bounded, non-blocking reader of
edgefd's own state (the inventory's state file, the DRA checkpoint, CDI specs), of
features.d, and of every configuration file a tool is given (schema.read_text, the
configuration watch).

Such a directory is on the host and shared: a FIFO planted there blocks a plain open() for
ever (and a signal handler that only sets a flag cannot end that wait), a symlink makes the
reader read, and quote, a file elsewhere, /dev/zero or a huge file exhausts memory. So the
file is opened with O_NOFOLLOW | O_NONBLOCK (a FIFO opens at once, a symlink fails), checked
with fstat on the opened descriptor (no race between a check and the open), and at most
`limit` + 1 bytes are read. Anything but a regular file within the limit is `Refused`, with a
short phrase for a log line; a missing file is FileNotFoundError, so the caller decides what
"none yet" means.

A configuration file is the one kind read through symlinks (`follow=True`): a ConfigMap volume
is made of them (`resources.yaml -> ..data/resources.yaml`), and the operator chose the path.
What it leads to is checked all the same: a FIFO at `..data/resources.yaml` would otherwise
block every later reload for ever, silently.
"""

from __future__ import annotations

import errno
import os
import stat

_FOLLOW_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_FLAGS = _FOLLOW_FLAGS | os.O_NOFOLLOW


class Refused(Exception):
    """Not read: `kind` is "symlink", "not-regular", "too-large" or "error"; the message
    is a phrase (`a symlink`, `a FIFO, not a regular file`, `larger than N bytes`)."""

    def __init__(self, kind: str, message: str, size: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.size = size


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def read_regular(
    path: str | os.PathLike[str],
    limit: int,
    *,
    dir_fd: int | None = None,
    follow: bool = False,
) -> tuple[bytes, os.stat_result]:
    """(content, fstat) of the regular file at `path` (relative to `dir_fd` if given;
    through symlinks with `follow`). FileNotFoundError when it is missing; Refused for
    anything else that is not read."""
    try:
        fd = os.open(path, _FOLLOW_FLAGS if follow else _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused("symlink", "a symlink") from None
        raise Refused("error", f"cannot be opened ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not-regular", f"{kind_of(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise Refused("too-large", f"larger than {limit} bytes", st.st_size)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise Refused("error", f"cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # grew while being read
        raise Refused("too-large", f"larger than {limit} bytes (still growing?)", len(data))
    return data, st
