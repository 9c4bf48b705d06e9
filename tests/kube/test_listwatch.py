"""edgefd.kube.listwatch's decisions, with a scripted client (a pure unit test): resume from the
last resourceVersion, list again only on 410, back off on failures and on a watch that ends
at once. The same loop against the real API server (a restart, an etcd compaction):
tests/feature_sink/test_watch.py."""

from __future__ import annotations

import threading
from typing import Any

from edgefd.kube.errors import ApiGone, ApiUnreachable
from edgefd.kube.listwatch import ListWatch, name_selector, newer
from edgefd.kube.retry import Retry


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
