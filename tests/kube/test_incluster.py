"""edgefd.kube.incluster: a pod's way to the API server without the `kubernetes` package: what
is missing said on one line, IPv6 Service addresses, a rotated token picked up within a minute
(a failed re-read keeping the last good one), and the whole path against the real kube-apiserver
with a minted service-account token, in a process that never imports `kubernetes`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgefd.kube.client import Client
from edgefd.kube.incluster import InClusterError, TokenFile, join_host_port, load

ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def account(tmp_path: Path, token: str = "tok-1", ca: bytes = b"PEM") -> Path:
    d = tmp_path / "sa"
    d.mkdir()
    (d / "token").write_text(token)
    (d / "ca.crt").write_bytes(ca)
    return d


def test_the_endpoint_of_a_pod(tmp_path: Path) -> None:
    d = account(tmp_path)
    ep = load(ENV, str(d))
    assert ep.host == "https://10.96.0.1:443"
    assert ep.ca_file == str(d / "ca.crt")
    assert ep.auth() == {"Authorization": "Bearer tok-1"}


@pytest.mark.parametrize(
    ("host", "want"), [("10.0.0.1", "10.0.0.1:6443"), ("fd00::1", "[fd00::1]:6443")]
)
def test_an_ipv6_service_address_is_bracketed(host: str, want: str) -> None:
    assert join_host_port(host, "6443") == want


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, True, "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set"),
        ({**ENV, "KUBERNETES_SERVICE_PORT": ""}, True, "are not set"),
        (ENV, False, r"ca\.crt: No such file"),
    ],
)
def test_what_is_missing_is_said(
    tmp_path: Path, env: dict[str, str], files: bool, message: str
) -> None:
    d = account(tmp_path) if files else tmp_path
    with pytest.raises(InClusterError, match=message):
        load(env, str(d))


@pytest.mark.parametrize(
    ("token", "message"), [("", "empty or not a token"), ("a b", "empty or not a token")]
)
def test_a_token_that_is_not_one_is_refused(tmp_path: Path, token: str, message: str) -> None:
    with pytest.raises(InClusterError, match=message):
        load(ENV, str(account(tmp_path, token=token)))


def test_an_empty_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InClusterError, match=r"ca\.crt: empty"):
        load(ENV, str(account(tmp_path, ca=b"")))


def test_a_rotated_token_is_read_again_after_a_minute(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("old")
    tf = TokenFile(str(path), refresh=60.0, clock=lambda: now[0])
    path.write_text("new")
    now[0] = 59.0
    assert tf.headers() == {"Authorization": "Bearer old"}
    now[0] = 60.0
    assert tf.headers() == {"Authorization": "Bearer new"}
    path.unlink()  # the moment of a swap: the last good token is kept
    now[0] = 130.0
    assert tf.headers() == {"Authorization": "Bearer new"}
    path.write_text("newer")
    now[0] = 191.0
    assert tf.headers() == {"Authorization": "Bearer newer"}


# -- the real API server, as a pod reaches it

PROBE = r"""
import json, sys
from edgefd.kube import incluster
from edgefd.kube.client import connect
incluster.SERVICE_ACCOUNT_DIR = sys.argv[1]
api = connect(None, 10.0)
# who the API server took us for: any authenticated identity may ask (system:basic-user)
me = api.request("POST", "selfsubjectreviews",
                 "/apis/authentication.k8s.io/v1/selfsubjectreviews", "who am I",
                 body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
print(json.dumps({"name": me["status"]["userInfo"]["username"],
                  "kubernetes": sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")}))
"""


@pytest.mark.realpeer
def test_a_pod_reaches_the_api_server_without_the_kubernetes_package(
    tmp_path: Path, kube_apiserver: Any
) -> None:
    ns, sa = "edgefd-incluster-test", "probe"
    token = kube_apiserver.mint_token(ns, sa)
    d = account(tmp_path, token=token, ca=Path(kube_apiserver.ca_file).read_bytes())
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "PATH": "/usr/bin:/bin",
           "KUBERNETES_SERVICE_PORT": str(kube_apiserver.port)}  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(d)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == {"name": f"system:serviceaccount:{ns}:{sa}", "kubernetes": []}


@pytest.mark.realpeer
def test_an_in_cluster_client_sends_the_token_of_the_moment(
    tmp_path: Path, kube_apiserver: Any
) -> None:
    ns, sa = "edgefd-incluster-test", "probe"
    d = account(tmp_path, token="not-a-valid-token", ca=Path(kube_apiserver.ca_file).read_bytes())
    ep = load({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": str(kube_apiserver.port)}, str(d))  # fmt: skip
    api = Client(ep, 10.0)
    from edgefd.kube.errors import ApiRefused

    with pytest.raises(ApiRefused, match="refused with 401"):
        api.request("GET", "namespaces", "/api/v1/namespaces/default", "get namespace")
    (d / "token").write_text(kube_apiserver.mint_token(ns, sa))
    ep.auth.__self__._read_at = -1e9  # type: ignore[attr-defined]  # the minute has passed
    with pytest.raises(ApiRefused, match="refused with 403"):
        api.request("GET", "namespaces", "/api/v1/namespaces/default", "get namespace")
