"""The bpf(2) calls the keeper needs, through ctypes (no new dependency): query a cgroup's
device programs, open one by ID, read its instructions, load a program, attach it in place
of another (BPF_F_ALLOW_MULTI | BPF_F_REPLACE).

What each call needs (measured on Linux 6.18; see the README): BPF_PROG_QUERY needs
CAP_NET_ADMIN or CAP_SYS_ADMIN; BPF_PROG_GET_FD_BY_ID needs CAP_SYS_ADMIN; reading the
instructions back needs CAP_BPF (or CAP_SYS_ADMIN) and, for a constant-blinded program,
CAP_SYSLOG; BPF_PROG_LOAD of a cgroup device program needs CAP_BPF (or CAP_SYS_ADMIN);
BPF_PROG_ATTACH to a cgroup needs CAP_NET_ADMIN or CAP_SYS_ADMIN and an fd of the cgroup
directory.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# include/uapi/linux/bpf.h
PROG_LOAD, PROG_ATTACH, PROG_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD, PROG_QUERY = 5, 8, 13, 15, 16
PROG_TYPE_CGROUP_DEVICE = 15
ATTACH_CGROUP_DEVICE = 6
F_ALLOW_OVERRIDE, F_ALLOW_MULTI, F_REPLACE = 1, 2, 4
NAME_LEN = 16
# Big enough for every command's attribute block: since 6.17 PROG_QUERY writes its
# `revision` field (offset 56) whatever size is passed (fixed in later kernels).
ATTR_SIZE = 160
INFO_SIZE = 232

_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "armv6l": 386, "riscv64": 280}
_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(OSError):
    """A bpf(2) call failed; `call` names it, errno says why."""

    def __init__(self, call: str, err: int, detail: str = "") -> None:
        super().__init__(err, f"{call}: {os.strerror(err)}{detail}")
        self.call = call


def _nr() -> int:
    try:
        return _SYSCALL[platform.machine()]
    except KeyError:
        raise BpfError(
            "bpf", errno.ENOSYS, f" (no syscall number known for {platform.machine()})"
        ) from None


def _call(cmd: int, attr: ctypes.Array[ctypes.c_char], name: str) -> int:
    ret = _libc.syscall(_nr(), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        raise BpfError(name, ctypes.get_errno())
    return int(ret)


def _attr(fmt: str, *values: object) -> ctypes.Array[ctypes.c_char]:
    buf = ctypes.create_string_buffer(ATTR_SIZE)
    struct.pack_into(fmt, buf, 0, *values)
    return buf


def _addr(buf: ctypes.Array[ctypes.c_char] | None) -> int:
    return 0 if buf is None else ctypes.addressof(buf)


def query(cgroup_fd: int) -> tuple[int, list[int]]:
    """(attach flags, IDs of the device programs attached to this cgroup itself)."""
    cap = 64
    while True:
        ids = (ctypes.c_uint32 * cap)()
        attr = _attr("<IIII QI", cgroup_fd, ATTACH_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), cap)
        try:
            _call(PROG_QUERY, attr, "BPF_PROG_QUERY")
        except BpfError as e:
            if e.errno == errno.ENOSPC and cap < 4096:
                cap *= 4
                continue
            raise
        (flags,) = struct.unpack_from("<I", attr, 12)
        (count,) = struct.unpack_from("<I", attr, 24)
        return flags, list(ids[:count])


def prog_fd(prog_id: int) -> int:
    return _call(PROG_GET_FD_BY_ID, _attr("<I", prog_id), "BPF_PROG_GET_FD_BY_ID")


class ProgInfo:
    """What the kernel says about one loaded program."""

    def __init__(self, prog_id: int, prog_type: int, name: str, insns: bytes, n_maps: int) -> None:
        self.id = prog_id
        self.type = prog_type
        self.name = name
        self.insns = insns
        self.n_maps = n_maps


def _info(fd: int, xlated: ctypes.Array[ctypes.c_char] | None) -> ctypes.Array[ctypes.c_char]:
    info = ctypes.create_string_buffer(INFO_SIZE)
    if xlated is not None:
        struct.pack_into("<I", info, 20, len(xlated))
        struct.pack_into("<Q", info, 32, ctypes.addressof(xlated))
    attr = _attr("<II Q", fd, INFO_SIZE, ctypes.addressof(info))
    _call(OBJ_GET_INFO_BY_FD, attr, "BPF_OBJ_GET_INFO_BY_FD")
    return info


def prog_info(fd: int) -> ProgInfo:
    """The program's type, ID, name and xlated instructions (empty when the caller may not
    read them: without CAP_BPF the kernel reports a length of 0)."""
    first = _info(fd, None)
    (length,) = struct.unpack_from("<I", first, 20)
    insns = b""
    if length:
        xlated = ctypes.create_string_buffer(length)
        info = _info(fd, xlated)
        (got,) = struct.unpack_from("<I", info, 20)
        (ptr,) = struct.unpack_from("<Q", info, 32)
        if ptr == 0:  # blinded and not allowed to see it raw
            raise BpfError("BPF_OBJ_GET_INFO_BY_FD", errno.EPERM, " (instructions withheld)")
        insns = xlated.raw[: min(got, length)]
    ptype, pid = struct.unpack_from("<II", first, 0)
    raw_name = first.raw[64 : 64 + NAME_LEN]
    (n_maps,) = struct.unpack_from("<I", first, 52)
    return ProgInfo(
        pid, ptype, raw_name.split(b"\0", 1)[0].decode("ascii", "replace"), insns, n_maps
    )


def load(insns: bytes, name: str, license: bytes) -> int:
    """Load a cgroup device program. When the verifier refuses it, the load is repeated
    with its log on, so the error says why (a log that overflows would fail a good load)."""
    prog = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license)

    def attempt(log: ctypes.Array[ctypes.c_char] | None) -> int:
        attr = _attr(
            "<II QQ IIQ II16s",
            PROG_TYPE_CGROUP_DEVICE,
            len(insns) // 8,
            _addr(prog),
            _addr(lic),
            0 if log is None else 1,
            0 if log is None else len(log),
            _addr(log),
            0,
            0,
            name.encode()[: NAME_LEN - 1],
        )
        return _call(PROG_LOAD, attr, "BPF_PROG_LOAD")

    try:
        return attempt(None)
    except BpfError as e:
        if e.errno != errno.EACCES and e.errno != errno.EINVAL:
            raise
        log = ctypes.create_string_buffer(1 << 20)
        try:
            fd = attempt(log)
        except BpfError:
            text = log.value.decode("ascii", "replace").strip().splitlines()
            if text:  # in what str() and strerror say: GrantFailed quotes strerror
                e.strerror = f"{e.strerror}; verifier: {' / '.join(text[-3:])}"
                e.args = (e.errno, e.strerror)
            raise e from None
        return fd  # refused once, accepted with the log on: take it


def attach(cgroup_fd: int, prog: int, flags: int, replace: int | None = None) -> None:
    """BPF_PROG_ATTACH; with `replace` (and F_ALLOW_MULTI) swaps that program for `prog`
    in one step: there is no moment with neither or both attached."""
    if replace is not None:
        flags |= F_REPLACE
    attr = _attr("<IIIII", cgroup_fd, prog, ATTACH_CGROUP_DEVICE, flags, replace or 0)
    _call(PROG_ATTACH, attr, "BPF_PROG_ATTACH")
