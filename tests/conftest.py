"""Test-suite wiring: the real-peer fixtures, one plugin module per peer (tests/peers/)."""

pytest_plugins = ["tests.peers.apiserver", "tests.peers.kubelet", "tests.peers.nfd"]
