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

The bytes are read as the tool's loader reads them (core.regular, through schema.read_text's
rules): never blocking on a FIFO or a device node found at `..data/resources.yaml`, at most
MAX_CONFIG_BYTES. Such a file is an error, said once, and the configuration in use is kept; the
next readable change is a reload as any other. (A plain read blocked the watcher's one thread
on the FIFO: reloads stopped, silently, for good.)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from edgefd.core.log import get_logger
from edgefd.core.regular import Refused, read_regular
from edgefd.core.schema import MAX_CONFIG_BYTES

log = get_logger(__name__)


def read_config_bytes(path: Path) -> tuple[bytes | None, str]:
    """(the file's bytes, "") or (None, why not, a phrase for a log line)."""
    try:
        return read_regular(path, MAX_CONFIG_BYTES, follow=True)[0], ""
    except Refused as e:
        return None, str(e)
    except OSError as e:
        return None, e.strerror or str(e)


class ConfigFileWatch:
    """Calls `on_change()` (on the watcher's thread) when the bytes of `path` change, and
    `on_unreadable(why)` when they cannot be read for a reason that is no swap half seen (a
    FIFO, a directory, too large), then `on_unreadable("")` once they can again."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_change: Callable[[], None],
        *,
        poll: float = 1.0,
        on_unreadable: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.on_unreadable = on_unreadable
        self.poll = poll
        self._seen, _ = read_config_bytes(self.path)  # the bytes in use (the last readable)
        self._unreadable = ""  # why it cannot be read now, as last said
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
        now, why = read_config_bytes(self.path)
        if now is None:
            if why != self._unreadable:
                # the key left the ConfigMap, or a swap half seen: a warning; a FIFO, a device
                # node, a directory, a huge file: never a configuration, an error
                missing = why == os.strerror(errno.ENOENT)
                say = log.warning if missing else log.error
                say("%s cannot be read: %s; keeping the configuration in use", self.path, why)
                if not missing and self.on_unreadable is not None:
                    self.on_unreadable(f"{self.path}: {why}")
            self._unreadable = why
            return
        if self._unreadable:
            log.info("%s can be read again", self.path)
            if self._unreadable != os.strerror(errno.ENOENT) and self.on_unreadable is not None:
                self.on_unreadable("")
            self._unreadable = ""
        if now == self._seen:
            return
        self._seen = now
        log.info("%s changed", self.path)
        self.on_change()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
