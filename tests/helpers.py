"""What every test suite shares, once: waiting for a condition, and loopback ports.

`wait_until` polls a predicate until it returns something true and returns that, or fails the
test; a predicate that raises one of `errors` (an API server that is restarting, a file
caught half written) counts as "not yet", and the last such error is named if time runs out.
`seconds_until` is the same for a test that measures how long it took.

`free_port` / `free_ports` give loopback TCP ports for a server a test starts (or for a
kubeconfig naming a server that is not there): the kernel picks them (bind to port 0), so
parallel runs do not collide on a fixed number. `free_ports(n)` holds all `n` until it has them,
so they are distinct; they were free a moment ago, not reserved.

`untimed` is a tool's stderr without the RFC 3339 time that begins each text log line
(edgefd.core.log), for the tests that compare what follows it.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_until(
    pred: Callable[[], Any],
    timeout: float = 5.0,
    step: float = 0.01,
    what: str = "condition",
    errors: tuple[type[BaseException], ...] = (Exception,),
) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = pred()
        except errors as e:
            value, last = None, e
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f" (last error: {last!r})" if last is not None else ""
            raise AssertionError(f"{what}: not within {timeout:g}s{extra}")
        time.sleep(step)


def seconds_until(pred: Callable[[], Any], timeout: float, step: float = 0.02) -> float | None:
    """How long until `pred()` is true; None if it is not within `timeout`."""
    start = time.monotonic()
    try:
        wait_until(pred, timeout, step)
    except AssertionError:
        return None
    return time.monotonic() - start


def free_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", re.M)


def untimed(text: str) -> str:
    """`text` with each line's leading log time (`2026-12-02T05:04:08.123Z `) taken off."""
    return _TIME.sub("", text)


def feature_files(directory: Path) -> list[str]:
    """The names in a features.d, sorted, besides the producers' staging directory (which must
    hold no temp file left behind)."""
    from edgefd.core.publish import STAGING

    staging = Path(directory) / STAGING
    if staging.is_dir():
        assert list(staging.iterdir()) == [], "temp files left in the staging directory"
    return sorted(p.name for p in Path(directory).iterdir() if p.name != STAGING)
