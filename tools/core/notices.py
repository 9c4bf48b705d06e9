"""Notices: how a tool with no API identity gets a Warning Event posted on its Node.

A failed configuration reload must show where an operator looks (`kubectl describe node`,
`kubectl get events`), but only feature-sink holds a token that may post Events: devplugin in
device-plugin mode and the scanners hold none, by design (a privileged or host-facing
container with an API token is a larger blast radius than a missing Event). So a tool writes
its degraded state as one small file, its notice, and the sink, which reads the notices at
each sync, posts them as Warning Events on its Node (edgefd.feature_sink.notices says how
often). The notice is removed when the state clears (the next reload that succeeds, or a
fresh start).

Where a notice lives is what says whose it is. Each writer has a directory of its own, an
emptyDir the pod mounts into that writer alone (`--notice-dir`) and, read-only, into the
sink at `<the sink's --notice-dir>/<writer>`; the notice is the file `notice` in it. So a
writer can write only its own notice: the kernel sees to it, not a file mode (the writers
run as different uids, one of them root without capabilities, and none may chown), and no
writer can fill another's directory (each emptyDir has its own size limit). The sink takes a
notice as its writer's by the directory it is in, never by what the file says; the
directories are mount points on the sink's read-only root, which no writer can add to.

What is read is checked as strictly as a features.d file, since a writer may be hostile: a
bounded, non-blocking read of a regular file; a known reason; a short printable message. A
notice that is not one is still its writer's (UNREADABLE, with why, never its content).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputError
from .escape import printable
from .log import get_logger
from .publish import write_atomic
from .regular import Refused, read_regular

log = get_logger(__name__)

FILE = "notice"  # the one file of a writer's directory
MAX_FILE_SIZE = 4096
MAX_MESSAGE = 1024
MAX_WRITERS = 16  # directories under the sink's --notice-dir: the pod has two
CONFIG_RELOAD_FAILED = "ConfigReloadFailed"
GRANT_REFUSED = "DeviceGrantRefused"  # device-keeper: a holder not granted a moved device
REASONS = frozenset({CONFIG_RELOAD_FAILED, GRANT_REFUSED})
UNREADABLE = "NoticeUnreadable"  # the sink's reason for a file that is not a notice
_WRITER = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


@dataclass(frozen=True)
class Notice:
    """One writer's degraded state. `writer` is the directory it was found in; `message` is
    the writer's own words, checked (one line, printable, bounded), or, for UNREADABLE, the
    sink's: why the file is not a notice."""

    writer: str
    reason: str
    message: str

    @property
    def readable(self) -> bool:
        return self.reason != UNREADABLE


class NoticeBoard:
    """A tool's notice in its own directory: `post` (re)writes it, `clear` removes it. Both
    are best effort: a notice that cannot be written is logged; the tool's /readyz and
    metrics still say the same."""

    def __init__(self, directory: Path, tool: str) -> None:
        self.tool = tool  # for its log lines; who the writer is, is where the directory goes
        self.path = Path(directory) / FILE

    def post(self, reason: str, message: str) -> None:
        body = {"reason": reason, "message": _clip(message)}
        try:
            write_atomic(self.path, json.dumps(body, sort_keys=True).encode(), own=True)
        except OutputError as e:
            log.warning("could not write the notice of %s: %s", self.tool, e)
        except OSError as e:
            log.warning("could not write the notice %s: %s", self.path, e.strerror or e)

    def clear(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not remove the notice %s: %s", self.path, e.strerror or e)


def _clip(message: str) -> str:
    message = " ".join(message.split())  # one line: an Event's message is shown as one
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def parse_notice(writer: str, data: bytes) -> Notice:
    """`writer`'s notice from the bytes of its file; ValueError with the reason when it is
    not one."""
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a JSON object") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    reason, message = body.get("reason"), body.get("message")
    if reason not in REASONS:
        raise ValueError(f"unknown reason (known: {', '.join(sorted(REASONS))})")
    if not isinstance(message, str) or not message or len(message) > MAX_MESSAGE:
        raise ValueError(f"message missing or longer than {MAX_MESSAGE} characters")
    if not message.isprintable():  # also refuses bidirectional overrides (category Cf)
        raise ValueError("message has control characters")
    return Notice(writer, reason, message)


def writer_directories(root: Path) -> tuple[tuple[str, Path], ...]:
    """(writer, directory) under the sink's `root`, in name order, at most MAX_WRITERS; what
    else is there is left out (read_notices says so). Empty when `root` cannot be listed."""
    return _listing(root)[0]


def _listing(root: Path) -> tuple[tuple[tuple[str, Path], ...], tuple[str, ...]]:
    try:
        with os.scandir(root) as it:
            # a mount point in the pod; a symlink to a directory elsewhere (a test's stand-in
            # for the pod's mounts) reads the same: only its `notice` is read, never followed
            entries = sorted((e.name, e.is_dir()) for e in it)
    except FileNotFoundError:
        return (), ()  # the sink may start before a writer's directory is there
    except OSError as e:
        return (), (f"notices {root}: cannot be listed ({e.strerror or e})",)
    writers: list[tuple[str, Path]] = []
    warnings: list[str] = []
    for name, is_dir in entries:
        if not is_dir or not _WRITER.fullmatch(name):
            warnings.append(f"notices {root}: {printable(name)} is not a writer's directory")
        elif len(writers) == MAX_WRITERS:
            warnings.append(f"notices {root}: more than {MAX_WRITERS} writers, read the first")
            break
        else:
            writers.append((name, Path(root) / name))
    return tuple(writers), tuple(warnings)


def read_notices(root: Path) -> tuple[tuple[Notice, ...], tuple[str, ...]]:
    """(notices, warnings) under the sink's `root`: each writer's directory's notice, in
    writer order; one whose file is not a notice is UNREADABLE, saying why (never its
    content). A warning is about `root` itself (what is not a writer's directory)."""
    writers, warnings = _listing(root)
    notices: list[Notice] = []
    for writer, directory in writers:
        try:
            data, _ = read_regular(directory / FILE, MAX_FILE_SIZE)
            notices.append(parse_notice(writer, data))
        except FileNotFoundError:
            continue  # no notice, or cleared while listed
        except (Refused, ValueError) as e:
            notices.append(Notice(writer, UNREADABLE, str(e)))
        except OSError as e:
            notices.append(Notice(writer, UNREADABLE, f"cannot be read ({e.strerror or e})"))
    return tuple(notices), warnings


def board_for(directory: str | os.PathLike[str] | None, tool: str) -> NoticeBoard | None:
    """The tool's notice board in `--notice-dir`, or None when the flag is unset."""
    return NoticeBoard(Path(directory), tool) if directory else None
