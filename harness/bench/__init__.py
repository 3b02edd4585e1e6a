"""Measure fightwatch for the benchmark scripts: what they share, and what each is made of, imported normally.

Shared: the machine a run describes (`machine`), the detection engine as a benchmark drives it (`engine`), a
process's CPU and memory (`process`), a fightwatch process's log and endpoints (`endpoints`), event lag (`lag`),
waiting for a condition (`polling`) and plain-text tables (`table`). The replay benchmark's measurements
(`replay`, `memory`, `recall`) and report (`replay_report`) take the stream of `harness.synthetic`; the audit
benchmark's log comes from `audit_log` and its measurements from `audit`; the live benchmarks are a package each
(`live`, `load_test`): workload, watchers, measure, figures, report.
"""
