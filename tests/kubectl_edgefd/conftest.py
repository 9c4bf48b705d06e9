"""The real-peer fixtures of kubectl-edgefd's tests (peer.py): `cluster`, an API server,
scheduler and resourceclaim controller of this package's own (its `why` looks at every node of
the cluster, so another test's Nodes must not be there), emptied after each test; `hosts`, a
directory for fixture hosts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.peers.apiserver import KubeAPIServer, running
from tests.peers.processes import harness_binary

from .peer import CONTROLLERS, EDGEFD_NS, NS, Cluster


@pytest.fixture(scope="package")
def _server(harness_bin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    harness_binary("kube-scheduler")
    srv = KubeAPIServer(
        tmp_path_factory.mktemp("kubectl-edgefd"), bin_dir=harness_bin, controllers=CONTROLLERS
    )
    for server in running(srv):
        server.start_scheduler()
        c = Cluster(server)
        c.namespace(NS)
        c.namespace(EDGEFD_NS)
        c.device_classes()
        yield c


@pytest.fixture
def cluster(_server: Cluster) -> Iterator[Cluster]:
    yield _server
    _server.clear()


@pytest.fixture(scope="package")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hosts")
