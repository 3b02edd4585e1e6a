//go:build tools

// Package tools pins Helm 4 (server-side apply), which the real-fight recordings run (harness/programs.py builds
// helm.sh/helm/v4/cmd/helm with `go build`).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
