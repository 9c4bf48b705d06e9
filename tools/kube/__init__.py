"""kube: the one Kubernetes API client edgefd's tools share (edgefd.kube).

Plain JSON over urllib3, without the `kubernetes` package's typed API classes: `endpoint` (where
the server is and how to reach it), `incluster` (a pod's service-account files: no `kubernetes`
import at all in a pod), `client` (connect from a kubeconfig, which the `kubernetes` package
reads, or in-cluster; requests with timeouts, watches) and `errors` (the few kinds of failure
the tools act on). `kubernetes` itself is imported only by `client` (import contract in
setup.cfg), and only to read a kubeconfig.
"""
