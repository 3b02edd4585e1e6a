"""Benchmark the live watcher under write load (scripts/bench_live.py) against other watchers on the same traffic.

`workload` creates the objects and writes the load, `watchers` starts and samples the watcher processes, `measure`
runs the benchmark and `figures` makes each run's figures of the samples; `report` assembles the results and prints
them.
"""
