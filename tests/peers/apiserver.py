"""A real etcd + kube-apiserver (+ a minimal kube-controller-manager) on loopback ports, and
the session fixture that runs them.

Fixtures: ``harness_bin`` (session), ``kube_apiserver`` (session): a :class:`KubeAPIServer`
with ``--authorization-mode=Node,RBAC``, service-account signing keys (TokenRequest works), an
admin kubeconfig (system:masters), and a kube-controller-manager running only the
``validatingadmissionpolicy-status-controller``; ``kube_scheduler`` (session): the same, with
kube-scheduler started; ``node_name`` (function): a fresh, unique Node name (not yet created).

The ``kubernetes`` package is imported lazily, inside functions.
"""

from __future__ import annotations

import itertools
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_ports

from .pki import PKI
from .processes import (
    harness_bin_dir,
    harness_binary,
    kill,
    spawn,
    wait_port_free,
    wait_ready,
)

ETCD = "etcd"
KUBE_APISERVER = "kube-apiserver"
KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
KUBE_SCHEDULER = "kube-scheduler"
# Only what the tests read; no controller that changes objects other tests create (no
# serviceaccount, namespace, garbage-collector, node-lifecycle ...).
KCM_CONTROLLERS = ["validatingadmissionpolicy-status-controller"]

SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class KubeAPIServer:
    """etcd + kube-apiserver (+ a minimal kube-controller-manager) on loopback.

    Use via the ``kube_apiserver`` fixture. The controller manager outlives apiserver
    restarts (``stop_apiserver``/``start_apiserver``): its clients reconnect by themselves."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        extra_args: list[str] | None = None,
        *,
        port: int | None = None,
        controllers: list[str] | None = None,
    ):
        """``port``: a fixed API port (a real node's pods are told it); ``controllers``: the
        kube-controller-manager controllers to run (default: ``KCM_CONTROLLERS``)."""
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.bin_dir = Path(bin_dir) if bin_dir else harness_bin_dir()
        self.extra_args = list(extra_args or [])
        self.controllers = list(controllers or KCM_CONTROLLERS)
        self.pki = PKI(self.dir / "pki")
        self.ca_file = str(self.pki.ca_crt)
        ports = free_ports(5)
        self.etcd_port, self.etcd_peer_port, self.kcm_port, self.scheduler_port = ports[:4]
        self.port = port or ports[4]
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
        self._scheduler: subprocess.Popen | None = None
        self.scheduler_log = self.dir / "kube-scheduler.log"
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
        self._etcd = spawn(argv, self.etcd_log)
        wait_ready(
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
        wait_port_free(self.port)
        self._apiserver = spawn(self.apiserver_args(), self.apiserver_log)
        wait_ready(self.ready, self._apiserver, self.apiserver_log, "kube-apiserver", timeout)

    def stop_apiserver(self) -> None:
        kill(self._apiserver)
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
            f"--controllers={','.join(self.controllers)}",
            # what root-ca-certificate-publisher-controller publishes as kube-root-ca.crt
            f"--root-ca-file={self.pki.ca_crt}",
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
        wait_port_free(self.kcm_port)
        self._kcm = spawn(self.controller_manager_args(), self.kcm_log)
        wait_ready(
            self.controller_manager_healthy,
            self._kcm,
            self.kcm_log,
            "kube-controller-manager",
            timeout,
        )

    def stop_controller_manager(self) -> None:
        kill(self._kcm)
        self._kcm = None

    def controller_manager_healthy(self) -> bool:
        return _healthz(self.kcm_port)

    def scheduler_args(self) -> list[str]:
        return [
            str(self.bin_dir / KUBE_SCHEDULER),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.scheduler_port}",
            f"--cert-dir={self.dir / 'scheduler-certs'}",
            "--authentication-skip-lookup=true",
            "--profiling=false",
            "--v=1",
        ]

    def start_scheduler(self, timeout: float = 60.0) -> None:
        """kube-scheduler, for tests with a real node (nothing schedules pods otherwise)."""
        if self._scheduler is not None and self._scheduler.poll() is None:
            return
        wait_port_free(self.scheduler_port)
        self._scheduler = spawn(self.scheduler_args(), self.scheduler_log)
        wait_ready(
            lambda: _healthz(self.scheduler_port),
            self._scheduler,
            self.scheduler_log,
            "kube-scheduler",
            timeout,
        )

    def stop_scheduler(self) -> None:
        kill(self._scheduler)
        self._scheduler = None

    def stop(self) -> None:
        self.stop_scheduler()
        self.stop_controller_manager()
        self.stop_apiserver()
        kill(self._etcd)
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

    def metrics_text(self) -> str:
        """The API server's own /metrics (Prometheus text)."""
        with urllib.request.urlopen(
            f"{self.url}/metrics", timeout=10, context=self._ssl_context()
        ) as r:
            return r.read().decode()

    def metric_sum(self, name: str, **labels: str) -> float:
        """The sum of every sample of `name` whose labels include `labels`."""
        want = [f'{k}="{v}"' for k, v in labels.items()]
        total = 0.0
        for line in self.metrics_text().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                head, value = line.rsplit(" ", 1)
                if all(w in head for w in want):
                    total += float(value)
        return total

    @property
    def apiserver_pid(self) -> int | None:
        return self._apiserver.pid if self._apiserver is not None else None

    @property
    def etcd_pid(self) -> int | None:
        return self._etcd.pid if self._etcd is not None else None

    # ---- etcd, below the API server (its JSON gateway on the client URL)

    def _etcd_call(self, method: str, body: dict) -> dict:
        import json

        req = urllib.request.Request(
            f"{self.etcd_url}/v3/{method}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def etcd_put(self, key: str, value: str) -> int:
        """Write a key outside the API server's prefix; etcd's new revision."""
        import base64

        def b64(text: str) -> str:
            return base64.b64encode(text.encode()).decode()

        out = self._etcd_call(
            "kv/put", {"key": b64(f"/edgefd-test-bump/{key}"), "value": b64(value)}
        )
        return int(out["header"]["revision"])

    def etcd_compact(self) -> int:
        """Compact etcd up to its current revision (what the API server does every 5 minutes):
        every older resourceVersion is gone. The revision compacted to."""
        rev = self.etcd_put("compact", str(time.time()))
        self._etcd_call("kv/compaction", {"revision": str(rev), "physical": True})
        return rev

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

    def kubeconfig_for_cert(self, user: str, crt: Path, key: Path) -> str:
        """A kubeconfig for a client certificate of ``self.pki`` (e.g. a kubelet's)."""
        return self._write_kubeconfig(
            self.dir / f"{user}.kubeconfig",
            {"client-certificate": str(crt), "client-key": str(key)},
            user,
        )

    def admin_api(self):
        """A new ``kubernetes.client.ApiClient`` with cluster-admin rights."""
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)

    def dynamic(self, api_client):
        """A ``kubernetes.dynamic.DynamicClient`` whose discovery cache is this server's (by
        default the library writes it to the machine's temp directory, where it outlives us)."""
        from kubernetes.dynamic import DynamicClient

        return DynamicClient(api_client, cache_file=str(self.dir / "discovery-cache.json"))

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


def _healthz(port: int) -> bool:
    """A control-plane component's /healthz on loopback (always allowed without credentials)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed
    url = f"https://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _create_ok(fn: Callable[[], Any]) -> None:
    from kubernetes.client.rest import ApiException

    try:
        fn()
    except ApiException as e:
        if e.status != 409:
            raise


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def harness_bin() -> Path:
    """The harness bin dir (skips / fails under CI when not built)."""
    harness_binary(KUBE_APISERVER)
    harness_binary(KUBE_CONTROLLER_MANAGER)
    harness_binary(ETCD)
    return harness_bin_dir()


def running(srv: KubeAPIServer) -> Iterator[KubeAPIServer]:
    """A started server for a fixture to yield, stopped afterwards, also when it failed to
    start (whatever it had started is stopped)."""
    try:
        srv.start()
    except BaseException:
        srv.stop()
        raise
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def kube_apiserver(harness_bin, tmp_path_factory) -> Iterator[KubeAPIServer]:
    yield from running(KubeAPIServer(tmp_path_factory.mktemp("kube"), bin_dir=harness_bin))


@pytest.fixture(scope="session")
def kube_scheduler(kube_apiserver) -> KubeAPIServer:
    """``kube_apiserver`` with the real kube-scheduler running against it, from first use to the
    end of the session: pods created without a nodeName get bound to a fitting Node from then on.
    Every Node the API server creates carries the not-ready taint until someone lifts it."""
    harness_binary(KUBE_SCHEDULER)
    kube_apiserver.start_scheduler()
    yield kube_apiserver
    kube_apiserver.stop_scheduler()


@pytest.fixture
def node_name(request) -> str:
    """A fresh, unique Node name (lowercase DNS label); the Node is not created."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:30].strip("-")
    return f"{base or 'node'}-{uuid.uuid4().hex[:8]}"
