"""The sink's calls to Kubernetes (nodeapi.py): what is read back is acted on only when it is
the Node asked for (`node_view`), and a node name never leaves its URL segment (issue 11,
item 3), neither at the command line nor below it in the client, against the real
kube-apiserver."""

from __future__ import annotations

import uuid

import pytest

from edgefd.feature_sink import nodeapi
from edgefd.feature_sink.nodeapi import ApiRefused, node_view
from tests.feature_sink.peer import F, run_once, write


def test_node_view_takes_only_the_node_asked_for():
    md = {"name": "n1", "resourceVersion": "7", "uid": "u1", "labels": {"a": "1"}}
    view = node_view({"kind": "Node", "metadata": md}, "n1", "get node n1", listed=False)
    assert (view.name, view.labels, view.annotations) == ("n1", {"a": "1"}, None)
    assert (view.resource_version, view.uid) == ("7", "u1")
    # an item of a list carries no kind; an answer to a GET must say it is a Node
    assert node_view({"metadata": md}, "n1", "list").labels == {"a": "1"}
    with pytest.raises(ApiRefused, match="answered with None 'n1', not Node 'n1'"):
        node_view({"metadata": md}, "n1", "get node n1", listed=False)
    for answer in ({"kind": "ConfigMap", "metadata": md}, {"kind": "Node", "metadata": md}, None):
        with pytest.raises(ApiRefused, match="not Node 'n2'"):
            node_view(answer, "n2", "get node n2")
    # no labels map at all is not an empty one (a patch must then create it whole)
    empty = node_view({"kind": "Node", "metadata": {"name": "n1", "labels": {}}}, "n1", "get")
    assert empty.labels == {} and empty.annotations is None


@pytest.mark.realpeer
def test_node_name_cannot_reach_another_object(cluster, fdir, monkeypatch):
    core = cluster.core
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_config_map("default", {"metadata": {"name": victim}, "data": {}})
    write(fdir, "usb-scan", {f"{F}/usb": "true"})

    def versions() -> tuple[str, str]:
        ns = core.read_namespace("kube-system").metadata
        cm = core.read_namespaced_config_map(victim, "default").metadata
        return ns.resource_version, cm.resource_version

    before = versions()
    for name in ("../namespaces/kube-system", f"../namespaces/default/configmaps/{victim}"):
        p = run_once(cluster, name, fdir)
        assert p.returncode == 2, p.stderr
        assert b"is not a valid Node name" in p.stderr
    # below the command line too: every URL segment is escaped, whatever reaches the client
    api = nodeapi.connect(cluster.kubeconfig, 5)
    ops = [{"op": "add", "path": "/metadata/labels", "value": {f"{F}/usb": "true"}}]
    for name in ("../namespaces/kube-system", f"../namespaces/default/configmaps/{victim}"):
        with pytest.raises(nodeapi.ApiNotFound):
            api.patch_node(name, ops)
        with pytest.raises(nodeapi.ApiNotFound):
            api.get_node(name)
    with pytest.raises(nodeapi.EdgefdError):
        api.patch_node("..", ops)
    body = {"metadata": {"name": victim}, "data": {"hijacked": "1"}}
    with pytest.raises(nodeapi.EdgefdError):  # a PUT that, unescaped, lands on the ConfigMap
        api.replace_nodefeature("../../../../api/v1/namespaces/default/configmaps", body)
    assert versions() == before
    # and were the escaping ever lost, what is read back must still be that Node: the sync
    # reads before it writes, so it stops there
    monkeypatch.setattr(nodeapi, "quote", lambda segment: segment)
    with pytest.raises(nodeapi.ApiRefused, match="not Node"):
        api.get_node(f"../namespaces/default/configmaps/{victim}")
    assert versions() == before
    assert f"{F}/usb" not in (core.read_namespace("kube-system").metadata.labels or {})
