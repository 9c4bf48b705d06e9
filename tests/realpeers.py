"""Real-peer test fixtures: a real etcd + kube-apiserver, and the kubelet's own
device-manager code (``kubelet-devices``), all built from the official Go
modules by ``scripts/build-harness`` into ``.cache/harness/bin``.

Use from conftest.py with ``pytest_plugins = ["tests.realpeers"]``.

Fixtures:

* ``kube_apiserver`` (session): a :class:`KubeAPIServer` on loopback ports
  picked at run time, ``--authorization-mode=Node,RBAC``, service-account
  signing keys (TokenRequest works), an admin kubeconfig (system:masters), and
  a kube-controller-manager running only the
  ``validatingadmissionpolicy-status-controller`` (writes a
  ValidatingAdmissionPolicy's ``status.typeChecking``).
* ``node_name`` (function): a fresh, unique Node name (not yet created).
* ``kubelet_devices`` (function): a :class:`KubeletDevices` running on a fresh
  plugin dir.
* ``nfd_worker`` (session): a :class:`NFDWorker` that runs the upstream
  nfd-worker once against a fixture host root and returns its labels.

When the binaries are missing the fixtures skip, except when ``CI`` is set,
where they fail: integration tests must never silently skip in CI.

The ``kubernetes`` package is imported lazily, inside functions.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as _dt
import ipaddress
import itertools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN_DIR = REPO_ROOT / ".cache" / "harness" / "bin"

ETCD = "etcd"
KUBE_APISERVER = "kube-apiserver"
KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
# Only what the tests read; no controller that changes objects other tests create (no
# serviceaccount, namespace, garbage-collector, node-lifecycle ...).
KCM_CONTROLLERS = ["validatingadmissionpolicy-status-controller"]
KUBELET_DEVICES = "kubelet-devices"
NFD_WORKER = "nfd-worker"


# --------------------------------------------------------------------------- binaries


def harness_bin_dir() -> Path:
    return Path(os.environ.get("EDGEFD_HARNESS_BIN") or DEFAULT_BIN_DIR)


def harness_binary(name: str) -> Path:
    """Path of a harness binary; skip (or fail under CI) when it is missing."""
    path = harness_bin_dir() / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    msg = f"harness not built: {path} missing; run scripts/build-harness"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- processes

_live_procs: list[subprocess.Popen] = []
_live_lock = threading.Lock()


def _load_prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # resolved here: the child after fork() should not dlopen


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """SIGKILL the child if pytest dies without running its finalizers (PR_SET_PDEATHSIG).

    SIGKILL, not SIGTERM: kube-apiserver may hang in graceful shutdown once etcd is gone."""
    if _prctl is not None:
        _prctl(1, int(signal.SIGKILL))


def _spawn(argv: list[str], log_path: Path, **kw: Any) -> subprocess.Popen:
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the process lifetime
    try:
        proc = subprocess.Popen(
            argv,
            stdout=kw.pop("stdout", log),
            stderr=log,
            stdin=kw.pop("stdin", subprocess.DEVNULL),
            start_new_session=True,  # own process group: killpg takes children too
            preexec_fn=_die_with_parent,
            **kw,
        )
    finally:
        log.close()
    with _live_lock:
        _live_procs.append(proc)
    return proc


def _kill(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # The leader exited; make sure nothing it started lingers.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with _live_lock:
        if proc in _live_procs:
            _live_procs.remove(proc)


@atexit.register
def _kill_all() -> None:
    with _live_lock:
        procs = list(_live_procs)
    for p in procs:
        _kill(p, grace=3.0)


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports that were free a moment ago (bind to port 0)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _wait_port_free(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.1)
    raise RuntimeError(f"port {port} still busy after {timeout}s")


# --------------------------------------------------------------------------- certificates


def _write_pem(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


class _PKI:
    """A throwaway CA, serving cert, admin client cert and SA signing key."""

    def __init__(self, d: Path):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)
        later = now + _dt.timedelta(days=2)

        def key():
            return ec.generate_private_key(ec.SECP256R1())

        def pem_key(k) -> bytes:
            return k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )

        def name(cn: str, org: str | None = None):
            attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
            if org:
                attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
            return x509.Name(attrs)

        ca_key = key()
        ca_name = name("edgefd-test-ca")
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )

        def leaf(cn: str, org: str | None, server: bool):
            k = key()
            b = (
                x509.CertificateBuilder()
                .subject_name(name(cn, org))
                .issuer_name(ca_name)
                .public_key(k.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(later)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [
                            ExtendedKeyUsageOID.SERVER_AUTH
                            if server
                            else ExtendedKeyUsageOID.CLIENT_AUTH
                        ]
                    ),
                    critical=False,
                )
            )
            if server:
                b = b.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.DNSName("localhost"),
                            x509.DNSName("kubernetes"),
                            x509.DNSName("kubernetes.default.svc"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                        ]
                    ),
                    critical=False,
                )
            return k, b.sign(ca_key, hashes.SHA256())

        pem = serialization.Encoding.PEM
        self.ca_crt = d / "ca.crt"
        _write_pem(self.ca_crt, ca.public_bytes(pem), 0o644)
        self.ca_key = d / "ca.key"
        _write_pem(self.ca_key, pem_key(ca_key))

        k, c = leaf("kube-apiserver", None, server=True)
        self.server_crt, self.server_key = d / "apiserver.crt", d / "apiserver.key"
        _write_pem(self.server_crt, c.public_bytes(pem), 0o644)
        _write_pem(self.server_key, pem_key(k))

        k, c = leaf("edgefd-admin", "system:masters", server=False)
        self.admin_crt, self.admin_key = d / "admin.crt", d / "admin.key"
        _write_pem(self.admin_crt, c.public_bytes(pem), 0o644)
        _write_pem(self.admin_key, pem_key(k))

        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key, self.sa_pub = d / "sa.key", d / "sa.pub"
        _write_pem(self.sa_key, pem_key(sa))
        _write_pem(
            self.sa_pub,
            sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
            0o644,
        )


def decode_jwt(token: str) -> dict:
    """The (unverified) claims of a JWT."""
    payload = token.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return json.loads(base64.urlsafe_b64decode(payload))


# --------------------------------------------------------------------------- apiserver

SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class KubeAPIServer:
    """etcd + kube-apiserver (+ a minimal kube-controller-manager) on loopback.

    Use via the ``kube_apiserver`` fixture. The controller manager outlives apiserver
    restarts (``stop_apiserver``/``start_apiserver``): its clients reconnect by themselves."""

    def __init__(
        self, workdir: Path, bin_dir: Path | None = None, extra_args: list[str] | None = None
    ):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.bin_dir = Path(bin_dir) if bin_dir else harness_bin_dir()
        self.extra_args = list(extra_args or [])
        self.pki = _PKI(self.dir / "pki")
        self.ca_file = str(self.pki.ca_crt)
        self.etcd_port, self.etcd_peer_port, self.port, self.kcm_port = free_ports(4)
        self.host = "127.0.0.1"
        self.url = f"https://{self.host}:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd_log = self.dir / "etcd.log"
        self.apiserver_log = self.dir / "kube-apiserver.log"
        self.kcm_log = self.dir / "kube-controller-manager.log"
        self.kubeconfig = str(self.dir / "admin.kubeconfig")
        self._etcd: subprocess.Popen | None = None
        self._apiserver: subprocess.Popen | None = None
        self._kcm: subprocess.Popen | None = None
        self._counter = itertools.count()
        self._write_kubeconfig(
            Path(self.kubeconfig),
            {"client-certificate": str(self.pki.admin_crt), "client-key": str(self.pki.admin_key)},
            "admin",
        )

    # ---- lifecycle

    def start(self, timeout: float = 90.0, controller_manager: bool = True) -> KubeAPIServer:
        self.start_etcd(timeout)
        self.start_apiserver(timeout)
        if controller_manager:
            self.start_controller_manager(timeout)
        return self

    def start_etcd(self, timeout: float = 30.0) -> None:
        data = self.dir / "etcd-data"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        argv = [
            str(self.bin_dir / ETCD),
            "--name=default",
            f"--data-dir={data}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # test data only
            "--log-level=warn",
        ]
        self._etcd = _spawn(argv, self.etcd_log)
        self._wait(
            lambda: self._http_ok(f"{self.etcd_url}/health", tls=False),
            self._etcd,
            self.etcd_log,
            "etcd",
            timeout,
        )

    def apiserver_args(self) -> list[str]:
        p = self.pki
        return [
            str(self.bin_dir / KUBE_APISERVER),
            f"--etcd-servers={self.etcd_url}",
            f"--etcd-prefix=/edgefd-{self.port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={p.server_crt}",
            f"--tls-private-key-file={p.server_key}",
            f"--client-ca-file={p.ca_crt}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # loopback advertise address
            # defaults stay on; NodeRestriction is what a real cluster adds.
            "--enable-admission-plugins=NodeRestriction",
            "--profiling=false",
            "--v=1",
            *self.extra_args,
        ]

    def start_apiserver(self, timeout: float = 90.0) -> None:
        if self._apiserver is not None and self._apiserver.poll() is None:
            return
        _wait_port_free(self.port)
        self._apiserver = _spawn(self.apiserver_args(), self.apiserver_log)
        self._wait(self.ready, self._apiserver, self.apiserver_log, "kube-apiserver", timeout)

    def stop_apiserver(self) -> None:
        _kill(self._apiserver)
        self._apiserver = None

    def restart_apiserver(self, downtime: float = 0.0, timeout: float = 90.0) -> None:
        """Stop kube-apiserver, stay down ``downtime`` s, start it on the same port/etcd."""
        self.stop_apiserver()
        if downtime:
            time.sleep(downtime)
        self.start_apiserver(timeout)

    def controller_manager_args(self) -> list[str]:
        return [
            str(self.bin_dir / KUBE_CONTROLLER_MANAGER),
            f"--kubeconfig={self.kubeconfig}",  # system:masters client cert
            f"--controllers={','.join(KCM_CONTROLLERS)}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.kcm_port}",
            f"--cert-dir={self.dir / 'kcm-certs'}",  # self-signed serving cert
            # /healthz is always allowed; no delegated authn/authz round trips.
            "--authentication-skip-lookup=true",
            "--profiling=false",
            "--v=1",
        ]

    def start_controller_manager(self, timeout: float = 60.0) -> None:
        if self._kcm is not None and self._kcm.poll() is None:
            return
        _wait_port_free(self.kcm_port)
        self._kcm = _spawn(self.controller_manager_args(), self.kcm_log)
        self._wait(
            self.controller_manager_healthy,
            self._kcm,
            self.kcm_log,
            "kube-controller-manager",
            timeout,
        )

    def stop_controller_manager(self) -> None:
        _kill(self._kcm)
        self._kcm = None

    def controller_manager_healthy(self) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.kcm_port}/healthz", timeout=2, context=ctx
            ) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def stop(self) -> None:
        self.stop_controller_manager()
        self.stop_apiserver()
        _kill(self._etcd)
        self._etcd = None

    @property
    def running(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    # ---- readiness

    def _ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if client_cert:
            ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
        return ctx

    def _http_ok(self, url: str, tls: bool = True) -> bool:
        try:
            ctx = self._ssl_context() if tls else None
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def ready(self) -> bool:
        return self._http_ok(f"{self.url}/readyz")

    @staticmethod
    def _wait(check: Callable[[], bool], proc, log: Path, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}:\n{_tail(log)}")
            if check():
                return
            time.sleep(0.25)
        _kill(proc)
        raise RuntimeError(f"{what} not ready after {timeout}s:\n{_tail(log)}")

    # ---- clients

    def _write_kubeconfig(self, path: Path, user: dict, user_name: str) -> str:
        import yaml

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "edgefd-test",
                    "cluster": {"server": self.url, "certificate-authority": self.ca_file},
                }
            ],
            "users": [{"name": user_name, "user": user}],
            "contexts": [
                {"name": "edgefd-test", "context": {"cluster": "edgefd-test", "user": user_name}}
            ],
            "current-context": "edgefd-test",
        }
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return str(path)

    def kubeconfig_for_token(self, token: str) -> str:
        n = next(self._counter)
        return self._write_kubeconfig(
            self.dir / f"token-{n}.kubeconfig", {"token": token}, f"token-{n}"
        )

    def admin_api(self):
        """A new ``kubernetes.client.ApiClient`` with cluster-admin rights."""
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)

    def api_for_token(self, token: str):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig_for_token(token))

    # ---- objects

    def ensure_namespace(self, name: str) -> None:
        from kubernetes import client

        with self.admin_api() as api:
            _create_ok(
                lambda: client.CoreV1Api(api).create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
                )
            )

    def ensure_service_account(self, namespace: str, name: str) -> None:
        from kubernetes import client

        self.ensure_namespace(namespace)
        with self.admin_api() as api:
            _create_ok(
                lambda: client.CoreV1Api(api).create_namespaced_service_account(
                    namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
                )
            )

    def create_node(self, name: str, labels: dict | None = None, annotations: dict | None = None):
        """Create a Node (no kubelet behind it); returns the V1Node (existing one if present)."""
        from kubernetes import client

        with self.admin_api() as api:
            core = client.CoreV1Api(api)
            _create_ok(
                lambda: core.create_node(
                    client.V1Node(
                        metadata=client.V1ObjectMeta(
                            name=name, labels=labels, annotations=annotations
                        )
                    )
                )
            )
            return core.read_node(name)

    def get_node(self, name: str):
        from kubernetes import client

        with self.admin_api() as api:
            return client.CoreV1Api(api).read_node(name)

    def create_pod_on_node(
        self, namespace: str, pod_name: str, node_name: str, sa: str = "default"
    ):
        """A Pod bound to ``node_name`` (nothing runs it); returns the V1Pod."""
        from kubernetes import client

        self.ensure_service_account(namespace, sa)
        self.create_node(node_name)
        with self.admin_api() as api:
            core = client.CoreV1Api(api)
            pod = client.V1Pod(
                metadata=client.V1ObjectMeta(name=pod_name, namespace=namespace),
                spec=client.V1PodSpec(
                    node_name=node_name,
                    service_account_name=sa,
                    automount_service_account_token=False,
                    containers=[client.V1Container(name="c", image="registry.k8s.io/pause:3.10")],
                ),
            )
            _create_ok(lambda: core.create_namespaced_pod(namespace, pod))
            return core.read_namespaced_pod(pod_name, namespace)

    def mint_token(
        self,
        namespace: str,
        sa: str,
        audiences: list[str] | None = None,
        expiration_seconds: int = 3600,
        bound_pod=None,
    ) -> str:
        from kubernetes import client

        self.ensure_service_account(namespace, sa)
        spec = client.V1TokenRequestSpec(
            audiences=audiences or [SA_ISSUER], expiration_seconds=expiration_seconds
        )
        if bound_pod is not None:
            spec.bound_object_ref = client.V1BoundObjectReference(
                api_version="v1",
                kind="Pod",
                name=bound_pod.metadata.name,
                uid=bound_pod.metadata.uid,
            )
        with self.admin_api() as api:
            tr = client.CoreV1Api(api).create_namespaced_service_account_token(
                sa, namespace, client.AuthenticationV1TokenRequest(spec=spec)
            )
            return tr.status.token

    def mint_node_bound_token(
        self, namespace: str, sa: str, node_name: str, audiences: list[str] | None = None
    ) -> str:
        """A service-account token bound to a Node object (ServiceAccountTokenNodeBinding)."""
        from kubernetes import client

        self.ensure_service_account(namespace, sa)
        node = self.create_node(node_name)
        spec = client.V1TokenRequestSpec(
            audiences=audiences or [SA_ISSUER],
            expiration_seconds=3600,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Node", name=node_name, uid=node.metadata.uid
            ),
        )
        with self.admin_api() as api:
            tr = client.CoreV1Api(api).create_namespaced_service_account_token(
                sa, namespace, client.AuthenticationV1TokenRequest(spec=spec)
            )
            return tr.status.token

    def mint_pod_token(
        self,
        namespace: str,
        sa: str,
        pod_name: str,
        node_name: str,
        audiences: list[str] | None = None,
        expiration_seconds: int = 3600,
    ) -> str:
        """A service-account token bound to a Pod on ``node_name``.

        Creates the namespace, SA, Node and Pod as needed. The token's
        ``kubernetes.io`` claim carries ``pod`` and ``node`` (name, uid)."""
        pod = self.create_pod_on_node(namespace, pod_name, node_name, sa)
        if pod.spec.node_name != node_name:
            raise RuntimeError(f"pod {namespace}/{pod_name} exists on node {pod.spec.node_name!r}")
        return self.mint_token(namespace, sa, audiences, expiration_seconds, bound_pod=pod)


def _create_ok(fn: Callable[[], Any]) -> None:
    from kubernetes.client.rest import ApiException

    try:
        fn()
    except ApiException as e:
        if e.status != 409:
            raise


# --------------------------------------------------------------------------- kubelet-devices


class KubeletDevicesError(RuntimeError):
    pass


class KubeletDevices:
    """The kubelet's device manager on ``plugin_dir`` (see
    tests/harness/cmd/kubelet-devices). Events are dicts with ``event`` and
    ``ts`` (``time.monotonic()`` clock)."""

    def __init__(
        self,
        plugin_dir: str | Path | None = None,
        bin_path: Path | None = None,
        log_dir: Path | None = None,
    ):
        self._own_dir = plugin_dir is None
        # Short paths: unix socket names are limited to 107 bytes.
        self.plugin_dir = str(plugin_dir or tempfile.mkdtemp(prefix="kd-"))
        self.kubelet_socket = os.path.join(self.plugin_dir, "kubelet.sock")
        self.bin_path = Path(bin_path) if bin_path else harness_binary(KUBELET_DEVICES)
        self._own_log = log_dir is None
        self.log_path = (
            Path(log_dir or tempfile.gettempdir()) / f"kubelet-devices-{uuid.uuid4().hex[:8]}.log"
        )
        self.events: list[dict] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._wlock = threading.Lock()

    def start(self, timeout: float = 15.0) -> KubeletDevices:
        self._proc = _spawn(
            [str(self.bin_path), "-plugin-dir", self.plugin_dir],
            self.log_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._reader = threading.Thread(
            target=self._read, daemon=True, name="kubelet-devices-reader"
        )
        self._reader.start()
        self.wait_for("ready", timeout=timeout)
        return self

    def _read(self) -> None:
        assert self._proc and self._proc.stdout
        for raw in self._proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "garbage", "line": line, "ts": time.monotonic()}
            with self._cond:
                self.events.append(ev)
                self._cond.notify_all()
        with self._cond:
            self.events.append(
                {"event": "exited", "ts": time.monotonic(), "returncode": self._proc.wait()}
            )
            self._cond.notify_all()

    # ---- events

    def mark(self) -> int:
        """An index into ``events``; pass as ``since=`` to only see later events."""
        with self._cond:
            return len(self.events)

    def events_named(self, name: str, since: int = 0, **match: Any) -> list[dict]:
        with self._cond:
            return [
                e
                for e in self.events[since:]
                if e.get("event") == name and all(e.get(k) == v for k, v in match.items())
            ]

    def wait_for(
        self,
        what: str | Callable[[dict], bool],
        timeout: float = 10.0,
        since: int = 0,
        **match: Any,
    ) -> dict:
        """The first event (from index ``since``) named ``what`` whose fields
        equal ``match``, or for which the predicate ``what`` is true."""
        if callable(what):
            pred = what
        else:

            def pred(e: dict) -> bool:
                return e.get("event") == what and all(e.get(k) == v for k, v in match.items())

        deadline = time.monotonic() + timeout
        i = since
        with self._cond:
            while True:
                while i < len(self.events):
                    e = self.events[i]
                    i += 1
                    if pred(e):
                        return e
                    if e.get("event") == "exited":
                        log = _tail(self.log_path)
                        msg = f"kubelet-devices exited waiting for {what!r}:\n{log}"
                        raise KubeletDevicesError(msg)
                left = deadline - time.monotonic()
                if left <= 0:
                    recent = self.events[since:][-20:]
                    msg = f"no {what!r} {match or ''} event in {timeout}s; got {recent}"
                    raise TimeoutError(msg)
                self._cond.wait(left)

    # ---- commands

    def command(self, cmd: str, timeout: float = 30.0, **args: Any) -> dict:
        if not self._proc or self._proc.poll() is not None:
            raise KubeletDevicesError("kubelet-devices is not running")
        cid = next(self._ids)
        since = self.mark()
        line = json.dumps({"cmd": cmd, "id": cid, **args}) + "\n"
        with self._wlock:
            assert self._proc.stdin
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        return self.wait_for("response", timeout=timeout, since=since, id=cid)

    def allocate(
        self,
        resource: str,
        count: int | None = None,
        devices: list[str] | None = None,
        timeout: float = 30.0,
    ) -> dict:
        """Allocate like the kubelet admitting a pod (``count``; the kubelet's
        device manager picks the IDs, asking GetPreferredAllocation when the
        plugin offers it), or send Allocate for explicit ``devices`` on the
        kubelet's connection. Returns the response event: ``ok``, ``error``,
        ``device_ids``, ``envs``, ``mounts``, ``devices``, ``annotations``,
        ``cdi_devices``."""
        args: dict[str, Any] = {"resource": resource}
        if devices is not None:
            args["devices"] = list(devices)
        else:
            args["count"] = 1 if count is None else count
        return self.command("allocate", timeout=timeout, **args)

    def preferred(
        self,
        resource: str,
        size: int,
        available: list[str] | None = None,
        must_include: list[str] | None = None,
        timeout: float = 30.0,
    ) -> dict:
        args: dict[str, Any] = {"resource": resource, "size": size}
        if available is not None:
            args["available"] = available
        if must_include is not None:
            args["must_include"] = must_include
        return self.command("preferred", timeout=timeout, **args)

    def capacity(self) -> dict:
        """``{"capacity": {res: n}, "allocatable": {res: n},
        "devices": {res: {"healthy": [...], "unhealthy": [...]}}}``"""
        return self.command("capacity")

    def release(self, pod_uid: str | None = None) -> dict:
        """Forget pods (all, or one) so their devices can be allocated again."""
        return self.command("release", **({"pod_uid": pod_uid} if pod_uid else {}))

    def restart(self, delay: float = 0.0, timeout: float = 30.0) -> dict:
        """A kubelet restart: the manager stops, a new one deletes every socket
        in the plugin dir and recreates kubelet.sock. Returns the new ``ready``."""
        since = self.mark()
        resp = self.command("restart", timeout=timeout, delay=delay)
        if not resp.get("ok"):
            raise KubeletDevicesError(f"restart failed: {resp}")
        return self.wait_for("ready", since=since, timeout=timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                self.command("stop", timeout=timeout)
                self._proc.wait(timeout=timeout)
            except (
                KubeletDevicesError,
                TimeoutError,
                subprocess.TimeoutExpired,
                BrokenPipeError,
                OSError,
            ):
                pass
        _kill(self._proc, grace=3.0)
        if self._reader:
            self._reader.join(timeout=5)
        self._proc = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.plugin_dir, ignore_errors=True)
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def log(self) -> str:
        """kubelet-devices' stderr (the kubelet code's log) so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# --------------------------------------------------------------------------- nfd-worker


class NFDWorker:
    """Runs the upstream nfd-worker once (``-oneshot -no-publish``) against a
    fixture host root (a directory with ``sys/``, ``etc/``, ... inside) and
    returns the labels it would publish."""

    def __init__(self, bin_path: Path | None = None):
        self.bin_path = Path(bin_path) if bin_path else harness_binary(NFD_WORKER)

    def run(
        self,
        host_root: str | Path,
        sources: str = "usb,pci",
        options: dict | None = None,
        timeout: float = 60.0,
    ) -> dict[str, str]:
        with tempfile.TemporaryDirectory(prefix="nfd-") as tmp:
            out = Path(tmp) / "labels.json"
            argv = [
                str(self.bin_path),
                f"-host-root={host_root}",
                f"-labels-out={out}",
                "-oneshot",
                "-no-publish",
                f"-label-sources={sources}",
                f"-feature-sources={sources}",
                f"-config={Path(tmp) / 'none.conf'}",
                "-metrics=0",
                "-grpc-health=0",
            ]
            if options:
                argv.append(f"-options={json.dumps(options)}")
            r = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "NODE_NAME": "fixture-node"},
            )
            if r.returncode != 0 or not out.exists():
                raise RuntimeError(f"nfd-worker failed ({r.returncode}):\n{r.stderr[-4000:]}")
            return json.loads(out.read_text())


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def harness_bin() -> Path:
    """The harness bin dir (skips / fails under CI when not built)."""
    harness_binary(KUBE_APISERVER)
    harness_binary(KUBE_CONTROLLER_MANAGER)
    harness_binary(ETCD)
    return harness_bin_dir()


@pytest.fixture(scope="session")
def kube_apiserver(harness_bin, tmp_path_factory) -> KubeAPIServer:
    srv = KubeAPIServer(tmp_path_factory.mktemp("kube"), bin_dir=harness_bin)
    try:
        srv.start()
    except BaseException:
        srv.stop()
        raise
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def node_name(request) -> str:
    """A fresh, unique Node name (lowercase DNS label); the Node is not created."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:30].strip("-")
    return f"{base or 'node'}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kubelet_devices() -> KubeletDevices:
    kd = KubeletDevices()
    try:
        kd.start()
        yield kd
    finally:
        kd.close()


@pytest.fixture(scope="session")
def nfd_worker() -> NFDWorker:
    return NFDWorker()


__all__ = [
    "KubeAPIServer",
    "KubeletDevices",
    "KubeletDevicesError",
    "NFDWorker",
    "decode_jwt",
    "free_port",
    "free_ports",
    "harness_bin_dir",
    "harness_binary",
]
