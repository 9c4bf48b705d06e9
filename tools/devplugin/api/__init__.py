"""The kubelet device plugin API v1beta1: our .proto and its generated Python modules."""
