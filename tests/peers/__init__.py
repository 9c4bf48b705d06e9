"""Real peers for the tests, one module per peer: processes and binaries, the PKI, the API
server, the kubelet's device manager, nfd-worker. Fixtures are registered in tests/conftest.py."""
