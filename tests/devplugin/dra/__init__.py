"""The DRA mode of devplugin: ResourceSlices, CDI specs, the kubelet plugin."""
