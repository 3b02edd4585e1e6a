"""Findings drawn for people and programs: pure functions of findings, no I/O of their own but writing a file.

`output` (the table fitted to the terminal, JSON, YAML: what the commands print), `columns` (its aligned columns),
`terminal` (`scan`'s status line on standard error), `page` (the HTML report and the live page, with `templates/`),
`timeline` (a finding's timeline: axis, layout, shapes, words) and `tally` (the report's summary of who wrote what).
"""
