"""The detection core: managedFields decoding, write attribution, fight and hot-loop rules, finding lifecycle.

Pure and deterministic: no I/O, no asyncio, no clock (event times are arguments), no client or metrics
library. The same events give the same findings, which is what makes `replay` and the live watcher agree.
"""
