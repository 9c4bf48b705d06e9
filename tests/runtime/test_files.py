"""What a file is beyond its name (edgefd.runtime.files): the filesystem it lives on (sysfs,
where inotify sees nothing, told apart from an ordinary one), and its identity (a file deleted
and created again is another file, even if its inode number is reused)."""

from __future__ import annotations

import time
from pathlib import Path

from edgefd.runtime.files import file_identity, filesystem_type


def test_filesystem_type_tells_sysfs(tmp_path: Path) -> None:
    assert filesystem_type(tmp_path) not in (None, "sysfs")
    if Path("/sys/bus").is_dir():
        assert filesystem_type("/sys/bus/usb/devices") == "sysfs"


def test_a_file_created_again_is_another_file(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    assert file_identity(str(sock)) is None
    sock.write_text("")
    first = file_identity(str(sock))
    assert first is not None and file_identity(str(sock)) == first
    sock.unlink()
    time.sleep(0.05)  # past the kernel's coarse timestamp tick
    sock.write_text("")
    assert file_identity(str(sock)) not in (None, first)
