"""fightwatch: find Kubernetes controllers that fight over objects, and hot reconcile loops.

Data flows one way (see ../shared/STYLE.md):

    sources (capture replay, live watch) -> detection.events.ObjectEvent -> detection.Engine
        -> model.FindingChange -> sinks

`watcher.model` and `watcher.detection` are pure: no I/O, no clock, no client library.
"""

__version__ = "0.1.0"
