"""How a command's process ends: with the command's status, its output and its atexit
handlers, and without the interpreter's teardown.

At exit the interpreter collects the garbage one last time and tears every module down, one
by one: for a one-shot `usb-scan --dry-run` (forty-odd modules of its own, click's) about a
fifth of its run, none of it anything a finished command needs. Ending the process once the
atexit handlers ran (logging's flush among them) and the streams are flushed took the
scanners from 1.32x to 1.10x the floor of any click command (`python -c "import click"`,
issue 33's goal 1.3x; benchmarks/bench_footprint.py).

Deferring the cyclic collector through start-up as well (gc.disable, then gc.freeze once
serving) bought the one-shot runs another 0.04x. In warm real-node e2e runs the pod's idle
working set read 100.9-106.4 MiB with it against 93.5 MiB without (issue 33's budget 96 MiB),
so the collector is left alone; but a cold CI run of the tree without it read 103.7-105.9 MiB
too, so how much of that difference was the collector is not settled (issue 33's note).

Each command's entry point is its package's `__main__` (which the console scripts name too):
`main = entry_point(__package__)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn


def entry_point(package: str) -> Callable[[], NoReturn]:
    """A tool's `main`: its command (`<package>.cli`'s `main`) imported and run by `run()`."""

    def main() -> NoReturn:
        from importlib import import_module

        run(import_module(f"{package}.cli").main)

    return main


def run(main: Callable[[], Any]) -> NoReturn:
    """Run a click command (standalone: it ends in SystemExit) and end the process with its
    status, as the interpreter would, without tearing the interpreter down; unless another
    thread still runs, which the interpreter's own exit waits for."""
    import sys

    try:
        main()
        status: Any = 0
    except SystemExit as e:
        status = e.code
    import threading

    if threading.active_count() > 1:
        sys.exit(status)
    import atexit
    import os

    if status is None:
        status = 0
    elif not isinstance(status, int):  # SystemExit("message"), as the interpreter prints it
        print(status, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()  # logging's flush among them
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            pass  # the reader went away (`| head`): not a failure (edgefd.cli.run_guarded)
        except (OSError, ValueError):
            status = status or 120  # the interpreter's status for output it could not write
    os._exit(status)
