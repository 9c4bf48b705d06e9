"""edgefd's pods on a node: the API devplugin serves, the keeper, the version."""

from __future__ import annotations

import pytest

from edgefd.kubectl_edgefd.edgefdpods import agent, api_of, version_of

EDGEFD = {"app.kubernetes.io/part-of": "edgefd"}


def epod(name: str, node: str, init=(), containers=(), labels=EDGEFD, ready=None) -> dict:
    status = {}
    if ready is not None:
        status["initContainerStatuses"] = [{"name": "devplugin", "ready": ready}]
    return {
        "metadata": {"name": name, "namespace": "edgefd", "labels": labels},
        "spec": {"nodeName": node, "initContainers": list(init), "containers": list(containers)},
        "status": status,
    }


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("ghcr.io/edgefd/edgefd:0.1.0", "0.1.0"),
        ("localhost:5000/edgefd:0.2.0-rc1", "0.2.0-rc1"),
        ("ghcr.io/edgefd/edgefd@sha256:" + "0123456789abcdef" * 4, "sha256:0123456789ab"),
        ("ghcr.io/edgefd/edgefd:0.1.0@sha256:" + "0" * 64, "0.1.0"),
        ("localhost:5000/edgefd", "latest"),
    ],
)
def test_version_of_an_image(image: str, version: str) -> None:
    assert version_of(image) == version


def test_api_from_the_environment_or_the_command_line() -> None:
    assert api_of({"env": [{"name": "EDGEFD_API", "value": "dra"}]}) == "dra"
    assert api_of({"command": ["devplugin", "--api=both"]}) == "both"
    assert api_of({"args": ["--api", "dra"]}) == "dra"
    assert api_of({"command": ["devplugin"]}) == "device-plugin"


def test_one_pod_with_the_keeper() -> None:
    plugin = {"name": "devplugin", "image": "edgefd:0.1.0"}
    keeper = {"name": "device-keeper", "image": "edgefd:0.1.0"}
    a = agent([epod("edgefd-x", "n1", [plugin], [keeper], ready=False)], "n1")
    assert (a.api, a.keeper, a.version, a.devplugin_ready) == (
        "device-plugin",
        True,
        "0.1.0",
        False,
    )
    assert a.logs_hint("n1") == "kubectl logs -n edgefd edgefd-x -c devplugin"


def test_split_identity_without_the_keeper_and_other_nodes_pods() -> None:
    sink = {"name": "feature-sink", "image": "edgefd:0.1.0"}
    plugin = {
        "name": "devplugin",
        "image": "edgefd:0.2.0",
        "env": [{"name": "EDGEFD_API", "value": "dra"}],
    }
    pods = [
        epod("edgefd-a", "n1", containers=[sink]),
        epod("edgefd-devplugin-a", "n1", containers=[plugin]),
        epod("edgefd-b", "n2", containers=[sink]),
        epod("workload", "n1", containers=[plugin], labels={}),
    ]
    a = agent(pods, "n1")
    assert a.pods == ("edgefd/edgefd-a", "edgefd/edgefd-devplugin-a")
    assert (a.api, a.keeper, a.version, a.devplugin_pod) == (
        "dra",
        False,
        "0.2.0",
        "edgefd/edgefd-devplugin-a",
    )
    b = agent(pods, "n2")  # the sink alone (no-devplugin): no API, no keeper, its version
    assert (b.api, b.keeper, b.version) == (None, None, "0.1.0")
    assert agent(pods, "n3").pods == ()
    assert "<edgefd pod on n3>" in agent(pods, "n3").logs_hint("n3")
