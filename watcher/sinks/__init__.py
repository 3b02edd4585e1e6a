"""Sinks consume what detection produces.

Reports for people and programs (`report`, `log`, `recording`), Prometheus metrics (`metric_families`, the one table,
fed by `metrics`), the HTTP endpoints of the live watcher (`http`), and delivery to Kubernetes Events, Alertmanager and
webhooks (`delivery` and its sinks). The only layer that imports prometheus-client.
"""
