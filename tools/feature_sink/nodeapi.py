"""The only module that talks to Kubernetes.

`kubernetes` is imported inside `connect()`, never at module import: the import costs about half
a second and tens of MiB, and `--help`, `--dry-run` with the API down, and the unit tests must
not pay for it. Every request has a (connect, read) timeout, so a half-open edge link cannot
block the sink forever; the client's own retries are off because the sink's loop owns retrying
(with jittered backoff), and API errors are translated into a few kinds the loop acts on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote as _quote

from edgefd.core.errors import BadInput, EdgefdError, Unreachable

from .patch import NodeView, Op

log = logging.getLogger(__name__)

USER_AGENT = "edgefd-feature-sink"
EVENT_NAMESPACE = "default"  # where the kubelet and kubectl put Node events

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NFD_PLURAL = "nodefeatures"


def quote(segment: str) -> str:
    """One URL path segment, fully escaped: a name can never add a segment (`../namespaces/x`)."""
    if segment in ("", ".", ".."):
        raise EdgefdError(f"refusing {segment!r} as an object name in a URL")
    return _quote(segment, safe="")


class ApiConflict(EdgefdError):
    """The object changed under us (409, or a failed `test` op: 422): re-read and retry."""


class ApiNotFound(EdgefdError):
    """The object does not exist (a Node not registered yet, a missing CRD)."""


class ApiRefused(EdgefdError):
    """The API answered and said no (401/403/400...): retrying soon will not help."""


class ApiUnreachable(Unreachable):
    """No answer, a timeout, or a 5xx/429: the link or the server is down; retry later."""


def _classify(exc: BaseException, what: str) -> EdgefdError:
    status = getattr(exc, "status", None)
    if status is None or status == 0:
        return ApiUnreachable(f"{what}: API server unreachable ({type(exc).__name__}: {exc})")
    reason = _api_message(exc)
    if status == 422 and " is invalid" in reason:
        # object validation (e.g. a label the API refuses): re-reading will not change that
        return ApiRefused(f"{what}: {status} {reason}")
    if status in (409, 422):
        # 409: stale object; 422 without a validation message: a JSON Patch `test` (or a
        # pointer) no longer matches the object, i.e. it changed since we read it
        return ApiConflict(f"{what}: {status} {reason}")
    if status == 404:
        return ApiNotFound(f"{what}: not found ({reason})")
    if status == 429 or status >= 500:
        return ApiUnreachable(f"{what}: API server answered {status} ({reason})")
    return ApiRefused(f"{what}: API server refused with {status} ({reason})")


def _api_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message", body))[:300]
        except (ValueError, AttributeError):
            return str(body)[:300]
    return str(getattr(exc, "reason", "") or exc)[:300]


class _HttpStatus(Exception):
    """A non-2xx answer, shaped like the client's ApiException for `_classify`."""

    def __init__(self, status: int, body: bytes | str | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body.decode(errors="replace") if isinstance(body, bytes) else body


class NodeAPI:
    """A configured client plus the handful of calls the sink makes.

    Requests go through the kubernetes client's REST layer (its TLS, proxy and auth handling,
    and the in-cluster token refresh) but not through its typed API classes: deserialising a
    Node into the generated models cost about 2 s of CPU on the first call (building every
    model class the Node references) and tens of MiB; the sink only needs a few fields, so
    it reads the JSON itself. `on_request(verb, resource)` is called for every request.
    """

    def __init__(
        self,
        configuration: Any,
        timeout: float,
        on_request: Callable[[str, str], None] | None = None,
    ) -> None:
        from kubernetes.client import rest

        self._cfg = configuration
        self._rest = rest.RESTClientObject(configuration)
        self._host = str(configuration.host).rstrip("/")
        # connect fast, read a little longer: a PATCH can queue behind etcd
        self._timeout = (min(timeout, 5.0), timeout)
        self._on_request = on_request or (lambda verb, resource: None)

    def _request(
        self,
        method: str,
        resource: str,
        path: str,
        what: str,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        self._on_request(method, resource)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        # auth_settings() runs the in-cluster token refresh hook, so a rotated token is used
        for auth in self._cfg.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        if content_type:
            headers["Content-Type"] = content_type
        try:
            resp = self._rest.request(
                method,
                self._host + path,
                headers=headers,
                body=body,
                _request_timeout=self._timeout,
            )
            data = getattr(resp, "data", None)
            if data is None and hasattr(resp, "read"):
                data = resp.read()
        except ApiException as e:  # older clients raise for non-2xx inside request()
            raise _classify(e, what) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiUnreachable(f"{what}: API server unreachable ({type(e).__name__}: {e})") from e
        if not 200 <= resp.status < 300:
            raise _classify(_HttpStatus(resp.status, data), what)
        try:
            return json.loads(data) if data else None
        except ValueError as e:
            raise ApiUnreachable(f"{what}: unreadable answer from the API server ({e})") from e

    # -- Node -------------------------------------------------------------------------------

    def get_node(self, name: str) -> NodeView:
        node = self._request("GET", "nodes", f"/api/v1/nodes/{quote(name)}", f"get node {name}")
        md = (node or {}).get("metadata") or {}
        if (node or {}).get("kind") != "Node" or md.get("name") != name:
            raise ApiRefused(
                f"get node {name}: the API answered with {(node or {}).get('kind')!r} "
                f"{md.get('name')!r}, not Node {name!r}"
            )
        return NodeView(
            name=name,
            labels=dict(md["labels"]) if md.get("labels") is not None else None,
            annotations=dict(md["annotations"]) if md.get("annotations") is not None else None,
            resource_version=md.get("resourceVersion"),
            uid=md.get("uid"),
        )

    def patch_node(self, name: str, ops: list[Op]) -> str | None:
        """Send one JSON Patch; return the Node's new resourceVersion."""
        node = self._request(
            "PATCH",
            "nodes",
            f"/api/v1/nodes/{quote(name)}",
            f"patch node {name}",
            body=ops,
            content_type="application/json-patch+json",
        )
        return ((node or {}).get("metadata") or {}).get("resourceVersion")

    # -- Events -----------------------------------------------------------------------------

    def create_node_event(
        self, node: NodeView, reason: str, message: str, dedup_key: str, component: str
    ) -> bool:
        """Post a Warning Event on the Node; False if an identical one already exists.

        The Event's name is derived from `dedup_key`, so the API server itself deduplicates
        across sink restarts: a second create of the same rejection gets 409 and is skipped.
        """
        digest = hashlib.sha256(dedup_key.encode()).hexdigest()[:16]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{node.name}.{digest}", "namespace": EVENT_NAMESPACE},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node.name,
                **({"uid": node.uid} if node.uid else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": component, "host": node.name},
            "reportingComponent": f"edgefd.io/{component}",
            "reportingInstance": node.name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._request(
                "POST",
                "events",
                f"/api/v1/namespaces/{EVENT_NAMESPACE}/events",
                f"create event {reason}",
                body=body,
                content_type="application/json",
            )
        except ApiConflict:
            return False
        return True

    # -- NodeFeature (NFD) ------------------------------------------------------------------

    def _nf_path(self, namespace: str, name: str | None = None) -> str:
        path = f"/apis/{NFD_GROUP}/{NFD_VERSION}/namespaces/{quote(namespace)}/{NFD_PLURAL}"
        return path + (f"/{quote(name)}" if name else "")

    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._request(
                "GET",
                NFD_PLURAL,
                self._nf_path(namespace, name),
                f"get nodefeature {namespace}/{name}",
            )
        except ApiNotFound as e:
            if "the server could not find the requested resource" in str(e):
                raise  # the CRD is not installed: not "object absent"
            return None

    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request(
            "POST",
            NFD_PLURAL,
            self._nf_path(namespace),
            f"create nodefeature {namespace}/{body['metadata']['name']}",
            body=body,
            content_type="application/json",
        )

    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace guarded by metadata.resourceVersion in `body` (409 if it moved)."""
        name = body["metadata"]["name"]
        return self._request(
            "PUT",
            NFD_PLURAL,
            self._nf_path(namespace, name),
            f"replace nodefeature {namespace}/{name}",
            body=body,
            content_type="application/json",
        )


def _kubeconfig_dict(path: str) -> dict[str, Any]:
    """The kubeconfig file as a mapping, or BadInput with one line saying why not. Checked here
    because the client's loader fails on a non-mapping with a TypeError deep inside."""
    from edgefd.core.schema import parse_yaml, read_text

    try:
        doc = parse_yaml(read_text(path, "--kubeconfig"), f"--kubeconfig {path}")
    except BadInput as e:  # YAML's own messages span lines
        raise BadInput(" ".join(str(e).split())) from None
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else f"a YAML {type(doc).__name__}"
        raise BadInput(f"--kubeconfig {path}: {kind}, not a kubeconfig (a YAML mapping)")
    return doc


def connect(
    kubeconfig: str | None,
    timeout: float,
    on_request: Callable[[str, str], None] | None = None,
) -> NodeAPI:
    """Load in-cluster config (or `kubeconfig`) and build the client. Makes no request.

    Only configuration errors fail here (a bad kubeconfig: exit 3; not in a cluster: exit 1);
    an unreachable API server is discovered later, by the loop, which retries.
    """
    try:
        import kubernetes.client as k8s
        import kubernetes.config as k8s_config
    except ImportError as e:  # pragma: no cover - install problem
        raise EdgefdError(f"the kubernetes Python client is not installed ({e})") from e

    cfg = k8s.Configuration()
    if kubeconfig:
        doc = _kubeconfig_dict(kubeconfig)
        try:
            # relative certificate paths are relative to the kubeconfig's directory
            k8s_config.load_kube_config_from_dict(
                doc,
                client_configuration=cfg,
                persist_config=False,
                temp_file_path=os.path.dirname(os.path.abspath(kubeconfig)),
            )
        except (k8s_config.ConfigException, TypeError, KeyError, ValueError, AttributeError) as e:
            # the loader reports a wrong shape deep inside with whatever error it hits first
            msg = " ".join(str(e).split()) or type(e).__name__
            raise BadInput(f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({msg})") from e
        except OSError as e:  # a certificate or key file it names
            raise BadInput(f"--kubeconfig {kubeconfig}: {e.strerror or e}") from e
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException as e:
            raise EdgefdError(
                f"cannot load the in-cluster client configuration: {e} (not running in a pod? "
                "pass --kubeconfig)"
            ) from e
    cfg.retries = False  # the sink's loop retries, with backoff; never inside a request
    return NodeAPI(cfg, timeout, on_request)
