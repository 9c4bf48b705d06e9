"""edgefd.kube.client: a name kept one URL segment, connecting (errors on one line), and
requests and watches, their failures raised as their kind, against the real kube-apiserver
(tests/peers/apiserver.py). Which kind an HTTP answer is: test_errors.py."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgefd.core.errors import EdgefdError
from edgefd.kube.client import Client, connect, quote
from edgefd.kube.errors import (
    ApiConflict,
    ApiNotFound,
    ApiRefused,
    ApiUnreachable,
)
from edgefd.kube.ratelimit import RateLimiter
from tests.helpers import free_port


@pytest.mark.parametrize(
    ("segment", "quoted"), [("n1", "n1"), ("a/b", "a%2Fb"), ("../x", "..%2Fx"), ("a b", "a%20b")]
)
def test_quote_keeps_a_name_one_segment(segment: str, quoted: str) -> None:
    assert quote(segment) == quoted


@pytest.mark.parametrize("segment", ["", ".", ".."])
def test_quote_refuses_what_is_not_a_name(segment: str) -> None:
    with pytest.raises(EdgefdError, match="refusing"):
        quote(segment)


def test_connect_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(EdgefdError, match="cannot"):
        connect(str(tmp_path / "missing.kubeconfig"), 1.0)
    with pytest.raises(EdgefdError, match="pass --kubeconfig"):
        connect(None, 1.0)  # not in a pod


# -- the real API server


@pytest.fixture
def admin(kube_apiserver: Any) -> Client:
    calls: list[tuple[str, str]] = []
    client = connect(kube_apiserver.kubeconfig, 5.0, lambda v, r: calls.append((v, r)))
    client.calls = calls  # type: ignore[attr-defined]
    return client


@pytest.mark.realpeer
def test_a_twin_with_its_own_limiter_never_takes_the_others_tokens(admin: Client) -> None:
    """with_limiter: the same server, identity, class and metrics hook; requests counted
    against the twin's limiter only (the original's tokens are all still there)."""
    fast = admin.with_limiter(RateLimiter(1000.0, 200))
    assert type(fast) is Client and fast.limiter is not admin.limiter
    before = admin.limiter.reserve()  # one token taken from a full bucket: no wait
    t0 = time.monotonic()
    for _ in range(100):
        fast.request("GET", "namespaces", "/api/v1/namespaces/default", "get ns")
    assert time.monotonic() - t0 < 10.0
    assert len(admin.calls) == 100  # type: ignore[attr-defined]  # the same on_request
    # the original's bucket lost only the token taken above: 9 of its burst of 10 are left
    assert before == 0.0 and [admin.limiter.reserve() for _ in range(9)] == [0.0] * 9


@pytest.mark.realpeer
def test_request_and_its_errors(admin: Client, kube_apiserver: Any) -> None:
    ns = admin.request("GET", "namespaces", "/api/v1/namespaces/default", "get ns")
    assert ns["metadata"]["name"] == "default"
    with pytest.raises(ApiNotFound, match="get node"):
        admin.request("GET", "nodes", f"/api/v1/nodes/{uuid.uuid4().hex}", "get node")
    assert admin.calls[:2] == [("GET", "namespaces"), ("GET", "nodes")]  # type: ignore[attr-defined]
    token = kube_apiserver.mint_token("default", "nobody")
    nobody = connect(kube_apiserver.kubeconfig_for_token(token), 5.0)
    with pytest.raises(ApiRefused, match="403"):
        nobody.request("GET", "nodes", "/api/v1/nodes", "list nodes")


@pytest.mark.realpeer
def test_an_unreachable_server_fails_fast(kube_apiserver: Any, tmp_path: Path) -> None:
    cfg = Path(kube_apiserver.kubeconfig).read_text()
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(cfg.replace(kube_apiserver.url, f"https://127.0.0.1:{free_port()}"))
    client = connect(str(dead), 2.0)
    t0 = time.monotonic()
    with pytest.raises(ApiUnreachable, match="unreachable"):
        client.request("GET", "nodes", "/api/v1/nodes", "list nodes")
    with pytest.raises(ApiUnreachable):
        client.watch("nodes", "/api/v1/nodes", "watch nodes", 5)
    assert time.monotonic() - t0 < 10


@pytest.mark.realpeer
def test_watch_sees_events_and_closes_from_another_thread(admin: Client) -> None:
    ns = "default"
    name = f"w-{uuid.uuid4().hex[:8]}"
    lst = admin.request("GET", "configmaps", f"/api/v1/namespaces/{ns}/configmaps", "list")
    rv = lst["metadata"]["resourceVersion"]
    watch = admin.watch(
        "configmaps",
        f"/api/v1/namespaces/{ns}/configmaps?resourceVersion={rv}",
        "watch configmaps",
        60,
    )
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def read() -> None:
        for ev in watch:
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
        done.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    admin.request("POST", "configmaps", f"/api/v1/namespaces/{ns}/configmaps", "create", body)
    deadline = time.monotonic() + 10
    while ("ADDED", name) not in seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ("ADDED", name) in seen
    t0 = time.monotonic()
    watch.close()
    assert done.wait(5), "close() did not end the blocked read"
    assert time.monotonic() - t0 < 5
    admin.request("DELETE", "configmaps", f"/api/v1/namespaces/{ns}/configmaps/{name}", "del")


@pytest.mark.parametrize(
    ("code", "kind"), [(410, ApiConflict), (403, ApiRefused), (500, ApiUnreachable)]
)
def test_watch_error_events_are_raised_as_their_kind(code: int, kind: type) -> None:
    """An ERROR event (a Status) ends the watch; 410 Gone (the resourceVersion is too old)
    is a conflict: list again, watch again."""
    from edgefd.kube.client import _event

    line = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": code}}).encode()
    with pytest.raises(kind):
        _event(line, "watch")
    with pytest.raises(ApiUnreachable, match="unreadable"):
        _event(b"{not json", "watch")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a\n- b\n", "a YAML list, not a kubeconfig"),
        ("", "empty, not a kubeconfig"),
        ("a: [\n", ":2:1: did not find expected node content"),
        ("apiVersion: v1\nkind: Config\nclusters: 3\n", "not a usable kubeconfig"),
    ],
)
def test_a_bad_kubeconfig_is_bad_input_on_one_line(
    tmp_path: Path, content: str, message: str
) -> None:
    from edgefd.core.errors import EXIT_BAD_INPUT

    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(EdgefdError) as err:
        connect(str(path), 1.0)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert message in str(err.value) and "\n" not in str(err.value)
