"""What the DRA mode's metrics count from the callbacks the kubelet plugin and the claim-status
writer call: each Prepare and Unprepare by result with the prepared claims then, each
registration status the kubelet reports, each status write by result."""

from __future__ import annotations

from edgefd.devplugin.dra.metrics import DraMetrics
from edgefd.runtime.metrics import Metrics


def test_calls_registrations_and_status_writes_are_counted_by_result() -> None:
    m = Metrics()
    dra = DraMetrics(m)
    dra.call("prepare", True, prepared=1)
    dra.call("prepare", False, prepared=1)
    dra.call("unprepare", True, prepared=0)
    dra.registration(True, "")
    dra.registration(False, "version not supported")
    dra.status_written(True)
    dra.status_written(True)
    dra.status_written(False)
    calls = "edgefd_devplugin_dra_calls_total"
    assert m.value(calls, op="prepare", result="ok") == 1
    assert m.value(calls, op="prepare", result="error") == 1
    assert m.value(calls, op="unprepare", result="ok") == 1
    assert m.value("edgefd_devplugin_dra_prepared_claims") == 0  # as the last call left it
    registrations = "edgefd_devplugin_dra_registrations_total"
    assert m.value(registrations, result="ok") == m.value(registrations, result="error") == 1
    writes = "edgefd_devplugin_dra_claim_status_writes_total"
    assert m.value(writes, result="ok") == 2 and m.value(writes, result="error") == 1
