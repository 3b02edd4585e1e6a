"""Manifests the harness's scenarios create: the few kinds they write, shaped as a user's would be."""

from __future__ import annotations

from .kube import JSON


def deployment(namespace: str, name: str, *, replicas: int, image: str = "nginx:1.19.6") -> JSON:
    """Make a Deployment of `replicas` pods of one container, labelled and selected by `app: name`."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": image}]},
            },
        },
    }
