"""Notices are read one per writer, each from the writer's own directory: whose a notice is
comes from where it is, never from what the file says; a file that is not a notice is still
its writer's (why, never its content), and nothing a writer puts in its own directory blocks,
floods or hides another writer's notice (issue 46 item 4)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from edgefd.core.notices import (
    CONFIG_RELOAD_FAILED,
    FILE,
    MAX_MESSAGE,
    MAX_WRITERS,
    UNREADABLE,
    Notice,
    NoticeBoard,
    read_notices,
    writer_directories,
)


def _root(tmp_path: Path, *writers: str) -> Path:
    """The sink's --notice-dir: one directory per writer, as the pod mounts them."""
    root = tmp_path / "notices"
    for w in writers:
        (root / w).mkdir(parents=True)
    root.mkdir(exist_ok=True)
    return root


def _write(d: Path, body: object) -> None:
    (d / FILE).write_text(json.dumps(body) if not isinstance(body, str) else body)


def test_a_posted_notice_is_its_writers_by_its_directory_and_clears(tmp_path: Path) -> None:
    root = _root(tmp_path, "bus-scan", "devplugin")
    board = NoticeBoard(root / "bus-scan", "usb-scan")  # the tool's name is not the writer's
    board.post(CONFIG_RELOAD_FAILED, "c.yaml:4:4: bad\n  in the list\tat 2:3")
    assert read_notices(root) == (
        (Notice("bus-scan", CONFIG_RELOAD_FAILED, "c.yaml:4:4: bad in the list at 2:3"),),
        (),
    )
    assert [p.name for p in (root / "bus-scan").iterdir()] == [FILE]  # no temp file left
    board.clear()
    board.clear()  # twice: nothing to remove is not an error
    assert read_notices(root) == ((), ())


def test_what_a_file_says_never_changes_whose_it_is(tmp_path: Path) -> None:
    """bus-scan wrote a notice naming the kubelet (in its name and its body): it is still
    bus-scan's, and files named for other tools in its directory are not read at all."""
    root = _root(tmp_path, "bus-scan")
    d = root / "bus-scan"
    _write(d, {"reason": CONFIG_RELOAD_FAILED, "message": "m", "tool": "kubelet"})
    (d / "kubelet.notice").write_text(json.dumps({"reason": CONFIG_RELOAD_FAILED, "message": "x"}))
    (d / "devplugin.notice").write_text("{}")
    assert read_notices(root) == ((Notice("bus-scan", CONFIG_RELOAD_FAILED, "m"),), ())


def test_a_long_message_is_clipped_to_what_an_event_shows(tmp_path: Path) -> None:
    root = _root(tmp_path, "devplugin")
    NoticeBoard(root / "devplugin", "devplugin").post(CONFIG_RELOAD_FAILED, "x" * 5000)
    (n,), _ = read_notices(root)
    assert len(n.message) == MAX_MESSAGE and n.message.endswith("…")


def test_a_bad_notice_is_its_writers_saying_why_never_what(tmp_path: Path) -> None:
    bodies: dict[str, object] = {
        "a": "s3cr3t not json",
        "b": {"reason": "Anything", "message": "s3cr3t"},
        "c": {"reason": CONFIG_RELOAD_FAILED, "message": "s3cr3t\x1b[2J"},
        "d": {"reason": CONFIG_RELOAD_FAILED, "message": "s3cr3t \u202e"},  # bidi override
        "e": {"reason": CONFIG_RELOAD_FAILED, "message": "y" * 2000},
        "f": "x" * 5000,
    }
    root = _root(tmp_path, *bodies, "g", "h", "i")
    for w, body in bodies.items():
        _write(root / w, body)
    os.mkfifo(root / "g" / FILE)  # opened non-blocking: no hang
    (root / "h" / FILE).symlink_to("/etc/hostname")
    (root / "i" / FILE).mkdir()
    notices, warnings = read_notices(root)
    assert warnings == ()
    assert [n.writer for n in notices] == [*bodies, "g", "h", "i"]
    assert all(n.reason == UNREADABLE and not n.readable for n in notices)
    assert not any("s3cr3t" in n.message or "/etc/hostname" in n.message for n in notices)
    said = [n.message for n in notices]
    for why, message in zip(
        (
            "not a JSON object",
            "unknown reason",
            "control characters",
            "control characters",
            "longer than",
            "larger than",
            "FIFO",
            "symlink",
            "directory",
        ),
        said,
        strict=True,
    ):
        assert why in message, (why, message)


def test_junk_in_one_writers_directory_hides_nothing_of_anothers(tmp_path: Path) -> None:
    """32 planted files kept a real failure from being posted: the sink read at most 32 files
    of the one shared directory. A writer's directory is read for its one file."""
    root = _root(tmp_path, "bus-scan", "devplugin")
    for i in range(200):
        (root / "bus-scan" / f"a{i:03d}.notice").write_text("{}")
    NoticeBoard(root / "devplugin", "devplugin").post(CONFIG_RELOAD_FAILED, "real failure")
    assert read_notices(root) == (
        (Notice("devplugin", CONFIG_RELOAD_FAILED, "real failure"),),
        (),
    )


def test_what_is_not_a_writers_directory_is_a_warning_and_writers_are_bounded(
    tmp_path: Path,
) -> None:
    root = _root(tmp_path, *(f"w{i:02d}" for i in range(MAX_WRITERS + 2)), "Bad_Name")
    (root / "stray.notice").write_text("{}")
    (root / "link").symlink_to(tmp_path / "elsewhere")  # dangling: not a directory
    for w in ("w00", f"w{MAX_WRITERS:02d}"):
        NoticeBoard(root / w, w).post(CONFIG_RELOAD_FAILED, "m")
    notices, warnings = read_notices(root)
    assert [n.writer for n in notices] == ["w00"]  # the one past the bound is not read
    assert [w for w, _ in writer_directories(root)] == [f"w{i:02d}" for i in range(MAX_WRITERS)]
    text = "\n".join(warnings)
    for name in ("Bad_Name", "stray.notice", "link"):
        assert f"{name} is not a writer's directory" in text
    assert f"more than {MAX_WRITERS} writers" in text
    assert read_notices(tmp_path / "missing") == ((), ())
