"""dra: the inventory's devices through Dynamic Resource Allocation (resource.k8s.io/v1),
`devplugin --api dra|both`. A peer of the v1beta1 front-end; neither imports the other.

Modules: `frontend` (subscribes to the inventory; wires the rest), `table` (one snapshot's
devices with their resource and attributes), `slices` (pure: devices -> ResourceSlice
devices, attributes, taints, the pool), `eviction` (NoExecute deadlines), `publisher` (keeps
the node's slices current, writes only changes), `heldslices` (what the API server holds, by
the one list-watch), `readback` (comparing a slice read back), `health` (DRAResourceHealth),
`claimstatus` (claims' status.devices), `checkpoint` (prepared claims on disk), `claims`
(Prepare/Unprepare), `kubeletplugin` (registration and the DRAPlugin gRPC service),
`kubeapi` (the resource.k8s.io calls, on edgefd.kube), `metrics`, `dryrun`. `api/` holds the
stubs generated from the kubelet's .proto files. The design is in ../README.md, "DRA".
"""
