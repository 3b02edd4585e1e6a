//go:build tools

// Package tools pins krew (the kubectl plugin manager) and its manifest validator, which tests/deploy/test_krew.py
// builds with `go build` (harness/go_build.py: go_binary) to install the plugin as users do.
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
