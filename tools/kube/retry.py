"""The one way a loop that talks to the API server retries: backed off, never sooner than the
server asked, said once, counted.

A fleet of nodes losing its API server at once comes back at once; if each loop retried on a
fixed period they would hammer the server in lock-step. So every retry waits a jittered,
capped exponential backoff (edgefd.core.backoff), stretched to the server's Retry-After when
it sent one (ApiUnreachable.retry_after). The first failure of a streak is logged at the
default verbosity (warning), a failure of another kind (reason) again, a repeat of the same
kind only at debug level (an unreachable server's message differs at every attempt, and a
steady outage must not fill the log); the first success after failures says so.
`on_retry(reason)` counts every retry (a metric).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from edgefd.core.backoff import Backoff

log = logging.getLogger(__name__)


class Retry:
    """The retry schedule and reporting of one loop (`what` names it in log lines)."""

    def __init__(
        self,
        what: str,
        initial: float = 0.2,
        cap: float = 30.0,
        on_retry: Callable[[str], None] | None = None,
        logger: logging.Logger | None = None,
        speak: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`speak=False`: no log lines (a caller that reports failures in its own words)."""
        self.what = what
        self.backoff = Backoff(initial=initial, cap=cap)
        self.on_retry = on_retry or (lambda reason: None)
        self.log = logger or log
        self.speak = speak
        self.clock = clock
        # the current streak of failures: how many, since when, the last one's reason and text
        self.failures = 0
        self.since: float | None = None
        self.last_error: str | None = None
        self.last_reason: str | None = None

    def failed(self, exc: BaseException, reason: str = "error") -> float:
        """Record a failure; the seconds to wait before the next attempt."""
        delay = self.backoff.next_delay()
        asked = getattr(exc, "retry_after", None)
        if asked is not None:
            delay = max(delay, float(asked))
        if self.failures == 0:
            self.since = self.clock()
        self.failures += 1
        msg = str(exc)
        if not self.speak:
            pass
        elif reason != self.last_reason:
            self.log.warning("%s failed (%s): %s", self.what, reason, msg)
        else:
            self.log.debug(
                "%s failed again (%s, retry in %.1f s): %s", self.what, reason, delay, msg
            )
        self.last_error, self.last_reason = msg, reason
        self.on_retry(reason)
        return delay

    def succeeded(self) -> None:
        if self.failures and self.speak:
            self.log.warning("%s succeeded again after %d failure(s)", self.what, self.failures)
        self.failures = 0
        self.since = None
        self.last_error = self.last_reason = None
        self.backoff.reset()

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def lasted(self) -> float:
        """How long the current streak has lasted (0 without one)."""
        return self.clock() - self.since if self.since is not None else 0.0
