"""edgefd.kube.endpoint: a kubeconfig's configuration becomes the same small record a pod's
files do (its auth asked again on every request, so a refreshed token is the one sent), and
the pool a record builds verifies the server unless told not to, through a proxy when named."""

from __future__ import annotations

import ssl

import urllib3

from edgefd.kube.endpoint import Endpoint, from_configuration


def test_a_kubeconfigs_configuration_becomes_an_endpoint() -> None:
    from kubernetes.client import Configuration

    cfg = Configuration()
    cfg.host = "https://10.0.0.1:6443/"
    cfg.ssl_ca_cert = "/etc/ca.crt"
    cfg.cert_file, cfg.key_file = "/etc/c.crt", "/etc/c.key"
    cfg.api_key = {"authorization": "Bearer one"}
    ep = from_configuration(cfg)
    assert (ep.host, ep.ca_file, ep.cert_file, ep.key_file, ep.verify) == (
        "https://10.0.0.1:6443", "/etc/ca.crt", "/etc/c.crt", "/etc/c.key", True
    )  # fmt: skip
    assert ep.auth() == {"authorization": "Bearer one"}
    cfg.api_key = {"authorization": "Bearer two"}  # what an exec plugin's refresh does
    assert ep.auth() == {"authorization": "Bearer two"}


def test_the_pool_verifies_the_server_unless_told_not_to() -> None:
    pool = Endpoint("https://h:1", ca_file="/etc/ca.crt").pool()
    assert isinstance(pool, urllib3.PoolManager)
    assert pool.connection_pool_kw["cert_reqs"] == ssl.CERT_REQUIRED
    assert pool.connection_pool_kw["ca_certs"] == "/etc/ca.crt"
    insecure = Endpoint("https://h:1", verify=False).pool()
    assert insecure.connection_pool_kw["cert_reqs"] == ssl.CERT_NONE


def test_a_named_proxy_is_used() -> None:
    pool = Endpoint("https://h:1", proxy="http://proxy:3128").pool()
    assert isinstance(pool, urllib3.ProxyManager)
    assert pool.proxy.host == "proxy"


def test_no_auth_sends_no_header() -> None:
    assert Endpoint("https://h:1").auth() == {}
