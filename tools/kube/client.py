"""Connecting to the API server and the two ways of talking to it: a request, and a watch.

`kubernetes` is imported only to read a kubeconfig (a person's or a test's; its loader knows
exec plugins, merged files and contexts), never in a pod: there the service-account files are
read by edgefd.kube.incluster, and every request goes through urllib3 with an
edgefd.kube.endpoint.Endpoint. The package's client layer would import its generated models
(~30 MiB, half a second) in every long-running container, and the tools need a few fields of
plain JSON. Every request has a (connect, read) timeout, so a half-open edge
link cannot block a tool forever; the client's own retries are off because each tool's loop
owns retrying (edgefd.kube.retry).

Every request and every watch opened goes through the client's rate limiter
(edgefd.kube.ratelimit): a bounded rate per client whatever its loops do, and the API server's
Retry-After honoured.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Self, TypeVar
from urllib.parse import quote as _quote

from edgefd.core.errors import BadInput, EdgefdError

from .endpoint import Endpoint, from_configuration
from .errors import ApiGone, ApiUnreachable, HttpStatus, classify
from .ratelimit import DEFAULT_BURST, DEFAULT_QPS, RateLimiter

log = logging.getLogger(__name__)

OnRequest = Callable[[str, str], None]
OnWait = Callable[[str, float], None]
C = TypeVar("C", bound="Client")

# the longest a watch stays open before the server ends it (and the caller watches again)
WATCH_SECONDS = 300
MAX_WATCH_LINE = 4 << 20  # one event; a ResourceSlice is at most a few hundred KiB


def quote(segment: str) -> str:
    """One URL path segment, fully escaped: a name can never add a segment (`../namespaces/x`)."""
    if segment in ("", ".", ".."):
        raise EdgefdError(f"refusing {segment!r} as an object name in a URL")
    return _quote(segment, safe="")


class Client:
    """A configured client: JSON requests and watches, errors as edgefd.kube.errors kinds.

    `on_request(verb, resource)` is called for every request sent (metrics); `limiter` bounds
    how fast they are sent (default: DEFAULT_QPS / DEFAULT_BURST); `user_agent` names the tool
    in the API server's audit log.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        timeout: float,
        on_request: OnRequest | None = None,
        user_agent: str = "edgefd",
        limiter: RateLimiter | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._timeout_s = timeout
        self._pool = endpoint.pool()
        self._host = endpoint.host.rstrip("/")
        # connect fast, read a little longer: a write can queue behind etcd
        self._timeout = (min(timeout, 5.0), timeout)
        self._on_request = on_request or (lambda verb, resource: None)
        self.user_agent = user_agent
        self.limiter = limiter or RateLimiter(DEFAULT_QPS, DEFAULT_BURST)
        self._said_limited = False

    def with_limiter(self, limiter: RateLimiter) -> Self:
        """A twin on the same configuration (server, identity; a pool of its own) whose
        requests go through `limiter`: reads on a caller's critical path beside a writer."""
        return type(self)(
            self.endpoint, self._timeout_s, self._on_request, self.user_agent, limiter
        )

    def _throttle(self, what: str) -> None:
        """Before each request: refuse it while the server's Retry-After runs (the caller's
        retry loop waits, stoppably), else wait for a token of the client's own rate."""
        held = self.limiter.held_for()
        if held > 0:
            # no figure in the message: a loop logs a message again only when it changes
            raise ApiUnreachable(
                f"{what}: not sent; the API server asked to wait (Retry-After)", held
            )
        if self.limiter.acquire() > 0 and not self._said_limited:
            self._said_limited = True
            log.warning(
                "%s: API requests reached this client's rate limit (%g/s, burst %d); they are "
                "spaced out from now on (counted in the metrics; said once)",
                what,
                self.limiter.qps,
                self.limiter.burst,
            )

    def _failed(self, err: Exception) -> Exception:
        """An error answer: a Retry-After in it holds every later request of this client."""
        wait = getattr(err, "retry_after", None)
        if wait is not None:
            self.limiter.hold_off(wait)
        return err

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        headers.update(self.endpoint.auth())  # a rotated token is the one sent
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self,
        method: str,
        resource: str,
        path: str,
        what: str,
        body: Any = None,
        content_type: str | None = None,
        verb: str | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer (None when empty). `what` names the
        operation in error messages (`patch node n1`); `verb` the request in metrics when
        it is not the method (LIST for a GET of a collection)."""
        import urllib3

        self._throttle(what)
        self._on_request(verb or method, resource)
        if body is not None and not isinstance(body, str | bytes):
            body = json.dumps(body)
        try:
            resp = self._pool.request(
                method,
                self._host + path,
                headers=self._headers(content_type or ("application/json" if body else None)),
                body=body,
                timeout=urllib3.Timeout(connect=self._timeout[0], read=self._timeout[1]),
                retries=False,
            )
            data = resp.data
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiUnreachable(f"{what}: API server unreachable ({type(e).__name__}: {e})") from e
        if not 200 <= resp.status < 300:
            headers = getattr(resp, "headers", None)
            raise self._failed(classify(HttpStatus(resp.status, data, headers), what))
        try:
            return json.loads(data) if data else None
        except ValueError as e:
            raise ApiUnreachable(f"{what}: unreadable answer from the API server ({e})") from e

    def watch(
        self,
        resource: str,
        path: str,
        what: str,
        seconds: int = WATCH_SECONDS,
        idle_timeout: float | None = None,
    ) -> Watch:
        """Open a watch on `path` (a collection URL with its query, without `watch` and
        `timeoutSeconds`); iterate the returned Watch for its events. Errors opening it are
        raised here, as their kind.

        The watch ends when nothing arrives for `idle_timeout` seconds (a dead link); by
        default that is the watch's whole length. A watch with bookmarks hears from the server
        about once a minute, so it can detect a dead link much sooner than it ends."""
        import urllib3

        sep = "&" if "?" in path else "?"
        url = f"{self._host}{path}{sep}watch=1&timeoutSeconds={int(seconds)}"
        self._throttle(what)
        self._on_request("WATCH", resource)
        read_timeout = idle_timeout if idle_timeout is not None else seconds + 15.0
        try:
            resp = self._pool.request(
                "GET",
                url,
                headers=self._headers(),
                preload_content=False,
                retries=False,
                timeout=urllib3.Timeout(connect=self._timeout[0], read=read_timeout),
            )
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiUnreachable(f"{what}: API server unreachable ({type(e).__name__}: {e})") from e
        if resp.status != 200:
            try:
                raise self._failed(
                    classify(HttpStatus(resp.status, resp.read(), resp.headers), what)
                )
            finally:
                resp.release_conn()
        return Watch(resp, what)


class Watch:
    """The events (`{"type": ..., "object": ...}`) of one open watch, until the server ends it.

    The socket read timeout (the server's own `timeoutSeconds` and a margin, or the caller's
    idle timeout) makes a dead link end the watch with ApiUnreachable instead of blocking for
    ever. An ERROR event is raised: 410 Gone (the resourceVersion is too old) as ApiGone, an
    ApiConflict (list again, watch again), anything else as its kind. `close()`, from any
    thread, ends a blocked iteration.
    """

    def __init__(self, resp: Any, what: str) -> None:
        self._resp = resp
        self.what = what
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import urllib3

        resp, what = self._resp, self.what
        try:
            buf = b""
            for chunk in resp.stream(1 << 16):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield _event(line, what)
                if len(buf) > MAX_WATCH_LINE:
                    raise ApiUnreachable(f"{what}: a watch event over {MAX_WATCH_LINE} bytes")
            if buf.strip() and not self.closed:
                yield _event(buf, what)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            if not self.closed:
                raise ApiUnreachable(f"{what}: watch ended ({type(e).__name__}: {e})") from e
        finally:
            self.close()

    def close(self) -> None:
        """End the watch; a thread blocked reading it returns (urllib3 >= 2.3 can interrupt
        a read in progress; older ones return at the read timeout)."""
        if self.closed:
            return
        self.closed = True
        shutdown = getattr(self._resp, "shutdown", None)
        try:
            if shutdown is not None:
                shutdown()
            self._resp.release_conn()
            self._resp.close()
        except Exception as e:  # closing a dead connection may fail in many ways
            log.debug("%s: closing the watch: %s", self.what, e)


def _event(line: bytes, what: str) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as e:
        raise ApiUnreachable(f"{what}: unreadable watch event ({e})") from e
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ApiUnreachable(f"{what}: unreadable watch event")
    if event.get("type") == "ERROR":
        status = event["object"]
        code = int(status.get("code") or 0)
        if code == 410:
            raise ApiGone(f"{what}: {status.get('message', 'resource version too old')}")
        raise classify(HttpStatus(code, json.dumps(status)), what)
    return event


def _kubeconfig_dict(path: str, label: str) -> dict[str, Any]:
    """The kubeconfig file as a mapping, or BadInput with one line saying why not. Checked here
    because the client's loader fails on a non-mapping with a TypeError deep inside."""
    from edgefd.core.schema import parse_yaml, read_text

    try:
        doc = parse_yaml(read_text(path, label, pipe=True), f"{label} {path}")
    except BadInput as e:  # YAML's own messages span lines
        raise BadInput(" ".join(str(e).split())) from None
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else f"a YAML {type(doc).__name__}"
        raise BadInput(f"{label} {path}: {kind}, not a kubeconfig (a YAML mapping)")
    return doc


def find_kubeconfig(explicit: str | None) -> tuple[list[str], str] | None:
    """Which kubeconfig files to load, and how to name them in messages; None: in-cluster.

    kubectl's order: `--kubeconfig`, else `$KUBECONFIG` (a list of files, merged; those that
    do not exist are skipped), else `~/.kube/config` when it exists, else the pod's service
    account. So the same command works from a workstation and inside a pod."""
    if explicit:
        return [explicit], "--kubeconfig"
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        existing = [p for p in listed if os.path.exists(p)]
        if not existing:
            raise BadInput(f"KUBECONFIG {os.pathsep.join(listed)}: no such file")
        return existing, "KUBECONFIG"
    home = os.path.expanduser("~/.kube/config")
    if os.path.isfile(home):
        return [home], "~/.kube/config"
    return None


def _from_kubeconfig(paths: list[str], label: str, context: str | None) -> Endpoint:
    """The Endpoint a kubeconfig names, read by the `kubernetes` package's loader (the only
    place it is imported: a person's or a test's process, never a pod's)."""
    try:
        import kubernetes.client as k8s
        import kubernetes.config as k8s_config
    except ImportError as e:  # pragma: no cover - install problem
        raise EdgefdError(f"the kubernetes Python client is not installed ({e})") from e
    cfg = k8s.Configuration()
    _load_files(paths, label, context, cfg, k8s_config)
    return from_configuration(cfg)


def _load_files(
    paths: list[str], label: str, context: str | None, cfg: Any, k8s_config: Any
) -> None:
    docs = [_kubeconfig_dict(p, label) for p in paths]
    where = f"{label} {os.pathsep.join(paths)}"
    if context is not None:
        names = sorted(
            {
                str(c.get("name"))
                for d in docs
                for c in d.get("contexts") or []
                if isinstance(c, dict)
            }
        )
        if context not in names:
            known = ", ".join(names) or "none"
            raise BadInput(f"--context {context}: no such context in {where} (it has: {known})")
    try:
        if len(paths) == 1:
            # relative certificate paths are relative to the kubeconfig's directory
            k8s_config.load_kube_config_from_dict(
                docs[0],
                context=context,
                client_configuration=cfg,
                persist_config=False,
                temp_file_path=os.path.dirname(os.path.abspath(paths[0])),
            )
        else:  # the client merges them as kubectl does (the first file to set a name wins)
            k8s_config.load_kube_config(
                config_file=os.pathsep.join(paths),
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
    except (k8s_config.ConfigException, TypeError, KeyError, ValueError, AttributeError) as e:
        # the loader reports a wrong shape deep inside with whatever error it hits first
        msg = " ".join(str(e).split()) or type(e).__name__
        raise BadInput(f"{where}: not a usable kubeconfig ({msg})") from e
    except OSError as e:  # a certificate or key file it names
        raise BadInput(f"{where}: {e.strerror or e}") from e


def connect(
    kubeconfig: str | None,
    timeout: float,
    on_request: OnRequest | None = None,
    *,
    context: str | None = None,
    user_agent: str = "edgefd",
    client_class: type[C] = Client,  # type: ignore[assignment]
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    on_wait: OnWait | None = None,
) -> C:
    """Load the client configuration (find_kubeconfig: `kubeconfig`, $KUBECONFIG,
    ~/.kube/config, else the pod's in-cluster one) and build a `client_class` whose
    requests are limited to `qps` a second (bursts of `burst`; `on_wait(by, seconds)` hears
    of each wait, see edgefd.kube.ratelimit). Makes no request.

    Only configuration errors fail here (a bad kubeconfig or --context: BadInput, exit 3; none
    at all: exit 1); an unreachable API server is discovered later, by the caller's loop,
    which retries.
    """
    found = find_kubeconfig(kubeconfig)
    if found is not None:
        paths, label = found
        endpoint = _from_kubeconfig(paths, label, context)
        source = f"{label} {os.pathsep.join(paths)}" + (f", context {context}" if context else "")
    else:
        if context is not None:
            raise BadInput(f"--context {context}: no kubeconfig to take it from (in a pod)")
        from . import incluster

        try:
            endpoint = incluster.load()
        except incluster.InClusterError as e:
            raise EdgefdError(
                f"cannot load the in-cluster client configuration: {e} (not running in a pod? "
                "pass --kubeconfig or set KUBECONFIG)"
            ) from e
        source = "in-cluster service account"
    log.info("API server %s (%s)", endpoint.host, source)
    limiter = RateLimiter(qps, burst, on_wait=on_wait)
    return client_class(endpoint, timeout, on_request, user_agent=user_agent, limiter=limiter)
