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


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration, as a person would write it: the largest unit that
    gives a whole number (86400 -> `24h`, 600 -> `10m`, 3 -> `3s`, 0.25 -> `250ms`), so a
    start-up line shows a setting as it is written on the command line or in a config
    (`forget_after=24h`, not `86400s`). A value that is whole in no unit is shown in seconds
    (`1.5s`); 0 is `0s`."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        n = seconds / size
        if n >= 1 and abs(n - round(n)) < 1e-9:
            return f"{round(n)}{unit}"
    ms = seconds * 1000
    if abs(ms - round(ms)) < 1e-6 and seconds < 1:
        return f"{round(ms)}ms"
    return f"{seconds:g}s"
