"""Noticing that a mounted configuration file changed, the way the kubelet changes it.

A ConfigMap volume is not updated in place: the kubelet writes the new files into a fresh
hidden directory (`..2026_12_01_17_00_00.123`), points a temporary symlink at it and renames
that over `..data`; `resources.yaml` itself is a symlink to `..data/resources.yaml` that never
changes. A watch on the file (its inode) therefore sees nothing, ever. So the directory is
watched (inotify sees the rename of `..data`; polling sees its new inode), and on any change
there the file's bytes, read through the symlinks, decide: the same bytes are no news (the
kubelet also refreshes the directory when nothing changed), other bytes are a new
configuration. A subPath mount never changes at all (the kubelet's documented limitation);
the chart and the manifests mount the whole volume.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from edgefd.core.log import get_logger

log = get_logger(__name__)


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


class ConfigFileWatch:
    """Calls `on_change()` (on the watcher's thread) when the bytes of `path` change."""

    def __init__(
        self, path: str | os.PathLike[str], on_change: Callable[[], None], *, poll: float = 1.0
    ) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.poll = poll
        self._seen = read_bytes(self.path)  # the bytes in use (the last readable version)
        self._unreadable = False
        self._watcher = None

    def start(self) -> ConfigFileWatch:
        from .watch import Watcher

        self._watcher = Watcher(
            self._changed,
            [self.path.parent],
            poll_interval=self.poll,
            debounce=0.2,  # the kubelet's swap is a few renames in a row
            max_delay=1.0,
            name="config-watch",
        ).start()
        return self

    def _changed(self, _names: frozenset[str]) -> None:
        now = read_bytes(self.path)
        if now is None:  # the key left the ConfigMap, or a swap half seen: not a new config
            if not self._unreadable:
                log.warning("%s cannot be read; keeping the configuration in use", self.path)
            self._unreadable = True
            return
        if self._unreadable:
            log.info("%s can be read again", self.path)
            self._unreadable = False
        if now == self._seen:
            return
        self._seen = now
        log.info("%s changed", self.path)
        self.on_change()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
