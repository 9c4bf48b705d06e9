"""Publishing a producer's feature file: the one way every producer writes (or, in a dry run,
prints) its labels.

Writing is atomic and idempotent, because a reader (the sink, or NFD's fsnotify watch) may look
at the directory at any instant and a half-written file would look like "all labels gone"; an
unchanged file is not touched, so a watch loop rewriting every few seconds causes no events.

A feature file's temp file is made in a hidden subdirectory of features.d (STAGING): on the same
filesystem (the rename stays atomic; features.d is an emptyDir in the pod) but out of sight of a
non-recursive watch. Made in features.d itself, its creation was an event nfd-worker acted on at
once, reading the directory before the rename, and its rate limit then dropped the rename's
event (nudge.py). NFD skips dot-names and directories (source/local/local.go,
getFeaturesFromFiles and getFileContent), and so does the sink (featuresd.read_feature_files).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from .errors import OutputError, UsageError
from .nudge import Nudge
from .output import write_stdout
from .regular import Refused, read_regular


def render(labels: Mapping[str, str], producer: str | None = None) -> bytes:
    """The exact bytes a producer writes: sorted, one `key=value` a line, stable across runs."""
    lines = []
    if producer:
        lines.append(f"# written by {producer} (edgefd); rewritten on every run, do not edit")
    lines.extend(f"{k}={labels[k]}" for k in sorted(labels))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _same_content(path: Path, data: bytes, own: bool = False) -> bool:
    """Whether `path` already holds exactly `data`; OutputError unless it is a regular file
    or absent (a FIFO there would block a plain open() for ever, a symlink could point a
    producer's write anywhere), or the file is the writer's `own` (then the rename replaces
    whatever is in its place, never writing through it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode) and own:
        return False
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise OutputError(f"{path} is {kind}; refusing to write there")
    if st.st_size != len(data):
        return False
    try:
        return read_regular(path, len(data))[0] == data
    except (OSError, Refused):  # replaced meanwhile, or unreadable: write it
        return False


def features_directory(path: str | os.PathLike[str], create: bool) -> None:
    """Check, before a producer scans, that its features.d is there: UsageError (exit 2) if it
    is missing (unless `create`: then it is made, parents and all), OutputError if it is not
    a directory or cannot be made. A
    producer never makes one silently: `--features-dir /etc/kubernetes/node-feature-discovry`
    would otherwise be a directory that no reader watches, and labels that never appear."""
    if os.path.isdir(path):
        return
    if os.path.lexists(path):
        raise OutputError(f"features directory {path} is not a directory")
    if not create:  # the command line's mistake, as feature-sink says of its --features-dir
        raise UsageError(
            f"features directory {path} does not exist (pass --create-features-dir to create it)"
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create features directory {path}: {e.strerror or e}") from None


STAGING = ".edgefd-staging"  # in features.d: the producers' temp files


def _make_staging(staging: Path, parent: Path) -> None:
    """Make the staging directory with its parent's mode: every producer that may write in
    features.d (an emptyDir is 0777; dt-labeller runs as root, bus-scan as 65532) may write
    its temp file there too."""
    try:
        staging.mkdir()
    except FileExistsError:
        return
    os.chmod(staging, stat.S_IMODE(os.stat(parent).st_mode))


def _temp_file(path: Path, staging: Path | None) -> tuple[int, str]:
    import tempfile  # lazy: a dry run never writes

    prefix = f".{path.name}."
    if staging is not None:
        try:
            _make_staging(staging, path.parent)
            return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=staging)
        except PermissionError:  # one this user cannot write: features.d itself, as before
            pass
    return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)


def sweep_stale(staging: Path, name: str) -> int:
    """Remove the temp files of the producer whose file is `name` that a crash left in
    `staging` (its first write of a process: one process writes a given producer's file, so
    none of them is in use). Nothing else is touched; how many were removed."""
    removed = 0
    try:
        entries = list(os.scandir(staging))
    except OSError:
        return 0
    prefix = f".{name}."
    for e in entries:
        ours = e.name.startswith(prefix) and e.name.endswith(".tmp")
        if ours and e.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(e.path)
                removed += 1
    return removed


def write_atomic(
    path: Path,
    data: bytes,
    *,
    own: bool = False,
    staging: Path | None = None,
    before_rename: Callable[[], None] | None = None,
) -> bool:
    """Replace `path` with `data` atomically; return False (and touch nothing) if unchanged.
    `own`: a file only this process writes (its state): a symlink or FIFO found in its place
    is replaced, not refused.

    The temp file is a dot-file in the same directory (or in `staging`, a directory on the
    same filesystem, made if missing), so readers skip it and the rename stays on one
    filesystem; it is fsynced before the rename and the directory after, so a crash leaves
    either the old or the new file, never a truncated one. `before_rename` runs just before
    the rename (the moment a watcher's event is decided). OSError on failure.
    """
    path = Path(path)
    if _same_content(path, data, own):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temp_file(path, staging)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        if before_rename is not None:
            before_rename()
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

    It is also the one place that decides whether there is anything new: a version with the
    same bytes as the last one published is neither written nor printed, so a watch loop can
    publish after every scan and `usb-scan --watch --dry-run | ...` streams each new file
    version once. A dry run prints exactly the bytes that would be written (`echo` False:
    prints nothing, for a caller that shows something else, like --explain).

    The temp file goes to features.d's STAGING directory; with a `nudge` (one per process),
    a version written within NFD's tick of another change gets its trailing event, and
    `settle()` waits for the ones still due before the process ends.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        producer: str,
        dry_run: bool,
        echo: bool = True,
        nudge: Nudge | None = None,
    ) -> None:
        self.path = Path(directory) / producer
        self.producer = producer
        self.dry_run = dry_run
        self.echo = echo
        self.nudge = nudge
        self._published: bytes | None = None
        self._swept = False  # this producer's temp files left by a crash are gone
        self.wrote = False  # the last new version changed the file (not already there)

    @property
    def published(self) -> bool:
        """Whether a version has gone out completely (written, or printed)."""
        return self._published is not None

    def render(self, labels: Mapping[str, str]) -> bytes:
        return render(labels, self.producer)

    def publish(self, labels: Mapping[str, str]) -> bool:
        """Write (or print) the file if its bytes are new; True when they were. OutputError
        when it cannot be written (the next publish tries again)."""
        data = self.render(labels)
        if data == self._published:
            return False
        if self.dry_run:
            if self.echo:
                write_stdout(data)
        else:
            recent: list[bool] = []
            nudge = self.nudge

            def before_rename() -> None:
                if nudge is not None:  # after the staging directory's creation, an event too
                    recent.append(nudge.recent(self.path.parent))

            if not self._swept:
                self._swept = True
                sweep_stale(self.path.parent / STAGING, self.path.name)
            try:
                self.wrote = write_atomic(
                    self.path, data, staging=self.path.parent / STAGING, before_rename=before_rename
                )
            except OSError as e:
                raise OutputError(f"cannot write {self.path}: {e.strerror or e}") from None
            if self.wrote and nudge is not None:
                nudge.wrote(self.path, any(recent))
        self._published = data
        return True

    def settle(self) -> None:
        """Send the trailing events still due (a one-shot run, or a watch stopping)."""
        if self.nudge is not None:
            self.nudge.flush()
