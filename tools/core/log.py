"""Loggers for the one-shot tools that import `logging` only when they must, writing lines a
person reads (`text`) or a log pipeline parses (`json`).

Importing `logging` costs a few milliseconds, a noticeable share of a producer's whole run
(`dt-labeller --dry-run` is about the start-up of click plus a millisecond of work). So the
tools' modules take a `Logger` from here: a message below the configured level returns at
once, and a message that is shown while nothing has imported `logging` is written to stderr
directly, in the handler's format (`line`). Once `logging` is loaded (a long-running service:
grpc, kubernetes, the watcher), messages go through it, with the stderr handler set up here.

Both formats carry the time (RFC 3339, UTC, milliseconds), the level and the tool. `text` is
the line people have read so far after the time (`tool: LEVEL: message`, escaped to one
printable line); `json` is one object per line, `ts`, `level`, `tool`, `msg`, plus the fields a
call passes as `extra=` (`device`, `resource`, `label` ...), which text leaves to the message's
own words. `json` itself is imported only when a json line is written.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from .escape import printable

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
_NAMES = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}
LEVELS = {"debug": DEBUG, "info": INFO, "warning": WARNING, "error": ERROR}
FORMATS = ("text", "json")

_verbosity = 0
_level: int | None = None  # --log-level; None: from -v and the mode
_format = "text"
_tool = "edgefd"
_configured = False  # by a command (configure); a library user's logging is left alone
_applied = False
_service = False  # a long-running mode: its state changes are logged at info by default


def configure(verbosity: int, tool: str, fmt: str = "text", level: str | int | None = None) -> None:
    """Remember how to log; set the handler up now only if `logging` is already loaded."""
    global _verbosity, _tool, _configured, _applied, _service, _format, _level
    _verbosity, _tool, _configured, _applied, _service = verbosity, tool, True, False, False
    _format = fmt if fmt in FORMATS else "text"
    _level = LEVELS[level] if isinstance(level, str) else level
    if "logging" in sys.modules:
        _apply()


def serving() -> None:
    """Switch to a long-running service's default: info. A one-shot run at the default
    verbosity says only what went wrong (its result is its output); a service has no output
    but its log, so each state change (labels added or removed, the API lost and back, a
    device plugged) is logged at info, and a steady state stays silent. `-v` still adds
    detail (-vv debug); `--log-level` sets the level whatever the mode."""
    global _service
    _service = True
    if _applied:
        sys.modules["logging"].getLogger().setLevel(threshold())


def threshold() -> int:
    """`--log-level` when given, else the mode's default; `-v` (info) and `-vv` (debug)
    only ever show more, with or without `--log-level`."""
    if _verbosity <= 0:
        by_mode = INFO if _service else WARNING
    else:
        by_mode = INFO if _verbosity == 1 else DEBUG
    if _level is None:
        return by_mode
    return min(_level, by_mode) if _verbosity > 0 else _level


def timestamp(t: float) -> str:
    """RFC 3339 in UTC with milliseconds: `2026-12-02T05:04:08.123Z`."""
    ms = int(t * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{ms:03d}Z"


def line(
    level: int,
    text: str,
    fields: Mapping[str, Any] | None = None,
    t: float | None = None,
    error: str = "",
) -> str:
    """One log line in the configured format, without its newline; `error` is a traceback
    (text puts it on its own lines after the message, json in the `error` key)."""
    when = timestamp(time.time() if t is None else t)
    name = _NAMES.get(level, f"LEVEL{level}")
    if _format == "json":
        import json

        obj: dict[str, Any] = {"ts": when, "level": name.lower(), "tool": _tool, "msg": text}
        for k, v in (fields or {}).items():
            obj.setdefault(k, v)
        if error:
            obj["error"] = error
        return json.dumps(obj, default=str)  # ASCII: every character escaped, one line
    out = f"{when} {_tool}: {name}: {printable(text)}"
    return f"{out}\n{error}" if error else out


def failure(tool: str, text: str) -> str:
    """A failed command's one line (edgefd.cli): `tool: error: text` as always in text (the
    documented failure line, no time: it is the command's result), a json line in json."""
    if _configured and _format == "json":
        return line(ERROR, text)
    return f"{tool}: error: {printable(text)}"


def say(tool: str, text: str) -> None:
    """A one-shot command's summary on stderr (`feature-sink: no changes`), shown whatever
    the level: part of its result, like the failure line; `tool: text` in text, an info line
    in json, so a json log stays one object per line."""
    if _configured and _format == "json":
        sys.stderr.write(line(INFO, text) + "\n")
    else:
        sys.stderr.write(f"{tool}: {printable(text)}\n")


def _apply() -> Any:
    """Logs go to stderr so stdout stays data (dry-run bytes, JSON) for pipelines."""
    global _applied
    import logging

    if _configured and not _applied:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_line_formatter())
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(threshold())
        _applied = True
    return logging


def _line_formatter() -> Any:
    """A logging.Formatter writing `line`: the record's own attributes beyond a plain
    record's are the `extra=` fields."""
    import logging

    plain = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    class LineFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            fields = {k: v for k, v in record.__dict__.items() if k not in plain}
            error = self.formatException(record.exc_info) if record.exc_info else ""
            return line(record.levelno, record.getMessage(), fields, record.created, error)

    return LineFormatter()


class Logger:
    """The subset of logging.Logger the tools use, importing logging on first real use."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def _real(self) -> Any:
        if self._logger is None or (_configured and not _applied):
            self._logger = _apply().getLogger(self.name)
        return self._logger

    def isEnabledFor(self, level: int) -> bool:
        return level >= threshold() if _configured else self._real().isEnabledFor(level)

    def log(self, level: int, msg: str, *args: Any, **kw: Any) -> None:
        if _configured and level < threshold():
            return
        if (
            _configured
            and kw.keys() <= {"extra"}
            and level in _NAMES
            and "logging" not in sys.modules
        ):
            text = msg % args if args else msg
            sys.stderr.write(line(level, text, kw.get("extra")) + "\n")
            return
        self._real().log(level, msg, *args, **kw)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(DEBUG, msg, *args, **kw)

    def info(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(INFO, msg, *args, **kw)

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(WARNING, msg, *args, **kw)

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(ERROR, msg, *args, **kw)

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        self._real().exception(msg, *args, **kw)


def get_logger(name: str) -> Logger:
    return Logger(name)
