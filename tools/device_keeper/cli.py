"""`device-keeper`: keep a re-enumerating device reachable inside running containers.

    device-keeper grant --cgroup DIR --allow c:189:5 [--revoke c:189:4] [--dry-run]
    device-keeper serve [--host-root /host] [--decisions FILE]   (follows devplugin's decisions)
    device-keeper serve --dry-run                                 (what it would do now; exits)

Exit codes as every edgefd tool, listed at the end of each `--help` (GRANT_EXIT_CODES,
SERVE_EXIT_CODES): 0 done, 1 refused, 2 usage, 3 bad input (grant: the cgroup; serve: a host
root that is not there, a decisions file that is not right), 4 the kernel refused the write,
5 a peer (the kubelet, the runtime) not reachable in a dry run, 70 a bug (also: a component of
`serve` that died).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from edgefd.cli import (
    Command,
    Listen,
    command,
    dry_run_option,
    exit_codes_help,
    guarded,
    host_root_option,
    listen_option,
    notice_dir_option,
    output_option,
    verbose_option,
)

TOOL = "device-keeper"
# the port of its /healthz, /readyz and /metrics: its own, as in k8s/pod-template.yaml and
# the chart (8081-8083 are feature-sink's, devplugin's and the scanners')
DEFAULT_LISTEN = ":8084"
log = logging.getLogger(TOOL)

GRANT_EXIT_CODES = {
    1: "refused: a systemd scope, a cgroup without a device program, a program that cannot "
    "be extended or that the verifier refused extended, another program beside the "
    "runtime's that may still deny the node",
    3: "the cgroup is missing, not a cgroup directory, or removed during the grant",
    4: "the kernel refused the write (capabilities)",
    5: None,
}
SERVE_EXIT_CODES = {
    3: "bad input: a host root that is not there; --dry-run: a decisions file that is not right",
    4: None,
    5: "--dry-run: the kubelet or the runtime cannot be reached",
    70: "internal error: a bug, or a component of serve that died (-v for the traceback)",
}
DEFAULT_DECISIONS = "/run/edgefd/decisions/decisions.json"


class Group(Command, click.Group):
    """Subcommands with the one-line usage errors of every edgefd command; with no
    subcommand, the help itself on stderr (exit 2: a usage error, but one whose answer is the
    whole help, not a line wrapping it)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), err=True)
            ctx.exit(2)
        return super().parse_args(ctx, args)


@command(
    TOOL,
    cls=Group,
    exit_codes={
        1: "refused or failed (grant: see device-keeper grant --help)",
        3: "bad input: grant's cgroup missing or not a cgroup; serve's host root or decisions",
        4: "grant: the kernel refused the write (capabilities)",
        5: "serve --dry-run: the kubelet or the runtime cannot be reached",
        70: SERVE_EXIT_CODES[70],
    },
)
def main() -> None:
    """Keep a Coral or NCS2 reachable inside running containers when it re-enumerates."""


def _nodes(values: tuple[str, ...], what: str) -> dict[Any, str]:
    from .rules import parse_node

    out: dict[Any, str] = {}
    for v in values:
        node, access = parse_node(v)
        if node in out:
            from edgefd.core.errors import UsageError

            raise UsageError(f"{what} {node.spec} given twice")
        out[node] = access
    return out


def systemd_socket_option(help_root: str) -> Any:
    """`--systemd-socket`: systemd's private socket, through which a systemd scope's grant
    is also its DeviceAllow= ('' for none: such containers are refused, saying why)."""
    return click.option(
        "--systemd-socket",
        default="/run/systemd/private",
        show_default=True,
        envvar="EDGEFD_SYSTEMD_SOCKET",
        help="The private socket of systemd"
        + help_root
        + ": under the systemd cgroup driver a grant is the container scope's DeviceAllow= "
        "too, or a daemon-reload undoes it ('': none; such grants are refused).",
    )


@main.command("grant", cls=Command, epilog=exit_codes_help(GRANT_EXIT_CODES))
@click.option(
    "--cgroup",
    required=True,
    type=click.Path(file_okay=False),
    help="The container's cgroup: a v2 directory, or its v1 devices controller directory.",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    metavar="T:MAJ:MIN[:ACC]",
    help="Allow this node (e.g. c:189:5; access rw unless given, e.g. c:189:5:rwm).",
)
@click.option(
    "--revoke",
    "revoke",
    multiple=True,
    metavar="T:MAJ:MIN",
    help="Revoke this node for every access (e.g. c:189:4), also if its number is reused.",
)
@systemd_socket_option("")
@dry_run_option
@output_option
@verbose_option
@guarded(TOOL)
def grant_cmd(
    cgroup: str,
    allow: tuple[str, ...],
    revoke: tuple[str, ...],
    systemd_socket: str,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Allow and revoke device nodes on one container cgroup, as the service does."""
    from edgefd.core.errors import UsageError
    from edgefd.core.output import emit_json, write_stdout

    from .grant import grant
    from .systemd import Systemd

    allowed = _nodes(allow, "--allow")
    revoked = set(_nodes(revoke, "--revoke"))
    if not allowed and not revoked:
        raise UsageError("nothing to do: give --allow and/or --revoke")
    systemd = Systemd(systemd_socket) if systemd_socket else None
    out = grant(cgroup, allowed, revoked, dry_run, systemd)
    if output == "json":
        emit_json(out.as_json())
    elif dry_run:
        write_stdout(out.text().encode())
    else:
        what = ", ".join(
            [f"allowed {n} {a}" for n, a in sorted(allowed.items())]
            + [f"revoked {n}" for n in sorted(revoked)]
        )
        state = "" if out.changed else " (already so)"
        write_stdout(f"{cgroup} ({out.version}): {what}{state}\n".encode())
    return 0


@main.command("serve", cls=Command, epilog=exit_codes_help(SERVE_EXIT_CODES))
@click.option(
    "--decisions",
    "decisions_path",
    default=DEFAULT_DECISIONS,
    show_default=True,
    envvar="EDGEFD_DECISIONS",
    type=click.Path(dir_okay=False),
    help="devplugin's decisions (its --decisions file): the devices it hands out, as what, "
    "at which container path and number. The keeper follows exactly those.",
)
@host_root_option
@click.option(
    "--kubelet-dir",
    default="/var/lib/kubelet",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The kubelet's directory (pod-resources/kubelet.sock in it), on the host.",
)
@click.option(
    "--cri-socket",
    default="/run/containerd/containerd.sock",
    show_default=True,
    help="The runtime's CRI socket (CRI-O: /var/run/crio/crio.sock).",
)
@click.option(
    "--state-dir",
    default="/var/lib/edgefd/device-keeper",
    show_default=True,
    envvar="EDGEFD_KEEPER_STATE_DIR",
    help="Where the keeper remembers what it granted (granted.json), so that after a restart "
    "every node it granted is still revoked when the device moves on ('': remember nothing).",
)
@systemd_socket_option(" on the host")
@notice_dir_option(
    "The keeper's own directory, which feature-sink reads as its writer's: a refused grant "
    "is written there as the file `notice`, which feature-sink posts as a Warning Event on "
    "the Node. Unset: the log and the metrics only."
)
@listen_option(DEFAULT_LISTEN)
@dry_run_option
@output_option
@verbose_option
@guarded(TOOL)
def serve_cmd(
    decisions_path: str,
    host_root: str,
    kubelet_dir: str,
    cri_socket: str,
    state_dir: str,
    systemd_socket: str,
    notice_dir: str | None,
    listen: Listen,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Grant each re-enumerated device to exactly the running containers holding it.

    With --dry-run: what it would grant and revoke now (each device devplugin hands out, as a
    keeper starting now would catch it up), printed; nothing is changed, and it exits."""
    import os

    from edgefd.core.version import startup_line
    from edgefd.runtime.runner import Lifeline, run

    from .containers import Runtime
    from .ledger import FILE, Ledger
    from .metrics import KeeperMetrics
    from .podresources import PodResources
    from .service import Keeper
    from .systemd import Systemd

    if not os.path.isdir(host_root):
        # every mode reads the host (its /proc and cgroups): said at once, as the other
        # tools say it, rather than a service that runs and can never grant
        from edgefd.core.errors import HostUnreadable

        what = "is not a directory" if os.path.exists(host_root) else "does not exist"
        raise HostUnreadable(f"host root {host_root} {what}")

    def host(path: str) -> str:
        return os.path.join(host_root, path.lstrip("/"))

    metrics = KeeperMetrics()
    runtime = Runtime(host(cri_socket))
    systemd = Systemd(host(systemd_socket)) if systemd_socket else None
    keeper = Keeper(
        PodResources(host(os.path.join(kubelet_dir, "pod-resources", "kubelet.sock"))),
        runtime,
        cgroup_fs=host("/sys/fs/cgroup"),
        proc=host("/proc"),
        metrics=metrics,
        dry_run=dry_run,
        ledger=Ledger(os.path.join(state_dir, FILE) if state_dir else None),
        systemd=systemd,
    )
    if dry_run:
        from .dryrun import show

        return show(decisions_path, keeper, output)
    keeper.forget_gone()
    from edgefd.core.notices import board_for

    from .notice import RefusalNotice

    notice = RefusalNotice(board_for(notice_dir, TOOL))

    def report(move: Any, done: list[Any]) -> None:
        notice.after(move, done)
        if output == "json":  # one line a move: a stream to follow, not one document
            from edgefd.core.output import write_stdout

            write_stdout(move_json(move, done))

    shown: dict[str, object] = {
        "host-root": host_root,
        "decisions": decisions_path,
        "state-dir": state_dir or "off",
        "listen": "off" if listen is None else f"{listen[0]}:{listen[1]}",
        **drivers(runtime, systemd),
    }

    def build(lifeline: Lifeline) -> list[Any]:
        from .follow import Following

        return [Following(decisions_path, keeper, report, lifeline, metrics)]

    return run(
        build,
        startup_line=startup_line("follow devplugin's decisions", shown),
        listen=listen,
        metrics=metrics.m,
    )


def drivers(runtime: Any, systemd: Any) -> dict[str, str]:
    """The startup line's cgroup driver (as the runtime says) and systemd (its version, or
    why it is not reached): the first thing to read when a grant under the systemd driver is
    refused. Neither stops the keeper: the runtime may come up after it."""
    from edgefd.core.errors import EdgefdError

    try:
        driver = runtime.cgroup_driver() or "not said by the runtime"
    except EdgefdError as e:
        driver = f"unknown ({e})"
    if systemd is None:
        reached = "off"
    else:
        try:
            reached = f"{systemd.version()} at {systemd.socket_path}"
        except EdgefdError as e:
            reached = f"not reached ({e})"
    if driver == "systemd" and not reached[:1].isdigit():
        log.warning(
            "the runtime uses the systemd cgroup driver and systemd is %s: every grant will "
            "be refused (see device-keeper's README, the systemd cgroup driver)",
            reached,
        )
    return {"cgroup-driver": driver, "systemd": reached}


def move_json(move: Any, done: list[Any]) -> bytes:
    """One move as a JSON line (`-o json`): the device, its old and new node and path, when
    the scan saw it, and per container what was done."""
    import json

    doc = {
        "device": move.device,
        "old": str(move.old) if move.old is not None else None,
        "new": str(move.new),
        "path": move.path,
        "old_path": move.old_path or None,
        "seen": move.seen or None,
        "containers": [d.as_json() for d in done],
    }
    return json.dumps(doc, sort_keys=True).encode() + b"\n"
