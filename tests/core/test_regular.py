"""Reading a file where others can write (edgefd.core.regular): a regular file is read within its
limit; a missing one is FileNotFoundError; a symlink, a FIFO (without blocking), a directory, a
device node or a file over the limit is refused with its kind and a short phrase."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgefd.core.regular import Refused, read_regular


def test_a_regular_file_within_its_limit_is_read(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_bytes(b"{}\n")
    data, st = read_regular(tmp_path / "state.json", 3)
    assert data == b"{}\n" and st.st_size == 3
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_regular("state.json", 3, dir_fd=fd)[0] == b"{}\n"
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", 3)


@pytest.mark.parametrize(
    ("kind", "refused", "phrase"),
    [
        ("symlink", "symlink", "a symlink"),
        ("fifo", "not-regular", "a FIFO, not a regular file"),
        ("directory", "not-regular", "a directory, not a regular file"),
        ("device", "not-regular", "a device node, not a regular file"),
        ("large", "too-large", "larger than 3 bytes"),
    ],
)
def test_anything_else_is_refused_without_blocking(
    tmp_path: Path, kind: str, refused: str, phrase: str
) -> None:
    path = tmp_path / "state.json"
    if kind == "symlink":
        (tmp_path / "elsewhere").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "fifo":
        os.mkfifo(path)  # a plain open() would wait for a writer for ever
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/null")
        path = Path("/dev/null")
    else:
        path.write_bytes(b"{ }\n")
    with pytest.raises(Refused) as e:
        read_regular(path, 3)
    assert (e.value.kind, str(e.value)) == (refused, phrase)
    if kind == "large":
        assert e.value.size == 4


def test_a_configuration_is_read_through_its_symlinks_and_still_checked(tmp_path: Path) -> None:
    """`follow=True` (a ConfigMap volume is made of symlinks): what they lead to is read only
    if it is a regular file; a FIFO at `..data/resources.yaml` is refused at once (issue 30,
    item 9: it stopped every later reload)."""
    data = tmp_path / "..data"
    data.mkdir()
    (data / "resources.yaml").write_text("a: 1\n")
    (tmp_path / "resources.yaml").symlink_to("..data/resources.yaml")
    assert read_regular(tmp_path / "resources.yaml", 8, follow=True)[0] == b"a: 1\n"
    (data / "resources.yaml").unlink()
    os.mkfifo(data / "resources.yaml")
    with pytest.raises(Refused, match=r"^a FIFO, not a regular file$"):
        read_regular(tmp_path / "resources.yaml", 8, follow=True)
