"""Expected failures and the exit codes they end a command with, the same for every tool.

  0  success (for a producer this includes "nothing found", e.g. no devicetree on x86)
  1  the requested operation failed (e.g. `feature-sink --once` could not sync)
  2  usage error: a bad option or argument
  3  bad input: a malformed DTB, config file or feature stream, or a host that cannot be read
  4  cannot write output (features directory not writable, disk full, not a regular file)
  5  a peer is unreachable (API server, kubelet) where the mode needs it
  70 internal error: a bug; run with -v for the traceback and please report it

They live below every other module (no click here) so that readers of files and of the host can
raise them without depending on the command-line layer.
"""

from __future__ import annotations

from collections.abc import Mapping

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_OUTPUT = 4
EXIT_UNREACHABLE = 5
EXIT_INTERNAL = 70

# What each code means, as every tool's `--help` lists it (a tool may say more about a code,
# or leave out one it never returns: edgefd.cli.command).
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_FAILED: "the operation failed",
    EXIT_USAGE: "usage error (a bad option or argument)",
    EXIT_BAD_INPUT: "bad input (a malformed file, config or stream) or a host that cannot be read",
    EXIT_OUTPUT: "cannot write output",
    EXIT_UNREACHABLE: "a peer (API server, kubelet) is unreachable",
    EXIT_INTERNAL: "internal error: a bug (run with -v for the traceback)",
}


def exit_code_lines(notes: Mapping[int, str | None] | None = None, width: int = 78) -> list[str]:
    """The exit codes as `--help` lists them, one code a line (wrapped to `width`): the
    shared meanings, with a tool's own `notes` (a more precise text for a code, or None for a
    code it never returns). Wrapped by hand: importing textwrap would cost every start-up."""
    lines = []
    for code, text in sorted({**EXIT_MEANINGS, **(notes or {})}.items()):
        if not text:
            continue
        first, *words = text.split()
        line = f"  {code:<3} {first}"
        for word in words:
            if len(line) + 1 + len(word) > width:
                lines.append(line)
                line = " " * 6 + word
            else:
                line += " " + word
        lines.append(line)
    return lines


class EdgefdError(Exception):
    """An expected failure: its message is shown to the user as is, with its exit code."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(EdgefdError):
    exit_code = EXIT_USAGE


class BadInput(EdgefdError):
    exit_code = EXIT_BAD_INPUT


class OutputError(EdgefdError):
    exit_code = EXIT_OUTPUT


class Unreachable(EdgefdError):
    exit_code = EXIT_UNREACHABLE


class HostUnreadable(EdgefdError):
    """What a producer is meant to read exists but cannot be read (sysfs not mounted, a bus or
    the devicetree unreadable): "could not read" must never be published as "nothing there"."""

    exit_code = EXIT_BAD_INPUT
