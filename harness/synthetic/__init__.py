"""Generate a synthetic cluster's watch stream, and the truth of what was injected into it.

The replay benchmark's input (scripts/generate_stream.py writes one; scripts/bench_replay.py and
scripts/bench_memory.py generate theirs). `population` plans the objects and `schedule` their writes; an object's
first body comes from `templates` (the recorded real captures) or `hand_built`, and each write is one of
`mutations`, which keep managedFields as `fields` does; `stream` writes the events in time order (`times`) and
`truth` what was injected.
"""
