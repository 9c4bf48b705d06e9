"""The command-line behaviour every edgefd tool shares: options, value types, logging set-up and
turning expected failures into one stderr line and a documented exit code (core/errors.py).

Only a bug (anything but an EdgefdError, a click usage error or an OS error) can show a
traceback, and only with -v. Kept to click and the standard library: importing this module is
the start-up floor of every tool.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ..core.duration import parse_duration
from ..core.errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, EdgefdError, exit_code_lines
from ..core.escape import printable
from ..core.service import Listen as Listen
from ..core.service import parse_listen as parse_listen
from .envvars import env_name as env_name
from .envvars import give_env
from .logs import defer_warning, fail
from .logs import setup_logging as setup_logging
from .logs import verbose_option as verbose_option
from .notices import notice_dir_option as notice_dir_option
from .oneshot import freeze_at_exit as freeze_at_exit

# node-feature-discovery's local source directory (its value is checked against
# edgefd.core.featuresd in the tests; not imported from there to keep start-up light)
DEFAULT_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------- value types


class Duration(click.ParamType):
    """Seconds as a number, or with a unit (`250ms`, `30s`, `10m`, `1h`), within bounds
    (edgefd.core.duration: the same grammar as the configuration files' durations)."""

    name = "duration"

    def __init__(self, minimum: float = 0.0, maximum: float = 7 * 24 * 3600.0) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if not self.minimum <= seconds <= self.maximum:
            self.fail(
                f"{value!r} is out of range ({self.minimum:g}s to {self.maximum:g}s)", param, ctx
            )
        return seconds


class ListenAddress(click.ParamType):
    name = "HOST:PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, tuple):
            return value
        try:
            return parse_listen(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class DnsName(click.ParamType):
    """A Kubernetes object name: a DNS-1123 subdomain (Node names) or label (namespaces).

    Names go into URL paths; they are checked here as the API server would check them (and
    the API client escapes every path segment anyway), so `../namespaces/x` is a usage error.
    """

    def __init__(self, what: str, label: bool = False) -> None:
        self.name = what
        self.label = label

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        # the label rules' own checks, imported only when a name is given (start-up floor)
        from ..core.labels import DNS_LABEL_MAX, PREFIX_MAX, is_dns_label, is_dns_subdomain

        text = str(value)
        if self.label:
            limit, ok = DNS_LABEL_MAX, is_dns_label(text)
        else:
            limit, ok = PREFIX_MAX, is_dns_subdomain(text)
        if not ok:
            kind, chars = ("label", "'-'") if self.label else ("subdomain", "'-' and '.'")
            self.fail(
                f"{text!a} is not a valid {self.name} (a DNS-1123 {kind}: lower-case letters, "
                f"digits, {chars}, at most {limit} characters)",
                param,
                ctx,
            )
        return text


NODE_NAME = DnsName("Node name")
NAMESPACE_NAME = DnsName("namespace name", label=True)


def host_node_name() -> str:
    """The Node a dry run without --node-name is about: this host's name, which is the
    kubelet's default Node name, checked as --node-name would be (feature-sink and devplugin
    dry runs, so a dry run on the node itself needs no flag)."""
    import os

    try:
        return str(NODE_NAME.convert(os.uname().nodename, None, None))
    except click.BadParameter as e:
        raise click.BadParameter(e.message, param_hint="'--node-name'") from None


# --------------------------------------------------------------------------- options


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


def watch_options(f: F) -> F:
    """--poll-interval and --rescan-interval, with the one set of defaults (WatchSettings)."""
    from ..core.service import WatchSettings

    d = WatchSettings()
    f = click.option(
        "--poll-interval",
        type=Duration(minimum=0.05, maximum=5.0),
        default=f"{d.poll_interval * 1000:g}ms",
        show_default=True,
        help="How often the host's bus listing is compared when no uevent comes (hostUsers: "
        "false). Not feature-sink's --poll-interval, which compares features.d's files.",
    )(f)
    return click.option(
        "--rescan-interval",
        type=Duration(minimum=0.5, maximum=86400.0),
        default=f"{d.rescan_interval:g}s",
        show_default=True,
        help="Full rescan period whatever happens: a backstop for changes no event shows.",
    )(f)


def renamed_option(old: str, new: str, dest: str, why: str, **kwargs: Any) -> Callable[[F], F]:
    """The old spelling of a renamed option, kept working for one release: hidden from
    `--help`, collected into `dest` (the command merges it with the new option's value), and
    a warning on stderr each time it is used, naming the new spelling and why it changed
    (logged by `guarded` once the log is set up, so it has the log's format and level)."""

    def warn(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value:
            defer_warning(
                f"{old} is deprecated and will be removed in the next release: use {new} ({why})"
            )
        return value

    return click.option(old, dest, hidden=True, callback=warn, **kwargs)


def api_options(purpose: str = "") -> Callable[[F], F]:
    """--node-name, --kubeconfig and --api-timeout, for the tools that talk to the API server
    (`purpose` prefixes each help text, e.g. "DRA: ")."""

    def deco(f: F) -> F:
        for opt in reversed(
            (
                click.option(
                    "--node-name",
                    envvar="NODE_NAME",
                    type=NODE_NAME,
                    metavar="NODE",
                    help=f"{purpose}This node [env NODE_NAME].",
                ),
                click.option(
                    "--kubeconfig",
                    type=click.Path(),
                    help=f"{purpose}Kubeconfig file; default: $KUBECONFIG, else ~/.kube/config, "
                    "else the pod's in-cluster service account.",
                ),
                click.option(
                    "--api-timeout",
                    type=Duration(minimum=0.1, maximum=600.0),
                    default="10s",
                    show_default=True,
                    help=f"{purpose}Timeout of each API request (a hung connection never "
                    "blocks longer).",
                ),
            )
        ):
            f = opt(f)
        return f

    return deco


def context_option(f: F) -> F:
    """kubectl's --context, for the tools an administrator runs from a workstation."""
    return click.option(
        "--context",
        metavar="NAME",
        help="The kubeconfig context to use [default: its current-context].",
    )(f)


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


# --------------------------------------------------------------------------- running


class Command(click.Command):
    """A click command whose usage errors are one line on stderr (exit 2), like every other
    expected failure (`usb-scan: error: Invalid value for '--hold': ...`); `--help` still
    shows the whole usage. Every option is also read from `EDGEFD_<FLAG>` (give_env)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        give_env(self.params)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        name = self.name or "edgefd"
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as e:
            click.echo(f"{name}: error: {e.format_message()} (see {name} --help)", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def exit_codes_help(notes: Mapping[int, str | None] | None = None) -> str:
    """The exit codes at the end of `--help` (core.errors.exit_code_lines); the leading \\b
    keeps click from re-wrapping the list into one paragraph."""
    return "\n".join(["\b", "Exit codes:", *exit_code_lines(notes)])


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ..core.version import version_line  # only when asked: start-up stays click + stdlib

    click.echo(version_line(ctx.command.name or "edgefd"))
    ctx.exit(EXIT_OK)


def command(
    name: str, exit_codes: Mapping[int, str | None] | None = None, **kwargs: Any
) -> Callable[[F], click.Command]:
    """`click.command` for an edgefd tool (`cls`: Command, or a Group of it): one-line usage
    errors, `-h`, `--version`, the exit codes at the end of `--help` (see exit_codes_help)."""
    settings = {"help_option_names": ["-h", "--help"], **kwargs.pop("context_settings", {})}
    epilog = "\n\n".join(t for t in (kwargs.pop("epilog", None), exit_codes_help(exit_codes)) if t)
    kwargs = {"cls": Command, **kwargs, "context_settings": settings, "epilog": epilog}
    make = click.command(name, **kwargs)

    def deco(f: F) -> click.Command:
        cmd = make(f)
        cmd.params.append(
            click.Option(
                ["--version"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_print_version,
                help="Print the version and build (Python, platform) and exit.",
            )
        )
        return cmd

    return deco


def run_guarded(tool: str, fn: Callable[[], int | None], verbosity: int = 0) -> None:
    """Run a command body, turning expected failures into one stderr line and an exit code."""
    try:
        code = fn()
    except EdgefdError as e:
        # messages quote paths, device strings and file content: one printable line each
        fail(tool, str(e))
        sys.exit(e.exit_code)
    except click.ClickException as e:
        # a usage error found inside the body (click.BadParameter ...) is not a bug
        fail(tool, e.format_message())
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): not our failure
        sys.stderr.close()
        sys.exit(EXIT_OK)
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        fail(tool, f"{e.strerror or e}{where}")
        sys.exit(EXIT_FAILED)
    except Exception as e:  # last line of defence: a bug, not an expected failure
        if verbosity > 0:
            raise
        click.echo(
            f"{tool}: internal error: {type(e).__name__}: {printable(str(e))} "
            "(run with -v for details)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(code or EXIT_OK)


def guarded(tool: str) -> Callable[[F], F]:
    """Decorator form of run_guarded for click commands that take verbose_option's options
    (`verbose`, and `log_format` and `log_level`, which are taken here and not passed on)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            verbosity = int(kwargs.get("verbose") or 0)
            fmt = kwargs.pop("log_format", None) or "text"
            setup_logging(verbosity, tool, fmt, kwargs.pop("log_level", None))
            run_guarded(tool, lambda: fn(*args, **kwargs), verbosity)

        return wrapper  # type: ignore[return-value]

    return deco
