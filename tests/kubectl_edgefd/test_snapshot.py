"""Reading the cluster: every page of a list, a pod that is not there, a claim template that
is not there, a cluster without resource.k8s.io/v1."""

from __future__ import annotations

from typing import Any

import pytest

from edgefd.core.errors import BadInput
from edgefd.kube.errors import ApiNotFound
from edgefd.kubectl_edgefd import snapshot

from .peer import Cluster


@pytest.mark.realpeer
def test_lists_are_read_a_page_at_a_time(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        cluster.node(f"n{i}")
    monkeypatch.setattr(snapshot, "PAGE", 2)
    seen: list[str] = []
    request = cluster.api.request

    def counting(method: str, resource: str, path: str, *a: Any, **kw: Any) -> Any:
        seen.append(path)
        return request(method, resource, path, *a, **kw)

    monkeypatch.setattr(cluster.api, "request", counting)
    snap = snapshot.read(cluster.api)
    assert sorted(n["metadata"]["name"] for n in snap.nodes) == [f"n{i}" for i in range(5)]
    assert sum(p.startswith("/api/v1/nodes?") for p in seen) == 3
    assert snap.dra_served and len(snap.classes) >= 5  # edgefd's classes, by kind


@pytest.mark.realpeer
def test_what_is_not_there(cluster: Cluster) -> None:
    with pytest.raises(BadInput, match="pod nobody not found in namespace why-test"):
        snapshot.get_pod(cluster.api, "why-test", "nobody")
    assert snapshot.get_dra(cluster.api, "resourceclaimtemplates", "why-test", "none") is None


def test_a_cluster_without_dra() -> None:
    class NoDra:
        def request(self, method: str, resource: str, path: str, what: str, **kw: Any) -> Any:
            if path.startswith(snapshot.DRA):
                raise ApiNotFound(f"{what}: not found (the server could not find the resource)")
            return {"items": [{"metadata": {"name": resource}}], "metadata": {}}

    snap = snapshot.read(NoDra())  # type: ignore[arg-type]
    assert not snap.dra_served and snap.slices == [] and snap.claims == []
    assert [n["metadata"]["name"] for n in snap.nodes] == ["nodes"]
