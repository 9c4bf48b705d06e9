"""What only a one-shot command (dt-labeller, usb-scan or pci-scan without --watch) does."""

from __future__ import annotations

_exit_freeze: list[bool] = []


def freeze_at_exit() -> None:
    """For a one-shot command: at interpreter exit, before its teardown, move every object to
    the collector's permanent generation, so that the teardown's full collections have nothing
    to walk. Measured on `usb-scan --dry-run`: teardown 11 ms -> 4 ms, a seventh of the floor
    of a click command, which every init container and CI pipeline pays. atexit runs before
    those collections, and a test process that runs a command many times registers it once.
    Not for the long-running tools: with it registered in every command, bus-scan and
    feature-sink read 0.9 and 1.9 MiB more at rest in four real-node e2e runs out of four,
    for a cause not found (their memory is issue 33's first budget)."""
    if not _exit_freeze:
        import atexit
        import gc

        _exit_freeze.append(True)
        atexit.register(gc.freeze)
