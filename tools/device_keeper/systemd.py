"""The systemd cgroup driver: a container is a systemd scope, and a grant must be the scope's.

Under the systemd driver (kubeadm's default, k3s's as a service) runc asks systemd for the
container's scope (`cri-containerd-<id>.scope` in the pod's slice) with `DevicePolicy=strict`
and one `DeviceAllow=` per node it gives the container, and writes the same rules into the
cgroup itself. systemd rebuilds the scope's device rules from `DeviceAllow=` whenever it
re-applies the unit: on every `systemctl daemon-reload` and on any property change of the
scope (the kubelet's CPU manager setting `AllowedCPUs`, an operator's `set-property`). A grant
written only into the cgroup is undone then; so the keeper gives the scope the node through
`DeviceAllow=` as well, with `SetUnitProperties(scope, runtime=true, ...)`, which systemd keeps
in /run/systemd/transient/<scope>.d/ and applies at once. A revocation is the list reset (an
empty `DeviceAllow=`) followed by the whole list without the revoked nodes, in one call; a
node is named `/dev/char/MAJOR:MINOR`, which systemd (>= 240) takes without the node existing.

How the keeper reaches systemd: its private socket, /run/systemd/private (`--systemd-socket`,
under the host root; the DaemonSet mounts the host's /run/systemd read-only). It needs no
D-Bus daemon (a Raspberry Pi OS Lite or a minimal server may run none); it is systemd's own
peer-to-peer socket, root only, the one runc and the kubelet use as root. No Hello: a direct
connection has no bus to say it to. The connection is made per grant (a grant is
rare), with a timeout, from the keeper's PID namespace: systemd authenticates the peer by its
credentials, which it cannot read from outside the host's PID namespaces (the keeper's pod has
its own, a child of the host's, where systemd sees it).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgefd.core.errors import EdgefdError, Unreachable

from .rules import DeviceNumber

SOCKET = "/run/systemd/private"
TIMEOUT = 5.0
SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = f"{SYSTEMD}.Manager"
SCOPE = f"{SYSTEMD}.Scope"


# A first call not answered in this long is nudged (below)
NUDGE = 0.2


class SystemdError(EdgefdError):
    """systemd said no, or did not answer."""


def device_path(n: DeviceNumber) -> str:
    """How `DeviceAllow=` names one node: `/dev/char/189:5` (or `/dev/block/8:0`)."""
    return f"/dev/{'char' if n.type == 'c' else 'block'}/{n.major}:{n.minor}"


@dataclass(frozen=True)
class Scope:
    """A container's scope: its unit name and its cgroup's path below the hierarchy's root,
    from the runtime's `cgroupsPath` (`slice:prefix:name`)."""

    unit: str
    path: str

    @classmethod
    def of(cls, cgroups_path: str) -> Scope:
        """`kubepods-besteffort-pod1.slice:cri-containerd:abc` -> unit
        `cri-containerd-abc.scope` in `kubepods.slice/kubepods-besteffort.slice/
        kubepods-besteffort-pod1.slice` (systemd's nesting of a dashed slice name)."""
        parts = cgroups_path.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{cgroups_path!r}: not the systemd driver's slice:prefix:name")
        slice_, prefix, name = parts
        unit = name if name.endswith(".slice") else f"{prefix}-{name}.scope"
        return cls(unit, "/".join([*slice_path(slice_), unit]))


def slice_path(name: str) -> list[str]:
    """The slices a slice is nested in, outermost first, and itself (`a-b.slice` ->
    `a.slice`, `a-b.slice`); `-.slice` is the root."""
    if name in ("-.slice", ""):
        return []
    stem = name.removesuffix(".slice")
    words = stem.split("-")
    return [f"{'-'.join(words[: i + 1])}.slice" for i in range(len(words))]


class Systemd:
    """systemd's manager over its private socket."""

    def __init__(self, socket_path: str = SOCKET, timeout: float = TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _call(self, path: str, interface: str, method: str, signature: str, body: tuple) -> Any:
        from jeepney import DBusAddress, new_method_call
        from jeepney.low_level import HeaderFields, Parser
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg

        call = new_method_call(DBusAddress(path, SYSTEMD, interface), method, signature, body)
        where = f"systemd at {self.socket_path}"
        deadline = time.monotonic() + self.timeout
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.socket_path)
                _authenticate(sock, where)
                sock.sendall(call.serialise(serial=1))
                parser, nudged = Parser(), False
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no answer in {self.timeout:g}s")
                    sock.settimeout(left if nudged else min(left, NUDGE))
                    try:
                        data = sock.recv(65536)
                    except TimeoutError:
                        if nudged:
                            raise
                        sock.sendall(_ping().serialise(serial=2))
                        nudged = True
                        continue
                    if not data:
                        raise ConnectionResetError("it closed the connection")
                    for reply in parser.feed(data):
                        if reply.header.fields.get(HeaderFields.reply_serial) == 1:
                            try:
                                return unwrap_msg(reply)
                            except DBusErrorResponse as e:
                                what = " ".join(map(str, e.data))
                                raise SystemdError(f"systemd: {method}: {e.name}: {what}") from None
        except (OSError, TimeoutError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            why = why or type(e).__name__
            raise Unreachable(f"{where}: {method}: {why}") from None

    def version(self) -> str:
        """systemd's version (`252.33-1~deb12u1`): what the keeper's startup line says it
        reaches, and a cheap proof that it does."""
        (value,) = self._call(
            MANAGER_PATH, "org.freedesktop.DBus.Properties", "Get", "ss", (MANAGER, "Version")
        )
        return str(value[1])

    def device_allow(self, unit: str) -> list[tuple[str, str]]:
        """The scope's `DeviceAllow=` list: (path, access) in systemd's order."""
        (path,) = self._call(MANAGER_PATH, MANAGER, "GetUnit", "s", (unit,))
        (value,) = self._call(
            path, "org.freedesktop.DBus.Properties", "Get", "ss", (SCOPE, "DeviceAllow")
        )
        _, entries = value
        return [(str(p), str(a)) for p, a in entries]

    def set_device_allow(
        self, unit: str, allow: dict[DeviceNumber, str], revoke: Iterable[DeviceNumber]
    ) -> list[tuple[str, str]]:
        """Allow `allow` and take `revoke` out of the scope's `DeviceAllow=` (runtime only:
        it goes with the scope); the list it has now. Nothing revoked is an append; otherwise
        the list is reset and set whole, in one call (systemd applies the result once)."""
        gone = {device_path(n) for n in revoke}
        new = [(device_path(n), a) for n, a in sorted(allow.items())]
        if not gone:
            current = self.device_allow(unit)
            add = [e for e in new if e not in current]
            if add:
                self._set(unit, [("DeviceAllow", ("a(ss)", add))])
            return current + add
        current = self.device_allow(unit)
        named = {p for p, _ in new}
        kept = [(p, a) for p, a in current if p not in gone and p not in named]
        whole = kept + new
        if whole != current:  # the same grant twice (a v1 and a v2 directory) sets it once
            self._set(unit, [("DeviceAllow", ("a(ss)", [])), ("DeviceAllow", ("a(ss)", whole))])
        return whole

    def _set(self, unit: str, props: list[tuple[str, tuple[str, list]]]) -> None:
        self._call(MANAGER_PATH, MANAGER, "SetUnitProperties", "sba(sv)", (unit, True, props))


def _authenticate(sock: socket.socket, where: str) -> None:
    """D-Bus's EXTERNAL authentication (the peer's uid, which systemd reads from the socket
    too) and BEGIN in one write, as sd-bus's own clients send them: systemd has read BEGIN
    by the time its OK arrives, so the first call is a read of its own."""
    uid = str(os.geteuid()).encode().hex().encode()
    sock.sendall(b"\0AUTH EXTERNAL " + uid + b"\r\nBEGIN\r\n")
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionResetError("it closed the connection while authenticating")
        line += chunk
        if len(line) > 256:
            raise ConnectionError("not a D-Bus server")
    if not line.startswith(b"OK "):
        raise ConnectionRefusedError(f"it refused us: {line.decode(errors='replace').strip()}")


def _ping() -> Any:
    """The nudge: systemd (sd-bus as a server) may hold a call that arrived in the same read
    as BEGIN without dispatching it until more bytes arrive (seen with systemd 252: about
    one direct connection in ten). A Peer.Ping is those bytes; its answer is ignored."""
    from jeepney import DBusAddress, new_method_call

    return new_method_call(DBusAddress("/", SYSTEMD, "org.freedesktop.DBus.Peer"), "Ping")
