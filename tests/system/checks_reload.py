"""Check 6d: an edited ConfigMap reaches the running devplugin without a restart (issue 25 item
4). The real API server stores the change, the real kubelet swaps the mounted volume's `..data`
(within its sync period: 5 s on this node), devplugin reloads it: the resource now shared
(`replicas: 2`) doubles in the Node's allocatable, the container is the same one, not
restarted. Then a malformed one (issue 32 item 1): devplugin keeps the configuration in use
and leaves its notice in its own notices directory, and feature-sink, the pod's one identity
that may post Events, posts it as a `ConfigReloadFailed` Warning Event on the Node naming
devplugin by that directory (issue 46 item 4). The
configuration is then put back, the same way.
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from .context import NAMESPACE, Run, statuses_of
from .kube import wait_for

CONFIGMAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/edgefd-devplugin"
DEVPLUGIN_SAYS = "edgefd's devplugin left this notice: "  # edgefd.feature_sink.notices


def _set(run: Run, text: str) -> None:
    cm = run.api.get(CONFIGMAP)
    cm["data"]["resources.yaml"] = text
    run.api.request("PUT", CONFIGMAP, cm)


def _devplugin(run: Run) -> tuple[str, int]:
    """(container ID, restart count) of the running devplugin container."""
    for pod in run.all_edgefd_pods():
        for st in statuses_of(pod):
            if st["name"] == "devplugin":
                return st.get("containerID", ""), int(st.get("restartCount", 0))
    raise AssertionError("no devplugin container")


def check_config_reload(run: Run) -> dict[str, Any]:
    resource = run.offer.primary()
    if resource is None:
        return {"ok": False, "problems": ["the host tree has no device the plugin offers"]}
    count = int(run.offer.allocatable()[resource])
    original = run.api.get(CONFIGMAP)["data"]["resources.yaml"]
    doc = yaml.safe_load(original)
    for r in doc["resources"]:
        if r["name"] == resource:
            r["replicas"] = 2
    before = _devplugin(run)

    def allocatable(n: int) -> bool:
        return run.get_node()["status"]["allocatable"].get(resource, "0") == str(n)

    problems = []
    t0 = time.monotonic()
    _set(run, yaml.safe_dump(doc, sort_keys=False))
    try:
        wait_for(f"{resource}: {2 * count}", lambda: allocatable(2 * count), timeout=60)
        took = time.monotonic() - t0
        _set(run, "resources: [oops\n")
        event, failed_s = wait_for(
            "a ConfigReloadFailed Event", lambda: _reload_failed(run), timeout=60, interval=0.5
        )
        if not event["message"].startswith(f'{DEVPLUGIN_SAYS}"configuration reload failed: '):
            problems.append(f"the Event does not say devplugin's failure: {event['message']!r}")
        if not allocatable(2 * count):
            problems.append("a malformed configuration changed the resources in use")
    finally:
        _set(run, original)
    wait_for(f"{resource}: {count} again", lambda: allocatable(count), timeout=60)
    back = time.monotonic() - t0 - took
    # the Events this check caused go, so that a later scenario's check 1b on this Node does
    # not count them
    for e in _reload_events(run):
        run.api.request("DELETE", f"/api/v1/namespaces/default/events/{e['metadata']['name']}")
    if _devplugin(run) != before:
        problems.append(f"devplugin restarted: {before} -> {_devplugin(run)}")
    line = "configuration reloaded: "
    if run.container_log("devplugin").count(line) < 2:
        problems.append(f"devplugin's log lacks two {line!r} lines")
    return {"ok": not problems, "problems": problems, "resource": resource,
            "edit_to_allocatable_s": round(took, 1), "back_s": round(back, 1),
            "malformed_to_event_s": round(failed_s, 1)}  # fmt: skip


def _reload_events(run: Run) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={run.node_name}"
    return [e for e in run.api.get(path)["items"] if e.get("reason") == "ConfigReloadFailed"]


def _reload_failed(run: Run) -> dict[str, Any] | None:
    """devplugin's ConfigReloadFailed Event on this Node (posted by feature-sink), if any."""
    return next((e for e in _reload_events(run) if e["message"].startswith(DEVPLUGIN_SAYS)), None)
