"""The device inventory: one device source per process (the hot-plug watcher, the scans, the
catalogue match and the selectors, presence with the hold and the memory, the facts) that the
scanners, the device plugin, DRA and every later consumer subscribe to as equals.

Modules: `inventory` (the Inventory: watch, scan, publish, scans at a time asked for),
`snapshot` (Snapshot, Diff, Change: added, removed, changed, moved), `device` (Device, Facts
and their shaping), `select` (Selector: what a resource selects; which records are devices),
`resources` (the resources configuration devplugin serves and device-keeper follows),
`naming` (the one identity vocabulary: the domain, the device name, replica IDs, the
container path), `presence` (the hold, the memory, since when a device is missing), `state`
(the state file), `metrics`. Below the scan engine and the tools, above
bus and runtime; no click, no gRPC, no Kubernetes.
"""
