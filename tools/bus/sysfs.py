"""Reading sysfs attribute files: the one place that turns kernel text into values.

Every bus scanner reads dozens of tiny files per device, and on a real host some of them are
missing (no `serial`), some are unreadable (`EIO`, `EACCES` in a restricted pod), and in a broken
or hostile mount some are not files at all (a directory, a FIFO that would block `open()` forever,
a symlink loop). A scan must survive all of that: every reader here returns None instead of
raising, and reports *why* into a list the caller owns, so nothing is dropped silently and the
caller decides whether a problem is worth showing (a missing `serial` is normal; a garbage
`idVendor` is not). `AttrDir` is the reader: a device directory held open, its attributes read
relative to it.

Reads are bounded (attribute files are at most a page) and use `O_NONBLOCK`, so a FIFO or a
device node planted where an attribute should be cannot hang the scanner.
"""

from __future__ import annotations

import os
import re
import stat

from .key import dev_number

# sysfs attributes are at most one page; anything longer is not an attribute file.
MAX_ATTR_BYTES = 4096

_HEX = frozenset("0123456789abcdef")
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)

Warnings = list[str]


def _note(warnings: Warnings | None, message: str) -> None:
    if warnings is not None:
        warnings.append(message)


def _read_raw(
    path: str | os.PathLike[str],
    warnings: Warnings | None,
    required: bool,
    max_bytes: int,
    dir_fd: int | None = None,
    name: str | None = None,
) -> bytes | None:
    """One attribute's raw bytes, or None with a reason; with `dir_fd`, `name` is opened
    relative to it (openat: no walk of the whole path) and `path` is only what messages show."""
    try:
        fd = os.open(path if dir_fd is None else name, _OPEN_FLAGS, dir_fd=dir_fd)  # type: ignore[arg-type]
    except FileNotFoundError:
        if required:
            _note(warnings, f"{os.fspath(path)}: missing")
        return None
    except OSError as e:
        _note(warnings, f"{os.fspath(path)}: cannot open ({e.strerror or e})")
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
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


def _decode(path: str | os.PathLike[str], data: bytes, warnings: Warnings | None) -> str | None:
    """Attribute bytes as trimmed text ('' stays ''). Strings such as `manufacturer` come from
    the device's own descriptors and may hold any bytes: undecodable bytes are replaced (and
    reported) rather than failing the device; NUL bytes mean garbage."""
    if b"\x00" in data:
        _note(warnings, f"{os.fspath(path)}: contains NUL bytes; ignored")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _note(warnings, f"{os.fspath(path)}: not UTF-8; undecodable bytes replaced")
        text = data.decode("utf-8", "replace")
    return text.strip()


def _hex_of(
    path: str | os.PathLike[str], text: str, warnings: Warnings | None, width: int | None
) -> str | None:
    """A hex attribute as bare lower-case hex; `width` is the number of digits the kernel
    always prints for it (another length is garbage and reported)."""
    v = normalize_hex(text)
    if v is None or (width is not None and len(v) != width):
        shown = text if len(text) <= 40 else text[:40] + "..."
        want = f"{width} hex digits" if width else "hex"
        _note(warnings, f"{os.fspath(path)}: {shown!r} is not {want}; ignored")
        return None
    return v


_DECIMAL = re.compile(r"-?[0-9]{1,18}")


def _int_of(path: str | os.PathLike[str], text: str, warnings: Warnings | None) -> int | None:
    """A decimal attribute (`busnum`, `numa_node`, `sriov_totalvfs`), as the kernel prints it:
    ASCII digits, maybe a minus sign (`numa_node` is -1 without NUMA). Python's int() would
    also take `1_0`, `+3`, non-ASCII digits and numbers of any size."""
    if _DECIMAL.fullmatch(text):
        return int(text)
    shown = text if len(text) <= 40 else text[:40] + "..."
    _note(warnings, f"{os.fspath(path)}: {shown!r} is not a decimal number; ignored")
    return None


def normalize_hex(value: str) -> str | None:
    """Bare lower-case hex (`0x030200` -> `030200`, `1A6E` -> `1a6e`), or None if not hex."""
    v = value.strip().lower()
    if v.startswith("0x"):
        v = v[2:]
    if not v or not _HEX.issuperset(v):
        return None
    return v


def _link_name(
    path: str | os.PathLike[str],
    warnings: Warnings | None,
    dir_fd: int | None = None,
    name: str | None = None,
) -> str | None:
    try:
        target = os.readlink(path if dir_fd is None else name, dir_fd=dir_fd)  # type: ignore[arg-type]
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


def uevent_devname(text: str) -> str | None:
    """`DEVNAME` of a uevent text, exactly as parse_uevent(text).get("DEVNAME") would give it."""
    if "DEVNAME" not in text:
        return None
    value = None
    for line in text.splitlines():
        if "DEVNAME" in line:
            key, sep, v = line.partition("=")
            if sep and key.strip() == "DEVNAME":
                value = v.strip()
    return value


def dev_path(devname: str) -> str | None:
    """The /dev path a uevent's DEVNAME names (`bus/usb/001/004` -> `/dev/bus/usb/001/004`),
    or None when it would lie outside /dev (`../etc/shadow`): it becomes a host path the
    device plugin hands the runtime, so it must never escape /dev."""
    if "\x00" in devname:
        return None
    path = os.path.normpath("/dev/" + devname.lstrip("/"))
    return path if path.startswith("/dev/") and path != "/dev/" else None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def note_dir_error(path: str, e: OSError, warnings: Warnings) -> None:
    """The one wording for a sysfs directory that cannot be listed, wherever it is met."""
    if isinstance(e, FileNotFoundError):
        warnings.append(f"{path}: does not exist (dangling symlink?)")
    elif isinstance(e, NotADirectoryError):
        warnings.append(f"{path}: not a directory")
    else:
        warnings.append(f"{path}: cannot list ({e.strerror or e})")


class AttrDir:
    """One sysfs directory held open, its attributes read relative to it (`openat`).

    A scan reads a dozen attributes per device; opening each relative to the directory spares
    the kernel walking the whole `/sys/devices/...` path every time. A missing attribute is
    normal for optional ones, so it is reported only when `required`; anything else that
    prevents a clean read (not a regular file, permission, I/O error, too long) always is,
    with the full path. Open with `AttrDir.open`; close with `close()` (or use `with`).
    """

    __slots__ = ("fd", "prefix")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.prefix = path + "/"

    @classmethod
    def open(cls, path: str, warnings: Warnings) -> AttrDir | None:
        """Open a directory, or None with the warning note_dir_error words."""
        try:
            return cls(os.open(path, _DIR_FLAGS), path)
        except OSError as e:
            note_dir_error(path, e, warnings)
        return None

    def names(self, warnings: Warnings) -> set[str] | None:
        """The names in the directory (os.listdir), or None with a warning."""
        try:
            return set(os.listdir(self.fd))
        except OSError as e:
            warnings.append(f"{self.prefix[:-1]}: cannot list ({e.strerror or e})")
            return None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> AttrDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def readable(self, name: str) -> bool:
        """Whether `name` is a file that can be read, whatever it holds: how
        node-feature-discovery decides that an optional attribute (`sriov_totalvfs`) is there.
        A dangling link, a link loop, a directory or a file that fails to read is not; nor,
        here, a FIFO, which NFD would wait on for ever."""
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            os.read(fd, 1)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def text(self, name: str, warnings: Warnings | None, required: bool = False) -> str | None:
        path = self.prefix + name
        data = _read_raw(path, warnings, required, MAX_ATTR_BYTES, self.fd, name)
        return None if data is None else _decode(path, data, warnings)

    def hex(
        self,
        name: str,
        warnings: Warnings | None,
        required: bool = False,
        width: int | None = None,
    ) -> str | None:
        path = self.prefix + name
        data = _read_raw(path, warnings, required, MAX_ATTR_BYTES, self.fd, name)
        if data is None:
            return None
        text = _decode(path, data, warnings)
        return None if text is None else _hex_of(path, text, warnings, width)

    def int(self, name: str, warnings: Warnings | None, required: bool = False) -> int | None:
        path = self.prefix + name
        data = _read_raw(path, warnings, required, MAX_ATTR_BYTES, self.fd, name)
        if data is None:
            return None
        text = _decode(path, data, warnings)
        return None if text is None else _int_of(path, text, warnings)

    def dev_number(self, name: str, warnings: Warnings | None) -> str | None:
        """A `dev` attribute (a device node's char number) as "major:minor", or None."""
        text = self.text(name, warnings)
        number = dev_number(text)
        if text is not None and number is None:
            shown = text if len(text) <= 40 else text[:40] + "..."
            _note(warnings, f"{self.prefix}{name}: {shown!r} is not major:minor; ignored")
        return number

    def link_name(self, name: str, warnings: Warnings | None) -> str | None:
        return _link_name(self.prefix + name, warnings, self.fd, name)

    def devname(self, name: str, warnings: Warnings | None) -> str | None:
        """The /dev path the DEVNAME of a uevent file names, or None (none, or outside /dev)."""
        text = self.text(name, warnings)
        devname = None if text is None else uevent_devname(text)
        if not devname:
            return None
        path = dev_path(devname)
        if path is None:
            _note(warnings, f"{self.prefix}{name}: DEVNAME {devname!r} is outside /dev; ignored")
        return path
