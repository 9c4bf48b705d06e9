"""Settings every long-running process shares (edgefd.core.service): the listen address as
`host:port`, `:port` (all interfaces), an IPv6 host in brackets, or '' for no server; anything
else refused with what was expected."""

from __future__ import annotations

import pytest

from edgefd.core.service import WATCH_DEFAULTS, parse_listen


@pytest.mark.parametrize(
    ("value", "listen"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (":8081", ("0.0.0.0", 8081)),
        ("[::1]:9000", ("::1", 9000)),
        (" :0 ", ("0.0.0.0", 0)),
        ("", None),
        ("  ", None),
    ],
)
def test_a_listen_address(value: str, listen: tuple[str, int] | None) -> None:
    assert parse_listen(value) == listen


@pytest.mark.parametrize(
    ("value", "why"),
    [("8080", "expected HOST:PORT"), (":http", "must be a number"), (":65536", "out of range")],
)
def test_what_is_not_a_listen_address_says_why(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_listen(value)


def test_the_watch_defaults_are_one_set_for_every_tool() -> None:
    assert (WATCH_DEFAULTS.poll_interval, WATCH_DEFAULTS.rescan_interval) == (0.25, 10.0)
    assert WATCH_DEFAULTS.debounce <= WATCH_DEFAULTS.max_delay


def test_listen_addresses():
    assert parse_listen(":8081") == ("0.0.0.0", 8081)
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("") is None
    assert parse_listen("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("8081")
    with pytest.raises(ValueError, match="out of range"):
        parse_listen(":70000")
