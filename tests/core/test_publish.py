"""The feature-file publisher: atomic, idempotent writes; exact bytes on stdout in a dry run;
anything but a regular file at the output path refused (exit 4), never blocked on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.core import publish
from edgefd.core.errors import OutputError
from edgefd.core.publish import Publisher, write_atomic


def write_feature_file(directory: Path, producer: str, labels: dict[str, str]) -> tuple[Path, bool]:
    pub = Publisher(directory, producer, dry_run=False)
    pub.publish(labels)
    return pub.path, pub.wrote


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

    monkeypatch.setattr(publish.os, "replace", spy)
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

    monkeypatch.setattr(publish.os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_anything_but_a_regular_file_at_the_output_is_refused(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "usb-scan"
    if kind == "directory":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)  # a plain open() would block for ever
    else:
        (tmp_path / "elsewhere").write_text("x\n")
        out.symlink_to(tmp_path / "elsewhere")
    pub = Publisher(tmp_path, "usb-scan", dry_run=False)
    with pytest.raises(OutputError, match="refusing to write there") as e:
        pub.publish({"a.io/x": "1"})
    assert e.value.exit_code == 4
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "x\n"


def test_dry_run_prints_the_exact_bytes(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pub = Publisher(tmp_path, "tool", dry_run=True)
    assert pub.publish({"b.io/x": "1"})
    assert capfd.readouterr().out == pub.render({"b.io/x": "1"}).decode()
    assert os.listdir(tmp_path) == []


def test_the_publisher_is_the_one_change_check(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version with the same bytes as the last one published is neither written (the file
    is not even looked at) nor printed; a failed write is tried again next time."""
    pub = Publisher(tmp_path, "tool", dry_run=False)
    assert pub.publish({"a.io/x": "1"}) and pub.wrote and pub.published
    monkeypatch.setattr(publish, "write_atomic", lambda *_a: pytest.fail("compared twice"))
    assert not pub.publish({"a.io/x": "1"})
    monkeypatch.setattr(
        publish, "write_atomic", lambda *_a: (_ for _ in ()).throw(OSError(28, "full"))
    )
    with pytest.raises(OutputError, match="full"):
        pub.publish({"a.io/x": "2"})
    monkeypatch.undo()
    assert pub.publish({"a.io/x": "2"}) and (tmp_path / "tool").read_text().endswith("a.io/x=2\n")
    dry = Publisher(tmp_path, "other", dry_run=True)
    assert dry.publish({"b.io/x": "1"}) and not dry.publish({"b.io/x": "1"})
    assert capfd.readouterr().out.count("b.io/x=1") == 1
    quiet = Publisher(tmp_path, "quiet", dry_run=True, echo=False)
    assert quiet.publish({"c.io/x": "1"}) and capfd.readouterr().out == ""


def test_a_producer_refuses_a_missing_features_dir_unless_told_to_create_it(
    tmp_path: Path,
) -> None:
    """Issue 32 item 7: a typo in --features-dir is exit 4, not a new directory no one reads."""
    typo = tmp_path / "features.dd"
    with pytest.raises(OutputError) as e:
        publish.features_directory(typo, create=False)
    assert str(e.value) == (
        f"features directory {typo} does not exist (pass --create-features-dir to create it)"
    )
    assert not typo.exists()
    publish.features_directory(typo / "nested", create=True)
    assert (typo / "nested").is_dir()
    publish.features_directory(typo, create=False)  # there: nothing to say
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is not a directory"):
        publish.features_directory(tmp_path / "file", create=True)
