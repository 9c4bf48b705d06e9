"""devplugin: a kubelet device plugin (API v1beta1) advertising edge accelerators.

Modules: `config` (resources YAML, default from the catalogue), `discovery` (the host read
through edgefd.bus), `devices` (scan results to devices with stable IDs and health), `links`
(stable device links, remembered devices), `allocate` (what a container gets), `server` (the
gRPC DevicePlugin service), `registration` (Register), `resource` (one resource's lifecycle
with the kubelet), `plugin` (all resources, scanning, reload), `metrics`, `cli`. See README.md
beside this file for the design.
"""
