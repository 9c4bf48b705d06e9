"""The Prometheus Operator's kinds on the real API server, for the chart's and the components'
PodMonitor and PrometheusRule: stand-ins for its CRDs with the real group, version, kind and
scope, so that the API server serves the kinds (what the chart's Capabilities check looks for)
and accepts the objects; their spec is not validated (the harness builds no Prometheus
Operator: promtool checks the rules themselves, tests/alerts)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.peers.processes import harness_binary

GROUP = "monitoring.coreos.com"
PODMONITOR_API = f"{GROUP}/v1/PodMonitor"
PROMETHEUSRULE_API = f"{GROUP}/v1/PrometheusRule"


def crd(api: str) -> dict[str, Any]:
    """The stand-in CRD of `api` (`group/version/Kind`)."""
    group_version, kind = api.rsplit("/", 1)
    group, version = group_version.split("/")
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                      "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
            }],
        },
    }  # fmt: skip


def kubectl(kube_apiserver: Any, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [str(harness_binary("kubectl")), f"--kubeconfig={kube_apiserver.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_served(kube_apiserver: Any, api: str, served: bool = True) -> None:
    group_version, kind = api.rsplit("/", 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = kubectl(kube_apiserver, "api-resources", f"--api-group={group_version.split('/')[0]}",
                    "-o", "name")  # fmt: skip
        if (f"{kind.lower()}s." in r.stdout) == served:
            return
        time.sleep(0.3)
    raise AssertionError(f"{api} {'not ' if served else ''}served after 30 s")


def install(kube_apiserver: Any, api: str) -> None:
    r = kubectl(kube_apiserver, "apply", "--server-side", "-f", "-", stdin=json.dumps(crd(api)))
    assert r.returncode == 0, r.stderr
    wait_served(kube_apiserver, api)


def uninstall(kube_apiserver: Any, api: str) -> None:
    kubectl(kube_apiserver, "delete", "crd", crd(api)["metadata"]["name"], "--ignore-not-found")
    wait_served(kube_apiserver, api, served=False)


@contextmanager
def served(kube_apiserver: Any, *apis: str) -> Iterator[None]:
    """The kinds served for the duration, removed again after (a cluster without the
    Prometheus Operator is what the other tests expect)."""
    for api in apis:
        install(kube_apiserver, api)
    try:
        yield
    finally:
        for api in apis:
            uninstall(kube_apiserver, api)
