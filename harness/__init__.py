"""Test harness: a real etcd + kube-apiserver (+ kube-controller-manager), scenarios and a watch recorder.

Shared by tests/ and scripts/ (neither imports from the other's folder): besides what the tests start and run,
the benchmarks' generators and measurements (`harness.bench`, `harness.synthetic`), and the Go programs both build
(`harness.go_build`).
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
