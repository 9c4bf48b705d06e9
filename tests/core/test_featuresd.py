"""The features.d format: NFD-compatible parsing, and reading only regular files."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from edgefd.core.featuresd import (
    MAX_FILE_SIZE,
    MergedFeatures,
    merge,
    parse_bytes,
    parse_text,
    read_feature_files,
    render,
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


def read_directory(directory: Path) -> MergedFeatures:
    return merge(read_feature_files(directory, NOW))


def test_directory_reading(tmp_path: Path) -> None:
    (tmp_path / "b-second").write_text("x.io/k=from-b\nx.io/only-b=1\n")
    (tmp_path / "a-first").write_text("x.io/k=from-a\nx.io/only-a=1\n")
    (tmp_path / "c-third").write_text("x.io/k=from-c\n")
    (tmp_path / ".a-first.123.tmp").write_text("x.io/k=in-flight\n")
    (tmp_path / "subdir").mkdir()
    (tmp_path / "big").write_bytes(b"x.io/big=1\n" + b"#" * MAX_FILE_SIZE)
    files = read_feature_files(tmp_path, NOW)
    assert [f.name for f in files] == ["a-first", "b-second", "big", "c-third"]
    merged = merge(files)
    # the later file (by name) wins
    assert merged.labels == {"x.io/k": "from-c", "x.io/only-a": "1", "x.io/only-b": "1"}
    assert merged.origin["x.io/k"] == "c-third:1"
    assert any("over the 65536-byte limit" in w for w in merged.warnings)
    overrides = [w for w in merged.warnings if "overrides" in w]
    assert overrides == [
        "b-second:1: x.io/k='from-b' overrides 'from-a' from a-first:1",
        "c-third:1: x.io/k='from-c' overrides 'from-b' from b-second:1",
    ]


def test_only_regular_files_directly_in_the_directory_are_read(tmp_path: Path) -> None:
    """A symlink (to a secret, say) or a FIFO planted in features.d is refused, unread."""
    secret = tmp_path / "secret"
    secret.write_text("password=hunter2\n")
    d = tmp_path / "features.d"
    d.mkdir()
    (d / "good").write_text("x.io/k=1\n")
    (d / "link").symlink_to(secret)
    os.mkfifo(d / "fifo")  # must not block
    files = {f.name: f for f in read_feature_files(d, NOW)}
    assert files["good"].labels() == {"x.io/k": "1"}
    assert files["link"].error == "link: is a symlink; not read" and not files["link"].features
    assert files["fifo"].error == "fifo: not a regular file; not read"
    assert "hunter2" not in repr(files)


def test_same_value_in_two_files_is_not_a_conflict(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x.io/k=1\n")
    (tmp_path / "b").write_text("x.io/k=1\n")
    assert read_directory(tmp_path).warnings == ()


def test_missing_directory_is_an_error_for_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_feature_files(tmp_path / "nope", NOW)


def test_render_is_sorted_and_stable() -> None:
    a = render({"b.io/x": "1", "a.io/y": "2"}, "tool")
    b = render({"a.io/y": "2", "b.io/x": "1"}, "tool")
    assert a == b
    assert a.splitlines()[1:] == [b"a.io/y=2", b"b.io/x=1"]
    assert a.startswith(b"# written by tool")
    assert render({}) == b""
    assert parse_bytes(a).labels() == {"a.io/y": "2", "b.io/x": "1"}
