"""dt-labeller: node labels from the devicetree's `compatible` strings.

Kept thin: options in, discovery -> derivation -> output. The heavy modules are imported inside
the command so `--help` and usage errors stay as fast as click itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgefd.cli import command, common_options, freeze_at_exit, guarded, renamed_option
from edgefd.cli.scanner import create_features_dir_option
from edgefd.core.errors import UsageError

if TYPE_CHECKING:
    from edgefd.core.labels import Derivation

    from .labels import Visit

TOOL = "dt-labeller"


@command(
    TOOL,
    exit_codes={
        0: "ok (also when this host has no devicetree: an empty file)",
        3: "malformed or unreadable devicetree (the previous file is kept)",
        4: "cannot write the feature file (the previous file is kept)",
        5: None,
    },
)
@common_options
@create_features_dir_option
@click.option(
    "--dtb",
    type=click.Path(path_type=Path),
    help="Read this devicetree blob instead of the host's.",
)
@click.option(
    "-n",
    "--dt-node",
    "node_names",
    multiple=True,
    metavar="NAME",
    help="Also visit devicetree nodes named NAME, NAME@addr or NAMEn@addr, at any depth "
    "(repeatable; added to cpu and gpu).",
)
@renamed_option(
    "--node-name",
    "--dt-node",
    "old_node_names",
    "everywhere else --node-name is the Kubernetes Node",
    multiple=True,
)
@click.option(
    "--no-default-nodes",
    is_flag=True,
    help="Do not visit cpu and gpu nodes by default (the root node is always visited).",
)
@click.option(
    "--prefix",
    default="beta.devicetree.org",
    show_default=True,
    help="Label namespace (the part before '/'). feature-sink applies another one only when "
    "started with --allow-namespace for it.",
)
@click.option(
    "--include-disabled",
    is_flag=True,
    help='Also count nodes whose status is not "okay" (disabled, reserved, fail).',
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["features", "reference"]),
    default="features",
    show_default=True,
    help="With --dry-run: print the feature file, or k8s-dt-node-labeller's `-d` listing.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Print which nodes produced each label, and which were not counted and why; write "
    "nothing.",
)
@guarded(TOOL)
def main(
    host_root: str,
    features_dir: str,
    create_features_dir: bool,
    dry_run: bool,
    output: str,
    verbose: int,
    dtb: Path | None,
    node_names: tuple[str, ...],
    old_node_names: tuple[str, ...],
    no_default_nodes: bool,
    prefix: str,
    include_disabled: bool,
    fmt: str,
    explain: bool,
) -> int:
    """Label this node from its devicetree (root, cpu and gpu `compatible` strings).

    Writes FEATURES_DIR/dt-labeller for node-feature-discovery or edgefd's feature-sink.
    """
    freeze_at_exit()  # one-shot: a cheaper exit (edgefd.cli)
    from edgefd.core.labels import PRODUCER_POLICY, check_prefix
    from edgefd.core.log import get_logger

    from .labels import DEFAULT_NODE_NAMES

    log = get_logger(TOOL)
    reason = check_prefix(prefix) or PRODUCER_POLICY.check(f"{prefix}/x")
    if reason:
        raise UsageError(f"--prefix: {reason}")
    if fmt == "reference" and not (dry_run and output == "text"):
        raise UsageError("--format reference only applies to --dry-run text output")
    if explain and output == "json":
        raise UsageError(
            "--explain prints text: drop -o json (-o json --dry-run prints the JSON inventory: "
            "its nodes, labels and where each label comes from)"
        )
    if not (dry_run or explain):
        from edgefd.core.publish import features_directory

        features_directory(features_dir, create_features_dir)

    from .discovery import discover, load_dtb
    from .labels import derive

    if dtb is not None:
        tree = load_dtb(dtb)
    else:
        from edgefd.core.hostroot import HostRoot

        tree = discover(HostRoot.of(host_root))
    if tree is None:
        log.info("no devicetree under %s (not an ARM/RISC-V board?); no labels", host_root)
    names = (() if no_default_nodes else DEFAULT_NODE_NAMES) + node_names + old_node_names
    result = derive(tree.nodes if tree else (), names, prefix, include_disabled)
    for r in result.rejected:
        log.warning("%s: %s; label skipped", r.source, r.reason)
    if explain:  # the explanation is the output, as usb-scan's: nothing is written
        _explain(result)
        return 0

    from .output import emit

    return emit(tree, result, Path(features_dir), dry_run, output, fmt)


def _explain(result: Derivation[Visit]) -> None:
    from edgefd.core.escape import printable

    from .labels import origins

    # node names and notes come from the blob: each line is escaped into one printable line
    for key, paths in origins(result).items():
        click.echo(printable(f"{key}={result.labels[key]} <- {', '.join(paths)}"))
    for v in result.reports:
        if not v.counted:
            click.echo(printable(f"not counted: {v.path}: {v.note}"))
