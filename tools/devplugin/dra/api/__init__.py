"""The kubelet's DRA plugin API (dra/v1) and plugin registration API (pluginregistration/v1):
stubs generated from the kubelet's own .proto files by edgefd.devplugin.api.generate."""
