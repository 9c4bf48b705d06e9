"""Durations as people write them (edgefd.core.duration), one grammar for every flag and
configuration field: bare seconds or with a unit (ms, s, m, h); nothing that is not a finite,
non-negative number gets in, and a refusal says what a duration looks like."""

from __future__ import annotations

import pytest

from edgefd.core.duration import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("86400", 86400.0),
        ("30s", 30.0),
        ("10m", 600.0),
        ("24h", 86400.0),
        ("250ms", 0.25),
        (" 1.5 s ", 1.5),
        (".5", 0.5),
        ("3.", 3.0),
        (0, 0.0),
        (2.5, 2.5),
    ],
)
def test_what_a_duration_may_look_like(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "nan",
        "inf",
        "-1",
        "1e3",
        "30x",
        "",
        "1 d",
        "+3",
        float("nan"),
        True,
        "\u0663s",
        "\uff13\uff10",
    ],
)
def test_what_is_not_a_duration_says_why(value: object) -> None:
    with pytest.raises(ValueError, match=r"is not a (finite )?duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (86400.0, "24h"),
        (3600.0, "1h"),
        (600.0, "10m"),
        (90.0, "90s"),
        (3.0, "3s"),
        (0.25, "250ms"),
        (0.05, "50ms"),
        (1.5, "1.5s"),
        (0.0, "0s"),
    ],
)
def test_a_duration_is_shown_as_it_is_written(seconds: float, written: str) -> None:
    """Issue 32 item 2: start-up lines said `forget_after=86400s` for a flag written `24h`;
    format_duration is parse_duration's inverse, in the largest whole unit."""
    assert format_duration(seconds) == written
    assert parse_duration(written) == seconds
