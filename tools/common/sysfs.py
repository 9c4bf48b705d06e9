"""Reading sysfs attribute files: the one place that turns kernel text into values.

Every bus scanner reads dozens of tiny files per device, and on a real host some of them are
missing (no `serial`), some are unreadable (`EIO`, `EACCES` in a restricted pod), and in a broken
or hostile mount some are not files at all (a directory, a FIFO that would block `open()` forever,
a symlink loop). A scan must survive all of that: every reader here returns None instead of
raising, and reports *why* into a list the caller owns, so nothing is dropped silently and the
caller decides whether a problem is worth showing (a missing `serial` is normal; a garbage
`idVendor` is not).

Reads are bounded (attribute files are at most a page) and use `O_NONBLOCK`, so a FIFO or a
device node planted where an attribute should be cannot hang the scanner.
"""

from __future__ import annotations

import os
import stat

# sysfs attributes are at most one page; anything longer is not an attribute file.
MAX_ATTR_BYTES = 4096

_HEX = frozenset("0123456789abcdef")
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)

Warnings = list[str]


def _note(warnings: Warnings | None, message: str) -> None:
    if warnings is not None:
        warnings.append(message)


def read_bytes(
    path: str | os.PathLike[str],
    warnings: Warnings | None = None,
    *,
    required: bool = False,
    max_bytes: int = MAX_ATTR_BYTES,
) -> bytes | None:
    """Return the raw content of one attribute file, or None.

    A missing file is normal for optional attributes, so it is only reported when `required`.
    Anything else that prevents a clean read (not a regular file, permission, I/O error, longer
    than `max_bytes`) is always reported.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        if required:
            _note(warnings, f"{os.fspath(path)}: missing")
        return None
    except OSError as e:
        _note(warnings, f"{os.fspath(path)}: cannot open ({e.strerror or e})")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _note(warnings, f"{os.fspath(path)}: not a regular file")
            return None
        data = os.read(fd, max_bytes + 1)
    except OSError as e:
        _note(warnings, f"{os.fspath(path)}: cannot read ({e.strerror or e})")
        return None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        _note(warnings, f"{os.fspath(path)}: longer than {max_bytes} bytes; ignored")
        return None
    return data


def read_text(
    path: str | os.PathLike[str],
    warnings: Warnings | None = None,
    *,
    required: bool = False,
    max_bytes: int = MAX_ATTR_BYTES,
) -> str | None:
    """Return an attribute as trimmed text ('' stays ''), or None if it cannot be read.

    Strings such as `manufacturer` come from the device's own descriptors and may hold any
    bytes; undecodable bytes are replaced (and reported) rather than failing the device, and
    NUL bytes are treated as garbage.
    """
    data = read_bytes(path, warnings, required=required, max_bytes=max_bytes)
    if data is None:
        return None
    if b"\x00" in data:
        _note(warnings, f"{os.fspath(path)}: contains NUL bytes; ignored")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _note(warnings, f"{os.fspath(path)}: not UTF-8; undecodable bytes replaced")
        text = data.decode("utf-8", "replace")
    return text.strip()


def normalize_hex(value: str) -> str | None:
    """Bare lower-case hex (`0x030200` -> `030200`, `1A6E` -> `1a6e`), or None if not hex."""
    v = value.strip().lower()
    if v.startswith("0x"):
        v = v[2:]
    if not v or not _HEX.issuperset(v):
        return None
    return v


def read_hex(
    path: str | os.PathLike[str],
    warnings: Warnings | None = None,
    *,
    required: bool = False,
    width: int | None = None,
) -> str | None:
    """Read a hex attribute (`idVendor`, `class`) as bare lower-case hex, or None.

    `width`, when given, is the number of digits the kernel always prints for this attribute;
    a value of another length is garbage and reported.
    """
    text = read_text(path, warnings, required=required)
    if text is None:
        return None
    v = normalize_hex(text)
    if v is None or (width is not None and len(v) != width):
        shown = text if len(text) <= 40 else text[:40] + "..."
        want = f"{width} hex digits" if width else "hex"
        _note(warnings, f"{os.fspath(path)}: {shown!r} is not {want}; ignored")
        return None
    return v


def read_int(
    path: str | os.PathLike[str],
    warnings: Warnings | None = None,
    *,
    required: bool = False,
) -> int | None:
    """Read a decimal attribute (`busnum`, `numa_node`, `sriov_totalvfs`), or None."""
    text = read_text(path, warnings, required=required)
    if text is None:
        return None
    try:
        return int(text, 10)
    except ValueError:
        shown = text if len(text) <= 40 else text[:40] + "..."
        _note(warnings, f"{os.fspath(path)}: {shown!r} is not a decimal number; ignored")
        return None


def read_link_name(path: str | os.PathLike[str], warnings: Warnings | None = None) -> str | None:
    """The last component of a symlink's target (`driver` -> `apex`), or None if no link.

    Only the link text is needed, so a dangling link (driver module unloaded under a fixture, a
    chroot without `/sys/bus/...`) still yields the name.
    """
    try:
        target = os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == 22:  # EINVAL: exists but is not a symlink
            _note(warnings, f"{os.fspath(path)}: not a symlink; ignored")
        else:
            _note(warnings, f"{os.fspath(path)}: cannot read link ({e.strerror or e})")
        return None
    name = os.path.basename(target.rstrip("/"))
    return name or None


def parse_uevent(text: str) -> dict[str, str]:
    """Parse a `uevent` file (`KEY=value` lines); lines without `=` are ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key:
            out[key.strip()] = value.strip()
    return out


def read_uevent(
    path: str | os.PathLike[str], warnings: Warnings | None = None
) -> dict[str, str] | None:
    """Read and parse a `uevent` file, or None if it cannot be read."""
    text = read_text(path, warnings)
    return None if text is None else parse_uevent(text)
