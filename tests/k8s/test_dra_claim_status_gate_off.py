"""The claim-status policy where the API server's own per-driver check is off
(`DRAResourceClaimGranularStatusAuthorization=false`, issue 30 item 5): there RBAC's
`patch resourceclaims/status` lets devplugin's token write any driver's `status.devices`
entry of a claim on its node, so the policy alone keeps other drivers' entries (a NIC's
networkData) as they were. A kube-apiserver of its own, started with the gate off, with
k8s/dra/ applied by the fixtures of test_dra_apiserver.py and test_dra_claim_status.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from edgefd.devplugin.dra.claimstatus import FIELD_MANAGER
from edgefd.devplugin.dra.slices import DRIVER
from edgefd.kube.errors import ApiRefused
from tests.k8s.test_dra_apiserver import applied  # noqa: F401
from tests.k8s.test_dra_claim_status import (  # noqa: F401
    APPLY,
    CLAIMS,
    CORAL,
    GPU,
    POLICY,
    claims,
    prepared,
    write_own_status,
)
from tests.k8s.test_manifests import NAMESPACE
from tests.peers.apiserver import KubeAPIServer, running

pytestmark = pytest.mark.realpeer

GATE_OFF = "--feature-gates=DRAResourceClaimGranularStatusAuthorization=false"
NIC = {
    "driver": GPU["driver"],
    "pool": GPU["pool"],
    "device": GPU["device"],
    "conditions": [],
    "networkData": {"interfaceName": "eth1", "ips": ["10.9.0.7/24"]},
}
REFUSAL = f"edgefd may only write status.devices entries of its own driver, {DRIVER}"


@pytest.fixture(scope="module")
def kube_apiserver(harness_bin: Any, tmp_path_factory: Any) -> Iterator[KubeAPIServer]:
    """This module's own API server, the per-driver check off (the fixtures it imports take
    it in place of the session's)."""
    yield from running(
        KubeAPIServer(
            tmp_path_factory.mktemp("kube-gate-off"), bin_dir=harness_bin, extra_args=[GATE_OFF]
        )
    )


def _devices(applied: dict[str, Any]) -> list[dict[str, Any]]:  # noqa: F811
    claim = applied["admin"].get_claim(NAMESPACE, "status-a")
    return (claim.get("status") or {}).get("devices") or []


def _apply_as(client: Any, manager: str, devices: list[dict[str, Any]]) -> None:
    path = f"{CLAIMS}/status-a/status?fieldManager={manager}&force=true"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "status-a", "namespace": NAMESPACE},
        "status": {"devices": devices},
    }
    client.request("PATCH", "resourceclaims", path, "apply", json.dumps(body), APPLY)


@pytest.fixture
def nic_entry(applied: dict[str, Any], claims: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """status-a (node A's claim, with a NIC's device allocated beside edgefd's) carrying the
    NIC driver's own entry, written by that driver."""
    _apply_as(applied["admin"], "nic-driver", [NIC])
    [entry] = _devices(applied)
    assert entry["networkData"] == NIC["networkData"]
    return entry


def _refused(applied: dict[str, Any], write: Any) -> str:  # noqa: F811
    with pytest.raises(ApiRefused) as err:
        write()
    message = str(err.value)
    assert POLICY in message and REFUSAL in message, message
    return message


def test_the_gate_is_off_and_rbac_alone_would_allow_it(
    applied,  # noqa: F811
    claims,  # noqa: F811
    kube_apiserver: KubeAPIServer,
) -> None:
    """Without the policy's binding the token does write another driver's entry: what the
    policy is for here (the API server's own check would refuse it with the gate on)."""
    dyn = kube_apiserver.dynamic(applied["api_client"])
    bindings = dyn.resources.get(
        api_version="admissionregistration.k8s.io/v1", kind="ValidatingAdmissionPolicyBinding"
    )
    binding = bindings.get(name=POLICY).to_dict()
    bindings.delete(name=POLICY)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                applied["sa"].apply_claim_status(NAMESPACE, "status-a", [NIC], FIELD_MANAGER)
                break
            except ApiRefused as e:  # until the API server's informer drops the binding
                assert POLICY in str(e) and time.monotonic() < deadline, str(e)
                time.sleep(0.3)
        assert [d["driver"] for d in _devices(applied)] == [GPU["driver"]]
    finally:
        body = {k: binding[k] for k in ("apiVersion", "kind", "spec")}
        body["metadata"] = {"name": POLICY, "labels": binding["metadata"].get("labels")}
        bindings.create(body=body)
    # the claims fixture's next use waits until the policy is in force again
    _apply_as(applied["admin"], "nic-driver", [])
    deadline = time.monotonic() + 60
    while True:
        try:
            applied["sa"].apply_claim_status(NAMESPACE, "status-b", [], FIELD_MANAGER)
        except ApiRefused as e:
            if POLICY in str(e):
                break
            raise
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_adding_another_drivers_entry_is_refused(applied, claims) -> None:  # noqa: F811
    _refused(
        applied,
        lambda: applied["sa"].apply_claim_status(NAMESPACE, "status-a", [NIC], FIELD_MANAGER),
    )
    assert _devices(applied) == []


def test_changing_another_drivers_entry_is_refused(applied, nic_entry) -> None:  # noqa: F811
    forged = {**NIC, "networkData": {"interfaceName": "eth1", "ips": ["10.66.0.1/24"]}}
    _refused(
        applied,
        lambda: applied["sa"].apply_claim_status(NAMESPACE, "status-a", [forged], FIELD_MANAGER),
    )
    assert _devices(applied) == [nic_entry]


def test_removing_another_drivers_entry_is_refused(applied, nic_entry) -> None:  # noqa: F811
    path = f"{CLAIMS}/status-a/status"
    remove = [{"op": "remove", "path": "/status/devices/0"}]
    _refused(
        applied,
        lambda: applied["sa"].request(
            "PATCH", "resourceclaims", path, "remove", remove, "application/json-patch+json"
        ),
    )
    assert _devices(applied) == [nic_entry]


def test_its_own_entry_is_written_beside_another_drivers(applied, claims, nic_entry) -> None:  # noqa: F811
    claim = prepared(claims["a"])
    write_own_status(applied["sa"], claim)
    by_driver = {d["driver"]: d for d in _devices(applied)}
    assert set(by_driver) == {GPU["driver"], DRIVER}
    assert by_driver[GPU["driver"]] == nic_entry


def test_removing_the_allocation_is_refused(applied, claims) -> None:  # noqa: F811
    """The API server's own check is off: RBAC's patch of resourceclaims/status lets the token
    deallocate an unreserved claim of its own node; the policy refuses it."""
    from tests.k8s.test_dra_claim_status import ALLOCATION_REFUSAL, DEALLOCATE, patch_status

    with pytest.raises(ApiRefused) as err:
        patch_status(applied["sa"], "status-a", DEALLOCATE)
    assert POLICY in str(err.value) and ALLOCATION_REFUSAL in str(err.value), str(err.value)
    claim = applied["admin"].get_claim(NAMESPACE, "status-a")
    assert claim["status"]["allocation"] == claims["a"]["status"]["allocation"]


def test_its_own_entry_does_not_need_the_allocation_changed(applied, claims) -> None:  # noqa: F811
    """What the policy lets through is devplugin's own write, as before."""
    write_own_status(applied["sa"], prepared(claims["a"]))
    assert [d["driver"] for d in _devices(applied)] == [DRIVER]
