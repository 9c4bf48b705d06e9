//go:build tools

// Package tools pins actionlint, which checks .github/workflows in the tests (scripts/build-harness).
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
