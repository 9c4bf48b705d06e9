"""The real-API-server fixtures the sink's test modules share: one Cluster per module, sink
processes that are always stopped, a features.d, and NFD's NodeFeature CRD installed."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.feature_sink.peer import Cluster, Sink


@pytest.fixture(scope="module")
def cluster(kube_apiserver: Any) -> Cluster:
    return Cluster(kube_apiserver)


@pytest.fixture
def sinks(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., Sink]]:
    started: list[Sink] = []

    def start(node: str, features: Path, *extra: str, verbose: bool = True) -> Sink:
        s = Sink(cluster, node, features, tmp_path, *extra, verbose=verbose)
        started.append(s)
        return s

    yield start
    for s in started:
        with contextlib.suppress(Exception):
            s.stop(signal.SIGKILL)


@pytest.fixture
def fdir(tmp_path: Path) -> Path:
    d = tmp_path / "features.d"
    d.mkdir()
    return d


@pytest.fixture(scope="module")
def nodefeature_crd(cluster: Cluster) -> None:
    """NFD's own CRDs, from the pinned module's deployment files (tests/peers/nfd.py)."""
    from tests.peers.nfd import install_nfd_crds

    install_nfd_crds(cluster.apiserver)
