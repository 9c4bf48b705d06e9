"""Where the API server is and how to reach it: one small record, whichever way it was found.

A pod finds it in its service-account files (edgefd.kube.incluster, no `kubernetes` import);
a person at a workstation in a kubeconfig, which the `kubernetes` package reads (exec plugins,
merged files, contexts: code not worth writing twice). Both end as an Endpoint, and requests go
straight through urllib3 with it: the `kubernetes` package's client layer costs ~30 MiB of
generated models per process, which a Raspberry Pi's pod pays for nothing.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

AuthHeaders = Callable[[], dict[str, str]]


def _no_auth() -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Endpoint:
    """The server URL, its TLS trust and client identity, and the auth headers of the moment.

    `auth` is called before every request, so a token rotated on disk (the kubelet renews a
    projected one hourly) or refreshed by an exec plugin is the one sent.
    """

    host: str
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None
    proxy: str | None = None
    auth: AuthHeaders = field(default=_no_auth, compare=False, repr=False)

    def pool(self, maxsize: int = 4) -> Any:
        """A urllib3 pool manager for this endpoint (its own connections: a twin client must
        not share a socket with a watch)."""
        import urllib3

        args: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE,
            "ca_certs": self.ca_file,
            "ca_cert_data": self.ca_data,
            "cert_file": self.cert_file,
            "key_file": self.key_file,
            "maxsize": maxsize,
            "retries": False,
        }
        if self.server_name:
            args["server_hostname"] = self.server_name
        if not self.verify:
            args["assert_hostname"] = False
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if self.proxy:
            if self.proxy.startswith(("socks5://", "socks5h://", "socks4://", "socks4a://")):
                from urllib3.contrib.socks import SOCKSProxyManager

                return SOCKSProxyManager(self.proxy, **args)
            return urllib3.ProxyManager(self.proxy, **args)
        return urllib3.PoolManager(**args)


def from_configuration(cfg: Any) -> Endpoint:
    """The Endpoint of a `kubernetes.client.Configuration` filled from a kubeconfig; its auth
    asks the configuration each time (its refresh hook renews exec-plugin and OIDC tokens)."""

    def auth() -> dict[str, str]:
        headers = {}
        for setting in cfg.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    return Endpoint(
        host=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert or None,
        ca_data=getattr(cfg, "ca_cert_data", None) or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
        verify=bool(cfg.verify_ssl),
        server_name=getattr(cfg, "tls_server_name", None) or None,
        proxy=getattr(cfg, "proxy", None) or None,
        auth=auth,
    )
