"""A command's process from its first line to its exit: the cyclic garbage collector kept out
of start-up, and an end without the interpreter's teardown.

Start-up allocates tens of thousands of objects that live as long as the process (modules,
classes, functions, click's commands and options), and the collector walks all of them again
each time enough new ones have piled up: some twenty times while a scanner starts. At exit
the interpreter collects once more and tears every module down, one by one. For a one-shot
`usb-scan --dry-run` the two cost about a quarter of its run (issue 33: one-shot tools within
1.3x of `python -c "import click"`), and neither does anything a finished command needs.

So each command's entry point (its package's `__main__`, which the console scripts name too:
`entry_point()`) calls `begin()` before it imports anything and runs the command through
`run()`: collection
is deferred; a long-running tool, once it serves (edgefd.runtime.runner), freezes what
start-up made (kept out of every later collection: cheaper ones for the life of the process)
and turns collection back on with `started()`; and when the command returns, the atexit
handlers run and the streams are flushed as at any exit, and then the process ends with the
command's status, unless another thread still runs (the interpreter's own exit waits for
those). Reference counting frees everything that is not in a cycle meanwhile, as always.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any, NoReturn


def begin() -> None:
    """The first thing an entry point does, before anything is imported."""
    gc.disable()


def entry_point(package: str) -> Callable[[], NoReturn]:
    """A tool's `main` (its `__main__`'s, and so its console script's): collection deferred
    now; the tool's command (`<package>.cli`'s `main`) imported and run when it is called."""
    begin()

    def main() -> NoReturn:
        from importlib import import_module

        run(import_module(f"{package}.cli").main)

    return main


def started() -> None:
    """Start-up is over: what it made and still uses is kept out of every later collection,
    which runs again. A process whose entry point did not `begin()` (a test calling the
    runner) is left as it is."""
    if not gc.isenabled():
        gc.collect()  # the cycles start-up left behind, once, so that none is frozen
        gc.freeze()
        gc.enable()


def run(main: Callable[[], Any]) -> NoReturn:
    """Run a click command (standalone: it ends in SystemExit) and end the process with its
    status, as the interpreter would, without tearing the interpreter down."""
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
