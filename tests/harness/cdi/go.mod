// The CDI library the node's containerd vendors (tests/harness/node: containerd v2.4.2 requires
// tags.cncf.io/container-device-interface v1.1.1), for checking edgefd's CDI specs against the
// library's own parsing, validation and edits (tests/devplugin/test_cdi_realpeer.py). Its own
// module, built by that test, so no harness group's pins or stamp move.
module edgefd/tests/harness/cdi

go 1.26.0

require (
	github.com/opencontainers/runtime-spec v1.3.0
	tags.cncf.io/container-device-interface v1.1.1
)

require (
	github.com/fsnotify/fsnotify v1.7.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.19.0 // indirect
	tags.cncf.io/container-device-interface/specs-go v1.1.1 // indirect
)
