"""The v1beta1 device plugin front-end: extended resources (`edgefd.io/coral-usb`) served to
the kubelet over the device plugin API, from the inventory's snapshots. A peer of the DRA
front-end (`..dra`); neither imports the other.

Modules: `frontend` (subscribes to the inventory; all resources; kubelet restarts),
`resource` (one resource's lifecycle: serve, register, re-register), `server` (the gRPC
DevicePlugin service), `registration` (Register), `advertised` (devices -> kubelet IDs and
health), `allocate` (the Allocate answer), `metrics`, `dryrun`."""
