"""Fixtures of the DRA front-end's suites. `kubelet_dir`: a short temporary kubelet directory
with its plugins_registry/ (unix socket paths are limited to 107 bytes), for the kubelet
plugin's sockets. The real-peer ones (peer.py; they need the real API server and scheduler,
tests/peers): `api`, admin access with the shipped DeviceClasses and a namespace for claims
and pods (once per module); `node`, a schedulable Node of a fresh name (its slices removed
afterwards); `plugins`, the DraPlugins a test starts (peer.start), closed afterwards.
test_publisher.py's `api` is its own, a stand-in (fakeapi.FakeSliceApi)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefd.core.errors import EdgefdError
from edgefd.kube.errors import ApiConflict
from tests.devplugin.dra.peer import NAMESPACE, NODE_LABEL, ROOT, Api, DraPlugin


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="kp-"))  # unix socket paths are limited to 107 bytes
    (d / "plugins_registry").mkdir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def api(kube_scheduler: Any) -> Iterator[Api]:
    """Admin access, with the shipped DeviceClasses and a namespace for claims and pods. The
    classes it made go at the end: the API server is the session's, and a class with an
    extendedResourceName left behind makes the scheduler serve every later test's
    `edgefd.io/<x>` request through DRA (tests/docs' device-plugin recipes)."""
    a = Api(kube_scheduler.kubeconfig)
    made = []
    for doc in yaml.safe_load_all((ROOT / "k8s" / "dra" / "deviceclasses.yaml").read_text()):
        with contextlib.suppress(ApiConflict):
            a.req("POST", "/apis/resource.k8s.io/v1/deviceclasses", doc)
            made.append(doc["metadata"]["name"])
    kube_scheduler.ensure_service_account(NAMESPACE, "default")
    a.kubeconfig = kube_scheduler.kubeconfig  # type: ignore[attr-defined]
    yield a
    for name in made:
        with contextlib.suppress(EdgefdError):
            a.req("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{name}")


@pytest.fixture
def node(api: Api, node_name: str) -> Iterator[str]:
    api.schedulable_node(node_name, {NODE_LABEL: node_name})
    yield node_name
    api.delete_node(node_name)
    for s in api.slices(node_name):
        api.req("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{s['metadata']['name']}")


@pytest.fixture
def plugins(api: Api) -> Iterator[list[DraPlugin]]:
    started: list[DraPlugin] = []
    yield started
    for p in started:
        p.close()
