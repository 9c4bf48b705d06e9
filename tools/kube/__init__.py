"""kube: the one Kubernetes API client edgefd's tools share (edgefd.kube).

A thin layer over the `kubernetes` package's REST and configuration code, without its typed API
classes: `client` (connect from a kubeconfig or in-cluster, requests with timeouts, watches)
and `errors` (the few kinds of failure the tools act on). `kubernetes` itself is imported only
here (import contract in setup.cfg), and only once a client is actually built.
"""
