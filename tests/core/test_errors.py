"""Expected failures and their exit codes, the same for every tool (edgefd.core.errors): the
documented numbers, each error class's code, and the list `--help` ends with (one code a
line, wrapped, a tool's own wording for a code, or a code left out)."""

from __future__ import annotations

from edgefd.core.errors import exit_code_lines


def test_exit_code_constants_are_the_documented_ones() -> None:
    from edgefd.core import errors as e

    assert (e.EXIT_OK, e.EXIT_FAILED, e.EXIT_USAGE, e.EXIT_BAD_INPUT) == (0, 1, 2, 3)
    assert (e.EXIT_OUTPUT, e.EXIT_UNREACHABLE, e.EXIT_INTERNAL) == (4, 5, 70)
    assert e.BadInput("x").exit_code == 3
    assert e.HostUnreadable("x").exit_code == 3
    assert e.UsageError("x").exit_code == 2
    assert e.OutputError("x").exit_code == 4
    assert e.EdgefdError("x", 9).exit_code == 9


def test_the_exit_codes_as_help_lists_them() -> None:
    lines = exit_code_lines({3: "malformed devicetree (the previous file is kept)", 5: None}, 40)
    assert lines[:2] == ["  0   ok", "  1   the operation failed"]
    assert "  3   malformed devicetree (the previous" in lines
    assert "      file is kept)" in lines  # wrapped to the width, indented under the text
    assert not any(line.startswith("  5 ") for line in lines)  # a code this tool never returns
    assert lines[-2:] == ["  70  internal error: a bug (run with -v", "      for the traceback)"]
    assert all(len(line) <= 40 for line in lines)
