"""Settings every long-running edgefd process shares: where it serves its probes and metrics,
and how it watches for changes. Plain values, no click (the CLI builds them from options)."""

from __future__ import annotations

from .record import Record

Listen = tuple[str, int] | None


def parse_listen(value: str) -> Listen:
    """`host:port`, `:port` (all interfaces) or '' (no server); port 0 picks a free port."""
    value = value.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError(f"{value!r}: expected HOST:PORT or :PORT")
    try:
        port_n = int(port)
    except ValueError:
        raise ValueError(f"{value!r}: port must be a number") from None
    if not 0 <= port_n <= 65535:
        raise ValueError(f"{value!r}: port out of range")
    return host.strip("[]") or "0.0.0.0", port_n


class WatchSettings(Record):
    """How a watcher of the buses sees changes, one set of defaults for every tool.

    poll_interval    how often a listing is compared where no event source works (no
                     uevents with `hostUsers: false`; a fixture tree without inotify)
    rescan_interval  a full rescan whatever happens: the backstop for a change no listing
                     shows (a driver binding) and the heartbeat /healthz checks
    debounce         quiet time that ends a burst (a hub with four devices, a re-enumeration)
    max_delay        the longest a burst can hold a rescan back
    """

    poll_interval: float = 0.25
    rescan_interval: float = 10.0
    debounce: float = 0.1
    max_delay: float = 0.3


WATCH_DEFAULTS = WatchSettings()
