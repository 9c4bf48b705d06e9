"""Whether the API server enforces edgefd's admission policies, asked the only way that shows it:
a request one of them must refuse.

The chart stores its policies, then a canary policy that refuses one dry run only (creating
ConfigMap edgefd-policies-in-force in the release's namespace) with a message naming the
release's revision and a hash of the policies (charts/edgefd/templates/policy-gate.yaml says
why the canary in force means the policies before it are). A stored policy is enforced only
at the API server's next policy refresh, so the dry run is admitted until then; an older
canary (the same release's last operation) refuses it with another message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import ApiRefused, ApiUnreachable

CANARY = "edgefd-policies-in-force"
INTERVAL = 0.2  # seconds between probes: the API server refreshes its policies every second
POLICY_DENIAL = "ValidatingAdmissionPolicy '"  # how the API server words a policy's refusal


class NotInForce(EdgefdError):
    """The canary's refusal did not come back within the wait (exit 1)."""


@dataclass(frozen=True)
class Answer:
    """One probe's outcome: `in_force` when the canary refused it with the expected text;
    `said` what the API server answered, for the message of a wait that ends without it."""

    in_force: bool
    said: str


def probe(api: Any, namespace: str, expect: str) -> Answer:
    """One dry run creating the canary's ConfigMap. A refusal that is no policy's (RBAC: the
    account may not create ConfigMaps there) is raised as it is: waiting will not change it."""
    path = f"/api/v1/namespaces/{quote(namespace)}/configmaps?dryRun=All"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CANARY}}
    what = f"create configmap {namespace}/{CANARY} (a dry run)"
    try:
        api.request("POST", "configmaps", path, what, body)
    except ApiRefused as e:
        said = str(e)
        if POLICY_DENIAL not in said:
            raise
        return Answer(expect in said, said)
    return Answer(False, "admitted: the canary policy is not enforced yet")


@dataclass(frozen=True)
class InForce:
    """How long the wait took and how many probes it sent."""

    seconds: float
    probes: int


def wait_in_force(
    api: Any,
    namespace: str,
    expect: str,
    wait: float,
    consecutive: int = 3,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> InForce:
    """Probe until `consecutive` answers in a row are the canary's refusal with `expect`;
    NotInForce after `wait` seconds (the last answer in its message). An unreachable API
    server is probed again until then."""
    start = clock()
    row = probes = 0
    said = "no answer yet"
    while True:
        probes += 1
        try:
            answer = probe(api, namespace, expect)
        except ApiUnreachable as e:
            answer = Answer(False, str(e))
        if answer.in_force:
            row += 1
            if row >= consecutive:
                return InForce(clock() - start, probes)
        else:
            row, said = 0, answer.said
        if clock() - start >= wait:
            raise NotInForce(
                f"edgefd's admission policies not in force after {wait:g} s "
                f"(expected the canary's refusal saying {expect!r}); last answer: {said}"
            )
        sleep(INTERVAL)
