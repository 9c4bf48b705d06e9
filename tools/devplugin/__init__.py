"""devplugin: edge accelerators for the kubelet, through the device plugin API (v1beta1) and
Dynamic Resource Allocation, as two peer front-ends of one device inventory.

Modules: `config` (resources YAML, default from the catalogue), `app` (the process: the
inventory, the links, the CDI specs, the front-ends, probes, reloads), `links` (the stable
device links), `container` (what a container gets for a device), `cdi` (CDI specs, for both
front-ends), `cli`; `v1beta1/` (the device plugin front-end), `dra/` (the DRA front-end);
`api/` (the v1beta1 stubs). Devices, their names, health and memory come from
edgefd.inventory. See README.md beside this file for the design.
"""
