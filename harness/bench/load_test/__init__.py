"""Load-test fightwatch's scale and high availability on a real API server (scripts/load_test.py).

`workload` plans the cluster and writes the load (benign churn, injected fights and hot loops), `watchers` starts
and samples the fightwatch processes (and a client-go informer), `measure` runs the load test and `figures` makes
each watcher's figures of its samples and checks the findings; `report` describes the run and prints its table.
"""
