"""The feature-file publisher: atomic, idempotent writes; exact bytes on stdout in a dry run;
anything but a regular file at the output path refused (exit 4), never blocked on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from edgefd.core import publish
from edgefd.core.errors import OutputError, UsageError
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
    assert sorted(os.listdir(fd)) == [publish.STAGING, "tool"]  # no temp file left
    assert os.listdir(fd / publish.STAGING) == []


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
    monkeypatch.setattr(publish, "write_atomic", lambda *_a, **_k: pytest.fail("compared twice"))
    assert not pub.publish({"a.io/x": "1"})
    monkeypatch.setattr(
        publish, "write_atomic", lambda *_a, **_k: (_ for _ in ()).throw(OSError(28, "full"))
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
    """Issue 32 item 7: a typo in --features-dir is a usage error (exit 2, as feature-sink's),
    not a new directory no one reads."""
    typo = tmp_path / "features.dd"
    with pytest.raises(UsageError) as e:
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")
def test_a_feature_files_temp_file_is_made_out_of_nfds_sight(tmp_path: Path) -> None:
    """nfd-worker watches features.d (not its subdirectories) and reads it at the first event:
    a temp file created there was that event, before the rename. Now the rename is the only
    one (the staging directory's creation, once, aside)."""
    import select

    from edgefd.runtime.inotify import (
        IN_ATTRIB,
        IN_CLOSE_WRITE,
        IN_CREATE,
        IN_DELETE,
        IN_MODIFY,
        IN_MOVED_FROM,
        IN_MOVED_TO,
        Inotify,
    )

    fd = tmp_path / "features.d"
    fd.mkdir()
    pub = Publisher(fd, "usb-scan", dry_run=False)
    pub.publish({"a.io/x": "1"})
    assert (fd / publish.STAGING).is_dir()
    mask = IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO
    with Inotify() as ino:
        ino.add_watch(fd, mask | IN_DELETE)
        pub.publish({"a.io/x": "2"})
        ready, _, _ = select.select([ino.fileno()], [], [], 5)
        assert ready
        events = [(e.name, e.mask & (mask | IN_DELETE)) for e in ino.read()]
    assert events == [("usb-scan", IN_MOVED_TO)]
    assert os.listdir(fd / publish.STAGING) == []
    assert (fd / "usb-scan").read_bytes() == publish.render({"a.io/x": "2"}, "usb-scan")


class FakeNudge:
    def __init__(self, recent: bool = False) -> None:
        self.is_recent = recent
        self.asked: list[Path] = []
        self.writes: list[tuple[Path, bool]] = []
        self.flushed = 0

    def recent(self, directory: Path) -> bool:
        self.asked.append(Path(directory))
        return self.is_recent

    def wrote(self, path: Path, recent: bool) -> None:
        self.writes.append((Path(path), recent))

    def flush(self) -> None:
        self.flushed += 1


def test_the_nudge_is_asked_before_the_rename_and_told_after_it(tmp_path: Path) -> None:
    fd = tmp_path / "features.d"
    fd.mkdir()
    nudge = FakeNudge(recent=True)
    pub = Publisher(fd, "usb-scan", dry_run=False, nudge=nudge)  # type: ignore[arg-type]
    pub.publish({"a.io/x": "1"})
    assert nudge.asked == [fd] and nudge.writes == [(fd / "usb-scan", True)]
    assert (fd / publish.STAGING).is_dir()  # made before the question: its creation is an event
    pub.publish({"a.io/x": "1"})  # the same bytes: nothing written, nothing to tell
    pub2 = Publisher(fd, "usb-scan", dry_run=False, nudge=nudge)  # type: ignore[arg-type]
    pub2.publish({"a.io/x": "1"})  # a restart finding its file as it would write it
    assert nudge.writes == [(fd / "usb-scan", True)]
    pub.settle()
    assert nudge.flushed == 1


def test_the_first_write_into_a_fresh_directory_is_recent(tmp_path: Path) -> None:
    """Making the staging directory is an event in features.d: the rename right after it
    needs its trailing event."""
    from edgefd.core.nudge import Nudge

    fd = tmp_path / "features.d"
    fd.mkdir()
    os.utime(fd, (1_000_000, 1_000_000))
    nudge = Nudge(threaded=False)
    Publisher(fd, "usb-scan", dry_run=False, nudge=nudge).publish({"a.io/x": "1"})
    assert nudge.next_due() is not None


def test_a_dry_run_tells_the_nudge_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    nudge = FakeNudge()
    Publisher(tmp_path, "usb-scan", dry_run=True, nudge=nudge).publish({"a": "1"})  # type: ignore[arg-type]
    assert nudge.asked == [] and nudge.writes == [] and not (tmp_path / publish.STAGING).exists()


def test_the_staging_directory_has_the_mode_of_features_d(tmp_path: Path) -> None:
    """features.d is an emptyDir (0777) shared by dt-labeller (root) and bus-scan (65532):
    whoever writes first must not lock the other out of the staging directory."""
    fd = tmp_path / "features.d"
    fd.mkdir()
    fd.chmod(0o777)
    old = os.umask(0o022)
    try:
        Publisher(fd, "dt-labeller", dry_run=False).publish({"a.io/x": "1"})
    finally:
        os.umask(old)
    assert (fd / publish.STAGING).stat().st_mode & 0o7777 == 0o777


def test_a_staging_directory_it_cannot_write_falls_back_to_features_d(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    fd = tmp_path / "features.d"
    fd.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*a: object, dir: str, **k: object) -> tuple[int, str]:
        if Path(dir).name == publish.STAGING:
            raise PermissionError(13, "denied")
        return real(*a, dir=dir, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    assert write_atomic(fd / "usb-scan", b"a=1\n", staging=fd / publish.STAGING)
    assert (fd / "usb-scan").read_bytes() == b"a=1\n"


def test_a_producers_temp_files_left_by_a_crash_are_swept_on_its_first_write(
    tmp_path: Path,
) -> None:
    fd = tmp_path / "features.d"
    staging = fd / publish.STAGING
    staging.mkdir(parents=True)
    stale = staging / ".usb-scan.abc123.tmp"
    stale.write_text("half a file")
    other = staging / ".dt-labeller.def456.tmp"  # another producer's: not ours to touch
    other.write_text("x")
    pub = Publisher(fd, "usb-scan", dry_run=False)
    pub.publish({"a.io/x": "1"})
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in staging.iterdir()) == [other.name]
