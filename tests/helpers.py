"""Helpers every test suite shares: waiting for a condition, without a copy per module."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    pred: Callable[[], Any], timeout: float = 5.0, step: float = 0.01, what: str = "condition"
) -> Any:
    """Poll `pred` until it returns something true (and return that), or fail the test after
    `timeout` seconds. A predicate that raises counts as not yet (a file half written)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except (LookupError, AttributeError, OSError, ValueError):
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(step)
