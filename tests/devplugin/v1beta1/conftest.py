"""Fixtures of the v1beta1 front-end's suites: a stand-in kubelet on the plugin directory
(`kubelet`: tests/devplugin/kubelet.py's FakeKubelet, which dials the plugin back inside
Register), and the devplugin App serving the sample host to it (`plugin`), with its probes
server (/metrics, /readyz) as the runner serves them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefd.core.hostroot import HostRoot
from edgefd.core.service import WatchSettings
from edgefd.devplugin.app import Options
from edgefd.devplugin.resources import default_config
from edgefd.runtime.runner import serve_probes
from tests.devplugin.kubelet import FakeKubelet
from tests.devplugin.running import Running

SLOW_RESCAN = WatchSettings(rescan_interval=30)


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(plugin_dir)
    yield k
    k.stop()


@pytest.fixture
def plugin(host: Path, plugin_dir: Path, kubelet: FakeKubelet) -> Iterator[Running]:
    opts = Options(
        plugin_dir=str(plugin_dir),
        host=HostRoot.of(host),
        links_dir=str(plugin_dir / "links"),
        listen=("127.0.0.1", 0),
        settings=SLOW_RESCAN,
    )
    p = Running(opts, default_config()).start()
    server = serve_probes(opts.listen, p.metrics, p.components)  # as the runner serves them
    p.port = server.port  # type: ignore[attr-defined]
    yield p
    server.stop()
    p.stop()
