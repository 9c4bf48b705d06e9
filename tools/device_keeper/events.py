"""A source of moves from JSON lines, one move a line, for operators and tests (`serve
--events`; by default the service follows its own device inventory, source.py):

    {"device": {"name": "coral-usb-1-1-3",
                "plugin": [["edgefd.io/coral-usb", "coral-usb-1-1-3"]],
                "ids": ["coral-usb-1-1-3"],
                "dra": [["edgefd.io", "node1", "coral-usb-1-1-3"]]},
     "old": "c:189:4", "new": "c:189:5"}

`plugin`: (resource, device ID) pairs; `ids`: device IDs under any resource (what the inventory
source gives); `dra`: (driver, pool, device), pool "" for any pool of the driver.

`new` may carry the access (`c:189:5:rwm`; default rw); `path` names the container's path when
it is not `/dev/edgefd/<name>` (a device's second node: `/dev/edgefd/<name>.1`).

A bad line is logged with its number and skipped; the stream goes on. That includes what no
move looks like: a line longer than MAX_LINE characters (never held whole: the rest of it is
read past), JSON nested deeper than MAX_DEPTH (refused before the parser, whose recursion it
would exhaust), bytes that are not UTF-8 (read as replacement characters). With `--follow` the
file is read as it grows (a file the inventory appends to, in the pod). `EventsFeed` is the
runner's component for `serve --events`: done when the lines end.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from edgefd.core.errors import EdgefdError
from edgefd.inventory.naming import CONTAINER_DIR
from edgefd.runtime.runner import Lifeline

from .holders import DeviceRef
from .rules import parse_node
from .service import Keeper, Move, Report, Worker

log = logging.getLogger("device-keeper")
POLL = 0.05  # seconds between looks at a followed file that has no new line
MAX_LINE = 64 * 1024  # characters; a move is a few hundred
MAX_DEPTH = 16  # a move nests four deep ({"device": {"plugin": [[...]]}})


def _pairs(value: Any, width: int, what: str) -> frozenset:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(
        isinstance(v, list) and len(v) == width and all(isinstance(x, str) for x in v)
        for v in value
    ):
        raise ValueError(f"{what}: a list of {width}-string lists")
    return frozenset(tuple(v) for v in value)


def nesting(text: str) -> int:
    """How deep the JSON text's arrays and objects nest (brackets inside strings are text)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse(line: str) -> Move:
    """One move; ValueError (or EdgefdError for a bad node) says what is wrong."""
    if len(line.rstrip("\n")) > MAX_LINE:
        raise ValueError(f"longer than {MAX_LINE} characters")
    if nesting(line) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    doc = json.loads(line)
    if not isinstance(doc, dict) or not isinstance(doc.get("device"), dict):
        raise ValueError("expected an object with a 'device' object")
    dev = doc["device"]
    name = dev.get("name")
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError("device.name: a file name")
    ids = dev.get("ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("device.ids: a list of strings")
    ref = DeviceRef(
        name,
        _pairs(dev.get("plugin"), 2, "device.plugin"),
        _pairs(dev.get("dra"), 3, "device.dra"),
        frozenset(ids),
    )
    old, _ = parse_node(str(doc.get("old", "")))
    new, access = parse_node(str(doc.get("new", "")))
    path = doc.get("path", "")
    if not isinstance(path, str) or (path and not path.startswith(f"{CONTAINER_DIR}/")):
        raise ValueError(f"path: a file under {CONTAINER_DIR}/")
    return Move(ref, old, new, access, path)


def moves(lines: Iterable[str]) -> Iterator[Move]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            move = parse(line)
        except (ValueError, TypeError, RecursionError, EdgefdError) as e:
            log.warning("event line %d: %s; skipped", n, e)
            continue
        yield move


def bounded(stream: IO[str]) -> Iterator[str]:
    """The lines of a stream, none held longer than MAX_LINE + 1 characters: of a longer
    line the first MAX_LINE + 1 are given (parse refuses them), the rest is read past."""
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        rest = line
        while len(rest) > MAX_LINE and not rest.endswith("\n"):
            rest = stream.readline(MAX_LINE + 1)
        yield line


def follow(path: str, stopped: Callable[[], bool], wait: Callable[[float], None]) -> Iterator[str]:
    """The lines of a file as they are appended (`tail -F`), until `stopped()`; a file that
    does not exist yet is waited for, one replaced (a new inode) is read from its start."""
    f = None
    ino = None
    partial = ""  # at most MAX_LINE + 1 characters of the line being written
    while not stopped():
        if f is None:
            try:
                f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open
                ino = os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                wait(POLL)
                continue
        chunk = f.readline(MAX_LINE + 1)
        if chunk:
            ended = chunk.endswith("\n")
            if len(partial) <= MAX_LINE:
                partial = (partial + chunk)[: MAX_LINE + 1] if not ended else partial + chunk
            if ended:
                yield partial
                partial = ""
            continue
        try:
            replaced = os.stat(path).st_ino != ino
        except FileNotFoundError:
            replaced = True
        if replaced:
            f.close()
            f, partial = None, ""
            continue
        wait(POLL)
    if f is not None:
        f.close()


class EventsFeed(Worker):
    """Moves from JSON lines; done at the end of the lines."""

    def __init__(
        self, lines: Iterable[str], keeper: Keeper, report: Report, lifeline: Lifeline
    ) -> None:
        super().__init__(keeper, report, lifeline, "events")
        self.lines = lines

    def start(self) -> None:  # type: ignore[override]
        super().start(moves(self.lines))

    def prepare(self) -> None:
        """Nothing ahead of time (see _Worker.prepare)."""

    def finished(self) -> None:
        self.lifeline.done()

    def stop(self) -> None:
        self.join(5)  # a blocked read of stdin is left to the process's end (daemon thread)
