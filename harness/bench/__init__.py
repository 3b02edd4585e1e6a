"""Measure fightwatch for the benchmark scripts: what two of them share, imported as a library.

The machine a run describes (`machine`), the detection engine as a benchmark drives it (`engine`), a process's CPU
and memory (`process`), a fightwatch process's log and endpoints (`endpoints`), event lag (`lag`), waiting for a
condition (`polling`) and plain-text tables (`table`); and, a package each, the generators, measurements and
reports of the benchmarks that have them.
"""
