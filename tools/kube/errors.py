"""The kinds of API failure a caller acts on differently, and the mapping from HTTP answers.

The tools retry some failures (the link or server is down, the object moved under them) and
give up on others (the server said no), so every error is one of four kinds, each with one
message line that names what was attempted.
"""

from __future__ import annotations

import json

from edgefd.core.errors import EdgefdError, Unreachable


class ApiConflict(EdgefdError):
    """The object changed under us (409, or a failed `test` op: 422): re-read and retry."""


class ApiNotFound(EdgefdError):
    """The object does not exist (a Node not registered yet, a missing CRD)."""


class ApiRefused(EdgefdError):
    """The API answered and said no (401/403/400...): retrying soon will not help."""


class ApiUnreachable(Unreachable):
    """No answer, a timeout, or a 5xx/429: the link or the server is down; retry later."""


class HttpStatus(Exception):
    """A non-2xx answer, shaped like the client's ApiException for `classify`."""

    def __init__(self, status: int, body: bytes | str | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body.decode(errors="replace") if isinstance(body, bytes) else body


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
    if status in (409, 422):
        # 409: stale object; 422 without a validation message: a JSON Patch `test` (or a
        # pointer) no longer matches the object, i.e. it changed since we read it
        return ApiConflict(f"{what}: {status} {reason}")
    if status == 404:
        return ApiNotFound(f"{what}: not found ({reason})")
    if status == 429 or status >= 500:
        return ApiUnreachable(f"{what}: API server answered {status} ({reason})")
    return ApiRefused(f"{what}: API server refused with {status} ({reason})")
