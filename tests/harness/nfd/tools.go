//go:build tools

// Package tools names the upstream programs scripts/build-harness builds from this module
// besides its own mains, so that `go mod tidy` keeps what they need: nfd-master, the single
// writer of feature labels that feature-sink --mode nodefeature publishes to.
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
)
