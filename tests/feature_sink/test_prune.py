"""`feature-sink --prune` against a real kube-apiserver: after an uninstall it removes exactly
what the ownership annotation says edgefd owns, and the annotation; nothing else, and nothing
a tampered annotation claims beyond the namespace policy."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefd.feature_sink.ownership import ANNOTATION, decode
from tests.feature_sink.test_realpeer import (
    Cluster,
    run_sink,
    write,
)

pytestmark = pytest.mark.realpeer

F = "feature.node.kubernetes.io"
FOREIGN = {"example.com/rack": "r1", "node-role.kubernetes.io/worker": ""}


@pytest.fixture
def fdir(fdir: Path) -> Path:
    """The conftest's empty features.d with two producers' files in it."""
    d = fdir
    write(d, "usb-scan", {f"{F}/usb-fe_1a6e_089a.present": "true", "edgefd.io/edgetpu.count": "1"})
    write(d, "dt-labeller", {"beta.devicetree.org/brcm-bcm2711": "1"})
    return d


def sink_once(cluster: Cluster, node: str, fdir: Path, *extra: str) -> None:
    p = run_sink("--once", "--kubeconfig", cluster.kubeconfig, "--node-name", node,
                 "--features-dir", str(fdir), "--listen=", *extra)  # fmt: skip
    assert p.returncode == 0, p.stderr.decode()


def prune(cluster: Cluster, node: str, *extra: str) -> Any:
    # --features-dir is not read: a workstation has no features.d
    return run_sink("--prune", "--kubeconfig", cluster.kubeconfig, "--node-name", node,
                    "--features-dir", "/nonexistent", *extra)  # fmt: skip


def labelled_node(cluster: Cluster, fdir: Path) -> str:
    """A Node with the administrator's labels, labelled by the real sink."""
    node = cluster.new_node(FOREIGN)
    sink_once(cluster, node, fdir)
    assert cluster.ownership(node).keys == {
        f"{F}/usb-fe_1a6e_089a.present",
        "edgefd.io/edgetpu.count",
        "beta.devicetree.org/brcm-bcm2711",
    }
    return node


def annotations(cluster: Cluster, node: str) -> dict[str, str]:
    return dict(cluster.node(node).metadata.annotations or {})


def test_prune_removes_what_edgefd_owns_and_the_annotation(cluster, fdir):
    node = labelled_node(cluster, fdir)
    before = cluster.labels(node)
    owned = cluster.ownership(node).keys
    p = prune(cluster, node)
    assert p.returncode == 0, p.stderr.decode()
    after = cluster.labels(node)
    assert not owned & after.keys()
    assert after == {k: v for k, v in before.items() if k not in owned}
    assert after["kubernetes.io/hostname"] == node and after["example.com/rack"] == "r1"
    assert ANNOTATION not in annotations(cluster, node)
    removed = sorted(line.split()[1] for line in p.stdout.decode().splitlines())
    assert removed == sorted(owned)
    # again: nothing left to do, and no write
    rv = cluster.node(node).metadata.resource_version
    again = prune(cluster, node)
    assert again.returncode == 0 and again.stdout == b""
    assert b"nothing to prune" in again.stderr
    assert cluster.node(node).metadata.resource_version == rv


def test_dry_run_changes_nothing(cluster, fdir):
    node = labelled_node(cluster, fdir)
    rv = cluster.node(node).metadata.resource_version
    p = prune(cluster, node, "--dry-run", "--output", "json")
    assert p.returncode == 0, p.stderr.decode()
    shown = json.loads(p.stdout)
    assert {c["key"] for c in shown} == cluster.ownership(node).keys
    assert all(c["op"] == "remove" for c in shown)
    assert cluster.node(node).metadata.resource_version == rv


def test_a_tampered_annotation_removes_nothing_beyond_the_policy(cluster, fdir):
    """Claims on kubernetes.io/hostname and node-role.kubernetes.io/worker (refused by the
    namespace policy) and on a denied namespace are dropped; their labels stay."""
    node = labelled_node(cluster, fdir)
    own = json.loads(annotations(cluster, node)[ANNOTATION])
    own["producers"]["usb-scan"] += ["kubernetes.io/hostname", "node-role.kubernetes.io/worker"]
    own["producers"]["usb-scan"].sort()
    own["producers"]["rack"] = ["example.com/rack"]
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: json.dumps(own)}}})
    p = prune(cluster, node, "--deny-namespace", "example.com")
    assert p.returncode == 0, p.stderr.decode()
    after = cluster.labels(node)
    assert after["kubernetes.io/hostname"] == node
    assert after["node-role.kubernetes.io/worker"] == ""
    assert after["example.com/rack"] == "r1"
    assert not {f"{F}/usb-fe_1a6e_089a.present", "beta.devicetree.org/brcm-bcm2711"} & set(after)
    assert ANNOTATION not in annotations(cluster, node)
    assert b"kubernetes.io/hostname" in p.stderr and b"claim dropped" in p.stderr
    # without the deny, a claim the policy allows is edgefd's to remove
    node = labelled_node(cluster, fdir)
    own = json.loads(annotations(cluster, node)[ANNOTATION])
    own["producers"]["rack"] = ["example.com/rack"]
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: json.dumps(own)}}})
    assert prune(cluster, node).returncode == 0
    assert "example.com/rack" not in cluster.labels(node)


@pytest.mark.parametrize("value", ["not json", '{"v":2,"producers":{}}'])
def test_an_untrusted_annotation_blocks_every_write(cluster, fdir, value):
    node = labelled_node(cluster, fdir)
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: value}}})
    before = cluster.node(node).metadata
    p = prune(cluster, node)
    assert p.returncode == 1, p.stderr.decode()
    assert len(p.stderr.decode().strip().splitlines()) <= 3, p.stderr.decode()
    after = cluster.node(node).metadata
    assert after.resource_version == before.resource_version
    assert after.annotations[ANNOTATION] == value


def test_unreachable_api_is_exit_5(cluster, tmp_path):
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    bad = tmp_path / "down.kubeconfig"
    bad.write_text(json.dumps(cfg))
    p = run_sink("--prune", "--kubeconfig", str(bad), "--node-name", "n1", "--api-timeout", "2")
    assert p.returncode == 5, p.stderr.decode()
    assert b"Traceback" not in p.stderr


@pytest.fixture(scope="module")
def nodefeature_crd(cluster: Cluster) -> None:
    from tests.peers.nfd import install_nfd_crds

    install_nfd_crds(cluster.apiserver)  # NFD's own, from the pinned module


def test_nodefeature_mode_empties_edgefds_object_and_creates_none(cluster, fdir, nodefeature_crd):
    custom = cluster.k8s.CustomObjectsApi(cluster.core.api_client)
    mode = ("--mode", "nodefeature", "--namespace", "default")
    node = cluster.new_node()

    def get(name: str) -> dict:
        return custom.get_namespaced_custom_object(
            "nfd.k8s-sigs.io", "v1alpha1", "default", "nodefeatures", name
        )

    sink_once(cluster, node, fdir, *mode)
    assert get(node)["spec"]["labels"]
    p = prune(cluster, node, *mode)
    assert p.returncode == 0, p.stderr.decode()
    obj = get(node)
    assert obj["spec"]["labels"] == {}
    assert ANNOTATION not in (obj["metadata"].get("annotations") or {})
    # a node without an object: nothing to prune, and no object appears
    other = cluster.new_node()
    p = prune(cluster, other, *mode)
    assert p.returncode == 0 and b"does not exist" in p.stderr
    time.sleep(0.2)
    with pytest.raises(cluster.k8s.exceptions.ApiException) as err:
        get(other)
    assert err.value.status == 404


def test_ownership_read_back_is_the_sinks(cluster, fdir):
    """The annotation these tests tamper with is the one the sink writes (format v1)."""
    node = labelled_node(cluster, fdir)
    assert decode(annotations(cluster, node)[ANNOTATION]).producers.keys() == {
        "usb-scan",
        "dt-labeller",
    }
