"""How every tool logs, from its command line: `-v`, `--log-level` and `--log-format`
(verbose_option, on every command and subcommand), the set-up they lead to (setup_logging,
called by edgefd.cli.guarded before the command's body), and the lines found before it.

Why here: a tool's log is its output when it runs as a service, and a log pipeline needs one
format from the first line to the last; so a warning click finds while parsing (a deprecated
flag) waits until the format is known, and a failed command's one line follows the format
too. Kept to click and the standard library, like the rest of edgefd.cli (start-up floor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_deferred: list[str] = []  # warnings found while parsing, before the log is set up


def setup_logging(verbosity: int, tool: str, fmt: str = "text", level: str | None = None) -> None:
    """Logs go to stderr so stdout stays data; `logging` itself is imported only when a
    message is shown (edgefd.core.log). Then the warnings found while parsing."""
    from ..core import log

    log.configure(verbosity, tool, fmt, level)
    if _deferred:
        for message in _deferred:
            log.get_logger("edgefd.cli").warning("%s", message)
        _deferred.clear()


def defer_warning(message: str) -> None:
    """A warning found while click parses the command line: logged by setup_logging, in the
    format and at the level the same command line asks for."""
    _deferred.append(message)


def fail(tool: str, text: str) -> None:
    """A failed command's one stderr line: `tool: error: ...`, or a json line when the logs
    are json (edgefd.core.log.failure)."""
    from ..core import log

    click.echo(log.failure(tool, text), err=True)


def verbose_option(f: F) -> F:
    """-v, --log-level and --log-format: how every tool and subcommand logs (guarded takes
    them; edgefd.core.log writes the lines)."""
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Log lines on stderr: text (time, tool, level, message) or json (one object "
        "per line: ts, level, tool, msg and the device's fields).",
    )(f)
    f = click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"]),
        default=None,
        help="Least severe level logged [default: warning for a one-shot run, info for a "
        "service]; -v and -vv still add info and debug.",
    )(f)
    return click.option(
        "-v", "--verbose", count=True, help="More logging on stderr (-vv for debug)."
    )(f)
