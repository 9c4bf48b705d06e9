"""Notices are read from a directory other containers write: each bad file is a warning that
names it and why (never its content), and nothing in it blocks or floods the sink."""

from __future__ import annotations

import json
import os
from pathlib import Path

from edgefd.core.notices import (
    CONFIG_RELOAD_FAILED,
    MAX_MESSAGE,
    MAX_NOTICES,
    Notice,
    NoticeBoard,
    read_notices,
)


def _write(d: Path, name: str, body: object) -> None:
    (d / name).write_text(json.dumps(body) if not isinstance(body, str) else body)


def test_a_posted_notice_reads_back_on_one_line_and_clears(tmp_path: Path) -> None:
    board = NoticeBoard(tmp_path, "usb-scan")
    board.post(CONFIG_RELOAD_FAILED, "c.yaml:4:4: bad\n  in the list\tat 2:3")
    assert read_notices(tmp_path) == (
        (Notice("usb-scan", CONFIG_RELOAD_FAILED, "c.yaml:4:4: bad in the list at 2:3"),),
        (),
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
    board.clear()
    board.clear()  # twice: nothing to remove is not an error
    assert read_notices(tmp_path) == ((), ())


def test_a_long_message_is_clipped_to_what_an_event_shows(tmp_path: Path) -> None:
    NoticeBoard(tmp_path, "devplugin").post(CONFIG_RELOAD_FAILED, "x" * 5000)
    (n,), _ = read_notices(tmp_path)
    assert len(n.message) == MAX_MESSAGE and n.message.endswith("…")


def test_bad_files_are_warnings_that_never_quote_them(tmp_path: Path) -> None:
    _write(tmp_path, "a.notice", "s3cr3t not json")
    _write(tmp_path, "b.notice", {"reason": "Anything", "message": "s3cr3t"})
    _write(tmp_path, "c.notice", {"reason": CONFIG_RELOAD_FAILED, "message": "s3cr3t\x1b[2J"})
    _write(tmp_path, "Bad_Name.notice", {"reason": CONFIG_RELOAD_FAILED, "message": "s3cr3t"})
    _write(tmp_path, "d.notice", {"reason": CONFIG_RELOAD_FAILED, "message": "y" * 2000})
    _write(tmp_path, "e.notice", "x" * 5000)
    os.mkfifo(tmp_path / "f.notice")  # opened non-blocking: no hang
    (tmp_path / "g.notice").symlink_to("/etc/hostname")
    _write(tmp_path, "readme.txt", "not a notice: not read")
    notices, warnings = read_notices(tmp_path)
    assert notices == ()
    assert len(warnings) == 8
    assert not any("s3cr3t" in w or "/etc/hostname" in w for w in warnings)
    text = "\n".join(warnings)
    for why in (
        "not a JSON object",
        "unknown reason",
        "control characters",
        "not <tool>.notice",
        "longer than",
        "larger than",
        "FIFO",
        "symlink",
    ):
        assert why in text


def test_a_flood_is_cut_and_said_and_a_missing_directory_has_none(tmp_path: Path) -> None:
    for i in range(MAX_NOTICES + 5):
        _write(tmp_path, f"t{i:03d}.notice", {"reason": CONFIG_RELOAD_FAILED, "message": "m"})
    notices, warnings = read_notices(tmp_path)
    assert len(notices) == MAX_NOTICES and "read the first" in warnings[0]
    assert read_notices(tmp_path / "missing") == ((), ())
