"""What may be found where the DRA front-end keeps a file (its checkpoint, a claim's CDI spec):
not a small regular file but a FIFO, a symlink to /dev/zero or a huge file
(`fifo_symlink_huge`), and the check that a call on it returns rather than blocks
(`finishes`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def finishes(fn: Callable[[], Any], seconds: float = 5.0) -> Any:
    """fn() on a thread; fails if it has not returned within `seconds` (a blocked open)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    return out[0] if out else None


def fifo_symlink_huge(path: Path, what: str) -> None:
    if what == "fifo":
        os.mkfifo(path)
    elif what == "symlink":
        path.symlink_to("/dev/zero")
    elif what == "huge":
        with open(path, "wb") as fh:
            fh.truncate(64 << 20)
