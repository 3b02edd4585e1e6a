"""Sinks consume findings: reports for people and programs (later metrics, Events, alerts)."""
