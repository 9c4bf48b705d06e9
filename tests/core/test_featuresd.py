"""The features.d format: NFD-compatible parsing, and reading only regular files."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert pf.warnings == (
        "f:1: expiry-time is not an RFC 3339 time with a time zone offset; directive ignored",
    )


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
    assert pf.warnings == (
        "f:1: unknown directive (known: expiry-time=, no-label, no-feature); ignored",
    )


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
        "b-second:1: overrides the value set at a-first:1 (the later file wins)",
        "c-third:1: overrides the value set at b-second:1 (the later file wins)",
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


def test_messages_name_file_line_and_reason_never_content(tmp_path: Path) -> None:
    """Issue 11, item 2: what a file holds may be a secret; warnings never repeat it."""
    text = "# +expiry-time=s3cr3t-stamp\n# +s3cr3t-directive\na.io/x=s3cr3t-one\na.io/\xff=s3cr3t\n"
    (tmp_path / "a").write_text(text)
    (tmp_path / "b").write_text("a.io/x=s3cr3t-two\n")
    (tmp_path / "bad\nname").write_text("a.io/y=1\n")
    merged = merge(read_feature_files(tmp_path, NOW))
    assert len(merged.warnings) == 3
    assert all("s3cr3t" not in w and "\n" not in w for w in merged.warnings)
    assert merged.warnings[2] == "b:1: overrides the value set at a:3 (the later file wins)"
    pf = parse_bytes(b"a.io/x=\xffs3cr3t\n", "f")
    assert pf.warnings == ("f:1: not UTF-8 text; line skipped",)
    assert parse_text("a.io/k=1\n", "evil\nfeature-sink: forged").labels() == {"a.io/k": "1"}
    assert parse_text("# +x\n", "evil\nforged").warnings[0].startswith("'evil\\nforged':1: ")


def test_an_unterminated_last_line_and_the_mtime_are_reported(tmp_path: Path) -> None:
    """So the sink can tell a file caught mid-rewrite (issue 11, item 10)."""
    (tmp_path / "done").write_text("a.io/x=1\n")
    (tmp_path / "cut").write_text("a.io/x=1\n# c\na.io/y=tr")
    (tmp_path / "empty").write_text("")
    os.utime(tmp_path / "done", (1_000_000, 1_000_000))
    files = {f.name: f for f in read_feature_files(tmp_path, NOW)}
    assert files["done"].partial_line is None and files["done"].mtime == 1_000_000
    assert files["cut"].partial_line == 3
    assert [f.line for f in files["cut"].features] == [1, 3]
    assert files["empty"].partial_line is None and files["empty"].features == ()
    assert files["empty"].mtime is not None


_line_chars = st.characters(codec="utf-8", exclude_characters="\n")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(st.text(_line_chars, max_size=40), st.just("# +x")), max_size=12),
    st.booleans(),
)
def test_fuzz_any_lines_parse_without_error_and_never_echo_content(
    lines: list[str], undecodable: bool
) -> None:
    """Property over the line format: any text parses (nothing raises), keys and values never
    span lines, lines are trimmed (a key never starts with a blank; NFD keeps `k =1`'s blank,
    which the label check then refuses), and no warning repeats a line."""
    # every directive carries a marker: an unknown one must be reported without it
    data = "\n".join(f"# +qz{line[3:]}" if line.startswith("# +") else line for line in lines)
    raw = data.encode() + (b"\n\xffqz\n" if undecodable else b"")
    pf = parse_bytes(raw, "f", NOW)
    assert pf.error is None or "NUL" in pf.error
    for f in pf.features:
        assert "\n" not in f.key and "\n" not in f.value
        assert f.key == f.key.lstrip() and not f.key.startswith("#")
        assert f.value == f.value.rstrip()
    for w in pf.warnings:
        assert w.startswith("f:") and "qz" not in w


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(
            r"[a-z]{1,8}\.io/[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True
        ),
        st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?", fullmatch=True),
        max_size=20,
    )
)
def test_fuzz_render_then_parse_is_identity(labels: dict[str, str]) -> None:
    assert parse_bytes(render(labels, "tool"), "f", NOW).labels() == labels


def test_the_producers_staging_directory_is_passed_over_silently(tmp_path: Path) -> None:
    """The producers' temp files live in features.d/.edgefd-staging (publish.STAGING): the
    sink, like NFD, neither reads nor warns about it, even with a crashed write left in it."""
    from edgefd.core.publish import STAGING

    (tmp_path / "usb-scan").write_text("x.io/k=1\n")
    (tmp_path / STAGING).mkdir()
    (tmp_path / STAGING / ".usb-scan.abc.tmp").write_text("x.io/k=half")
    merged = merge(read_feature_files(tmp_path, NOW))
    assert merged.labels == {"x.io/k": "1"} and merged.warnings == ()
