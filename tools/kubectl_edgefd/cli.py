"""`kubectl-edgefd`: a kubectl plugin (kubectl runs `kubectl-edgefd` from PATH for
`kubectl edgefd ...`, passing the rest of the line).

    kubectl edgefd nodes [-o json]                 one row per node
    kubectl edgefd why POD [-n NAMESPACE] [-o json] why a pod is Pending, in one paragraph
    kubectl edgefd policies -n NS --expect TEXT    wait until edgefd's admission policies
                                                   are in force (the chart's hook Job)

Read-only: it lists Nodes, Pods, ResourceSlices, ResourceClaims and DeviceClasses, and reads
the pod and its ResourceClaimTemplates; `policies` sends dry runs only. Exit codes as every
edgefd tool: 0 done (whatever the pod's state), 1 the API server refused a read, or the
policies were not in force in time, 2 usage, 3 the pod does not exist or the kubeconfig or
--context is unusable, 5 no cluster to ask (unreachable, or none configured).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from edgefd.cli import (
    NAMESPACE_NAME,
    Command,
    DnsName,
    Duration,
    command,
    context_option,
    exit_codes_help,
    guarded,
    output_option,
    verbose_option,
)

TOOL = "kubectl-edgefd"
log = logging.getLogger("edgefd.kubectl_edgefd")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES = {
    0: "done (`why`: whatever the pod's state)",
    1: "the API server refused a read (RBAC: the message names it), or cel-python is missing;"
    " `policies`: not in force within --wait, or the probe refused by RBAC",
    3: "the pod does not exist, or the kubeconfig or --context is unusable",
    4: None,
    5: "no cluster to ask: the API server is unreachable, or no kubeconfig and not in a pod",
}
QPS, BURST = 20.0, 40  # a person's one-off reads: kubectl's own client rate is higher


class Group(Command, click.Group):
    """Subcommands with the one-line usage errors of every edgefd command; with no
    subcommand, the help on stderr (exit 2)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), err=True)
            ctx.exit(2)
        return super().parse_args(ctx, args)


def cluster_options(f: F) -> F:
    """--kubeconfig, --context and --api-timeout, as kubectl's flags of the same names say."""
    f = click.option(
        "--api-timeout",
        type=Duration(minimum=0.1, maximum=600.0),
        default="10s",
        show_default=True,
        help="Timeout of each API request.",
    )(f)
    f = context_option(f)
    return click.option(
        "--kubeconfig",
        type=click.Path(),
        help="Kubeconfig file; default: $KUBECONFIG, else ~/.kube/config, else the pod's "
        "in-cluster service account.",
    )(f)


@command(TOOL, cls=Group, exit_codes=EXIT_CODES)
def main() -> None:
    """edgefd's accelerators in the cluster: what each node has and serves, and why a pod
    that asks for one is Pending."""


def connect(kubeconfig: str | None, context: str | None, timeout: float) -> Any:
    """The API client, or Unreachable (exit 5) when there is no cluster to ask at all."""
    from edgefd.core.errors import Unreachable
    from edgefd.kube.client import connect as kube_connect
    from edgefd.kube.client import find_kubeconfig

    if find_kubeconfig(kubeconfig) is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise Unreachable(
            "no cluster to ask: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) "
            "and not in a pod"
        )
    return kube_connect(kubeconfig, timeout, context=context, user_agent=TOOL, qps=QPS, burst=BURST)


@main.command("nodes", cls=Command, epilog=exit_codes_help(EXIT_CODES))
@cluster_options
@output_option
@verbose_option
@guarded(TOOL)
def nodes_cmd(
    kubeconfig: str | None, context: str | None, api_timeout: float, output: str, verbose: int
) -> int:
    """One row per node: its accelerators (capability labels), the device API its devplugin
    serves, how many devices it serves, how many are healthy and in use, the edgefd version
    running there and whether device-keeper runs beside devplugin."""
    from edgefd.core.output import emit_json, write_stdout

    from .nodes import rows, table
    from .snapshot import read

    found = rows(read(connect(kubeconfig, context, api_timeout)))
    if output == "json":
        emit_json({"nodes": [r.as_json() for r in found]})
    else:
        write_stdout(table(found).encode())
    return 0


@main.command("why", cls=Command, epilog=exit_codes_help(EXIT_CODES))
@click.argument("pod", metavar="POD", type=DnsName("pod name"))
@click.option(
    "--namespace",
    "-n",
    type=NAMESPACE_NAME,
    help="The pod's namespace [default: the kubeconfig context's, else default].",
)
@cluster_options
@output_option
@verbose_option
@guarded(TOOL)
def why_cmd(
    pod: str,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    api_timeout: float,
    output: str,
    verbose: int,
) -> int:
    """Why POD is Pending, in one paragraph: the label no node has, the devices that are all
    in use and by which pods, a device that is unhealthy or tainted, a claim whose selector
    matches nothing, a node whose plugin is not registered; or that it is not Pending."""
    from edgefd.core.output import emit_json, write_stdout
    from edgefd.kube.namespace import default_namespace

    from .known import known
    from .snapshot import get_dra, get_pod, read
    from .why import explain, templates_to_read

    ns = namespace or default_namespace(kubeconfig, context)
    api = connect(kubeconfig, context, api_timeout)
    found = get_pod(api, ns, pod)
    snap = read(api)
    templates = {
        t: get_dra(api, "resourceclaimtemplates", ns, t) for t in templates_to_read(found, snap)
    }
    told = explain(found, snap, known(), templates)
    if output == "json":
        emit_json(told.as_json())
    else:
        write_stdout((_wrapped(told.paragraph()) + "\n").encode())
    return 0


@main.command("policies", cls=Command, epilog=exit_codes_help(EXIT_CODES))
@click.option(
    "--namespace",
    "-n",
    type=NAMESPACE_NAME,
    required=True,
    help="The release's namespace, where the chart's canary policy refuses the probe.",
)
@click.option(
    "--expect",
    required=True,
    help="Text the canary's refusal must carry: the chart passes its revision and a hash of "
    "its policies, so an older canary still loaded does not count.",
)
@click.option(
    "--wait",
    type=Duration(minimum=0.0, maximum=3600.0),
    default="120s",
    show_default=True,
    help="How long to wait for the policies to be in force.",
)
@click.option(
    "--consecutive",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Refusals in a row that count (behind a load balancer each answer may come from "
    "another API server).",
)
@cluster_options
@verbose_option
@guarded(TOOL)
def policies_cmd(
    namespace: str,
    expect: str,
    wait: float,
    consecutive: int,
    kubeconfig: str | None,
    context: str | None,
    api_timeout: float,
    verbose: int,
) -> int:
    """Wait until the API server enforces edgefd's admission policies: a dry run that the
    chart's canary policy, stored after them, refuses. The chart's pre-install, pre-upgrade and
    pre-rollback hook Job runs it, so that Helm stores no right before the policies restricting
    it are in force (charts/edgefd/templates/policy-gate.yaml)."""
    from edgefd.core.output import write_stdout

    from .policies import wait_in_force

    got = wait_in_force(connect(kubeconfig, context, api_timeout), namespace, expect, wait,
                        consecutive)  # fmt: skip
    write_stdout(
        f"edgefd's admission policies are in force ({expect}): after {got.seconds:.1f} s, "
        f"{got.probes} probes\n".encode()
    )
    return 0


def _wrapped(text: str) -> str:
    """One paragraph: wrapped to the terminal when a person reads it, one line in a pipe."""
    import shutil
    import sys

    if not sys.stdout.isatty():
        return text
    import textwrap

    return textwrap.fill(text, min(shutil.get_terminal_size().columns, 100))
