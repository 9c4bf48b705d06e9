"""The combinations of k8s/overlays/ that cannot work are refused at render time, in edgefd's
words, by both kubectls (the system's kustomize 5.5.0 and the harness's), in every order, and
by the chart (`fail`) naming the same rule: two distributions, dra-evict without dra listed
before it, no-devplugin with dra or with split-identity (and the order rule that split-identity
comes after every component that patches devplugin). What is not refused builds the same
objects with both kubectls and binds no right that no running container uses.

Each rule is a JSON patch's `test` of an annotation key no object has (the rule's name) on the
components' ledger, k8s/KustomizeComponents, where each component taking part writes that it
was listed: kustomize stops with that key and the refusing component's path, and says nothing
of its own (no source field missing, no test of a real value). `refusal` in test_kustomize.py
is the model of every rule; every component alone and every ordered pair is checked against
it, and each refused set in every order."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.test_helm import CHART, RELEASE, VALUE_SETS, helm, s, template
from tests.k8s.test_kustomize import (
    DISTRIBUTIONS,
    OTHERS,
    OVERLAYS,
    RULES,
    assert_refused,
    keyed,
    refusal,
    sorted_env,
    system_kubectl,
    write_kustomization,
)
from tests.k8s.test_manifests import TOKEN_PATH, find, pod_spec, setting
from tests.peers.processes import harness_binary

COMPONENTS = tuple(sorted((*OTHERS, "dra-evict", *DISTRIBUTIONS)))
# The sets that cannot work in any order (each one in every order, both kubectls)
REFUSED = [
    ("k3s", "microk8s"),
    ("k3s", "k0s"),
    ("microk8s", "k0s"),
    ("k3s", "no-devplugin", "k0s"),  # the ledger sees past no-devplugin's removal of the marks
    ("k3s", "microk8s", "k0s"),
    ("dra-evict",),
    ("dra-evict", "no-devplugin"),
    ("dra-evict", "hostnetwork", "nodefeature"),
    ("dra", "no-devplugin"),
    ("dra", "dra-evict", "no-devplugin"),
    ("no-devplugin", "dra", "k0s"),
    ("split-identity", "no-devplugin"),
    ("split-identity", "no-devplugin", "nodefeature"),
    ("dra", "split-identity", "no-devplugin"),
]
# The chart's values that say the same, and the rule it names (the first it checks)
CHART_REFUSED = {
    "no-devplugin+dra": (
        s("devicePlugin.enabled=false", "devicePlugin.api=dra"),
        ("dra", "no-devplugin"),
        "list-dra-or-no-devplugin-not-both",
    ),
    "no-devplugin+both": (
        s("devicePlugin.enabled=false", "devicePlugin.api=both"),
        ("dra", "no-devplugin"),
        "list-dra-or-no-devplugin-not-both",
    ),
    "no-devplugin+dra-evict": (
        s("devicePlugin.enabled=false", "devicePlugin.api=dra", "devicePlugin.evictAfter=5m"),
        ("dra", "dra-evict", "no-devplugin"),
        "list-dra-or-no-devplugin-not-both",
    ),
    "dra-evict": (
        s("devicePlugin.evictAfter=5m"),
        ("dra-evict",),
        "list-dra-before-dra-evict",
    ),
    "dra-evict+no-devplugin": (
        s("devicePlugin.evictAfter=5m", "devicePlugin.enabled=false"),
        ("dra-evict", "no-devplugin"),
        "list-dra-before-dra-evict",
    ),
    "split+no-devplugin": (
        s("splitByIdentity=true", "devicePlugin.enabled=false"),
        ("split-identity", "no-devplugin"),
        "list-split-identity-or-no-devplugin-not-both",
    ),
    "split+no-devplugin+dra": (
        s("splitByIdentity=true", "devicePlugin.enabled=false", "devicePlugin.api=dra"),
        ("dra", "split-identity", "no-devplugin"),
        "list-dra-or-no-devplugin-not-both",
    ),
}
KUBECTLS = ("system", "harness")


def kubectl_binary(which: str) -> str:
    return system_kubectl() if which == "system" else str(harness_binary("kubectl"))


def build(which: str, components: tuple[str, ...], d: Path) -> subprocess.CompletedProcess:
    write_kustomization(d, components)
    return subprocess.run([kubectl_binary(which), "kustomize", str(d)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


# -- which container uses which right -----------------------------------------------------------

# (group, resource, verb) -> who uses it: the sink in node or nodefeature mode, the prune Job's
# sink, devplugin serving DRA (tools/feature_sink, tools/devplugin/dra; the rbac files say why)
SINK_NODEFEATURE = {("nfd.k8s-sigs.io", "nodefeatures", v): {"sink-nodefeature"}
                    for v in ("get", "list", "watch", "create", "update")}  # fmt: skip
DRA_VERBS = ("get", "list", "watch", "create", "update", "delete", "patch", "associated-node:patch")
DRA_RESOURCES = ("resourceslices", "resourceclaims", "resourceclaims/status",
                 "resourceclaims/driver")  # fmt: skip
USERS = {
    ("", "nodes", "get"): {"sink-node", "sink-prune", "devplugin-dra"},
    ("", "nodes", "list"): {"sink-node", "sink-prune"},
    ("", "nodes", "watch"): {"sink-node"},
    ("", "nodes", "patch"): {"sink-node", "sink-prune"},
    ("", "events", "create"): {"sink-node", "sink-nodefeature"},
    **SINK_NODEFEATURE,
    **{("resource.k8s.io", r, v): {"devplugin-dra"} for r in DRA_RESOURCES for v in DRA_VERBS},
}
MARK = ("admission.edgefd.io", "restrictions", "subject")  # no right (k8s/rbac.yaml)


def users(docs: list[dict[str, Any]], account: str, namespace: str) -> set[str]:
    """Who, running as the account, calls the API: a container holding its token, by what it
    runs (feature-sink's mode, devplugin's API)."""
    out = set()
    for d in docs:
        if d["kind"] not in ("DaemonSet", "Job") or d["metadata"]["namespace"] != namespace:
            continue
        spec = pod_spec(d)
        if spec.get("serviceAccountName") != account:
            continue
        automount = spec.get("automountServiceAccountToken", True)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            mounted = any(m["mountPath"] == TOKEN_PATH for m in c.get("volumeMounts", []))
            if not (mounted or automount):
                continue
            command = " ".join(c.get("command", []) + c.get("args", []))
            if "--prune" in command:
                out.add("sink-prune")
            elif c["name"] == "feature-sink":
                out.add(f"sink-{setting(c, '--mode') or 'node'}")
            elif c["name"] == "devplugin" and setting(c, "--api") in ("dra", "both"):
                out.add("devplugin-dra")
    return out


def unused_rights(docs: list[dict[str, Any]]) -> list[str]:
    """Every right bound to an account whose pods run no container that uses it."""
    unused = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = find(docs, b["roleRef"]["kind"], b["roleRef"]["name"])
        for subject in b["subjects"]:
            who = users(docs, subject["name"], subject["namespace"])
            for rule in role["rules"]:
                for g, r, v in itertools.product(
                    rule["apiGroups"], rule["resources"], rule["verbs"]
                ):
                    if (g, r, v) != MARK and not USERS.get((g, r, v), set()) & who:
                        unused.append(f"{b['metadata']['name']}: {v} {g}/{r} to {subject['name']}")
    return unused


def test_the_rights_check_finds_an_unused_right() -> None:
    """What the check is worth: DRA's rights bound to the sink's account in a pod whose
    devplugin serves the device-plugin API, as [dra, no-devplugin] rendered before."""
    docs = template(*s("devicePlugin.api=dra"))
    ds = find(docs, "DaemonSet", "edgefd")
    for c in pod_spec(ds)["initContainers"]:
        if c["name"] == "devplugin":
            c["env"] = [e for e in c["env"] if e["name"] != "EDGEFD_API"]
    found = unused_rights(docs)
    assert found and all("resource.k8s.io" in u or "nodes" in u for u in found), found
    assert unused_rights(template(*s("devicePlugin.api=dra"))) == []


# -- kustomize --------------------------------------------------------------------------------


@pytest.mark.parametrize("which", KUBECTLS)
@pytest.mark.parametrize("components", REFUSED, ids=lambda c: "+".join(c))
def test_refused_in_every_order(components: tuple[str, ...], which: str, tmp_path: Path) -> None:
    for i, order in enumerate(itertools.permutations(components)):
        refused = refusal(order)
        assert refused is not None, f"the model lets {order} through"
        assert_refused(build(which, order, tmp_path / str(i)), *refused)


@pytest.mark.parametrize("first", COMPONENTS)
def test_each_component_alone_and_with_each_other_in_both_orders(
    first: str, tmp_path: Path
) -> None:
    """The model against both kubectls: refused exactly when `refusal` says, naming its rule;
    otherwise the same objects from both, and no right nobody uses."""
    for i, order in enumerate([(first,), *((first, c) for c in COMPONENTS if c != first)]):
        results = {w: build(w, order, tmp_path / f"{w}{i}") for w in KUBECTLS}
        refused = refusal(order)
        if refused is not None:
            for r in results.values():
                assert_refused(r, *refused)
            continue
        built = {}
        for w, r in results.items():
            assert r.returncode == 0, (order, w, r.stderr)
            assert not r.stderr, (order, w, r.stderr)  # nothing of kustomize's own either
            docs = [d for d in yaml.load_all(r.stdout, Loader=yaml.CSafeLoader) if d]
            built[w] = keyed([sorted_env(d) for d in docs])
        assert built["system"] == built["harness"], order
        assert unused_rights(list(built["harness"].values())) == [], order


def test_every_rule_is_reached() -> None:
    """Each rule the components hold refuses some combination checked here, and each is a
    test of a key on the ledger or a DaemonSet that no object has."""
    reached = {refusal(o)[1] for c in REFUSED for o in itertools.permutations(c)}
    reached |= {refusal(("split-identity", "dra"))[1]}
    assert reached == set(RULES)
    for f in OVERLAYS.rglob("*.yaml"):
        text = f.read_text()
        if "op: test" not in text:
            continue
        (op,) = [op for op in yaml.safe_load(text) if op["op"] == "test"]
        key = op["path"].removeprefix("/metadata/annotations/edgefd.io~1")
        assert key in RULES and op["value"] == "yes", f


# -- the chart --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CHART_REFUSED)
def test_the_chart_refuses_the_same_combinations_in_the_same_words(
    name: str, tmp_path: Path
) -> None:
    args, components, rule = CHART_REFUSED[name]
    r = helm("template", RELEASE, str(CHART), *args, check=False)
    assert r.returncode != 0, r.stdout[:300]
    (said,) = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert said.endswith(tuple(f"): edgefd.io/{rule}: {x}" for x in (
        "devicePlugin.api is dra but devicePlugin.enabled is false: no devplugin would serve DRA",
        "devicePlugin.api is both but devicePlugin.enabled is false: no devplugin would serve DRA",
        "devicePlugin.evictAfter needs devicePlugin.api dra or both: the device-plugin API "
        "cannot evict",
        "splitByIdentity is true but devicePlugin.enabled is false: no device plugin to give "
        "a pod of its own",
    ))), said  # fmt: skip
    # kustomize refuses the counterpart in every order, once with the same rule
    named = set()
    for i, order in enumerate(itertools.permutations(components)):
        refused = refusal(order)
        assert refused is not None, order
        assert_refused(build("harness", order, tmp_path / str(i)), *refused)
        named.add(refused[1])
    assert rule in named


@pytest.mark.parametrize("name", VALUE_SETS)
def test_no_value_set_binds_a_right_nobody_uses(name: str) -> None:
    assert unused_rights(template(*VALUE_SETS[name][0])) == []
