"""docs/scheduling.md, run: every YAML block is applied with the real kubectl to the real API
server, the real kube-scheduler places it on the sample fleet, and where each pod lands (or why
it stays Pending) must be what the guide says right after the block.

One scheduler for the module, one fleet; each heading of the guide is a scenario that starts from
the empty fleet with the default device-plugin configuration.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.peers.processes import harness_binary

from . import dra, fleet
from .guide import LANDS, PENDING, Block, Scenario, load
from .placement import NAMESPACE, Cluster, check, probe

pytestmark = pytest.mark.realpeer

PENDING_GRACE = 1.5  # s: a scheduler retry after a stale verdict comes within its 1 s backoff


@dataclass
class Fleet:
    nodes: list[fleet.SampleNode]
    core: Any
    cluster: Cluster
    defaults: dict[str, dict[str, tuple[int, int]]]  # node -> default devplugin resources

    def republish(self, config: str | None) -> dict[str, dict[str, tuple[int, int]]]:
        """Every node's status with devplugin under ``config`` (None: the default)."""
        devices = self.defaults
        if config is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                f.write(config)
                f.flush()
                devices = fleet.device_resources_all(self.nodes, Path(f.name))
        for n in self.nodes:
            fleet.publish_status(self.core, n, devices[n.name])
        return devices

    def withdraw(self) -> None:
        """Every node as on `devplugin --api dra`: no edgefd.io extended resource at all (a
        node that still advertised one would have the scheduler use the device plugin)."""
        for n in self.nodes:
            gone = {r: None for r in self.defaults[n.name]}
            self.core.patch_node_status(n.name, {"status": {"capacity": gone, "allocatable": gone}})


@pytest.fixture(scope="module")
def guide() -> tuple[list[Scenario], list[Any]]:
    return load()


@pytest.fixture(scope="module")
def sample_fleet(kube_scheduler: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    from kubernetes import client

    kubectl = harness_binary("kubectl")
    nodes = fleet.build(tmp_path_factory.mktemp("fleet"))
    kube_scheduler.ensure_service_account(NAMESPACE, "default")
    with kube_scheduler.admin_api() as api:
        core = client.CoreV1Api(api)
        try:
            defaults = fleet.register_all(kube_scheduler, core, nodes)
            others = fleet.others_schedulable(core, nodes)
            assert not others, f"Nodes left schedulable by other tests: {others}"
            cluster = Cluster(kube_scheduler, core, kubectl)
            yield Fleet(nodes, core, cluster, defaults)
            cluster.clear()
        finally:
            fleet.unregister(core, nodes)


def test_fleet_is_the_guides_table(sample_fleet: Fleet, guide: Any) -> None:
    """The table of sample nodes shows each Node's edgefd labels and resources, all of them."""
    _, rows = guide
    assert sorted(r.node for r in rows) == sorted(n.name for n in sample_fleet.nodes)
    for row in rows:
        labels, resources = fleet.edgefd_view(sample_fleet.core, row.node)
        where = f"docs/scheduling.md:{row.line} ({row.node})"
        assert row.labels == labels, f"{where}: capability labels on the Node: {labels}"
        assert row.resources == resources, f"{where}: allocatable on the Node: {resources}"


def _run_blocks(fl: Fleet, scenario: Scenario, claims_checked: bool) -> list[str]:
    failures: list[str] = []
    placed: list[tuple[Block, Any, str | None]] = []
    for block in scenario.blocks:
        if block.config is not None:
            failures += _published(fl, block)
            continue
        fl.cluster.create(block.text)
        got = fl.cluster.wait(block.pod_name, block.expect.kind)
        failure = check(block, got)
        placed.append((block, got, failure))
        failures += filter(None, [failure])
    # a Pending verdict must hold: look again once the scenario has settled
    held = [b for b, _, failure in placed if b.expect.kind == PENDING and not failure]
    if held:
        time.sleep(PENDING_GRACE)
        for block in held:
            failures += filter(None, [check(block, fl.cluster.placement(block.pod_name))])
    if claims_checked:
        for block, got, _ in placed:
            failures += _claims(fl, block, got)
    return failures


def _published(fl: Fleet, block: Block) -> list[str]:
    devices = fl.republish(block.config)
    got = {
        (node, res, alloc)
        for node, rs in devices.items()
        for res, (_, alloc) in rs.items()
        if alloc > 0
    }
    want = set(block.expect.published)
    if got != want:
        return [
            f"docs/scheduling.md:{block.expect.line}: with this ConfigMap devplugin publishes "
            f"{sorted(got)}; the guide says {sorted(want)}"
        ]
    return []


def _claims(fl: Fleet, block: Block, got: Any) -> list[str]:
    """A pod's claims are allocated from the node it landed on, or not at all while Pending."""
    out = []
    if block.dra_mode and block.expect.kind != PENDING:
        status = fl.core.read_namespaced_pod(block.pod_name, NAMESPACE).status
        own = status.extended_resource_claim_status
        pools = own and fl.cluster.claim_pools(own.resource_claim_name)
        if not pools or set(pools) != {got.node}:
            out.append(
                f"docs/scheduling.md:{block.expect.line}: pod {block.pod_name}'s extended "
                f"resources were not allocated through DRA on {got.node} (its claim: {own})"
            )
    for claim in block.of_kind("ResourceClaim"):
        name = claim["metadata"]["name"]
        pools = fl.cluster.claim_pools(name)
        if block.expect.kind == PENDING:
            ok = pools is None
        else:
            ok = bool(pools) and set(pools) == {got.node}
        if not ok:
            out.append(
                f"docs/scheduling.md:{block.expect.line}: claim {name}: allocated from {pools}, "
                f"pod {got.describe()}"
            )
    return out


def _run(fl: Fleet, scenario: Scenario, claims_checked: bool = False) -> list[str]:
    config = any(b.config is not None for b in scenario.blocks)
    dra_mode = any(b.dra_mode for b in scenario.blocks)
    if dra_mode:
        fl.withdraw()
    try:
        failures = _run_blocks(fl, scenario, claims_checked)
    finally:
        fl.cluster.clear(claims=scenario.dra)
        if config or dra_mode:
            fl.republish(None)
    for block in scenario.blocks:
        if block.expect.kind == LANDS and len(block.expect.nodes) > 1 and not block.dra:
            failures += probe(fl.cluster, block)
    return failures


def test_every_recipe_is_placed_as_the_guide_says(sample_fleet: Fleet, guide: Any) -> None:
    scenarios, _ = guide
    failures = []
    for scenario in (s for s in scenarios if not s.dra):
        failures += _run(sample_fleet, scenario)
    assert not failures, "\n".join(failures)


def test_dra_recipes_are_allocated_as_the_guide_says(sample_fleet: Fleet, guide: Any) -> None:
    classes = dra.device_classes()
    # k8s/dra ships them: none found means they were lost, not that recipe 8 cannot run
    assert classes, "k8s/ ships no DeviceClass: recipe 8 (DRA) cannot be placed"
    scenarios, _ = guide
    cluster = sample_fleet.cluster
    # the classes may be shared with other tests of the session: leave alone those that were there
    there = set(cluster.kubectl("get", "deviceclasses", "-o", "name").split())
    cluster.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(c) for c in classes))
    ours = {f"deviceclass.resource.k8s.io/{c['metadata']['name']}" for c in classes} - there
    try:
        slices = [s for n in sample_fleet.nodes for s in dra.resource_slices(n)]
        assert slices, "devplugin's DRA dry run publishes no ResourceSlice for the sample fleet"
        cluster.kubectl("create", "-f", "-", stdin="\n---\n".join(json.dumps(s) for s in slices))
        failures = []
        for scenario in (s for s in scenarios if s.dra):
            failures += _run(sample_fleet, scenario, claims_checked=True)
        assert not failures, "\n".join(failures)
    finally:
        cluster.delete_slices(n.name for n in sample_fleet.nodes)
        if ours:
            cluster.kubectl("delete", *sorted(ours), "--wait=false")
