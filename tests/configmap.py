"""A ConfigMap volume as the kubelet lays it out and updates it (its AtomicWriter), for tests
of tools that must notice a new configuration without a restart.

The files live in a hidden timestamped directory; `..data` is a symlink to it; each key is a
symlink `<key> -> ..data/<key>`. An update writes a new timestamped directory, points
`..data_tmp` at it, renames `..data_tmp` over `..data` (the one atomic step), then removes
the old directory. The key's own symlink never changes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path

_seq = itertools.count()


class ConfigMapVolume:
    def __init__(self, directory: Path, files: Mapping[str, str]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.update(files)

    def path(self, key: str) -> Path:
        return self.dir / key

    def update(self, files: Mapping[str, str]) -> None:
        data = self.dir / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        ts = self.dir / f"..2026_12_01_17_00_00.{next(_seq):09d}"
        ts.mkdir()
        for key, text in files.items():
            (ts / key).write_text(text)
        tmp = self.dir / "..data_tmp"
        os.symlink(ts.name, tmp)
        os.rename(tmp, data)
        for key in files:
            if not self.path(key).is_symlink():
                os.symlink(f"..data/{key}", self.path(key))
        if old is not None:
            for f in (self.dir / old).iterdir():
                f.unlink()
            (self.dir / old).rmdir()
