"""The cap on a gRPC server's open streams, for both front-ends' watch streams (the device
plugin's ListAndWatch, DRA's NodeWatchResources).

A stream stays open for as long as its client wants, and every open stream costs the server
something for its whole life (a coroutine and its buffers; on a thread-pool server a whole
worker). Without a bound, a client that loops on the watch call, or several that linger,
grow that cost without end, or take every worker the unary calls need. Beyond the cap a new
stream is refused at once with RESOURCE_EXHAUSTED (the client may retry later), the streams
already open carry on, and the refusal is logged once per time the cap is reached (a client
looping on the call does not flood the log).
"""

from __future__ import annotations

import logging
import threading

import grpc

log = logging.getLogger(__name__)

REFUSED = grpc.StatusCode.RESOURCE_EXHAUSTED


class StreamCap:
    """At most `limit` open streams of `what` (`coral-usb: ListAndWatch`). Thread-safe: the
    thread-pool server's workers and the asyncio loop alike call it."""

    def __init__(self, limit: int, what: str) -> None:
        if limit < 1:
            raise ValueError(f"a stream cap needs a limit of at least 1 (got {limit})")
        self.limit = limit
        self.what = what
        self._lock = threading.Lock()
        self._open = 0
        self._said = False  # the refusal was logged since the cap was last below its limit

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    @property
    def refusal(self) -> str:
        """The status detail a refused stream gets."""
        return f"{self.what}: {self.limit} streams are open already"

    def enter(self) -> bool:
        """Count one more open stream; False (nothing counted) when the cap is reached, and
        the caller refuses the stream with REFUSED and `refusal`."""
        with self._lock:
            if self._open < self.limit:
                self._open += 1
                return True
            say, self._said = not self._said, True
        if say:
            log.warning("%s; refusing new ones (RESOURCE_EXHAUSTED) until one ends", self.refusal)
        return False

    def leave(self) -> None:
        """One counted stream ended."""
        with self._lock:
            self._open = max(0, self._open - 1)
            if self._open < self.limit:
                self._said = False
