"""Sinks consume findings: reports for people and programs, Prometheus metrics, and delivery to Kubernetes
Events, Alertmanager and webhooks. The only layer that imports prometheus-client and HTTP clients."""
