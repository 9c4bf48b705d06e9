"""kubectl-edgefd: the kubectl plugin an operator asks about edgefd's nodes and Pending pods.

Read-only, from a workstation: `kubectl edgefd nodes` (what each node has, serves, uses and
runs) and `kubectl edgefd why POD` (why a pod that asks for an accelerator is Pending, in one
paragraph). `snapshot` reads the cluster once through the shared client (edgefd.kube); every
other module is a pure function of what it read: `podspec` (what a pod asks and where it may
go), `known` (edgefd's resources and kinds, from the catalogue), `edgefdpods` (edgefd's own
pods on a node), `devices` (DRA devices and their allocations), `cel` (a device selector,
evaluated), `nodes` (the table), and `why` with `selection`, `extended` and `claims` (the
reasons) speaking through `causes`.
"""
