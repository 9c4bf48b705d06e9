"""dt-labeller: Kubernetes node labels from the devicetree (ARM and RISC-V boards).

A drop-in for adaptant-labs/k8s-dt-node-labeller's label set that refuses invalid labels one by
one instead of breaking the node update, skips disabled devices, and runs unprivileged from the
directory form of the tree when the blob is root-only.
"""
