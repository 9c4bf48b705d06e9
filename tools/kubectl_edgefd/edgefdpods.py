"""edgefd's own pods on a node, and what they say about it: which device API devplugin
serves, whether device-keeper runs beside it, which edgefd version runs there.

Found by the label every edgefd pod carries (`app.kubernetes.io/part-of: edgefd`, in any
namespace: a kustomization may relocate the base) and by container name, as the manifests
name them (k8s/pod-template.yaml): devplugin is an init container of DaemonSet edgefd's pod,
or an ordinary container of edgefd-devplugin's with split-identity; device-keeper sits in
the pod that holds devplugin, unless it was opted out. The API is devplugin's own setting
(`EDGEFD_API`, or `--api` in its command line; device-plugin by default), the version the
tag of the image it runs (the chart's pods carry no version label; a digest is shown short).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .podspec import labels, name_of, node_of, ref

PART_OF = ("app.kubernetes.io/part-of", "edgefd")
DEVPLUGIN = "devplugin"
KEEPER = "device-keeper"
API_ENV = "EDGEFD_API"
DEFAULT_API = "device-plugin"


@dataclass(frozen=True)
class Agent:
    """What edgefd runs on one node. `api` is None without a devplugin there, `keeper` then
    too; `version` is devplugin's image version (else any edgefd container's)."""

    pods: tuple[str, ...] = ()
    api: str | None = None
    keeper: bool | None = None
    version: str | None = None
    devplugin_ready: bool | None = None
    devplugin_pod: str | None = None  # namespace/name

    def logs_hint(self, node: str) -> str:
        """The command that shows devplugin's log on the node."""
        if self.devplugin_pod:
            ns, _, pod = self.devplugin_pod.partition("/")
            return f"kubectl logs -n {ns} {pod} -c {DEVPLUGIN}"
        return f"kubectl logs -n <namespace> <edgefd pod on {node}> -c {DEVPLUGIN}"

    def as_json(self) -> dict[str, Any]:
        return {
            "pods": list(self.pods),
            "api": self.api,
            "keeper": self.keeper,
            "version": self.version,
            "devplugin_ready": self.devplugin_ready,
            "devplugin_pod": self.devplugin_pod,
        }


def is_edgefd(pod: dict[str, Any]) -> bool:
    return labels(pod).get(PART_OF[0]) == PART_OF[1]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def version_of(image: str) -> str:
    """`ghcr.io/edgefd/edgefd:0.1.0` -> `0.1.0`; a digest -> `sha256:` and 12 hex digits;
    no tag -> `latest` (what the runtime pulls)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    if digest:
        algo, _, hexa = digest.partition(":")
        return f"{algo}:{hexa[:12]}"
    return "latest"


def api_of(container: dict[str, Any]) -> str:
    """devplugin's `--api`: its EDGEFD_API variable, else the flag in its command line."""
    for e in container.get("env") or ():
        if e.get("name") == API_ENV and e.get("value"):
            return str(e["value"])
    argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    for i, a in enumerate(argv):
        if a.startswith("--api="):
            return a.split("=", 1)[1]
        if a == "--api" and i + 1 < len(argv):
            return argv[i + 1]
    return DEFAULT_API


def _ready(pod: dict[str, Any], container: str) -> bool | None:
    status = pod.get("status") or {}
    for s in [
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ]:
        if s.get("name") == container:
            return bool(s.get("ready"))
    return None


def agent(pods: list[dict[str, Any]], node: str) -> Agent:
    """What edgefd runs on `node`, from every active pod (snapshot.Snapshot.pods)."""
    mine = sorted((p for p in pods if node_of(p) == node and is_edgefd(p)), key=name_of)
    if not mine:
        return Agent()
    api = keeper = ready = version = holder = None
    for pod in mine:
        by_name = {c.get("name"): c for c in containers(pod)}
        plugin = by_name.get(DEVPLUGIN)
        if plugin is not None:
            api = api_of(plugin)
            keeper = KEEPER in by_name
            ready = _ready(pod, DEVPLUGIN)
            version = version_of(str(plugin.get("image") or ""))
            holder = ref(pod)
    if version is None:
        images = [str(c.get("image") or "") for p in mine for c in containers(p)]
        version = next((version_of(i) for i in images if i), None)
    return Agent(tuple(ref(p) for p in mine), api, keeper, version, ready, holder)
