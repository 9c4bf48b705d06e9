"""Notices: how a tool with no API identity gets a Warning Event posted on its Node.

A failed configuration reload must show where an operator looks (`kubectl describe node`,
`kubectl get events`), but only feature-sink holds a token that may post Events: devplugin in
device-plugin mode, device-keeper and the scanners hold none, by design (a privileged or
host-facing container with an API token is a larger blast radius than a missing Event). So a
tool writes its degraded state as one small file, `<tool>.notice`, into a directory its pod
shares (an emptyDir, `--notice-dir`), and the sink, which reads that directory at each sync,
posts each notice once as a Warning Event on its Node, as it does its own problems. The file
is removed when the state clears (the next reload that succeeds, or a fresh start), so a
recurrence is posted again.

What is read is checked as strictly as a features.d file: the directory is shared, so a file
may be anything (bounded, non-blocking read; a known reason; a short printable message; the
tool named by the file name), and a bad one is a warning of the sink's, never an Event.
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

SUFFIX = ".notice"
MAX_FILE_SIZE = 4096
MAX_MESSAGE = 1024
MAX_NOTICES = 32  # a directory is read whole at every sync: a flood is cut, and said
CONFIG_RELOAD_FAILED = "ConfigReloadFailed"
REASONS = frozenset({CONFIG_RELOAD_FAILED})
_TOOL = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


@dataclass(frozen=True)
class Notice:
    """One tool's degraded state: the Event's reason and a message safe to publish."""

    tool: str
    reason: str
    message: str


class NoticeBoard:
    """A tool's own notice file in the shared directory: `post` (re)writes it, `clear` removes
    it. Both are best effort: a notice that cannot be written is logged; the tool's /readyz and
    metrics still say the same."""

    def __init__(self, directory: Path, tool: str) -> None:
        if not _TOOL.fullmatch(tool):
            raise ValueError(f"not a tool name for a notice: {tool!r}")
        self.path = Path(directory) / f"{tool}{SUFFIX}"

    def post(self, reason: str, message: str) -> None:
        body = {"reason": reason, "message": _clip(message)}
        try:
            write_atomic(self.path, json.dumps(body, sort_keys=True).encode(), own=True)
        except OutputError as e:
            log.warning("could not write the notice: %s", e)
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


def parse_notice(name: str, data: bytes) -> Notice:
    """The notice in file `name`; ValueError with the reason when it is not one."""
    tool = name.removesuffix(SUFFIX)
    if not _TOOL.fullmatch(tool):
        raise ValueError("its name is not <tool>.notice")
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
    if not message.isprintable():
        raise ValueError("message has control characters")
    return Notice(tool, reason, message)


def read_notices(directory: Path) -> tuple[tuple[Notice, ...], tuple[str, ...]]:
    """(notices, warnings) of the directory: every `*.notice` file, in name order; one that
    cannot be taken is a warning naming the file and why, never its content. A missing
    directory has none (the sink may start first)."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except FileNotFoundError:
        return (), ()
    except OSError as e:
        return (), (f"notices {directory}: cannot be listed ({e.strerror or e})",)
    notices: list[Notice] = []
    warnings: list[str] = []
    if len(names) > MAX_NOTICES:
        warnings.append(f"notices {directory}: {len(names)} files, read the first {MAX_NOTICES}")
        names = names[:MAX_NOTICES]
    for name in names:
        try:
            data, _ = read_regular(Path(directory) / name, MAX_FILE_SIZE)
            notices.append(parse_notice(name, data))
        except FileNotFoundError:
            continue  # cleared while listed
        except (Refused, ValueError) as e:
            warnings.append(f"notice {printable(name)}: {e}; ignored")
    return tuple(notices), tuple(warnings)


def board_for(directory: str | os.PathLike[str] | None, tool: str) -> NoticeBoard | None:
    """The tool's notice board in `--notice-dir`, or None when the flag is unset."""
    return NoticeBoard(Path(directory), tool) if directory else None
