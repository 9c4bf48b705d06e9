"""Publishing a producer's feature file: the one way every producer writes (or, in a dry run,
prints) its labels.

Writing is atomic and idempotent, because a reader (the sink, or NFD's fsnotify watch) may look
at the directory at any instant and a half-written file would look like "all labels gone"; an
unchanged file is not touched, so a watch loop rewriting every few seconds causes no events.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import OutputError
from .featuresd import render
from .output import write_stdout


def _same_content(path: Path, data: bytes) -> bool:
    """Whether `path` already holds exactly `data`; OutputError unless it is a regular file
    or absent (a FIFO there would block a plain open() for ever, a symlink could point a
    producer's write anywhere)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise OutputError(f"{path} is {kind}; refusing to write there")
    if st.st_size != len(data):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(len(data) + 1) == data
    except OSError:
        return False


def write_atomic(path: Path, data: bytes) -> bool:
    """Replace `path` with `data` atomically; return False (and touch nothing) if unchanged.

    The temp file is a dot-file in the same directory, so readers skip it and the rename stays
    on one filesystem; it is fsynced before the rename and the directory after, so a crash
    leaves either the old or the new file, never a truncated one. OSError on failure.
    """
    path = Path(path)
    if _same_content(path, data):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # lazy: a dry run never writes

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


class Publisher:
    """Where one producer's labels go: its own file in features.d, or stdout in a dry run.

    A dry run prints exactly the bytes that would be written, every time it is asked to
    publish (a watch loop asks only when they changed), so `usb-scan --watch --dry-run | ...`
    streams each new file version.
    """

    def __init__(self, directory: str | os.PathLike[str], producer: str, dry_run: bool) -> None:
        self.path = Path(directory) / producer
        self.producer = producer
        self.dry_run = dry_run

    def render(self, labels: Mapping[str, str]) -> bytes:
        return render(labels, self.producer)

    def publish(self, labels: Mapping[str, str]) -> bool:
        """Write (or print) the file; True when it changed. OutputError when it cannot."""
        data = self.render(labels)
        if self.dry_run:
            write_stdout(data)
            return True
        try:
            return write_atomic(self.path, data)
        except OSError as e:
            raise OutputError(f"cannot write {self.path}: {e.strerror or e}") from None
