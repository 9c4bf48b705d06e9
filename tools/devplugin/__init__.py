"""devplugin: edge accelerators for the kubelet, through the device plugin API (v1beta1) and
Dynamic Resource Allocation, as two peer front-ends of one device inventory.

Modules: `app` (the process, one component of the runner: the inventory, the links, the CDI
specs, the front-ends), `links` (the stable device links), `container` (what a container gets
for a device beyond its nodes), `cdi` (CDI specs, for both front-ends), `known` (an earlier
release's memory, taken over), `cli`; `v1beta1/` (the device plugin front-end), `dra/` (the
DRA front-end); `api/` (the v1beta1 stubs). Devices, their names, health and memory, and the
resources configuration come from edgefd.inventory. See README.md beside this file.
"""
