"""The ResourceSlice publisher against a real kube-apiserver with k8s/dra/ in force (the
fixtures of test_dra_apiserver.py): slice names are the node's own, a name someone else holds
backs off instead of spinning, a 403 on list/watch is said and shown in /readyz, and another
pool's slice on the node is never deleted or rewritten, with no rewrite loop, whether the
publisher runs with admin credentials or devplugin's pod-bound token.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devplugin.dra.peer import DraPlugin, list_slices
from tests.fixturegen import build_host
from tests.helpers import wait_until
from tests.k8s import test_dra_apiserver as base
from tests.k8s.test_dra_apiserver import NODE_A, NODE_B, refused, slice_body
from tests.k8s.test_manifests import NAMESPACE

pytestmark = pytest.mark.realpeer

applied = base.applied  # the policy, RBAC and tokens in force (module-scoped fixture)
clean = base.clean

OURS = f"{NODE_A}-edgefd.io-0"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "host", devicetree=False)


@contextlib.contextmanager
def plugin(host: Path, node: str, kubeconfig: str) -> Iterator[DraPlugin]:
    p = DraPlugin(host, node, kubeconfig).start()
    try:
        yield p
    finally:
        with contextlib.suppress(Exception):
            p.stop()
        p.close()


def readyz(p: DraPlugin) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.port}/readyz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def posts(kube_apiserver: Any) -> float:
    return kube_apiserver.metric_sum(
        "apiserver_request_total", resource="resourceslices", verb="POST"
    )


# -- item 3: names


@pytest.mark.parametrize(
    "name", [f"{NODE_A}-extra", f"{NODE_B}-edgefd.io-0", f"{NODE_A}-edgefd.io-0x"]
)
def test_a_node_may_only_use_its_own_slice_names(clean: dict[str, Any], name: str) -> None:
    refused(lambda: clean["sa"].create_slice(slice_body(name, NODE_A)), "may only name")
    assert not list_slices(clean["admin"], NODE_A, "edgefd.io")["items"]


def test_a_taken_slice_name_backs_off_and_is_said_once(
    kube_apiserver: Any, clean: dict[str, Any], host: Path
) -> None:
    admin = clean["admin"]
    # node A's slice name, held by a slice of node B (an administrator could; the policy now
    # keeps node B's own token from it)
    admin.create_slice(slice_body(OURS, NODE_B))
    try:
        with plugin(host, NODE_A, clean["kubeconfig"]) as p:
            wait_until(lambda: "name-taken" in p.stderr(), 20, 0.1, "the first failure said")
            before = posts(kube_apiserver)
            time.sleep(6.0)
            sent = posts(kube_apiserver) - before
            log = p.stderr()
            retries = p.metrics()
        # jittered backoff from 0.1 s doubling: a handful of creates in 6 s (it was ~120/s)
        assert sent <= 8, sent
        assert log.count("failed (name-taken)") == 1, log
        assert f"cannot create ResourceSlice {OURS}" in log
        assert retries['edgefd_devplugin_dra_api_retries_total{loop="write",reason="name-taken"}']
    finally:
        admin.delete_slice(OURS)


# -- item 9: a 403 on list/watch


def test_a_403_on_list_is_said_once_shown_in_readyz_and_its_end_said(
    kube_apiserver: Any, clean: dict[str, Any], host: Path
) -> None:
    sa = "edgefd-dra-without-rights"
    token = kube_apiserver.mint_pod_token(NAMESPACE, sa, "edgefd-dra-pod-403", NODE_A)
    kubeconfig = kube_apiserver.kubeconfig_for_token(token)
    binding = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{sa}"
    admin = clean["admin"]
    with plugin(host, NODE_A, kubeconfig) as p:
        wait_until(lambda: "failed (refused)" in p.stderr(), 20, 0.1, "the 403 said")
        status, body = readyz(p)
        assert status == 503 and "ResourceSlices cannot be read" in body, body
        assert "403" in body or "forbidden" in body.lower(), body
        time.sleep(3.0)
        assert p.stderr().count("failed (refused)") == 1, p.stderr()
        # the rights arrive (devplugin's DRA role): the recovery is said and /readyz moves on
        admin.request(
            "POST",
            "clusterrolebindings",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            "bind",
            body={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": sa},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "edgefd-dra",
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
            },
            content_type="application/json",
        )
        try:
            wait_until(lambda: "succeeded again" in p.stderr(), 40, 0.2, "the recovery said")
            wait_until(lambda: "cannot be read" not in readyz(p)[1], 10, 0.1)
            wait_until(lambda: list_slices(admin, NODE_A, "edgefd.io")["items"], 20, 0.1)
        finally:
            admin.request("DELETE", "clusterrolebindings", binding, "unbind")


# -- item 11: another pool's slice on this node


def _touch(admin: Any, name: str, n: int) -> None:
    """A change of the slice that is not ours to make (a label): the publisher hears it and
    reconciles; its content is unchanged, so nothing may be written."""
    obj = admin.request(
        "GET", "resourceslices", f"/apis/resource.k8s.io/v1/resourceslices/{name}", "get"
    )
    obj["metadata"].setdefault("labels", {})["edgefd-test/touch"] = str(n)
    admin.replace_slice(obj)


@pytest.mark.parametrize("who", ["admin", "pod-bound token"])
def test_another_pools_slice_is_kept_and_nothing_is_rewritten(
    kube_apiserver: Any, clean: dict[str, Any], host: Path, who: str
) -> None:
    admin = clean["admin"]
    theirs = admin.create_slice(slice_body(f"{NODE_A}-shared", NODE_A, pool="shared"))
    kubeconfig = kube_apiserver.kubeconfig if who == "admin" else clean["kubeconfig"]
    try:
        with plugin(host, NODE_A, kubeconfig) as p:
            [ours] = wait_until(
                lambda: [
                    s
                    for s in list_slices(admin, NODE_A, "edgefd.io")["items"]
                    if s["metadata"]["name"] == OURS
                ],
                20,
                0.1,
            )
            wait_until(lambda: p.writes() >= 1, 10, 0.1)
            time.sleep(1.0)
            writes = p.writes()
            for n in range(4):  # four reconciles of unchanged content
                _touch(admin, OURS, n)
                time.sleep(0.7)
            [now] = [
                s
                for s in list_slices(admin, NODE_A, "edgefd.io")["items"]
                if s["metadata"]["name"] == OURS
            ]
            assert p.writes() == writes, p.stderr()
            assert now["spec"]["pool"]["generation"] == ours["spec"]["pool"]["generation"] == 1
            assert "of pool 'shared', not this node's: leaving it alone" in p.stderr()
            assert p.stderr().count("leaving it alone") == 1
        kept = list_slices(admin, NODE_A, "edgefd.io")["items"]
        [same] = [s for s in kept if s["metadata"]["name"] == f"{NODE_A}-shared"]
        assert same["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
        assert json.dumps(same["spec"], sort_keys=True) == json.dumps(
            theirs["spec"], sort_keys=True
        )
    finally:
        admin.delete_slice(f"{NODE_A}-shared")
