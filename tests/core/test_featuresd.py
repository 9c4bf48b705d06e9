"""The features.d format: NFD-compatible parsing and the atomic, idempotent writer."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tools.common import featuresd
from tools.common.featuresd import (
    MAX_FILE_SIZE,
    list_feature_files,
    parse_bytes,
    parse_text,
    read_directory,
    render,
    write_atomic,
    write_feature_file,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_comments_blank_lines_whitespace_and_bare_keys() -> None:
    pf = parse_text("# a comment\n\n   a.io/x=1  \n\tb.io/flag\n#no=label\n", "f", NOW)
    assert pf.labels() == {"a.io/x": "1", "b.io/flag": "true"}
    assert [f.line for f in pf.features] == [3, 4]
    assert pf.warnings == ()


def test_value_may_contain_equals() -> None:
    assert parse_text("a.io/k=x=y=z\n", "f", NOW).labels() == {"a.io/k": "x=y=z"}
    assert parse_text("a.io/k=\n", "f", NOW).labels() == {"a.io/k": ""}


def test_only_newline_splits_lines() -> None:
    # str.splitlines() would also split at \x1c, \x0b, \u2028: NFD does not
    pf = parse_text("a.io/k=x\x1cb.io/j=y\r\n", "f", NOW)
    assert [f.key for f in pf.features] == ["a.io/k"]
    assert pf.features[0].value == "x\x1cb.io/j=y"


def test_expiry_in_the_past_drops_following_lines() -> None:
    text = "a.io/before=1\n# +expiry-time=2026-01-01T00:00:00Z\na.io/after=1\n"
    assert parse_text(text, "f", NOW).labels() == {"a.io/before": "1"}


def test_expiry_in_the_future_keeps_lines() -> None:
    text = "# +expiry-time=2027-01-01T00:00:00+02:00\na.io/after=1\n"
    assert parse_text(text, "f", NOW).labels() == {"a.io/after": "1"}


@pytest.mark.parametrize(
    "stamp", ["tomorrow", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00", "", "2026-01-01Tx"]
)
def test_malformed_expiry_is_warned_and_ignored(stamp: str) -> None:
    pf = parse_text(f"# +expiry-time={stamp}\na.io/x=1\n", "f", NOW)
    assert pf.labels() == {"a.io/x": "1"}
    assert len(pf.warnings) == 1 and pf.warnings[0].startswith("f:1: bad expiry-time directive")


def test_no_label_and_no_feature_apply_to_the_next_feature_only() -> None:
    pf = parse_text("# +no-label\na.io/a=1\na.io/b=2\n# +no-feature\na.io/c=3\na.io/d=4\n")
    flags = {f.key: (f.label, f.feature) for f in pf.features}
    assert flags == {
        "a.io/a": (False, True),
        "a.io/b": (True, True),
        "a.io/c": (True, False),
        "a.io/d": (True, True),
    }
    assert pf.labels() == {"a.io/b": "2", "a.io/c": "3", "a.io/d": "4"}


def test_unknown_directive_is_warned_and_processing_goes_on() -> None:
    pf = parse_text("# +frobnicate\na.io/x=1\n", "f", NOW)
    assert pf.labels() == {"a.io/x": "1"}
    assert pf.warnings == ("f:1: unknown directive 'frobnicate'; ignored",)


def test_size_limit_is_nfds() -> None:
    line = b"a.io/x=1\n"
    exact = line + b"#" * (MAX_FILE_SIZE - len(line) - 1) + b"\n"
    assert len(exact) == MAX_FILE_SIZE
    assert parse_bytes(exact, "f").error is None
    over = parse_bytes(exact + b"\n", "f")
    assert over.error is not None and "over the 65536-byte limit" in over.error
    assert over.features == ()


def test_non_utf8_line_is_refused_alone_and_nul_refuses_the_file() -> None:
    pf = parse_bytes(b"a.io/x=\xff\n# +no-label\nb.io/\xc3=1\nc.io/y=caf\xc3\xa9\nd.io/z=1\n", "f")
    assert pf.error is None
    assert pf.warnings == (
        "f:1: not UTF-8 text; line skipped",
        "f:3: not UTF-8 text; line skipped",
    )
    # the good lines survive, and the pending directive applies to the next real feature
    assert [(f.key, f.value, f.label) for f in pf.features] == [
        ("c.io/y", "café", False),
        ("d.io/z", "1", True),
    ]
    assert "NUL" in (parse_bytes(b"a.io/x=1\0\n", "f").error or "")


def test_directory_reading(tmp_path: Path) -> None:
    (tmp_path / "b-second").write_text("x.io/k=from-b\nx.io/only-b=1\n")
    (tmp_path / "a-first").write_text("x.io/k=from-a\nx.io/only-a=1\n")
    (tmp_path / ".a-first.123.tmp").write_text("x.io/k=in-flight\n")
    (tmp_path / "subdir").mkdir()
    (tmp_path / "big").write_bytes(b"x.io/big=1\n" + b"#" * MAX_FILE_SIZE)
    (tmp_path / "link").symlink_to("a-first")
    assert [p.name for p in list_feature_files(tmp_path)] == ["a-first", "b-second", "big", "link"]
    merged = read_directory(tmp_path, NOW)
    # link (a copy of a-first) is read last and wins again
    assert merged.labels == {"x.io/k": "from-a", "x.io/only-a": "1", "x.io/only-b": "1"}
    assert merged.origin["x.io/k"] == "link:1"
    assert any("over the 65536-byte limit" in w for w in merged.warnings)
    overrides = [w for w in merged.warnings if "overrides" in w]
    assert overrides == [
        "b-second:1: x.io/k='from-b' overrides 'from-a' from a-first:1",
        "link:1: x.io/k='from-a' overrides 'from-b' from b-second:1",
    ]


def test_same_value_in_two_files_is_not_a_conflict(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x.io/k=1\n")
    (tmp_path / "b").write_text("x.io/k=1\n")
    assert read_directory(tmp_path, NOW).warnings == ()


def test_missing_directory_is_empty(tmp_path: Path) -> None:
    merged = read_directory(tmp_path / "nope", NOW)
    assert merged.labels == {} and merged.warnings == ()


def test_render_is_sorted_and_stable() -> None:
    a = render({"b.io/x": "1", "a.io/y": "2"}, "tool")
    b = render({"a.io/y": "2", "b.io/x": "1"}, "tool")
    assert a == b
    assert a.splitlines()[1:] == [b"a.io/y=2", b"b.io/x=1"]
    assert a.startswith(b"# written by tool")
    assert render({}) == b""
    assert parse_bytes(a).labels() == {"a.io/y": "2", "b.io/x": "1"}


def test_writer_creates_then_leaves_unchanged_file_alone(tmp_path: Path) -> None:
    fd = tmp_path / "features.d"
    path, changed = write_feature_file(fd, "tool", {"a.io/x": "1"})
    assert changed and path == fd / "tool"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 5 * 10**9))
    st = path.stat()
    _, changed = write_feature_file(fd, "tool", {"a.io/x": "1"})
    assert not changed
    st2 = path.stat()
    assert (st2.st_ino, st2.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    _, changed = write_feature_file(fd, "tool", {"a.io/x": "2"})
    assert changed
    assert path.stat().st_ino != st.st_ino  # replaced by rename, not rewritten in place
    assert os.listdir(fd) == ["tool"]


def test_writer_prefix_of_existing_content_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc\nextra\n")
    assert write_atomic(path, b"abc\n")
    assert path.read_bytes() == b"abc\n"


def test_writer_uses_a_dot_temp_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append((src, dst))
        assert Path(src).read_bytes() == b"new\n"  # complete before it becomes visible
        real_replace(src, dst)

    monkeypatch.setattr(featuresd.os, "replace", spy)
    write_atomic(tmp_path / "f", b"new\n")
    ((src, dst),) = seen
    assert Path(src).parent == tmp_path and Path(src).name.startswith(".f.")
    assert dst == tmp_path / "f"


def test_failed_write_keeps_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old\n")

    def broken(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(featuresd.os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["f"]


def test_writing_over_a_directory_is_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    with pytest.raises(OSError, match="is a directory"):
        write_atomic(tmp_path / "f", b"x\n")
