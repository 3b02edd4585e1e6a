//go:build tools

// Package tools pins Helm 3 (client-side three-way merge), which the real-fight recordings run (harness/programs.py
// builds helm.sh/helm/v3/cmd/helm with `go build`).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
