"""The tests of edgefd.devplugin (tools/devplugin/): the tests of `tools/devplugin/<path>/<mod>.py`
are in `tests/devplugin/<path>/test_<mod>.py`; suites against a real peer (the kubelet's device
manager, the real API server and scheduler) are the `*realpeer.py` ones. Shared fixtures are
in conftest.py files, shared helpers in modules named for what they hold (devices.py,
kubelet.py, command.py; dra/peer.py, dra/fakeapi.py, dra/hardware.py, dra/obstacles.py)."""
