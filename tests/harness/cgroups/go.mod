// The device-keeper test's runc device filter (tests/device_keeper): its own module so its
// pins never move the others'. github.com/opencontainers/cgroups at the version runc v1.5.3
// (runc's current release) requires. See scripts/build-harness.
module edgefd/tests/harness/cgroups

go 1.26.6

require github.com/opencontainers/cgroups v0.1.0

require (
	github.com/cilium/ebpf v0.17.3 // indirect
	github.com/coreos/go-systemd/v22 v22.6.0 // indirect
	github.com/cyphar/filepath-securejoin v0.4.1 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
