"""A pod's own way to the API server: the service-account files and the injected Service address.

Read here rather than through the `kubernetes` package, whose loader imports its whole client
(~30 MiB of generated models in every long-running container). The facts are the kubelet's:
KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT in the environment, the token, CA and
namespace under /var/run/secrets/kubernetes.io/serviceaccount. A projected token is renewed on
disk before it expires, so it is read again once a minute (as client-go and the Python client
do), never cached for the process's life.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from edgefd.core.errors import EdgefdError

from .endpoint import Endpoint

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_REFRESH_S = 60.0
MAX_TOKEN_BYTES = 64 << 10  # a JWT is a few KiB; anything bigger is not a token


class InClusterError(EdgefdError):
    """No in-cluster configuration here (not in a pod, or its token or CA is missing)."""


def join_host_port(host: str, port: str) -> str:
    """host:port, an IPv6 address in brackets (a dual-stack cluster's Service address)."""
    return f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"


class TokenFile:
    """The bearer token in a file, read again when older than `refresh` seconds; a read that
    fails after the first keeps the last good token (the kubelet swaps the file by rename, so
    a failed read is a moment, and the old token is valid for a while yet)."""

    def __init__(
        self,
        path: str,
        refresh: float = TOKEN_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._token = self._read()
        self._read_at = clock()

    def _read(self) -> str:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_TOKEN_BYTES + 1)
        except OSError as e:
            raise InClusterError(f"service-account token {self.path}: {e.strerror or e}") from e
        token = data.decode("ascii", errors="replace").strip()
        if not token or len(data) > MAX_TOKEN_BYTES or any(c.isspace() for c in token):
            raise InClusterError(f"service-account token {self.path}: empty or not a token")
        return token

    def headers(self) -> dict[str, str]:
        with self._lock:
            if self._clock() - self._read_at >= self.refresh:
                try:
                    self._token = self._read()
                except InClusterError as e:  # keep the last good one; the next minute retries
                    log.warning("%s (the token read before is used meanwhile)", e)
                self._read_at = self._clock()
            return {"Authorization": f"Bearer {self._token}"}


def load(environ: Mapping[str, str] | None = None, account_dir: str | None = None) -> Endpoint:
    """The Endpoint of the pod this process runs in, or InClusterError saying what is missing.
    `account_dir`: SERVICE_ACCOUNT_DIR unless given (tests give a directory of theirs)."""
    env = os.environ if environ is None else environ
    account_dir = account_dir or SERVICE_ACCOUNT_DIR
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise InClusterError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
    ca = Path(account_dir, "ca.crt")
    try:
        if ca.stat().st_size == 0:
            raise InClusterError(f"service-account CA {ca}: empty")
    except OSError as e:
        raise InClusterError(f"service-account CA {ca}: {e.strerror or e}") from e
    token = TokenFile(str(Path(account_dir, "token")))
    url = f"https://{join_host_port(host, port)}"
    return Endpoint(host=url, ca_file=str(ca), auth=token.headers)
