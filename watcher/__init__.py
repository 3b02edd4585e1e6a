"""fightwatch: find Kubernetes controllers that fight over objects, and hot reconcile loops.

Data flows one way (docs/architecture.md, "Life of a watch event"):

    sources (live watch, captures, audit logs) -> pipeline.Pipeline (detection's engines, joined)
        -> model.FindingChange -> what tells people (rendering, logs, metrics, delivery)

`watcher.model` and `watcher.detection` are pure: no I/O, no clock, no client library (import-linter contracts in
pyproject.toml hold every layering rule).
"""

__version__ = "0.1.0"
