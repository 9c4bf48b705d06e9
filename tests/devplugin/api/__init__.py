"""devplugin's generated gRPC stubs and their generator."""
