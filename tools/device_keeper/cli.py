"""`device-keeper`: keep a re-enumerating device reachable inside running containers.

    device-keeper grant --cgroup DIR --allow c:189:5 [--revoke c:189:4] [--dry-run]
    device-keeper serve [--host-root /host]        (the service: follows the host's devices)
    device-keeper serve --events FILE|- [--follow] (moves as JSON lines: tests, by hand)


Exit codes as every edgefd tool, listed at the end of each `--help` (GRANT_EXIT_CODES,
SERVE_EXIT_CODES): 0 done, 1 refused, 2 usage, 3 bad input (grant: the cgroup; serve: a config,
an --events file, a host root that is not there), 4 the kernel refused the write, 70 a bug
(also: a component of `serve` that died).
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
    watch_options,
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
    3: "bad input: a malformed config or --events file, or a host root that is not there",
    4: None,
    5: None,
    70: "internal error: a bug, or a component of serve that died (-v for the traceback)",
}


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
        3: "bad input: grant's cgroup missing or not a cgroup; serve's config, --events file "
        "or host root",
        4: "grant: the kernel refused the write (capabilities)",
        5: None,
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
@dry_run_option
@output_option
@verbose_option
@guarded(TOOL)
def grant_cmd(
    cgroup: str,
    allow: tuple[str, ...],
    revoke: tuple[str, ...],
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Allow and revoke device nodes on one container cgroup, as the service does."""
    from edgefd.core.errors import UsageError
    from edgefd.core.output import emit_json, write_stdout

    from .grant import grant

    allowed = _nodes(allow, "--allow")
    revoked = set(_nodes(revoke, "--revoke"))
    if not allowed and not revoked:
        raise UsageError("nothing to do: give --allow and/or --revoke")
    out = grant(cgroup, allowed, revoked, dry_run=dry_run)
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
    "--events",
    default=None,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Read moves as JSON lines from this file ('-': stdin) instead of following the "
    "host's devices (for tests and by hand).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep reading --events as it grows (and wait for it to appear), until SIGTERM.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(),  # a directory is bad input (3), as a missing file: the reader says so
    envvar="EDGEFD_DEVPLUGIN_CONFIG",
    help="devplugin's resources YAML (the same ConfigMap), so that the devices followed and "
    "their names are devplugin's; reloaded when it changes (default: one resource per "
    "catalogue accelerator, as devplugin without --config).",
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
    "--node-name",
    envvar="NODE_NAME",
    default="",
    help="This node's name: the pool of its DRA devices (default $NODE_NAME; unset: any pool "
    "of edgefd's DRA driver).",
)
@click.option(
    "--state-dir",
    default="/var/lib/edgefd/device-keeper",
    show_default=True,
    envvar="EDGEFD_KEEPER_STATE_DIR",
    help="Where the keeper remembers what it granted (granted.json), so that after a restart "
    "every node it granted is still revoked when the device moves on ('': remember nothing).",
)
@watch_options
@listen_option(DEFAULT_LISTEN)
@notice_dir_option()
@dry_run_option
@output_option
@verbose_option
@guarded(TOOL)
def serve_cmd(
    events: str | None,
    follow: bool,
    config_path: str | None,
    host_root: str,
    kubelet_dir: str,
    cri_socket: str,
    node_name: str,
    state_dir: str,
    poll_interval: float,
    rescan_interval: float,
    listen: Listen,
    notice_dir: str | None,
    dry_run: bool,
    output: str,
    verbose: int,
) -> int:
    """Grant each re-enumerated device to exactly the running containers holding it."""
    import os

    from edgefd.core.output import write_stdout
    from edgefd.core.service import WatchSettings
    from edgefd.core.version import startup_line
    from edgefd.inventory.resources import load_config
    from edgefd.runtime.runner import Lifeline, Reload, run

    from .containers import Runtime
    from .ledger import FILE, Ledger
    from .metrics import KeeperMetrics
    from .podresources import PodResources
    from .service import Keeper

    if follow and events is None:
        from edgefd.core.errors import UsageError

        raise UsageError("--follow follows an --events file")
    if not os.path.isdir(host_root):
        # every mode reads the host (its /proc and cgroups, even with --events): said at once,
        # as the other tools say it, rather than a service that runs and can never grant
        from edgefd.core.errors import HostUnreadable

        what = "is not a directory" if os.path.exists(host_root) else "does not exist"
        raise HostUnreadable(f"host root {host_root} {what}")

    def host(path: str) -> str:
        return os.path.join(host_root, path.lstrip("/"))

    metrics = KeeperMetrics()
    keeper = Keeper(
        PodResources(host(os.path.join(kubelet_dir, "pod-resources", "kubelet.sock"))),
        Runtime(host(cri_socket)),
        cgroup_fs=host("/sys/fs/cgroup"),
        proc=host("/proc"),
        metrics=metrics,
        dry_run=dry_run,
        ledger=Ledger(os.path.join(state_dir, FILE) if state_dir else None),
    )
    keeper.forget_gone()

    def report(move: Any, done: list[Any]) -> None:
        if output == "json":  # one line a move: a stream to follow, not one document
            import json

            doc = {
                "device": move.device.name,
                "old": str(move.old) if move.old is not None else None,
                "new": str(move.new),
                "seen": move.seen or None,
                "containers": [d.as_json() for d in done],
            }
            write_stdout(json.dumps(doc, sort_keys=True).encode() + b"\n")

    shown: dict[str, object] = {
        "host-root": host_root,
        "events": events or "off",
        "state-dir": state_dir or "off",
    }
    reload = None
    if events is None:
        config = load_config(config_path)
        shown["config"] = config.source
        from edgefd.core.notices import board_for
        from edgefd.inventory.confdiff import config_changes

        reload = Reload(
            lambda: load_config(config_path),
            config_path,
            current=config,
            changes=config_changes,
            notices=board_for(notice_dir, TOOL),
        )
    shown["listen"] = "off" if listen is None else f"{listen[0]}:{listen[1]}"

    def build(lifeline: Lifeline) -> list[Any]:
        from .events import EventsFeed
        from .watch import Following, keeper_inventory

        if events is None:
            settings = WatchSettings(poll_interval=poll_interval, rescan_interval=rescan_interval)
            inventory = keeper_inventory(host_root, config, settings, metrics)
            return [Following(inventory, keeper, report, lifeline, node_name)]
        return [EventsFeed(_lines(events, follow, lifeline), keeper, report, lifeline)]

    mode = "dry-run" if dry_run else "events" if events is not None else "follow devices"
    return run(
        build,
        startup_line=startup_line(mode, shown),
        listen=listen,
        metrics=metrics.m,
        reload=reload,
    )


def _lines(events: str, follow: bool, lifeline: Any) -> Any:
    """The event lines: a file followed as it grows, stdin, or a file read once; each line
    bounded (events.bounded), bytes that are not UTF-8 read as replacement characters."""
    import io
    import sys

    from .events import bounded

    if follow:
        from .events import follow as follow_file

        return follow_file(events, lambda: lifeline.stopping, lifeline.wait)
    if events == "-":
        return bounded(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    # opened here, so a missing file is said at once
    f = open(events, encoding="utf-8", errors="replace")  # noqa: SIM115

    def read() -> Any:
        with f:
            yield from bounded(f)

    return read()
