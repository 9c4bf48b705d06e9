"""The devicetree as this tool needs it, read from a flattened blob or from its directory form.

Only two properties matter for labelling, `compatible` and `status`, so both readers keep those
and drop the rest. That keeps the directory reader to two small reads per node and the blob
walker to one dictionary-free pass.

The blob walker is our own rather than the `fdt` package's: on a 30 KB board blob `fdt` takes
about 17 ms (budget: 5 ms) and, fed mutated blobs, it raises assorted exceptions (IndexError,
AssertionError, UnicodeDecodeError, bare Exception) or accepts corrupt data silently. Here every
offset is checked before it is used, every loop step consumes at least four bytes of a block
whose size was checked against the file, and nesting is capped, so a hostile blob costs at most
one linear pass and ends in a MalformedTree naming the byte offset.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from edgefd.core.regular import kind_of

FDT_MAGIC = 0xD00DFEED
HEADER_SIZE = 40  # version 17 header; version 16 lacks only size_dt_struct (the last field)
MAX_BLOB_SIZE = 8 * 1024 * 1024  # real board blobs are 10-250 KB; the kernel caps fdt at 2 MB
MAX_DEPTH = 64  # real trees are under 12 deep; this only stops pathological input
MAX_NODES = 200_000
MAX_PROP_FILE = 64 * 1024  # a compatible or status file is tens of bytes

_BEGIN_NODE = 1
_END_NODE = 2
_PROP = 3
_NOP = 4
_END = 9

WANTED = frozenset({"compatible", "status"})


class MalformedTree(ValueError):
    """The input is not a devicetree we can trust; the message names where and why."""


@dataclass(frozen=True)
class DtNode:
    """One node: its full path and the raw bytes of the properties labelling looks at.

    Raw bytes, not decoded strings, because decoding (and refusing what does not decode) is a
    labelling decision that should be reported per node, not a reason to drop the tree.
    """

    path: str
    compatible: bytes | None = None
    status: bytes | None = None

    @property
    def name(self) -> str:
        """The node name with its unit address (`cpu@0`); '' for the root."""
        return self.path.rsplit("/", 1)[1]


@dataclass(frozen=True)
class DeviceTree:
    """A parsed tree: its nodes (parents before children) and where it came from.

    A blob keeps its source order; the directory form has none and is walked in name order.
    Compare the two forms after sorting by path.
    """

    source: str
    form: str  # "blob" or "directory"
    nodes: tuple[DtNode, ...]
    warnings: tuple[str, ...] = ()


_U32 = struct.Struct(">I")
_U32X2 = struct.Struct(">II")


def _u32(data: bytes, off: int) -> int:
    return int.from_bytes(data[off : off + 4], "big")


def _decode_name(raw: bytes) -> str:
    # backslashreplace keeps a non-UTF-8 name visible and identical in both tree forms
    return raw.decode("utf-8", "backslashreplace")


def check_header(data: bytes) -> tuple[int, int, int, int]:
    """Validate a blob header; return (struct offset, struct end, strings offset, strings end).

    Everything the walker will index is proven to lie inside `data` here, so the walk itself
    only has to check positions against these bounds.
    """
    size = len(data)
    if data.lstrip().startswith((b"/dts-v1/", b"/dts-v0/", b"/ {", b"/include/")):
        raise MalformedTree(
            "it is devicetree source (.dts): compile it first with "
            "`dtc -I dts -O dtb -o board.dtb board.dts`"
        )
    if size < HEADER_SIZE - 4:
        raise MalformedTree(f"{size} bytes is too short for a devicetree header")
    magic = _u32(data, 0)
    if magic != FDT_MAGIC:
        raise MalformedTree(f"bad magic 0x{magic:08x} (a devicetree blob starts with 0xd00dfeed)")
    totalsize = _u32(data, 4)
    if totalsize > size:
        raise MalformedTree(
            f"header says the blob is {totalsize} bytes but only {size} are present (truncated?)"
        )
    off_struct, off_strings, off_rsvmap = _u32(data, 8), _u32(data, 12), _u32(data, 16)
    version, last_comp = _u32(data, 20), _u32(data, 24)
    if version < 16 or last_comp > 17:
        raise MalformedTree(
            f"unsupported devicetree version {version} (compatible back to {last_comp}); "
            "versions 16 and 17 are supported"
        )
    header_end = HEADER_SIZE if version >= 17 else HEADER_SIZE - 4
    if totalsize < header_end:
        raise MalformedTree(f"header says the blob is {totalsize} bytes, smaller than its header")
    size_strings = _u32(data, 32)
    size_struct = _u32(data, 36) if version >= 17 else totalsize - off_struct
    for what, off, length in (
        ("structure block", off_struct, size_struct),
        ("strings block", off_strings, size_strings),
        ("memory reservation map", off_rsvmap, 16),
    ):
        if off < header_end or off + length > totalsize:
            raise MalformedTree(
                f"{what} at offset {off} (+{length} bytes) lies outside the {totalsize}-byte blob"
            )
    if off_struct % 4:
        raise MalformedTree(f"structure block offset {off_struct} is not 4-byte aligned")
    return off_struct, off_struct + size_struct, off_strings, off_strings + size_strings


def _name_slot(data: bytes, nameoff: int, str_off: int, str_end: int, at: int) -> int:
    """Where a property name's value goes in a stack entry: 1 compatible, 2 status, 0 nowhere."""
    if str_off + nameoff >= str_end:
        raise MalformedTree(
            f"property at offset {at} names string {nameoff}, outside the strings block"
        )
    nend = data.find(b"\0", str_off + nameoff, str_end)
    if nend < 0:
        raise MalformedTree(f"property name at string offset {nameoff} is not terminated")
    pname = data[str_off + nameoff : nend]
    return 1 if pname == b"compatible" else 2 if pname == b"status" else 0


def parse_blob(data: bytes, source: str = "<blob>") -> DeviceTree:
    """Walk a flattened devicetree (DTB) once and return its nodes.

    Raises MalformedTree for anything that is not a well-formed version 16/17 blob.
    """
    pos, end, str_off, str_end = check_header(data)
    nodes: list[DtNode | None] = []
    # per open node: [path, compatible, status, index in nodes]
    stack: list[list] = []
    find = data.find
    u32 = _U32.unpack_from
    u32x2 = _U32X2.unpack_from
    slots: dict[int, int] = {}  # string offset -> index in a stack entry, 0 = not wanted
    closed_root = False
    while True:
        if pos + 4 > end:
            raise MalformedTree(f"structure block ends at offset {end} without an END token")
        (token,) = u32(data, pos)
        pos += 4
        if token == _PROP:
            if not stack:
                raise MalformedTree(f"property outside any node at offset {pos - 4}")
            if pos + 8 > end:
                raise MalformedTree(f"property header at offset {pos - 4} is cut off")
            length, nameoff = u32x2(data, pos)
            pos += 8
            if pos + length > end:
                raise MalformedTree(
                    f"property at offset {pos - 12} claims {length} bytes, past the structure block"
                )
            # dtc stores each name once, so a name's offset repeats: look each up only once
            slot = slots.get(nameoff)
            if slot is None:
                slot = slots[nameoff] = _name_slot(data, nameoff, str_off, str_end, pos - 12)
            if slot:
                stack[-1][slot] = data[pos : pos + length]
            pos += (length + 3) & ~3
        elif token == _BEGIN_NODE:
            if closed_root:
                raise MalformedTree(f"second root node at offset {pos - 4}")
            nend = find(b"\0", pos, end)
            if nend < 0:
                raise MalformedTree(f"node name at offset {pos} is not terminated")
            name = _decode_name(data[pos:nend])
            if not stack:
                path = "/"
            else:
                if not name or "/" in name:
                    raise MalformedTree(f"invalid node name {name!r} at offset {pos}")
                parent = stack[-1][0]
                path = f"{parent}/{name}" if parent != "/" else f"/{name}"
            if len(stack) >= MAX_DEPTH:
                raise MalformedTree(f"nesting deeper than {MAX_DEPTH} levels at {path}")
            stack.append([path, None, None, len(nodes)])
            nodes.append(None)  # filled in at END_NODE, so `nodes` stays in document order
            pos = (nend + 4) & ~3
        elif token == _END_NODE:
            if not stack:
                raise MalformedTree(f"unbalanced END_NODE at offset {pos - 4}")
            p, compat, status, index = stack.pop()
            nodes[index] = DtNode(p, compat, status)
            if not stack:
                closed_root = True
        elif token == _NOP:
            continue
        elif token == _END:
            if stack:
                raise MalformedTree(f"END token at offset {pos - 4} inside node {stack[-1][0]}")
            if not closed_root:
                raise MalformedTree("the structure block has no root node")
            break
        else:
            raise MalformedTree(f"unknown token 0x{token:08x} at offset {pos - 4}")
    return DeviceTree(source=source, form="blob", nodes=tuple(nodes))  # type: ignore[arg-type]


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _read_bounded(fd: int, limit: int) -> bytes:
    chunks = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_blob_file(path: str | os.PathLike[str], allow_pipe: bool = False) -> bytes:
    """Read at most MAX_BLOB_SIZE + 1 bytes, so a huge or endless file cannot exhaust memory.

    Only a regular file is read (opened non-blocking, checked with fstat): a FIFO, a device
    node or a directory planted where a blob should be is an OSError naming what it is, never
    a hang. `allow_pipe` lets a blob the user named come through a pipe (`--dtb <(dtc ...)`),
    read to its end like any command-line input. A symlink loop is ELOOP.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) and allow_pipe:
            os.set_blocking(fd, True)
        elif not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{kind_of(mode)}, not a devicetree blob file")
        data = _read_bounded(fd, MAX_BLOB_SIZE)
    finally:
        os.close(fd)
    if len(data) > MAX_BLOB_SIZE:
        raise MalformedTree(f"over {MAX_BLOB_SIZE} bytes; no real devicetree blob is that large")
    return data


def _read_prop(path: str, warnings: list[str], host_path: str) -> bytes | None:
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.append(f"{host_path}: cannot read ({e.strerror or e}); property ignored")
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            warnings.append(f"{host_path}: {kind_of(mode)}; property ignored")
            return None
        data = _read_bounded(fd, MAX_PROP_FILE)
    except OSError as e:
        warnings.append(f"{host_path}: cannot read ({e.strerror or e}); property ignored")
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_PROP_FILE:
        warnings.append(f"{host_path}: over {MAX_PROP_FILE} bytes; property ignored")
        return None
    return data


def read_directory(top: Path, source: str | None = None) -> DeviceTree:
    """Read the directory form (/proc/device-tree): a directory per node, a file per property.

    Symlinks inside the tree are never followed (the kernel's tree has none, so one is either
    a fixture mistake or a loop); unreadable nodes and properties are skipped with a warning;
    nesting beyond MAX_DEPTH is cut off with a warning rather than failing the whole tree.
    A top directory that cannot be listed raises OSError: that is no tree at all, not an
    empty one.
    """
    source = source or os.fspath(top)
    warnings: list[str] = []
    nodes: list[DtNode] = []
    pending: list[tuple[str, str, int]] = [(os.fspath(top), "/", 0)]
    while pending:
        dirpath, dtpath, depth = pending.pop()
        if len(nodes) >= MAX_NODES:
            raise MalformedTree(f"{source}: more than {MAX_NODES} nodes")
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            if depth == 0:
                raise
            warnings.append(f"{dtpath}: cannot list node ({e.strerror or e}); node skipped")
            continue
        props: dict[str, bytes | None] = {}
        children: list[tuple[str, str]] = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as e:
                warnings.append(f"{dtpath}: cannot stat {entry.name!r} ({e.strerror or e})")
                continue
            if stat.S_ISLNK(st.st_mode):
                warnings.append(f"{dtpath}: {entry.name!r} is a symlink; not followed")
            elif stat.S_ISDIR(st.st_mode):
                name = _decode_name(os.fsencode(entry.name))
                child = f"/{name}" if dtpath == "/" else f"{dtpath}/{name}"
                children.append((entry.path, child))
            elif entry.name in WANTED and stat.S_ISREG(st.st_mode):
                props[entry.name] = _read_prop(entry.path, warnings, f"{dtpath}:{entry.name}")
        nodes.append(DtNode(dtpath, props.get("compatible"), props.get("status")))
        if children and depth + 1 >= MAX_DEPTH:
            warnings.append(f"{dtpath}: nested deeper than {MAX_DEPTH} levels; children skipped")
            continue
        pending.extend((p, c, depth + 1) for p, c in reversed(children))
    return DeviceTree(source=source, form="directory", nodes=tuple(nodes), warnings=tuple(warnings))
