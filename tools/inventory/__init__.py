"""The device inventory: one device source per process (the hot-plug watcher, the scans, the
catalogue match and the selectors, presence with the hold and the memory, the facts) that the
scanners, the device plugin, DRA and every later consumer subscribe to as equals.

Modules: `inventory` (the Inventory: watch, scan, publish), `snapshot` (Snapshot, Diff,
Change), `device` (Device, Facts and their shaping), `select` (Selector: what a resource
selects; which records are devices), `naming` (the one device name), `presence` (the hold and
the memory), `state` (the state file), `metrics`. Below the scan engine and the tools, above
bus and runtime; no click, no gRPC, no Kubernetes.
"""
