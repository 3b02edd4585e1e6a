"""Measure fightwatch for the benchmark scripts: what they share, and what each is made of, imported normally.

Shared: the machine a run describes (`machine`), the detection engine as a benchmark drives it (`engine`), a
process's CPU and memory (`process`), a fightwatch process's log and endpoints (`endpoints`), event lag (`lag`),
waiting for a condition (`polling`) and plain-text tables (`table`). The replay benchmark's measurements
(`replay`, `memory`, `recall`) and report (`replay_report`) take the stream of `harness.synthetic`; the audit
benchmark's log comes from `audit_log` and its measurements from `audit`; the benchmarks under write load share
`cluster_load` (the control plane, the objects and the writes, the watcher processes) and keep a package each for
the rest (`live`, `load_test`): workload, watchers, measure, figures, report.
"""
