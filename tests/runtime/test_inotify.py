"""edgefd.runtime.inotify: the shared ctypes binding the device plugin and the sink watch with."""

from __future__ import annotations

import errno
import os
import select
import sys
from pathlib import Path

import pytest

from edgefd.runtime import inotify as ino_mod
from edgefd.runtime.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    Event,
    Inotify,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")

MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF


def _events(ino: Inotify, want: int, timeout: float = 5.0) -> list[Event]:
    """Read until `want` events arrived (select()ing on the fd, as the callers do)."""
    out: list[Event] = []
    while len(out) < want:
        ready, _, _ = select.select([ino.fileno()], [], [], timeout)
        assert ready, f"timed out after {out}"
        out.extend(ino.read())
    return out


def test_create_rename_delete_reported_with_names(tmp_path: Path) -> None:
    with Inotify() as ino:
        wd = ino.add_watch(tmp_path, MASK)
        assert wd >= 1
        (tmp_path / "a.sock").write_bytes(b"")
        os.rename(tmp_path / "a.sock", tmp_path / "b.sock")
        (tmp_path / "b.sock").unlink()
        evs = _events(ino, 4)
        assert [(e.wd, e.mask, e.name) for e in evs] == [
            (wd, IN_CREATE, "a.sock"),
            (wd, IN_MOVED_FROM, "a.sock"),
            (wd, IN_MOVED_TO, "b.sock"),
            (wd, IN_DELETE, "b.sock"),
        ]
        wd2, mask, name = evs[0]  # plain tuples to callers that unpack
        assert (wd2, mask, name) == (wd, IN_CREATE, "a.sock")
        assert ino.read() == []  # drained


def test_read_without_events_returns_empty_and_does_not_block(tmp_path: Path) -> None:
    with Inotify() as ino:
        ino.add_watch(tmp_path, MASK)
        assert ino.read() == []
        assert os.get_blocking(ino.fileno()) is False
        assert os.get_inheritable(ino.fileno()) is False


def test_directory_removed_reports_delete_self_then_ignored(tmp_path: Path) -> None:
    d = tmp_path / "watched"
    d.mkdir()
    with Inotify() as ino:
        wd = ino.add_watch(d, MASK)
        d.rmdir()
        evs = _events(ino, 2)
        assert [(e.wd, e.mask, e.name) for e in evs] == [
            (wd, IN_DELETE_SELF, ""),
            (wd, IN_IGNORED, ""),
        ]


def test_large_burst_is_read_in_chunks_without_loss(tmp_path: Path) -> None:
    n = 3000  # > 64 KiB of events: one read() cannot return them all
    with Inotify() as ino:
        ino.add_watch(tmp_path, IN_CREATE)
        for i in range(n):
            (tmp_path / f"f{i:05d}-{'x' * 8}").write_bytes(b"")
        first = ino.read()
        assert 0 < len(first) < n
        names = [e.name for e in first]
        while evs := ino.read():
            names.extend(e.name for e in evs)
        assert names == [f"f{i:05d}-{'x' * 8}" for i in range(n)]


def test_watching_a_missing_directory_raises_oserror(tmp_path: Path) -> None:
    with Inotify() as ino:
        with pytest.raises(OSError) as ei:
            ino.add_watch(tmp_path / "missing", MASK)
        assert ei.value.errno == errno.ENOENT
        assert str(tmp_path / "missing") in ei.value.strerror
        f = tmp_path / "file"
        f.write_bytes(b"")
        with pytest.raises(OSError) as ei:
            ino.add_watch(f, MASK | IN_ONLYDIR)
        assert ei.value.errno == errno.ENOTDIR
        assert not ino.closed  # a failed watch leaves the instance usable
        ino.add_watch(tmp_path, MASK)


def test_closed_instance(tmp_path: Path) -> None:
    ino = Inotify()
    fd = ino.fileno()
    assert fd >= 0 and not ino.closed
    ino.close()
    assert ino.closed and ino.fileno() == -1
    with pytest.raises(OSError) as ei:
        os.fstat(fd)  # the fd really was released
    assert ei.value.errno == errno.EBADF
    ino.close()  # idempotent: must not close someone else's reused fd
    with pytest.raises(OSError) as ei:
        ino.read()
    assert ei.value.errno == errno.EBADF
    with pytest.raises(OSError) as ei:
        ino.add_watch(tmp_path, MASK)
    assert ei.value.errno == errno.EBADF


def test_context_manager_closes(tmp_path: Path) -> None:
    with Inotify() as ino:
        fd = ino.fileno()
    assert ino.closed
    with pytest.raises(OSError):
        os.fstat(fd)


def test_unsupported_libc_is_an_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoInotify:  # a libc without the symbols, as on a non-Linux system
        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ino_mod, "_libc", None)
    monkeypatch.setattr(ino_mod.ctypes, "CDLL", lambda *a, **k: NoInotify())
    with pytest.raises(OSError) as ei:
        Inotify()
    assert ei.value.errno == errno.ENOSYS
    assert ino_mod._libc is None  # not cached: nothing half-initialised left behind


def test_init_failure_is_an_oserror_with_errno(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        def inotify_init1(self, flags: int) -> int:
            return -1

    monkeypatch.setattr(ino_mod, "_load_libc", lambda: Failing())
    monkeypatch.setattr(ino_mod.ctypes, "get_errno", lambda: errno.EMFILE)
    with pytest.raises(OSError) as ei:
        Inotify()
    assert ei.value.errno == errno.EMFILE
    assert "inotify_init1" in ei.value.strerror
