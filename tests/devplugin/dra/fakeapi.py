"""A stand-in for the resource.k8s.io slice calls, for unit tests of the publisher's logic
beside the real-API-server suites (tests/devplugin/dra/test_realpeer.py,
tests/k8s/test_dra_apiserver.py), which remain the tests of the API interaction itself.

It keeps objects with resourceVersions, refuses a stale write with 409 as the API server
does, streams watch events to every open watch, and can be made unreachable."""

from __future__ import annotations

import copy
import queue
import threading
from typing import Any

from edgefd.kube.errors import ApiConflict, ApiNotFound, ApiUnreachable


class FakeWatch:
    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.closed = False

    def __iter__(self):  # type: ignore[no-untyped-def]
        while not self.closed:
            ev = self.events.get()
            if ev is None:
                return
            yield ev

    def close(self) -> None:
        self.closed = True
        self.events.put(None)


class FakeSliceApi:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.writes: list[tuple[str, str]] = []  # (verb, name)
        self.watches: list[FakeWatch] = []
        self.down = False
        self.creates = 0  # create requests, refused ones included
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> Node object
        self.node_gets = 0
        self.status_writes: list[tuple[str, str, list[dict[str, Any]]]] = []

    def _check(self) -> None:
        if self.down:
            raise ApiUnreachable("connection refused")

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        for w in self.watches:
            if not w.closed:
                w.events.put({"type": kind, "object": copy.deepcopy(obj)})

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    def list_slices(self, node: str, driver: str) -> dict[str, Any]:
        with self.lock:
            self._check()
            items = [
                copy.deepcopy(o)
                for o in self.objects.values()
                if o["spec"].get("nodeName") == node and o["spec"].get("driver") == driver
            ]
            return {"metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def watch_slices(self, node: str, driver: str, resource_version: str, seconds: int) -> Any:
        with self.lock:
            self._check()
            w = FakeWatch()
            self.watches.append(w)
            return w

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self._check()
            name = body["metadata"]["name"]
            self.creates += 1
            if name in self.objects:
                raise ApiConflict(f"resourceslice {name} already exists")
            obj = self.objects[name] = self._stamp(body)
            self.writes.append(("create", name))
            self._emit("ADDED", obj)
            return copy.deepcopy(obj)

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self._check()
            name = body["metadata"]["name"]
            old = self.objects.get(name)
            if old is None:
                raise ApiNotFound(f"resourceslice {name} not found")
            if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                raise ApiConflict(f"resourceslice {name} was modified")
            obj = self.objects[name] = self._stamp(body)
            self.writes.append(("update", name))
            self._emit("MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete_slice(self, name: str, resource_version: str | None = None) -> None:
        with self.lock:
            self._check()
            obj = self.objects.pop(name, None)
            if obj is None:
                raise ApiNotFound(f"resourceslice {name} not found")
            self.writes.append(("delete", name))
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit("DELETED", obj)

    def delete_behind_its_back(self, name: str) -> None:
        """What a starting kubelet does to every DRA slice of its node."""
        with self.lock:
            obj = self.objects.pop(name)
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit("DELETED", obj)

    def get_node(self, name: str) -> dict[str, Any]:
        with self.lock:
            self._check()
            self.node_gets += 1
            if name not in self.nodes:
                raise ApiNotFound(f"nodes {name!r} not found")
            return copy.deepcopy(self.nodes[name])

    def apply_claim_status(
        self, namespace: str, name: str, devices: list[dict[str, Any]], manager: str
    ) -> dict[str, Any]:
        with self.lock:
            self._check()
            self.status_writes.append((namespace, name, copy.deepcopy(devices)))
            return {"status": {"devices": copy.deepcopy(devices)}}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        raise ApiNotFound(f"resourceclaim {namespace}/{name} not found")

    def devices(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {
                d["name"]: d for o in self.objects.values() for d in o["spec"].get("devices") or ()
            }

    def generation(self) -> int:
        with self.lock:
            return max((o["spec"]["pool"]["generation"] for o in self.objects.values()), default=0)
