"""edgefd.kube: the shared API client layer."""
