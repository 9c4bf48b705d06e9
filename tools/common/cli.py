"""Behaviour every edgefd command shares: options, logging, exit codes, error reporting.

Exit codes (documented in the README, the same for every tool):

  0  success (for a producer this includes "nothing found", e.g. no devicetree on x86)
  1  the requested operation failed (e.g. `feature-sink --once` could not sync)
  2  usage error: bad option or argument (click's own code)
  3  bad input: a malformed DTB, config file or feature stream
  4  cannot write output (features directory not writable, disk full)
  5  a peer is unreachable (API server, kubelet) where the mode needs it
  70 internal error: a bug; run with -v for the traceback and please report it

Expected failures raise EdgefdError and become one line on stderr; only a bug (anything else)
can show a traceback, and only with -v.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .featuresd import DEFAULT_FEATURES_DIR

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_OUTPUT = 4
EXIT_UNREACHABLE = 5
EXIT_INTERNAL = 70

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("edgefd")


class EdgefdError(Exception):
    """An expected failure: its message is shown to the user as is, with its exit code."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(EdgefdError):
    exit_code = EXIT_BAD_INPUT


class OutputError(EdgefdError):
    exit_code = EXIT_OUTPUT


class Unreachable(EdgefdError):
    exit_code = EXIT_UNREACHABLE


def setup_logging(verbosity: int, tool: str) -> None:
    """Logs go to stderr so stdout stays data (dry-run bytes, JSON) for pipelines."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{tool}: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def host_root_option(f: F) -> F:
    return click.option(
        "--host-root",
        default="/",
        show_default=True,
        envvar="EDGEFD_HOST_ROOT",
        type=click.Path(file_okay=False),
        help="Where the host's filesystem is mounted; every host path is read under it.",
    )(f)


def features_dir_option(f: F) -> F:
    return click.option(
        "--features-dir",
        default=DEFAULT_FEATURES_DIR,
        show_default=True,
        envvar="EDGEFD_FEATURES_DIR",
        type=click.Path(file_okay=False),
        help="The features.d directory (node-feature-discovery's local source format).",
    )(f)


def dry_run_option(f: F) -> F:
    return click.option(
        "--dry-run",
        is_flag=True,
        help="Print to stdout exactly what would be written; write nothing.",
    )(f)


def output_option(f: F) -> F:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Format of what is printed to stdout.",
    )(f)


def verbose_option(f: F) -> F:
    return click.option(
        "-v", "--verbose", count=True, help="More logging on stderr (-vv for debug)."
    )(f)


Listen = tuple[str, int] | None


def parse_listen(value: str) -> Listen:
    """`host:port`, `:port` (all interfaces) or '' (no server); port 0 picks a free port."""
    value = value.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError(f"{value!r}: expected HOST:PORT or :PORT")
    try:
        port_n = int(port)
    except ValueError:
        raise ValueError(f"{value!r}: port must be a number") from None
    if not 0 <= port_n <= 65535:
        raise ValueError(f"{value!r}: port out of range")
    return host.strip("[]") or "0.0.0.0", port_n


class ListenAddress(click.ParamType):
    name = "HOST:PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, tuple):
            return value
        try:
            return parse_listen(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


def listen_option(default: str) -> Callable[[F], F]:
    """Where the long-running tools serve /healthz, /readyz and /metrics."""
    return click.option(
        "--listen",
        default=default,
        show_default=True,
        type=ListenAddress(),
        help="Address for /healthz, /readyz and /metrics: HOST:PORT or :PORT; '' disables the "
        "server; port 0 picks a free port (logged at start-up).",
    )


def common_options(f: F) -> F:
    """The options every host-reading producer takes, in one place."""
    for deco in (
        verbose_option,
        output_option,
        dry_run_option,
        features_dir_option,
        host_root_option,
    ):
        f = deco(f)
    return f


def run_guarded(tool: str, fn: Callable[[], int | None], verbosity: int = 0) -> None:
    """Run a command body, turning expected failures into one stderr line and an exit code."""
    try:
        code = fn()
    except EdgefdError as e:
        click.echo(f"{tool}: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        # a usage error found inside the body (click.BadParameter ...) is not a bug
        click.echo(f"{tool}: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): not our failure
        sys.stderr.close()
        sys.exit(EXIT_OK)
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        click.echo(f"{tool}: error: {e.strerror or e}{where}", err=True)
        sys.exit(EXIT_FAILED)
    except Exception as e:  # last line of defence: a bug, not an expected failure
        if verbosity > 0:
            raise
        click.echo(
            f"{tool}: internal error: {type(e).__name__}: {e} (run with -v for details)", err=True
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(code or EXIT_OK)


def guarded(tool: str) -> Callable[[F], F]:
    """Decorator form of run_guarded for click commands that take a `verbose` count."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            verbosity = int(kwargs.get("verbose") or 0)
            setup_logging(verbosity, tool)
            run_guarded(tool, lambda: fn(*args, **kwargs), verbosity)

        return wrapper  # type: ignore[return-value]

    return deco


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


def write_stdout_bytes(data: bytes) -> None:
    """Dry-run output: exactly the bytes that would have been written."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
