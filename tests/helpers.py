"""What every test suite shares, once: waiting for a condition.

`wait_until` polls a predicate until it returns something true and returns that, or fails the
test; a predicate that raises one of `errors` (an API server that is restarting, a file
caught half written) counts as "not yet", and the last such error is named if time runs out.
`seconds_until` is the same for a test that measures how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
