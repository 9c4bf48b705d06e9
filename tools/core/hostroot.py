"""Reading the host through an explicit root directory.

Tools never read `/sys` directly: they are handed a HostRoot. In a pod that root is where the
host's filesystem is mounted; in tests it is a generated fixture tree. No global variable holds
it, so two roots can be used side by side (a test comparing fixtures, a benchmark).
"""

from __future__ import annotations

import os
from pathlib import Path

from .record import Record


class HostRoot(Record):
    root: Path

    @classmethod
    def of(cls, root: str | os.PathLike[str] = "/") -> HostRoot:
        return cls(Path(os.path.abspath(root)))

    def path(self, host_path: str | os.PathLike[str]) -> Path:
        """Map an absolute host path (`/sys/bus/usb`) to where it is under this root."""
        # normpath on an absolute path drops `..` at the top, so `/sys/../../etc` cannot
        # leave the root (lexically; resolve() is the symlink-aware version)
        rel = os.path.normpath("/" + os.fspath(host_path)).lstrip("/")
        return self.root / rel if rel else self.root

    def exists(self, host_path: str | os.PathLike[str]) -> bool:
        """Whether `host_path` exists on the host (a device node, say)."""
        return os.path.exists(self.path(host_path))

    def host_path(self, path: str | os.PathLike[str]) -> str:
        """Map a path under this root back to the path the host itself would use."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel == ".":
            return "/"
        if rel == ".." or rel.startswith("../"):
            return os.fspath(path)
        return "/" + rel

    def resolve(self, host_path: str | os.PathLike[str]) -> Path:
        """Resolve symlinks as the host would, never escaping the root.

        Absolute symlink targets are re-rooted (a fixture or a chroot-style mount can contain
        them); `..` cannot climb above the root.
        """
        parts = Path(os.fspath(host_path)).parts
        resolved = self.root
        pending = list(parts[1:] if parts and parts[0] == "/" else parts)
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved != self.root:
                    resolved = resolved.parent
                continue
            candidate = resolved / part
            if candidate.is_symlink():
                hops += 1
                if hops > 40:
                    raise OSError(40, "too many levels of symbolic links", str(host_path))
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = self.root
                pending[:0] = list(
                    Path(target).parts[1:] if target.startswith("/") else Path(target).parts
                )
                continue
            resolved = candidate
        return resolved
