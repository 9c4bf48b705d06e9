"""Devicetree fixtures: compile DTS with dtc, and lay a blob out as the kernel's directory form.

Other fixture generators put a devicetree into generated host roots with these two functions,
so both forms of one tree can be compared (they must give identical labels).

The directory writer walks the blob on its own, keeping every property: it is test code and
must not share a bug with the parser under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_BEGIN_NODE, _END_NODE, _PROP, _NOP, _END = 1, 2, 3, 4, 9


def compile_dts(dts: str | os.PathLike[str]) -> bytes:
    """Compile DTS source (a path, or the text itself if it contains `/dts-v1/`) to a blob."""
    dtc = shutil.which("dtc")
    if dtc is None:
        raise RuntimeError("dtc not found: apt-get install device-tree-compiler")
    text = os.fspath(dts)
    args = [dtc, "-q", "-I", "dts", "-O", "dtb", "-o", "-"]
    if isinstance(dts, str) and "/dts-v1/" in dts:
        proc = subprocess.run([*args, "-"], input=text.encode(), capture_output=True, check=False)
    else:
        path = Path(text)
        proc = subprocess.run(
            [*args, "-i", str(path.parent), str(path)], capture_output=True, check=False
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"dtc failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout


def _u32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 4], "big")


def expand_dtb(blob: bytes, dest_dir: Path) -> None:
    """Write `blob` as /proc/device-tree would show it, with `dest_dir` as the root node.

    One directory per node (named with its unit address), one file per property holding the
    raw value, and the `name` pseudo-property (node name without unit address, NUL-terminated)
    that the kernel adds to every node.
    """
    if _u32(blob, 0) != 0xD00DFEED:
        raise ValueError("not a devicetree blob")
    off_struct, off_strings = _u32(blob, 8), _u32(blob, 12)
    dest_dir = Path(dest_dir)
    stack: list[Path] = []
    pos = off_struct
    while True:
        token = _u32(blob, pos)
        pos += 4
        if token == _BEGIN_NODE:
            end = blob.index(b"\0", pos)
            name = blob[pos:end]
            pos = (end + 4) & ~3
            node_dir = stack[-1] / os.fsdecode(name) if stack else dest_dir
            node_dir.mkdir(parents=True, exist_ok=True)
            (node_dir / "name").write_bytes(name.split(b"@", 1)[0] + b"\0")
            stack.append(node_dir)
        elif token == _END_NODE:
            stack.pop()
        elif token == _PROP:
            length, nameoff = _u32(blob, pos), _u32(blob, pos + 4)
            pos += 8
            nend = blob.index(b"\0", off_strings + nameoff)
            pname = os.fsdecode(blob[off_strings + nameoff : nend])
            (stack[-1] / pname).write_bytes(blob[pos : pos + length])
            pos += (length + 3) & ~3
        elif token == _NOP:
            continue
        elif token == _END:
            return
        else:
            raise ValueError(f"bad token {token:#x} at {pos - 4}")
