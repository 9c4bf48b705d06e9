"""`feature-sink --prune` (prune.py): after an uninstall it removes exactly what the ownership
annotation says edgefd owns, and the annotation; nothing else, and nothing a tampered
annotation claims beyond the namespace policy; with --all-nodes, every object edgefd owns,
listed a page at a time. Which objects --all-nodes takes is a unit (an in-memory API's pages);
the rest runs the command against the real kube-apiserver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from edgefd.feature_sink.namespaces import SINK_POLICY
from edgefd.feature_sink.ownership import ANNOTATION, decode
from edgefd.feature_sink.prune import PAGE, targets
from edgefd.feature_sink.service import Settings
from tests.feature_sink.peer import (
    Cluster,
    F,
    forget_other_tests_nodes,
    run_sink,
    write,
)

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


@pytest.mark.realpeer
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


@pytest.mark.realpeer
def test_dry_run_changes_nothing(cluster, fdir):
    node = labelled_node(cluster, fdir)
    rv = cluster.node(node).metadata.resource_version
    p = prune(cluster, node, "--dry-run", "--output", "json")
    assert p.returncode == 0, p.stderr.decode()
    shown = json.loads(p.stdout)
    assert {c["key"] for c in shown} == cluster.ownership(node).keys
    assert all(c["op"] == "remove" for c in shown)
    assert cluster.node(node).metadata.resource_version == rv


@pytest.mark.realpeer
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
    # a claim on a namespace the operator allows is edgefd's to remove
    node = labelled_node(cluster, fdir)
    own = json.loads(annotations(cluster, node)[ANNOTATION])
    own["producers"]["rack"] = ["example.com/rack"]
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: json.dumps(own)}}})
    assert prune(cluster, node, "--allow-namespace", "example.com").returncode == 0
    assert "example.com/rack" not in cluster.labels(node)


@pytest.mark.realpeer
@pytest.mark.parametrize(
    "forged",
    [
        ["team", "zone"],  # issue 22, item 4: keys without a namespace
        ["example.com/rack"],  # item 13: someone else's namespace, under the default policy
    ],
    ids=["unprefixed", "foreign-namespace"],
)
def test_prune_with_an_admin_kubeconfig_spares_forged_claims(cluster, fdir, forged):
    """An annotation that names the user's labels under usb-scan: the sink can never have
    written them (it qualifies unprefixed keys; by default it writes edgefd's namespaces
    only), so even --prune with an administrator's kubeconfig, which no admission policy
    holds back, leaves them and removes only what edgefd wrote."""
    node = labelled_node(cluster, fdir)
    cluster.core.patch_node(node, {"metadata": {"labels": {"team": "a", "zone": "b"}}})
    own = json.loads(annotations(cluster, node)[ANNOTATION])
    own["producers"]["usb-scan"] = sorted(own["producers"]["usb-scan"] + forged)
    cluster.core.patch_node(node, {"metadata": {"annotations": {ANNOTATION: json.dumps(own)}}})
    p = prune(cluster, node)
    assert p.returncode == 0, p.stderr.decode()
    after = cluster.labels(node)
    assert (after["team"], after["zone"], after["example.com/rack"]) == ("a", "b", "r1")
    assert not {f"{F}/usb-fe_1a6e_089a.present", "beta.devicetree.org/brcm-bcm2711"} & set(after)
    assert ANNOTATION not in annotations(cluster, node)
    assert b"claim dropped" in p.stderr


@pytest.mark.realpeer
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


@pytest.mark.realpeer
def test_unreachable_api_is_exit_5(cluster, tmp_path):
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    bad = tmp_path / "down.kubeconfig"
    bad.write_text(json.dumps(cfg))
    p = run_sink("--prune", "--kubeconfig", str(bad), "--node-name", "n1", "--api-timeout", "2")
    assert p.returncode == 5, p.stderr.decode()
    assert b"Traceback" not in p.stderr


@pytest.mark.realpeer
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


@pytest.mark.realpeer
def test_ownership_read_back_is_the_sinks(cluster, fdir):
    """The annotation these tests tamper with is the one the sink writes (format v1)."""
    node = labelled_node(cluster, fdir)
    assert decode(annotations(cluster, node)[ANNOTATION]).producers.keys() == {
        "usb-scan",
        "dt-labeller",
    }


# -- issue 25 item 6: a workstation's kubeconfig, every node at once, "would" ----------------


def prune_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`feature-sink --prune` with a workstation's environment and no --kubeconfig."""
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "HOME")}
    return subprocess.run(
        [sys.executable, "-m", "edgefd.feature_sink", "--prune", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def two_contexts(cluster: Cluster, path: Path) -> Path:
    """A kubeconfig whose current context is a dead server; context `up` is the cluster."""
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    real = cfg["clusters"][0]
    dead = {"name": "dead", "cluster": {**real["cluster"], "server": "https://127.0.0.1:1"}}
    user = cfg["users"][0]["name"]
    cfg["clusters"].append(dead)
    cfg["contexts"] = [
        {"name": "up", "context": {"cluster": real["name"], "user": user}},
        {"name": "down", "context": {"cluster": "dead", "user": user}},
    ]
    cfg["current-context"] = "down"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.realpeer
def test_prune_finds_the_kubeconfig_as_kubectl_does(cluster, fdir, tmp_path):
    """$KUBECONFIG, then ~/.kube/config, and --context; once it exited 1 with "cannot load
    the in-cluster client configuration"."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    two_contexts(cluster, home / ".kube" / "config")
    node = labelled_node(cluster, fdir)
    p = prune_env({"HOME": str(home)}, "--node-name", node, "--context", "up", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].startswith("would remove ")
    # the current context (a dead server) when none is named: unreachable, exit 5
    p = prune_env({"HOME": str(home)}, "--node-name", node, "--api-timeout", "2")
    assert p.returncode == 5, p.stderr
    # $KUBECONFIG wins over ~/.kube/config; missing entries in it are skipped
    listed = os.pathsep.join([str(tmp_path / "absent"), cluster.kubeconfig])
    p = prune_env({"HOME": str(home), "KUBECONFIG": listed}, "--node-name", node)
    assert p.returncode == 0, p.stderr
    assert ANNOTATION not in annotations(cluster, node)
    # a context that is not there: one line, exit 3
    p = prune_env({"KUBECONFIG": cluster.kubeconfig}, "--node-name", node, "--context", "nope")
    assert p.returncode == 3
    has = yaml.safe_load(Path(cluster.kubeconfig).read_text())["contexts"][0]["name"]
    assert p.stderr.strip().splitlines() == [
        f"feature-sink: error: --context nope: no such context in KUBECONFIG "
        f"{cluster.kubeconfig} (it has: {has})"
    ]
    # nothing at all: says where it looked
    p = prune_env({"HOME": str(tmp_path / "nohome")}, "--node-name", node)
    assert p.returncode == 1 and "pass --kubeconfig or set KUBECONFIG" in p.stderr


@pytest.mark.realpeer
def test_prune_all_nodes_and_a_dry_run_that_says_would(cluster, fdir):
    forget_other_tests_nodes(cluster)
    a, b = labelled_node(cluster, fdir), labelled_node(cluster, fdir)
    bystander = cluster.new_node(FOREIGN)  # never labelled by edgefd: not even read
    owned = {n: sorted(cluster.ownership(n).keys) for n in (a, b)}
    rvs = {n: cluster.node(n).metadata.resource_version for n in (a, b, bystander)}
    kube = ("--kubeconfig", cluster.kubeconfig)

    dry = run_sink("--prune", "--all-nodes", "--dry-run", *kube)
    assert dry.returncode == 0, dry.stderr.decode()
    out, err = dry.stdout.decode().splitlines(), dry.stderr.decode()
    for n in (a, b):
        mine = [ln for ln in out if ln.startswith(f"{n}: ")]
        assert [ln.split()[3] for ln in mine] == owned[n]
        assert all(ln.startswith(f"{n}: would remove ") for ln in mine)
        assert f"node {n}: would remove 3 label(s) and the ownership annotation" in err
    assert not [ln for ln in out if ln.startswith(f"{bystander}: ")]
    assert "dry run: nothing was written" in err
    assert {n: cluster.node(n).metadata.resource_version for n in rvs} == rvs

    real = run_sink("--prune", "--all-nodes", *kube, "-o", "json")
    assert real.returncode == 0, real.stderr.decode()
    shown = json.loads(real.stdout)
    assert {(c["node"], c["key"]) for c in shown} >= {(n, k) for n in (a, b) for k in owned[n]}
    for n in (a, b):
        assert not set(owned[n]) & set(cluster.labels(n))
        assert ANNOTATION not in annotations(cluster, n)
        assert cluster.labels(n)["example.com/rack"] == "r1"
    assert cluster.node(bystander).metadata.resource_version == rvs[bystander]
    assert "would" not in real.stderr.decode()
    # and once more: nothing edgefd owns is left anywhere
    again = run_sink("--prune", "--all-nodes", *kube)
    assert again.returncode == 0 and not [
        ln for ln in again.stdout.decode().splitlines() if ln.split(":")[0] in (a, b)
    ]


@pytest.mark.realpeer
def test_prune_all_nodes_and_an_untrusted_annotation(cluster, fdir):
    """One node's failure is its own: the others are pruned, the exit code says it (1)."""
    forget_other_tests_nodes(cluster)
    good, bad = labelled_node(cluster, fdir), labelled_node(cluster, fdir)
    cluster.core.patch_node(bad, {"metadata": {"annotations": {ANNOTATION: "not json"}}})
    p = run_sink("--prune", "--all-nodes", "--kubeconfig", cluster.kubeconfig)
    assert p.returncode == 1, p.stderr.decode()
    assert f"feature-sink: {bad}: error: annotation {ANNOTATION} is not JSON" in p.stderr.decode()
    assert ANNOTATION not in annotations(cluster, good)
    assert annotations(cluster, bad)[ANNOTATION] == "not json"


@pytest.mark.realpeer
def test_prune_all_nodes_in_nodefeature_mode(cluster, fdir, nodefeature_crd):
    mode = ("--mode", "nodefeature", "--namespace", "default")
    a, b = cluster.new_node(), cluster.new_node()
    for n in (a, b):
        sink_once(cluster, n, fdir, *mode)
    p = run_sink("--prune", "--all-nodes", "--kubeconfig", cluster.kubeconfig, *mode)
    assert p.returncode == 0, p.stderr.decode()
    custom = cluster.k8s.CustomObjectsApi(cluster.core.api_client)
    for n in (a, b):
        obj = custom.get_namespaced_custom_object(
            "nfd.k8s-sigs.io", "v1alpha1", "default", "nodefeatures", n
        )
        assert obj["spec"]["labels"] == {}
        assert f"NodeFeature default/{n}: removed 3 label(s)" in p.stderr.decode()


# -- which objects --all-nodes takes, a page at a time ----------------------------------------


class PagedAPI:
    """An API server listing `pages` in turn, linked by their continue tokens."""

    def __init__(self, pages: dict[str, list[dict[str, Any]]]) -> None:
        self.pages = pages
        self.asked: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str, resource: str, path: str, what: str) -> dict[str, Any]:
        url = urlsplit(path)
        query = dict(parse_qsl(url.query))
        self.asked.append((resource, url.path, query))
        tokens = list(self.pages)
        token = query.get("continue", "")
        after = tokens.index(token) + 1
        following = tokens[after] if after < len(tokens) else ""
        return {"items": self.pages[token], "metadata": {"continue": following}}


def settings(mode: str) -> Settings:
    return Settings("*", None, None, mode, "edgefd", SINK_POLICY, timedelta(0), 5.0)


def item(name: str, annotated: bool) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if annotated:
        md["annotations"] = {ANNOTATION: "{}", "other": "x"}
    return {"metadata": md}


def test_all_nodes_takes_every_page_and_only_what_edgefd_owns():
    pages = {
        "": [item("n-b", True), item("n-x", False)],
        "p2": [item("n-a", True), {"metadata": {}}],
        "p3": [item("n-c", True)],
    }
    api = PagedAPI(pages)
    assert targets(settings("node"), api) == ["n-a", "n-b", "n-c"]  # sorted, unannotated left
    limit = str(PAGE)
    assert api.asked == [
        ("nodes", "/api/v1/nodes", {"limit": limit}),
        ("nodes", "/api/v1/nodes", {"limit": limit, "continue": "p2"}),
        ("nodes", "/api/v1/nodes", {"limit": limit, "continue": "p3"}),
    ]
    # nodefeature mode: the sink's own objects, selected by the server (no annotation needed)
    api = PagedAPI({"": [item("n-b", False)], "p2": [item("n-a", True)]})
    assert targets(settings("nodefeature"), api) == ["n-a", "n-b"]
    selector = "app.kubernetes.io/managed-by=edgefd-feature-sink"
    path = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/edgefd/nodefeatures"
    assert api.asked == [
        ("nodefeatures", path, {"limit": limit, "labelSelector": selector}),
        ("nodefeatures", path, {"limit": limit, "labelSelector": selector, "continue": "p2"}),
    ]
