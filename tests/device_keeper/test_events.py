"""The moves as JSON lines (`serve --events`): one line, one move, with its access, second node
and DRA names; a bad line refused (the stream skips it, see test_cli); a followed file read as
it grows and from its start again when replaced."""

from __future__ import annotations

import pytest

from edgefd.device_keeper.events import parse


def test_event_with_access_and_a_second_node():
    m = parse(
        '{"device": {"name": "x", "dra": [["edgefd.io", "n1", "x"]], "ids": ["x"]}, '
        '"old": "c:189:4", "new": "c:189:5:rwm", "path": "/dev/edgefd/x.1"}'
    )
    assert (m.access, m.container_path) == ("rwm", "/dev/edgefd/x.1")
    assert m.device.dra == frozenset({("edgefd.io", "n1", "x")})
    assert m.device.ids == frozenset({"x"})


@pytest.mark.parametrize(
    "line",
    [
        '{"device": {"name": "../etc"}, "old": "c:1:2", "new": "c:1:3"}',
        '{"device": {"name": "x", "plugin": [["only-one"]]}, "old": "c:1:2", "new": "c:1:3"}',
        '{"device": {"name": "x"}, "old": "c:1", "new": "c:1:3"}',
        '{"device": {"name": "x", "ids": "x"}, "old": "c:1:2", "new": "c:1:3"}',
        "[]",
        '{"device": {"name": "x"}, "old": "c:1:2", "new": "c:1:3", "path": "/etc/passwd"}',
    ],
)
def test_bad_events(line):
    with pytest.raises(Exception):  # noqa: B017 - ValueError or UsageError, both skip the line
        parse(line)


def test_follow_reads_lines_as_they_are_appended_and_a_replaced_file(tmp_path):
    from edgefd.device_keeper.events import follow

    path = tmp_path / "moves.jsonl"
    got: list[str] = []
    steps = iter(
        [
            lambda: path.write_text("one\ntw"),  # the file appears, the 2nd line half-written
            lambda: path.open("a").write("o\n"),
            lambda: (path.unlink(), path.write_text("three\n")),  # replaced: read from its start
        ]
    )

    def wait(_: float) -> None:
        step = next(steps, None)
        if step is not None:
            step()

    for line in follow(str(path), lambda: len(got) == 3, wait):
        got.append(line)
    assert got == ["one\n", "two\n", "three\n"]


GOOD = '{"device": {"name": "x", "ids": ["x"]}, "old": "c:189:4", "new": "c:189:5"}'


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("[" * 5_000 + "]" * 5_000, "nested deeper than 16 levels"),  # was RecursionError
        ('{"device": {"name": "x", "ids": [' + "[" * 20 + "]" * 20 + "]}}", "nested deeper"),
        ('{"device": {"name": "' + "x" * 70_000 + '"}}', "longer than 65536 characters"),
        ('{"device": {"name": "x", "ids": [1]}, "old": "c:1:2", "new": "c:1:3"}', "ids"),
    ],
)
def test_a_line_no_move_looks_like_is_skipped_with_a_warning(line, why, caplog):
    """issue 30 (7): one deeply nested line ended `serve --events` (a RecursionError out of
    the parser, exit 70) instead of being skipped as a bad line."""
    import logging

    from edgefd.device_keeper.events import moves

    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        got = list(moves([line, GOOD]))
    assert [m.device.name for m in got] == ["x"]
    [record] = caplog.records
    assert record.levelno == logging.WARNING and why in record.getMessage()
    assert record.getMessage().startswith("event line 1: ")


def test_brackets_inside_strings_are_not_nesting():
    from edgefd.device_keeper.events import nesting

    assert nesting('{"a": "[[[[{{{{\\"[[[["}') == 1
    assert nesting('{"a": [[{"b": []}]]}') == 5


def test_an_overlong_line_is_never_held_whole(tmp_path):
    """A line of megabytes without a newline: at most MAX_LINE + 1 characters of it are
    kept, read or followed, and the next line is whole."""
    import io

    from edgefd.device_keeper.events import MAX_LINE, bounded, follow

    text = "y" * (3 * MAX_LINE) + "\n" + GOOD + "\n"
    lines = list(bounded(io.StringIO(text)))
    assert [len(x) for x in lines[:1]] == [MAX_LINE + 1] and lines[1] == GOOD + "\n"
    path = tmp_path / "moves.jsonl"
    path.write_text(text)
    got: list[str] = []
    for line in follow(str(path), lambda: len(got) == 2, lambda _: None):
        got.append(line)
    assert len(got[0]) == MAX_LINE + 1 and got[1] == GOOD + "\n"
