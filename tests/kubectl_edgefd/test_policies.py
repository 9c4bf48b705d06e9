"""`kubectl edgefd policies`' wait, answer by answer (the real API server's answers, and the
chart's canary, are in tests/k8s/test_policy_gate.py): what counts, what starts the count
again, what is retried and what ends the wait at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from edgefd.kube.errors import ApiRefused, ApiUnreachable
from edgefd.kubectl_edgefd.policies import CANARY, NotInForce, wait_in_force

EXPECT = "revision 3, policies abc"
OURS = (
    f"configmaps \"{CANARY}\" is forbidden: ValidatingAdmissionPolicy '{CANARY}' with binding "
    f"'{CANARY}' denied request: edgefd's admission policies are in force: {EXPECT}"
)
OLDER = OURS.replace("revision 3", "revision 2")
RBAC = 'configmaps is forbidden: User "x" cannot create resource "configmaps"'


class Answers:
    """The API answering each probe in turn: None admits it, a string refuses it, an
    exception is raised; a clock that each probe moves on."""

    def __init__(self, *answers: Any) -> None:
        self.answers: Iterator[Any] = iter(answers)
        self.now = 0.0
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, resource: str, path: str, what: str, body: Any) -> Any:
        self.sent.append((method, path))
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        if answer is not None:
            raise ApiRefused(f"{what}: API server refused with 403 ({answer})")
        return {}

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(api: Answers, wait: float = 10.0, consecutive: int = 3) -> Any:
    return wait_in_force(api, "ns", EXPECT, wait, consecutive, lambda: api.now, api.sleep)


def test_three_of_ours_in_a_row_and_only_dry_runs() -> None:
    api = Answers(None, None, OURS, OURS, OURS)
    got = run(api)
    assert got.probes == 5 and got.seconds == pytest.approx(0.8)
    assert {s for s in api.sent} == {("POST", "/api/v1/namespaces/ns/configmaps?dryRun=All")}


def test_an_older_canary_or_an_admitted_probe_starts_the_count_again() -> None:
    api = Answers(OURS, OURS, OLDER, OURS, None, OURS, OURS, OURS)
    assert run(api).probes == 8


def test_an_unreachable_api_server_is_asked_again() -> None:
    api = Answers(ApiUnreachable("connection refused"), OURS, OURS, OURS)
    assert run(api).probes == 4


def test_a_refusal_that_is_no_policys_ends_the_wait_at_once() -> None:
    api = Answers(None, RBAC, OURS)
    with pytest.raises(ApiRefused, match="cannot create resource"):
        run(api)
    assert len(api.sent) == 2


def test_not_in_force_in_time_says_the_last_answer() -> None:
    api = Answers(*([None] * 5 + [OLDER] * 100))
    with pytest.raises(NotInForce) as e:
        run(api, wait=2.0)
    assert "not in force after 2 s" in str(e.value)
    assert EXPECT in str(e.value) and "revision 2" in str(e.value)
    assert NotInForce("x").exit_code == 1


def test_one_is_enough_when_asked() -> None:
    assert run(Answers(OURS), consecutive=1).probes == 1
