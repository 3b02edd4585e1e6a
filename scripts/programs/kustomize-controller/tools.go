//go:build tools

// Package tools pins Flux's kustomize-controller, which the real-fight recordings run out of cluster with a
// kubeconfig (harness/programs.py builds github.com/fluxcd/kustomize-controller with `go build`).
package tools

import _ "github.com/fluxcd/kustomize-controller"
