"""The kubelet's own device-manager code (``kubelet-devices``, tests/harness/cmd), driven over
JSON lines, and the fixture that gives each test a fresh one."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .processes import harness_binary, kill, spawn, tail

KUBELET_DEVICES = "kubelet-devices"


class KubeletDevicesError(RuntimeError):
    pass


class KubeletDevices:
    """The kubelet's device manager on ``plugin_dir`` (see
    tests/harness/cmd/kubelet-devices). Events are dicts with ``event`` and
    ``ts`` (``time.monotonic()`` clock)."""

    def __init__(
        self,
        plugin_dir: str | Path | None = None,
        bin_path: Path | None = None,
        log_dir: Path | None = None,
    ):
        self._own_dir = plugin_dir is None
        # Short paths: unix socket names are limited to 107 bytes.
        self.plugin_dir = str(plugin_dir or tempfile.mkdtemp(prefix="kd-"))
        self.kubelet_socket = os.path.join(self.plugin_dir, "kubelet.sock")
        self.bin_path = Path(bin_path) if bin_path else harness_binary(KUBELET_DEVICES)
        self._own_log = log_dir is None
        self.log_path = (
            Path(log_dir or tempfile.gettempdir()) / f"kubelet-devices-{uuid.uuid4().hex[:8]}.log"
        )
        self.events: list[dict] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._wlock = threading.Lock()

    def start(self, timeout: float = 15.0) -> KubeletDevices:
        self._proc = spawn(
            [str(self.bin_path), "-plugin-dir", self.plugin_dir],
            self.log_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._reader = threading.Thread(
            target=self._read, daemon=True, name="kubelet-devices-reader"
        )
        self._reader.start()
        self.wait_for("ready", timeout=timeout)
        return self

    def _read(self) -> None:
        assert self._proc and self._proc.stdout
        for raw in self._proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "garbage", "line": line, "ts": time.monotonic()}
            with self._cond:
                self.events.append(ev)
                self._cond.notify_all()
        with self._cond:
            self.events.append(
                {"event": "exited", "ts": time.monotonic(), "returncode": self._proc.wait()}
            )
            self._cond.notify_all()

    # ---- events

    def mark(self) -> int:
        """An index into ``events``; pass as ``since=`` to only see later events."""
        with self._cond:
            return len(self.events)

    def events_named(self, name: str, since: int = 0, **match: Any) -> list[dict]:
        with self._cond:
            return [
                e
                for e in self.events[since:]
                if e.get("event") == name and all(e.get(k) == v for k, v in match.items())
            ]

    def wait_for(
        self,
        what: str | Callable[[dict], bool],
        timeout: float = 10.0,
        since: int = 0,
        **match: Any,
    ) -> dict:
        """The first event (from index ``since``) named ``what`` whose fields
        equal ``match``, or for which the predicate ``what`` is true."""
        if callable(what):
            pred = what
        else:

            def pred(e: dict) -> bool:
                return e.get("event") == what and all(e.get(k) == v for k, v in match.items())

        deadline = time.monotonic() + timeout
        i = since
        with self._cond:
            while True:
                while i < len(self.events):
                    e = self.events[i]
                    i += 1
                    if pred(e):
                        return e
                    if e.get("event") == "exited":
                        log = tail(self.log_path)
                        msg = f"kubelet-devices exited waiting for {what!r}:\n{log}"
                        raise KubeletDevicesError(msg)
                left = deadline - time.monotonic()
                if left <= 0:
                    recent = self.events[since:][-20:]
                    msg = f"no {what!r} {match or ''} event in {timeout}s; got {recent}"
                    raise TimeoutError(msg)
                self._cond.wait(left)

    # ---- commands

    def command(self, cmd: str, timeout: float = 30.0, **args: Any) -> dict:
        if not self._proc or self._proc.poll() is not None:
            raise KubeletDevicesError("kubelet-devices is not running")
        cid = next(self._ids)
        since = self.mark()
        line = json.dumps({"cmd": cmd, "id": cid, **args}) + "\n"
        with self._wlock:
            assert self._proc.stdin
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        return self.wait_for("response", timeout=timeout, since=since, id=cid)

    def allocate(
        self,
        resource: str,
        count: int | None = None,
        devices: list[str] | None = None,
        timeout: float = 30.0,
    ) -> dict:
        """Allocate like the kubelet admitting a pod (``count``; the kubelet's
        device manager picks the IDs, asking GetPreferredAllocation when the
        plugin offers it), or send Allocate for explicit ``devices`` on the
        kubelet's connection. Returns the response event: ``ok``, ``error``,
        ``device_ids``, ``envs``, ``mounts``, ``devices``, ``annotations``,
        ``cdi_devices``."""
        args: dict[str, Any] = {"resource": resource}
        if devices is not None:
            args["devices"] = list(devices)
        else:
            args["count"] = 1 if count is None else count
        return self.command("allocate", timeout=timeout, **args)

    def preferred(
        self,
        resource: str,
        size: int,
        available: list[str] | None = None,
        must_include: list[str] | None = None,
        timeout: float = 30.0,
    ) -> dict:
        args: dict[str, Any] = {"resource": resource, "size": size}
        if available is not None:
            args["available"] = available
        if must_include is not None:
            args["must_include"] = must_include
        return self.command("preferred", timeout=timeout, **args)

    def capacity(self) -> dict:
        """``{"capacity": {res: n}, "allocatable": {res: n},
        "devices": {res: {"healthy": [...], "unhealthy": [...]}}}``"""
        return self.command("capacity")

    def release(self, pod_uid: str | None = None) -> dict:
        """Forget pods (all, or one) so their devices can be allocated again."""
        return self.command("release", **({"pod_uid": pod_uid} if pod_uid else {}))

    def restart(self, delay: float = 0.0, timeout: float = 30.0) -> dict:
        """A kubelet restart: the manager stops, a new one deletes every socket
        in the plugin dir and recreates kubelet.sock. Returns the new ``ready``."""
        since = self.mark()
        resp = self.command("restart", timeout=timeout, delay=delay)
        if not resp.get("ok"):
            raise KubeletDevicesError(f"restart failed: {resp}")
        return self.wait_for("ready", since=since, timeout=timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                self.command("stop", timeout=timeout)
                self._proc.wait(timeout=timeout)
            except (
                KubeletDevicesError,
                TimeoutError,
                subprocess.TimeoutExpired,
                BrokenPipeError,
                OSError,
            ):
                pass
        kill(self._proc, grace=3.0)
        if self._reader:
            self._reader.join(timeout=5)
        self._proc = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.plugin_dir, ignore_errors=True)
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def log(self) -> str:
        """kubelet-devices' stderr (the kubelet code's log) so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def kubelet_devices() -> KubeletDevices:
    kd = KubeletDevices()
    try:
        kd.start()
        yield kd
    finally:
        kd.close()
