"""Durations as people write them: `86400`, `30s`, `10m`, `24h`, `250ms`. One grammar for every
flag and every configuration field that is a length of time, so `forget_after: 24h` in a
ConfigMap reads like `--hold 3s` on a command line.

Only digits are accepted, so `nan`, `inf` and negative values cannot get in: a duration that is
not a finite number either spins a loop or makes it never wake.
"""

from __future__ import annotations

import math
import re

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$", re.ASCII)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
EXAMPLES = "e.g. 30, 30s, 10m, 24h, 250ms"


def parse_duration(value: object) -> float:
    """Seconds from a number or a string with an optional unit; ValueError says why not."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{value!r} is not a finite duration")
        return seconds
    m = _DURATION_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})")
    return float(m.group(1)) * _UNITS[m.group(2)]
