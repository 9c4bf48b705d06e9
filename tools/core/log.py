"""Loggers for the one-shot tools that import `logging` only when they must.

Importing `logging` costs a few milliseconds, a noticeable share of a producer's whole run
(`dt-labeller --dry-run` is about the start-up of click plus a millisecond of work). So the
tools' modules take a `Logger` from here: a message below the configured verbosity returns at
once, and a message that is shown by a command (configure) while nothing has imported
`logging` is written to stderr directly, in the handler's format (`tool: LEVEL: message`,
escaped). Once `logging` is loaded (a long-running service: grpc, kubernetes, the watcher),
messages go through it, with the stderr handler set up here.
"""

from __future__ import annotations

import sys
from typing import Any

from .escape import escaping_formatter, printable

DEBUG, INFO, WARNING = 10, 20, 30
_NAMES = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}

_verbosity = 0
_tool = "edgefd"
_configured = False  # by a command (configure); a library user's logging is left alone
_applied = False
_service = False  # a long-running mode: its state changes are logged at info by default


def configure(verbosity: int, tool: str) -> None:
    """Remember how to log; set the handler up now only if `logging` is already loaded."""
    global _verbosity, _tool, _configured, _applied, _service
    _verbosity, _tool, _configured, _applied, _service = verbosity, tool, True, False, False
    if "logging" in sys.modules:
        _apply()


def serving() -> None:
    """Switch to a long-running service's default: info. A one-shot run at the default
    verbosity says only what went wrong (its result is its output); a service has no output
    but its log, so each state change (labels added or removed, the API lost and back, a
    device plugged) is logged at info, and a steady state stays silent. `-v` still adds
    detail (-vv debug)."""
    global _service
    _service = True
    if _applied:
        sys.modules["logging"].getLogger().setLevel(threshold())


def threshold() -> int:
    if _verbosity <= 0:
        return INFO if _service else WARNING
    return INFO if _verbosity == 1 else DEBUG


def _apply() -> Any:
    """Logs go to stderr so stdout stays data (dry-run bytes, JSON) for pipelines."""
    global _applied
    import logging

    if _configured and not _applied:
        handler = logging.StreamHandler(sys.stderr)
        # device strings reach log messages: each message stays one printable line
        handler.setFormatter(escaping_formatter(f"{_tool}: %(levelname)s: %(message)s"))
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(threshold())
        _applied = True
    return logging


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
        if _configured and not kw and level in _NAMES and "logging" not in sys.modules:
            text = msg % args if args else msg
            sys.stderr.write(f"{_tool}: {_NAMES[level]}: {printable(text)}\n")
            return
        self._real().log(level, msg, *args, **kw)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(DEBUG, msg, *args, **kw)

    def info(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(INFO, msg, *args, **kw)

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(WARNING, msg, *args, **kw)

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self.log(40, msg, *args, **kw)

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        self._real().exception(msg, *args, **kw)


def get_logger(name: str) -> Logger:
    return Logger(name)
