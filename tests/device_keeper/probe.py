"""What a process in a given cgroup may do with device nodes, asked of the kernel itself.

A child process joins the cgroups, then for each (type, major, minor, access): `m` is a
mknod of that node in a scratch directory; `r` / `w` open a node the parent made beforehand
(so they do not depend on `m`). EPERM is the device cgroup saying no; anything else (ENXIO
from a major with no driver, EIO, success) means the cgroup let it through.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence

Probe = tuple[str, int, int, str]  # ("c", 189, 4, "r")

# majors with no driver behind them here, and a few real harmless nodes (null, zero, full)
SPREAD: list[Probe] = [
    (t, major, minor, acc)
    for t, major, minor in [
        ("c", 1, 3), ("c", 1, 5), ("c", 1, 7), ("c", 1, 4),
        ("c", 189, 0), ("c", 189, 3), ("c", 189, 4), ("c", 189, 5), ("c", 189, 6),
        ("c", 189, 132), ("c", 188, 4), ("c", 180, 4), ("c", 242, 5),
        ("b", 189, 4), ("b", 189, 5), ("b", 8, 0), ("b", 242, 1),
    ]
    for acc in ("r", "w", "m")
]  # fmt: skip


def _kind(t: str) -> int:
    return stat.S_IFCHR if t == "c" else stat.S_IFBLK


def probe(procs_files: Sequence[str], probes: Iterable[Probe]) -> dict[Probe, bool]:
    """{probe: allowed} for a process placed in the cgroups whose cgroup.procs are given."""
    probes = list(probes)
    with tempfile.TemporaryDirectory(prefix="edgefd-probe-") as scratch:
        made = {}
        for t, major, minor, _ in probes:
            path = os.path.join(scratch, f"{t}{major}_{minor}")
            if path not in made.values():
                os.mknod(path, _kind(t) | 0o600, os.makedev(major, minor))
            made[(t, major, minor)] = path
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                os.close(r)
                for f in procs_files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))
                out = {}
                for n, (t, major, minor, acc) in enumerate(probes):
                    out[n] = _try(scratch, made[(t, major, minor)], t, major, minor, acc)
                os.write(w, json.dumps(out).encode())
            except BaseException as e:
                os.write(w, json.dumps({"error": repr(e)}).encode())
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
    got = json.loads(data)
    if "error" in got:
        raise RuntimeError(f"probe child failed: {got['error']}")
    return {p: got[str(n)] for n, p in enumerate(probes)}


def _try(scratch: str, node: str, t: str, major: int, minor: int, acc: str) -> bool:
    try:
        if acc == "m":
            path = os.path.join(scratch, f"m-{t}{major}_{minor}")
            os.mknod(path, _kind(t) | 0o600, os.makedev(major, minor))
            os.unlink(path)
        else:
            flags = os.O_RDONLY if acc == "r" else os.O_WRONLY
            os.close(os.open(node, flags | os.O_NONBLOCK | os.O_NOCTTY))
    except OSError as e:
        return e.errno != errno.EPERM
    return True


def changed(before: dict[Probe, bool], after: dict[Probe, bool]) -> dict[Probe, tuple[bool, bool]]:
    return {p: (before[p], after[p]) for p in before if before[p] != after[p]}
