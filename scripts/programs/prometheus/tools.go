//go:build tools

// Package tools pins Prometheus (with its Kubernetes service discovery, which Debian's build leaves out), which
// scrapes the chart's pods on the test node (harness/programs.py builds
// github.com/prometheus/prometheus/cmd/prometheus with `go build`).
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
