"""edgefd.kube.listwatch's decisions, with a scripted client (a pure unit test): resume from the
last resourceVersion, list again only on 410, back off on failures and on a watch that ends
at once. The same loop against the real API server (a restart, an etcd compaction):
tests/feature_sink/test_watched.py."""

from __future__ import annotations

import queue
import threading
from typing import Any

from edgefd.kube.errors import ApiGone, ApiRefused, ApiUnreachable
from edgefd.kube.listwatch import ListWatch, name_selector, newer
from edgefd.kube.retry import Retry
from tests.helpers import wait_until


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


class ScriptedClient:
    """Answers list and watch calls from a script; records what was asked."""

    def __init__(self, script: list[Any], done: threading.Event) -> None:
        self.script = script
        self.calls: list[tuple[str, str]] = []
        self.done = done

    def _next(self) -> Any:
        if not self.script:
            self.done.set()
            raise ApiUnreachable("script over")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def request(self, method: str, resource: str, path: str, what: str, **kw: Any) -> Any:
        self.calls.append(("LIST", path))
        return self._next()

    def watch(self, resource: str, path: str, what: str, seconds: int, idle_timeout: Any) -> Any:
        self.calls.append(("WATCH", path))
        events = self._next()

        class W:
            def __iter__(self) -> Any:
                for e in events:
                    if isinstance(e, Exception):
                        raise e
                    yield e

            def close(self) -> None:
                pass

        return W()


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def listed(self, objects: dict[str, Any], reason: str) -> None:
        self.seen.append(("listed", (reason, sorted(objects))))

    def event(self, kind: str, o: dict[str, Any]) -> None:
        self.seen.append((kind, o["metadata"]["resourceVersion"]))

    def lost(self) -> None:
        self.seen.append(("lost", None))


def run(script: list[Any]) -> tuple[ScriptedClient, Recorder, list[str]]:
    done = threading.Event()
    client = ScriptedClient(script, done)
    rec = Recorder()
    lists: list[str] = []
    retry = Retry("watching n1", initial=0.001, cap=0.002)
    lw = ListWatch(
        client,  # type: ignore[arg-type]
        "nodes",
        f"/api/v1/nodes?{name_selector('n1')}",
        "node n1",
        rec,
        retry=retry,
        on_list=lists.append,
        jitter=lambda: 0.0,
    )
    lw.start()
    assert done.wait(10)
    lw.stop()
    return client, rec, lists


def test_resumes_from_the_last_resource_version_and_lists_again_only_on_410():
    bookmark = {"type": "BOOKMARK", "object": obj("", 9)}
    client, rec, lists = run(
        [
            {"metadata": {"resourceVersion": "5"}, "items": [obj("n1", 5)]},
            [{"type": "MODIFIED", "object": obj("n1", 7)}, bookmark],  # the server ends it
            [ApiGone("too old resource version")],  # resumed from 9: gone
            {"metadata": {"resourceVersion": "20"}, "items": [obj("n1", 18)]},
            [{"type": "DELETED", "object": obj("n1", 21)}],
        ]
    )
    assert [c[0] for c in client.calls][:5] == ["LIST", "WATCH", "WATCH", "LIST", "WATCH"]
    watches = [path for kind, path in client.calls if kind == "WATCH"]
    assert "resourceVersion=5" in watches[0] and "allowWatchBookmarks=true" in watches[0]
    assert "resourceVersion=9" in watches[1]  # from the bookmark: no list after a renewal
    assert "resourceVersion=20" in watches[2]
    assert "fieldSelector=metadata.name%3Dn1" in watches[0]
    assert lists[:2] == ["start", "gone"]
    assert rec.seen[:4] == [
        ("listed", ("start", ["n1"])),
        ("MODIFIED", "7"),
        ("listed", ("gone", ["n1"])),
        ("DELETED", "21"),
    ]


def test_failures_back_off_and_say_the_copy_may_be_stale():
    client, rec, lists = run(
        [
            ApiUnreachable("connection refused"),  # the first list fails: list again
            {"metadata": {"resourceVersion": "5"}, "items": []},
            [ApiUnreachable("watch ended")],  # a broken watch: resume, no list
            [],  # ended at once with nothing in it: counts as a failure, not a spin
        ]
    )
    assert [c[0] for c in client.calls][:4] == ["LIST", "LIST", "WATCH", "WATCH"]
    assert lists[:1] == ["error"]
    assert ("lost", None) in rec.seen
    assert [s for s in rec.seen if s[0] == "listed"] == [("listed", ("error", []))]


def test_resource_versions_compare_as_numbers():
    assert newer("10", "9") and not newer("9", "10") and not newer("9", "9")
    assert newer("x", "9")  # opaque: taken as newer


# -- a watch that stays open, as the server's does for minutes: what relist() must cut short


class OpenWatch:
    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.closed = False

    def __iter__(self) -> Any:
        while (ev := self.events.get()) is not None:
            yield ev

    def close(self) -> None:
        self.closed = True
        self.events.put(None)


class OpenClient:
    """Lists from a script (the last answer repeats); every watch stays open until closed.
    `hold` keeps the first watch from being opened until it is set."""

    def __init__(self, lists: list[Any], hold: threading.Event | None = None) -> None:
        self.lists = lists
        self.calls: list[tuple[str, str]] = []
        self.watches: list[OpenWatch] = []
        self.hold = hold
        self.opening = threading.Event()

    def request(self, method: str, resource: str, path: str, what: str, **kw: Any) -> Any:
        self.calls.append(("LIST", path))
        step = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        if isinstance(step, Exception):
            raise step
        return step

    def watch(self, resource: str, path: str, what: str, seconds: int, idle_timeout: Any) -> Any:
        self.calls.append(("WATCH", path))
        if self.hold is not None and not self.watches:
            self.opening.set()
            assert self.hold.wait(10)
        w = OpenWatch()
        self.watches.append(w)
        return w


def start(client: OpenClient, on_retry: Any = None) -> tuple[ListWatch, Recorder, list[str]]:
    rec = Recorder()
    lists: list[str] = []
    lw = ListWatch(
        client,  # type: ignore[arg-type]
        "resourceslices",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1",
        "resourceslices of n1",
        rec,
        retry=Retry("watching n1", initial=0.001, cap=0.002, on_retry=on_retry),
        on_list=lists.append,
        jitter=lambda: 0.0,
    )
    return lw.start(), rec, lists


def test_relist_closes_the_open_watch_lists_and_watches_from_that_list():
    client = OpenClient(
        [
            {"metadata": {"resourceVersion": "5"}, "items": [obj("n1-a", 5)]},
            {"metadata": {"resourceVersion": "8"}, "items": [obj("n1-a", 8)]},
        ]
    )
    lw, rec, lists = start(client)
    try:
        wait_until(lambda: lw.up)
        lw.relist("conflict")  # the owner's write was refused as stale
        wait_until(lambda: len(client.watches) == 2 and lw.up)
    finally:
        lw.stop()
    assert client.watches[0].closed
    assert [c[0] for c in client.calls] == ["LIST", "WATCH", "LIST", "WATCH"]
    assert "resourceVersion=8" in client.calls[3][1]
    assert lists == ["start", "conflict"]
    # a watch closed for the list asked for is no failure: nothing lost, nothing retried
    assert rec.seen == [("listed", ("start", ["n1-a"])), ("listed", ("conflict", ["n1-a"]))]
    assert not lw.retry.failing


def test_relist_while_the_watch_is_being_opened_is_not_lost():
    hold = threading.Event()
    client = OpenClient([{"metadata": {"resourceVersion": "5"}, "items": []}], hold)
    lw, _, lists = start(client)
    try:
        assert client.opening.wait(10)
        lw.relist()  # no watch to close yet: the one being opened must not run for minutes
        hold.set()
        wait_until(lambda: len(client.watches) == 2)
    finally:
        lw.stop()
    assert client.watches[0].closed
    assert lists == ["start", "asked"]


def test_a_list_that_succeeds_ends_a_failing_streak_at_once():
    # a 403 on list until the rights arrive: said once, and over as soon as a list succeeds,
    # not when the watch opened after it ends (minutes later)
    refused = ApiRefused("list resourceslices of n1: API server refused with 403 (forbidden)")
    client = OpenClient([refused, refused, {"metadata": {"resourceVersion": "5"}, "items": []}])
    retried: list[str] = []
    lw, rec, lists = start(client, retried.append)
    try:
        wait_until(lambda: lw.up)
        assert not lw.retry.failing and lw.retry.last_reason is None
    finally:
        lw.stop()
    assert retried == ["refused", "refused"]
    assert ("lost", None) in rec.seen and lists == ["error"]
