"""devplugin: a kubelet device plugin (API v1beta1) advertising edge accelerators.

Modules: `config` (resources YAML, default from the catalogue), `devices` (scan results to
devices with stable IDs and health), `allocate` (what a container gets), `server` (the gRPC
DevicePlugin service), `registration` (Register, kubelet-restart detection), `plugin`
(lifecycle), `cli`. See README.md beside this file for the design.
"""
