"""A mounted ConfigMap's file is noticed when the kubelet swaps `..data` (issue 25 item 4: a
ConfigMap edit was picked up only on a restart); a FIFO in its place is an error that keeps the
configuration, never a watcher blocked for good (issue 30 item 9)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from edgefd.runtime.configfile import ConfigFileWatch
from tests.configmap import ConfigMapVolume
from tests.helpers import wait_until


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "poll"])
def test_a_configmap_update_is_noticed_once(tmp_path: Path, inotify: bool) -> None:
    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": "a: 1\n", "other": "x"})
    calls: list[bytes] = []
    seen = threading.Event()

    def changed() -> None:
        calls.append(vol.path("resources.yaml").read_bytes())
        seen.set()

    watch = ConfigFileWatch(vol.path("resources.yaml"), changed, poll=0.1)
    watch.start()
    if not inotify:  # what a filesystem without inotify gets: the listing compared
        watch._watcher.stop()  # type: ignore[union-attr]
        from edgefd.runtime.watch import Watcher

        watch._watcher = Watcher(watch._changed, [vol.dir], poll_interval=0.1, debounce=0.2,
                                 max_delay=1.0, use_inotify=False).start()  # fmt: skip
    try:
        file_inode = os.lstat(vol.path("resources.yaml")).st_ino
        vol.update({"resources.yaml": "a: 2\n", "other": "x"})
        assert seen.wait(5), "the ..data swap went unnoticed"
        assert os.lstat(vol.path("resources.yaml")).st_ino == file_inode  # the file never moved
        vol.update({"resources.yaml": "a: 2\n", "other": "y"})  # another key: no news
        vol.update({"resources.yaml": "a: 3\n", "other": "y"})
        wait_until(lambda: len(calls) == 2, 5, what="the second change")
        assert calls == [b"a: 2\n", b"a: 3\n"]
    finally:
        watch.stop()


def test_an_unreadable_file_keeps_the_configuration(tmp_path: Path) -> None:
    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": "a: 1\n"})
    calls: list[int] = []
    watch = ConfigFileWatch(vol.path("resources.yaml"), lambda: calls.append(1), poll=0.1)
    watch.start()
    try:
        vol.update({"other": "x"})  # the key left the ConfigMap: its symlink now dangles
        time.sleep(0.6)
        vol.update({"resources.yaml": "a: 1\n"})  # back as it was: nothing to reload
        time.sleep(0.6)
        assert calls == []
        vol.update({"resources.yaml": "a: 5\n"})
        wait_until(lambda: calls, 5, what="the change after the gap")
        assert calls == [1]
    finally:
        watch.stop()


def plant_fifo(vol: ConfigMapVolume, key: str) -> None:
    """A FIFO where the key's file is, behind `..data` (what a writer of the volume could do)."""
    target = vol.dir / "..data" / key
    target.unlink()
    os.mkfifo(target)


def test_a_fifo_keeps_the_configuration_and_a_later_change_is_still_noticed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": "a: 1\n"})
    calls: list[int] = []
    said: list[str] = []  # what the runner's ReloadStatus hears (issue 32 item 1)
    watch = ConfigFileWatch(
        vol.path("resources.yaml"), lambda: calls.append(1), poll=0.1, on_unreadable=said.append
    )
    watch.start()
    try:
        plant_fifo(vol, "resources.yaml")
        vol.update({"resources.yaml": "a: 1\n", "other": "x"})  # a swap: the watch looks
        plant_fifo(vol, "resources.yaml")
        wait_until(lambda: "a FIFO, not a regular file" in caplog.text, 5, what="the error")
        [rec] = [r for r in caplog.records if "FIFO" in r.getMessage()]
        assert rec.levelname == "ERROR" and "keeping the configuration in use" in rec.getMessage()
        assert calls == []
        assert said == [f"{vol.path('resources.yaml')}: a FIFO, not a regular file"]
        vol.update({"resources.yaml": "a: 2\n", "other": "x"})  # the FIFO replaced
        wait_until(lambda: calls, 5, what="the change after the FIFO")
        assert calls == [1] and said[1:] == [""]
    finally:
        watch.stop()


def test_a_fifo_there_at_the_start_does_not_block_it(tmp_path: Path) -> None:
    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": "a: 1\n"})
    plant_fifo(vol, "resources.yaml")
    done = threading.Event()
    threading.Thread(
        target=lambda: (ConfigFileWatch(vol.path("resources.yaml"), lambda: None), done.set()),
        daemon=True,
    ).start()
    assert done.wait(5), "reading the configuration blocked on the FIFO"
