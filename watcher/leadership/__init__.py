"""Leader election, so that of several replicas exactly one delivers.

`lease` (the election on a coordination.k8s.io/v1 Lease) and `gate` (delivery paused and resumed on what it says,
with a new leader's catch-up).
"""
