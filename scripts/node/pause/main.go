// pause: the process that holds a pod's namespaces (the sandbox, or "pause", container), for the test node
// (harness/node.py). No registry is reachable there, so Kubernetes' own registry.k8s.io/pause image cannot be
// pulled: this does what it does. As PID 1 of the pod it reaps the orphans reparented to it, and exits on SIGINT
// or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
