"""Delivery of finding changes to the places that tell people, never holding detection up.

`dispatch` (a bounded queue per sink, retries, incidents), its sinks `kube_events` (Kubernetes Events on the object),
`alertmanager` and `webhook` (over `http_client`), and `outlets` (the sinks a config asks for, with their
`credentials` read from files or the environment).
"""
