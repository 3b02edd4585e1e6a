"""A finding's timeline, drawn as SVG for the page.

`axis` (time across the drawing), `layout` (where each part goes), `shapes` (markers that tell writers apart without
colour) and `words` (what it says in text).
"""
