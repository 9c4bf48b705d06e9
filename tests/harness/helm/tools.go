//go:build tools

// Package tools pins the helm command built by scripts/build-harness.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
