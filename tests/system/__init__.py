"""The whole system on a real node: a real kubelet and containerd run edgefd's DaemonSet on a
sample host tree, and ``scripts/e2e`` checks what users would see (issue 13).

Modules: ``mountns`` (the node's private mount namespace), ``cgroups`` (the node's own cgroup
subtree), ``runtime`` (containerd + runc, crictl), ``images`` (the sandbox image, the edgefd
image), ``hosttree`` (host trees: copies, device nodes, re-plugs), ``expect`` (what a host tree
should give, from the tools' dry runs), ``node`` (the kubelet, and the node brought up as one
piece), ``kube`` (control plane, kubectl, Node sampling), ``session`` (the node the scenarios
share, and its reset between them), ``scenario`` (one way of installing on one tree, and its
checks), ``checks_*`` (the checks), ``e2e`` (the run and its JSON lines).
"""
