// runc-devices attaches to one cgroup exactly the device filter runc attaches for a rule list:
// the rules go through github.com/opencontainers/cgroups' own devices code (the package runc
// uses, at the version runc's current release pins), so the program in the kernel is runc's,
// not a copy of it. The device-keeper tests (tests/device_keeper) then patch it and probe it.
//
//	runc-devices -cgroup DIR [-v1] < rules.json
//
// rules.json is the OCI runtime spec's linux.resources.devices list ({"allow", "type",
// "major", "minor", "access"}), converted to cgroup rules the way runc's specconv does: an
// empty type is "a", a missing major or minor is the wildcard. On cgroup v2 (the default) the
// rules become runc's eBPF program, attached with BPF_F_ALLOW_MULTI (replacing a single
// program already there, as runc does on update); with -v1 they are written to the v1 devices
// controller's devices.allow / devices.deny the way runc does.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/devices/config"

	// registers cgroups.DevicesSetV1 / DevicesSetV2, as runc's managers do
	_ "github.com/opencontainers/cgroups/devices"
)

type specRule struct {
	Allow  bool   `json:"allow"`
	Type   string `json:"type"`
	Major  *int64 `json:"major"`
	Minor  *int64 `json:"minor"`
	Access string `json:"access"`
}

func convert(in []specRule) ([]*config.Rule, error) {
	out := make([]*config.Rule, 0, len(in))
	for i, r := range in {
		t := config.Type('a')
		if r.Type != "" {
			if len(r.Type) != 1 {
				return nil, fmt.Errorf("rule %d: type %q", i, r.Type)
			}
			t = config.Type(r.Type[0])
		}
		major, minor := int64(config.Wildcard), int64(config.Wildcard)
		if r.Major != nil {
			major = *r.Major
		}
		if r.Minor != nil {
			minor = *r.Minor
		}
		if r.Access == "" {
			return nil, fmt.Errorf("rule %d: empty access", i)
		}
		out = append(out, &config.Rule{
			Type: t, Major: major, Minor: minor,
			Permissions: config.Permissions(r.Access), Allow: r.Allow,
		})
	}
	return out, nil
}

func main() {
	dir := flag.String("cgroup", "", "the cgroup directory (v2, or the v1 devices controller's with -v1)")
	v1 := flag.Bool("v1", false, "write the v1 devices controller's files instead of attaching a program")
	flag.Parse()
	if *dir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: runc-devices -cgroup DIR [-v1] < rules.json")
		os.Exit(2)
	}
	var spec []specRule
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		fmt.Fprintln(os.Stderr, "runc-devices: rules:", err)
		os.Exit(2)
	}
	rules, err := convert(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runc-devices:", err)
		os.Exit(2)
	}
	res := &cgroups.Resources{Devices: rules}
	set := cgroups.DevicesSetV2
	if *v1 {
		set = cgroups.DevicesSetV1
	}
	if err := set(*dir, res); err != nil {
		fmt.Fprintln(os.Stderr, "runc-devices:", err)
		os.Exit(1)
	}
}
