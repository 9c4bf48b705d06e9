"""The kubelet's pod-resources client (`List`), against an in-process gRPC server built from
the same stubs (a unit test; the real kubelet is the e2e node's check 6k): every pod's
devices come back, and a missing socket is said as such."""

from __future__ import annotations

import pytest

from edgefd.core.errors import Unreachable
from edgefd.device_keeper.api import podresources_pb2 as pr
from edgefd.device_keeper.api import podresources_pb2_grpc as pr_rpc
from edgefd.device_keeper.holders import holders
from edgefd.device_keeper.podresources import PodResources

from .pods import CORAL, PODS


class FakeKubelet(pr_rpc.PodResourcesListerServicer):
    def List(self, request, context):
        return pr.ListPodResourcesResponse(pod_resources=PODS)


def test_pod_resources_list(serve):
    sock = serve(pr_rpc.add_PodResourcesListerServicer_to_server, FakeKubelet())
    assert holders(PodResources(sock).list(), CORAL)[0].pod == "detector"


def test_pod_resources_unreachable(tmp_path):
    with pytest.raises(Unreachable, match="no pod-resources socket"):
        PodResources(str(tmp_path / "none.sock")).list()
