"""Prometheus metrics: the only package that imports prometheus-client.

`families` (every metric family, declared once), `exporter` (the series finding changes, writes and the watcher's own
health feed, and their exposition) and `samples` (the numbers the live watcher's parts keep, read at scrape time).
"""
