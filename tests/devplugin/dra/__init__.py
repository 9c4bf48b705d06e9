"""The DRA front-end of devplugin (tools/devplugin/dra/): one test module per product module,
the real-peer suites (*realpeer.py) and their helpers."""
