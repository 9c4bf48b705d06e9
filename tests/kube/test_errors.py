"""edgefd.kube.errors: which of the few kinds of failure an HTTP answer is (retried: the link
or the server is down, the object moved; given up: the server said no), each with one message
line naming what was attempted; the wait a 429/503 asks for (Retry-After, seconds or an HTTP
date, capped); and a failure's kind in one word for logs and metrics. Pure units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from edgefd.core.errors import EXIT_UNREACHABLE, EdgefdError
from edgefd.kube.errors import (
    MAX_RETRY_AFTER,
    ApiConflict,
    ApiGone,
    ApiNotFound,
    ApiRefused,
    ApiUnreachable,
    HttpStatus,
    classify,
    failure_kind,
    retry_after,
)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (409, '{"message": "the object has been modified"}', ApiConflict),
        (422, '{"message": "the server rejected our request due to an error"}', ApiConflict),
        (422, '{"message": "Node \\"x\\" is invalid: metadata.labels"}', ApiRefused),
        (404, '{"message": "nodes \\"x\\" not found"}', ApiNotFound),
        (403, '{"message": "forbidden"}', ApiRefused),
        (401, "Unauthorized", ApiRefused),
        (429, "", ApiUnreachable),
        (503, "", ApiUnreachable),
        (0, "", ApiUnreachable),
    ],
)
def test_classify(status: int, body: str, kind: type) -> None:
    err = classify(HttpStatus(status, body), "patch node x")
    assert type(err) is kind
    assert str(err).startswith("patch node x")


def test_unreachable_is_the_documented_exit_code() -> None:
    assert ApiUnreachable("x").exit_code == EXIT_UNREACHABLE


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("1", 1.0),
        ("2.5", 2.5),
        ("0", 0.0),
        ("86400", MAX_RETRY_AFTER),  # capped: a wrong header cannot park a client for a day
        ("soon", None),
        ("", None),
        ("-3", None),
    ],
)
def test_retry_after_header(header: str, seconds: float | None):
    assert retry_after(HttpStatus(429, "", {"Retry-After": header})) == seconds


def test_retry_after_as_an_http_date_and_absent():
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert retry_after(HttpStatus(503, "", {"retry-after": when})) == pytest.approx(30, abs=2)
    assert retry_after(HttpStatus(429, "", None)) is None
    assert retry_after(HttpStatus(429, "", {"Content-Type": "text/plain"})) is None


def test_classify_429_and_410():
    err = classify(HttpStatus(429, '{"message": "slow down"}', {"Retry-After": "3"}), "get x")
    assert isinstance(err, ApiUnreachable) and err.retry_after == 3
    assert "retry after 3 s" in str(err)
    assert classify(HttpStatus(503, "", None), "get x").retry_after is None
    gone = classify(HttpStatus(410, '{"message": "too old resource version"}'), "watch x")
    assert isinstance(gone, ApiGone) and isinstance(gone, ApiConflict)


def test_failure_kind_names_each_kind_in_one_word() -> None:
    """The word the loops log and count a failure under (a 410 is a conflict: list again)."""
    kinds = {
        "unreachable": classify(HttpStatus(503, ""), "get x"),
        "conflict": classify(HttpStatus(410, "gone"), "watch x"),
        "notfound": classify(HttpStatus(404, "missing"), "get x"),
        "refused": classify(HttpStatus(403, "forbidden"), "get x"),
        "error": EdgefdError("something else"),
    }
    assert {word: failure_kind(exc) for word, exc in kinds.items()} == {w: w for w in kinds}
    assert failure_kind(ValueError("a bug")) == "error"
