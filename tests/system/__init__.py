"""The whole system on a real node: a real kubelet and containerd run edgefd's DaemonSet on a
sample host tree, and ``scripts/e2e`` checks what users would see (issue 13).

Modules: ``mountns`` (the node's private mount namespace), ``cgroups`` (the node's own cgroup
subtree), ``runtime`` (containerd + runc, crictl), ``images`` (the sandbox image, the edgefd
image), ``hosttree`` (device nodes and re-plugs from a fixture host tree), ``node`` (the kubelet,
and the node brought up as one piece), ``kube`` (control plane, kubectl, Node sampling),
``checks_*`` (the issue's checks), ``e2e`` (the run and its JSON line).
"""
