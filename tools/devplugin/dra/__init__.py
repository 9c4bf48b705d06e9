"""dra: the device plugin's devices through Dynamic Resource Allocation (resource.k8s.io/v1),
`devplugin --api dra|both`.

Modules: `slices` (pure: devices -> ResourceSlice devices, attributes, taints, the pool),
`facts` (what the slice says beyond the device plugin's view: serial, driver, versions),
`table` (one scan's devices under their DRA names), `publisher` (keeps the node's slices
current, writes only changes), `cdi` (CDI specs, also for the device plugin's
--cdi-spec-dir), `checkpoint` (prepared claims on disk), `claims` (Prepare/Unprepare),
`kubeletplugin` (registration and the DRAPlugin gRPC service), `kubeapi` (the
resource.k8s.io calls, on edgefd.kube), `metrics`, `driver` (wires them to the device
plugin's scanning), `dryrun`. `api/` holds the stubs generated from the kubelet's .proto
files. The design is in ../README.md, "DRA".
"""
