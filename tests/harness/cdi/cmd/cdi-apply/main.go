// cdi-apply reads one CDI spec file as a container runtime does (the CDI library's ReadSpec:
// strict decoding, version rules, validation), applies the spec's and every device's edits to
// an OCI spec whose process runs as UID:GID, and prints what the container would get as one
// JSON object on stdout. An invalid spec: its reason on stderr, exit 1. Usage errors: exit 2.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type node struct {
	Path  string  `json:"path"`
	Type  string  `json:"type"`
	Major int64   `json:"major"`
	Minor int64   `json:"minor"`
	UID   *uint32 `json:"uid"`
	GID   *uint32 `json:"gid"`
}

type result struct {
	Version        string   `json:"cdiVersion"`
	AdditionalGids []uint32 `json:"additionalGids"`
	Devices        []node   `json:"devices"`
	Env            []string `json:"env"`
}

func id(s string) uint32 {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdi-apply: %q: not a uid/gid\n", s)
		os.Exit(2)
	}
	return uint32(v)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: cdi-apply SPEC_FILE UID GID")
		os.Exit(2)
	}
	spec, err := cdi.ReadSpec(os.Args[1], 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdi-apply: %v\n", err)
		os.Exit(1)
	}
	out := &oci.Spec{
		Process: &oci.Process{User: oci.User{UID: id(os.Args[2]), GID: id(os.Args[3])}},
		Linux:   &oci.Linux{},
	}
	if err := spec.ApplyEdits(out); err != nil {
		fmt.Fprintf(os.Stderr, "cdi-apply: spec edits: %v\n", err)
		os.Exit(1)
	}
	for _, d := range spec.Devices {
		if err := spec.GetDevice(d.Name).ApplyEdits(out); err != nil {
			fmt.Fprintf(os.Stderr, "cdi-apply: device %s: %v\n", d.Name, err)
			os.Exit(1)
		}
	}
	r := result{Version: spec.Version, AdditionalGids: out.Process.User.AdditionalGids, Env: out.Process.Env}
	for _, d := range out.Linux.Devices {
		r.Devices = append(r.Devices, node{d.Path, d.Type, d.Major, d.Minor, d.UID, d.GID})
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(1)
	}
}
