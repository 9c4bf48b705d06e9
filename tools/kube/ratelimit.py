"""How fast one client may talk to the API server: a token bucket, plus the wait the server
itself asked for (429/503 with Retry-After).

A fleet's API server sees the sum of every node's client, so each client keeps its own rate
bounded whatever its loops decide (a file flapping, another controller fighting over a label,
a retry storm after an outage): at most `qps` requests a second sustained and `burst` at once.
A short wait for a token is slept in the request; a wait the server asked for is not: requests
during it fail at once with that wait attached (ApiUnreachable.retry_after), so the caller's
retry loop, which can be stopped, does the waiting.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

DEFAULT_QPS = 5.0
DEFAULT_BURST = 10

# what on_wait's `by` says
BY_CLIENT = "client"  # our own token bucket
BY_SERVER = "server"  # the API server's Retry-After


class RateLimiter:
    """A thread-safe token bucket of `burst` tokens refilled at `qps` a second.

    `on_wait(by, seconds)` is told of every wait (metrics); `sleep` and `clock` are injectable
    for tests."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> None:
        if not (qps > 0 and math.isfinite(qps)) or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._on_wait = on_wait or (lambda by, seconds: None)
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._stamp = clock()
        self._not_before = 0.0  # the server's Retry-After, as a clock time
        self.waits = 0  # requests that had to wait for a token (for the first-time log line)

    def _refill(self, now: float) -> None:
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0: go now). Tokens may go
        negative: each waiter reserves its own slot, so waiters are served in order."""
        with self._lock:
            now = self._clock()
            self._refill(now)
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            if wait > 0:
                self.waits += 1
            return wait

    def acquire(self) -> float:
        """Wait for a token (sleeping here); the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            self._on_wait(BY_CLIENT, wait)
            self._sleep(wait)
        return wait

    def hold_off(self, seconds: float) -> None:
        """The server asked for no request in the next `seconds` (never shortens an earlier
        request to wait)."""
        with self._lock:
            self._not_before = max(self._not_before, self._clock() + max(0.0, seconds))
        self._on_wait(BY_SERVER, max(0.0, seconds))

    def held_for(self) -> float:
        """Seconds left of the server's requested wait (0 when none)."""
        with self._lock:
            return max(0.0, self._not_before - self._clock())
