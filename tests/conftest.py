"""Test-suite wiring: the real-peer harness fixtures (kube-apiserver, kubelet device manager)."""

pytest_plugins = ["tests.realpeers"]
