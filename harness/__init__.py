"""Test harness: a real etcd + kube-apiserver (+ kube-controller-manager), scenarios and a watch recorder."""
