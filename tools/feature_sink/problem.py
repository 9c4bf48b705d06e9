"""One thing a person should fix, as the sink tells it (report.py: a log line and a Warning
Event). A module of its own so that what makes problems (report.py, notices.py) and what
tells them need not import each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """`key` identifies it across syncs (and names its Event, so the API server deduplicates
    across restarts); neither it nor `message` holds refused content. `detail` may, and is
    only logged at debug level."""

    reason: str  # the Event reason
    message: str
    key: str
    detail: str = ""
