"""The kinds of API failure a caller acts on differently, and the mapping from HTTP answers.

The tools retry some failures (the link or server is down, the object moved under them) and
give up on others (the server said no), so every error is one of four kinds, each with one
message line that names what was attempted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from edgefd.core.errors import EdgefdError, Unreachable


class ApiConflict(EdgefdError):
    """The object changed under us (409, or a failed `test` op: 422): re-read and retry."""


class ApiGone(ApiConflict):
    """410 Gone: the resourceVersion a watch resumes from is older than the server keeps (its
    watch cache moved on, or etcd compacted it): list again, then watch from the list."""


class ApiNotFound(EdgefdError):
    """The object does not exist (a Node not registered yet, a missing CRD)."""


class ApiRefused(EdgefdError):
    """The API answered and said no (401/403/400...): retrying soon will not help."""


class ApiUnreachable(Unreachable):
    """No answer, a timeout, or a 5xx/429: the link or the server is down; retry later.

    `retry_after`: the seconds the API server asked us to wait (429/503 with Retry-After, or
    a request refused by edgefd's own client while that wait runs), else None."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class HttpStatus(Exception):
    """A non-2xx answer, shaped like the client's ApiException for `classify`."""

    def __init__(
        self, status: int, body: bytes | str | None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body.decode(errors="replace") if isinstance(body, bytes) else body
        self.headers = headers


# The longest Retry-After honoured: a server (or a proxy in front of it) asking for more is
# treated as asking for this much, so a wrong header cannot park a sink for hours.
MAX_RETRY_AFTER = 120.0


def retry_after(exc: BaseException) -> float | None:
    """Seconds from the answer's Retry-After header (delta-seconds or an HTTP date), capped at
    MAX_RETRY_AFTER; None when absent or unreadable."""
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    value = None
    for k, v in dict(headers).items():
        if str(k).lower() == "retry-after":
            value = str(v).strip()
    if not value:
        return None
    try:
        seconds = float(value) if value.replace(".", "", 1).isdigit() else _date_delta(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _date_delta(value: str) -> float:
    when = parsedate_to_datetime(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


def api_message(exc: BaseException) -> str:
    """The API server's own explanation (its Status `message`), cut to one readable size."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message", body))[:300]
        except (ValueError, AttributeError):
            return str(body)[:300]
    return str(getattr(exc, "reason", "") or exc)[:300]


def classify(exc: BaseException, what: str) -> EdgefdError:
    """The kind of failure an HTTP error (anything with `.status` and `.body`) is."""
    status = getattr(exc, "status", None)
    if status is None or status == 0:
        return ApiUnreachable(f"{what}: API server unreachable ({type(exc).__name__}: {exc})")
    reason = api_message(exc)
    if status == 422 and " is invalid" in reason:
        # object validation (e.g. a label the API refuses): re-reading will not change that
        return ApiRefused(f"{what}: {status} {reason}")
    if status == 410:
        return ApiGone(f"{what}: {status} {reason}")
    if status in (409, 422):
        # 409: stale object; 422 without a validation message: a JSON Patch `test` (or a
        # pointer) no longer matches the object, i.e. it changed since we read it
        return ApiConflict(f"{what}: {status} {reason}")
    if status == 404:
        return ApiNotFound(f"{what}: not found ({reason})")
    if status == 429 or status >= 500:
        wait = retry_after(exc)
        asked = f"; asked to retry after {wait:g} s" if wait is not None else ""
        return ApiUnreachable(f"{what}: API server answered {status} ({reason}){asked}", wait)
    return ApiRefused(f"{what}: API server refused with {status} ({reason})")


def failure_kind(exc: BaseException) -> str:
    """A failure's kind in one word, for log lines and metric labels (edgefd.kube.retry):
    unreachable, conflict, notfound, refused, else error."""
    if isinstance(exc, ApiUnreachable):
        return "unreachable"
    if isinstance(exc, ApiConflict):
        return "conflict"
    if isinstance(exc, ApiNotFound):
        return "notfound"
    if isinstance(exc, ApiRefused):
        return "refused"
    return "error"
