"""Stand-ins for the resource.k8s.io calls, for unit tests of the DRA front-end's logic beside
the real-API-server suites (tests/devplugin/dra/test_realpeer.py,
tests/k8s/test_dra_apiserver.py), which remain the tests of the API interaction itself.

`FakeSliceApi`, the slice calls: it keeps objects with resourceVersions, refuses a stale write
with 409 as the API server does, answers the list and the watch
edgefd.kube.listwatch.ListWatch sends (`request`, `watch`, with the field selector of
`slices_query` applied and a watch resumed from its resourceVersion), and can be made
unreachable. `Claims`, the ResourceClaims a Preparer reads (claims.ClaimSource), allocated
on tests/devplugin/devices.py's NODE unless told otherwise."""

from __future__ import annotations

import copy
import queue
import threading
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from edgefd.devplugin.dra import kubeapi
from edgefd.devplugin.dra.claims import ClaimRef
from edgefd.devplugin.dra.kubeapi import DraApi
from edgefd.kube.errors import ApiConflict, ApiNotFound, ApiUnreachable
from tests.devplugin.devices import NODE

SLICES = kubeapi.SLICES


def _selected(path: str) -> tuple[dict[str, str], str]:
    """The field selector's terms and the resourceVersion in a collection query."""
    query = parse_qs(urlsplit(path).query)
    terms = dict(t.split("=", 1) for s in query.get("fieldSelector", []) for t in s.split(",") if t)
    return terms, (query.get("resourceVersion") or [""])[0]


def _matches(obj: dict[str, Any], terms: dict[str, str]) -> bool:
    spec = obj.get("spec") or {}
    fields = {"spec.nodeName": spec.get("nodeName"), "spec.driver": spec.get("driver")}
    return all(fields.get(k) == v for k, v in terms.items())


class FakeWatch:
    def __init__(self, terms: dict[str, str]) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.terms = terms
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
        self.history: list[dict[str, Any]] = []  # every event, for a watch that resumes
        self.lists = 0
        self.down = False
        self.creates = 0  # create requests, refused ones included
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> Node object
        self.node_gets = 0
        self.status_writes: list[tuple[str, str, list[dict[str, Any]]]] = []

    def _check(self) -> None:
        if self.down:
            raise ApiUnreachable("connection refused")

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.history.append({"type": kind, "object": copy.deepcopy(obj)})
        for w in self.watches:
            if not w.closed and _matches(obj, w.terms):
                w.events.put({"type": kind, "object": copy.deepcopy(obj)})

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    slices_query = staticmethod(DraApi.slices_query)  # the very query the publisher sends

    def request(
        self,
        method: str,
        resource: str,
        path: str,
        what: str,
        body: Any = None,
        content_type: str | None = None,
        verb: str | None = None,
    ) -> Any:
        """Only the list of a slice collection (what a ListWatch sends)."""
        if method != "GET" or not path.startswith(f"{SLICES}?"):
            raise NotImplementedError(f"FakeSliceApi: {method} {path}")
        terms, _ = _selected(path)
        with self.lock:
            self._check()
            self.lists += 1
            items = [copy.deepcopy(o) for o in self.objects.values() if _matches(o, terms)]
            return {"metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def watch(
        self,
        resource: str,
        path: str,
        what: str,
        seconds: int = 300,
        idle_timeout: float | None = None,
    ) -> FakeWatch:
        """Every event after the query's resourceVersion that its selector selects, as the API
        server's watch cache gives them."""
        terms, rv = _selected(path)
        with self.lock:
            self._check()
            w = FakeWatch(terms)
            for ev in self.history:
                later = int(ev["object"]["metadata"]["resourceVersion"]) > int(rv or 0)
                if later and _matches(ev["object"], terms):
                    w.events.put(copy.deepcopy(ev))
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


class Claims:
    """ResourceClaims as the API server returns them (a dict per namespace/name)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets = 0

    def add(self, name: str, devices: list[str], pool: str = NODE, driver: str = "edgefd.io"):
        uid = str(uuid.uuid4())
        results = [{"request": "tpu", "driver": driver, "pool": pool, "device": d} for d in devices]
        self.objects[("default", name)] = {
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }
        return ClaimRef("default", uid, name)

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        return self.objects[(namespace, name)]
