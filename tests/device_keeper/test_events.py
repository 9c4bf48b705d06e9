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
