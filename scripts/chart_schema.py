"""Write helm/fightwatch/values.schema.json: the chart's own values, plus `config` from fightwatch's config schema.

The `config` value becomes fightwatch's config file, so its schema is generated from the same pydantic model that
validates `--config` (watcher/config.py): bad config fails at `helm install` time with the same rules. Run after
changing either; `--check` (used by the tests) fails when the committed file is out of date.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from watcher.config import Config

TARGET = Path(__file__).resolve().parent.parent / "helm" / "fightwatch" / "values.schema.json"

_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_ARR = {"type": "array"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"}
_OPTIONAL_DURATION = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"
_DAYS = {"type": "integer", "minimum": 1}


def strict(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


# The subjects of a ClusterRoleBinding (a ServiceAccount's need its namespace).
_SUBJECTS = {
    "type": "array",
    "items": strict(
        {
            "kind": {"enum": ["ServiceAccount", "User", "Group"]},
            "name": {"type": "string", "minLength": 1},
            "namespace": _STR,
            "apiGroup": _STR,
        },
        required=["kind", "name"],
        **{"if": {"properties": {"kind": {"const": "ServiceAccount"}}}, "then": {"required": ["namespace"]}},
    ),
}


def chart_schema() -> dict[str, Any]:
    config, defs = _config()
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "fightwatch chart values",
        **strict(
            {
                **_workload(),
                **_identity(),
                **_behaviour(config),
                **_serving(),
                **_readers(),
                **_audit_webhook(),
                **_monitoring(),
                **_pod(),
            }
        ),
        "$defs": defs,
    }


def _config() -> tuple[dict[str, Any], dict[str, Any]]:
    """The `config` value's schema (fightwatch's config model) and the definitions it refers to."""
    config = Config.model_json_schema()
    defs = config.pop("$defs", {})
    config["description"] = "The fightwatch config file (README 'Configuration'); validated again at start-up."
    return config, defs


def _workload() -> dict[str, Any]:
    """The image, how many replicas, and the names of what the chart makes."""
    return {
        "image": strict(
            {
                "repository": {"type": "string", "minLength": 1},
                "tag": _STR,
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            },
            required=["repository"],
        ),
        "imagePullSecrets": _ARR,
        "replicaCount": {"type": "integer", "minimum": 0},
        "nameOverride": _STR,
        "fullnameOverride": _STR,
    }


def _identity() -> dict[str, Any]:
    """The ServiceAccount fightwatch runs as, and what its RBAC lets it watch."""
    return {
        "serviceAccount": strict({"create": _BOOL, "name": _STR, "annotations": _LABELS}),
        "rbac": strict(
            {
                "create": _BOOL,
                "watch": {
                    "type": "array",
                    "minItems": 1,
                    "items": strict(
                        {
                            "apiGroups": {"type": "array", "items": _STR, "minItems": 1},
                            "resources": {"type": "array", "items": _STR, "minItems": 1},
                        },
                        required=["apiGroups", "resources"],
                    ),
                },
                "namespaces": {"type": "array", "items": {"type": "string", "minLength": 1}},
            }
        ),
    }


def _behaviour(config: dict[str, Any]) -> dict[str, Any]:
    """What fightwatch does and how it runs: events, leader election, sharding, its config, flags and env."""
    return {
        "events": strict({"enabled": _BOOL}),
        "leaderElection": strict({"enabled": _BOOL}),
        "sharding": strict({"enabled": _BOOL, "shards": {"type": "integer", "minimum": 1, "maximum": 256}}),
        "config": config,
        "logLevel": {"enum": ["debug", "info", "warning", "error"]},
        "extraArgs": {"type": "array", "items": _STR},
        "extraEnv": _ARR,
        "extraVolumes": _ARR,
        "extraVolumeMounts": _ARR,
    }


def _serving() -> dict[str, Any]:
    """The Service in front of fightwatch's HTTP server, and where its TLS certificate comes from."""
    return {
        "service": strict(
            {
                "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            }
        ),
        "tls": strict(
            {
                "source": {"enum": ["helm", "certManager", "secret", "selfSigned"]},
                "helm": strict(
                    {
                        "caValidityDays": _DAYS,
                        "certValidityDays": _DAYS,
                        "renewBeforeDays": {"type": "integer", "minimum": 0},
                    }
                ),
                "certManager": strict(
                    {
                        "issuerRef": strict({"name": {"type": "string", "minLength": 1}, "kind": _STR, "group": _STR}),
                        "duration": {**_DURATION, "pattern": _OPTIONAL_DURATION},
                        "renewBefore": {**_DURATION, "pattern": _OPTIONAL_DURATION},
                    }
                ),
                "secret": strict({"name": _STR}),
                "extraDnsNames": {"type": "array", "items": {"type": "string", "minLength": 1}},
            }
        ),
        "insecureHTTP": _BOOL,
    }


def _readers() -> dict[str, Any]:
    """Who may read /metrics and the findings API."""
    return {
        "metricsReader": strict({"create": _BOOL, "subjects": _SUBJECTS}),
        "findingsReader": strict({"create": _BOOL, "subjects": _SUBJECTS}),
    }


def _audit_webhook() -> dict[str, Any]:
    """The audit webhook receiver: its port, TLS and token secrets, and its own Service."""
    return {
        "auditWebhook": strict(
            {
                "enabled": _BOOL,
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "tlsSecret": _STR,
                "clientCASecret": _STR,
                "tokenSecret": _STR,
                "service": strict(
                    {
                        "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                        "clusterIP": _STR,
                        "nodePort": {"type": ["integer", "null"], "minimum": 30000, "maximum": 32767},
                        "port": {"type": ["integer", "null"], "minimum": 1, "maximum": 65535},
                        "annotations": {"type": "object", "additionalProperties": _STR},
                        "loadBalancerSourceRanges": {"type": "array", "items": _STR},
                    }
                ),
                "from": _ARR,
            }
        )
    }


def _monitoring() -> dict[str, Any]:
    """The Prometheus Operator's ServiceMonitor and PrometheusRule, and the Grafana dashboards."""
    rule_override = strict({"for": _DURATION, "severity": {"enum": ["info", "warning", "critical"]}})
    return {
        "serviceMonitor": strict(
            {
                "enabled": _BOOL,
                "additionalLabels": _LABELS,
                "interval": _DURATION,
                "scrapeTimeout": _DURATION,
                "relabelings": _ARR,
                "metricRelabelings": _ARR,
                "tlsConfig": _OBJ,
            }
        ),
        "prometheusRule": strict(
            {
                "enabled": _BOOL,
                "additionalLabels": _LABELS,
                "alerts": {"type": "object", "additionalProperties": rule_override},
            }
        ),
        "dashboards": strict(
            {
                "enabled": _BOOL,
                "label": {"type": "string", "minLength": 1},
                "labelValue": _STR,
                "annotations": _LABELS,
                "namespace": _STR,
            }
        ),
    }


def _pod() -> dict[str, Any]:
    """The pod's availability, network policy, resources, security context and scheduling."""
    return {
        "podDisruptionBudget": strict({"enabled": _BOOL, "minAvailable": {"type": ["integer", "string"]}}),
        "networkPolicy": strict({"enabled": _BOOL, "metricsFrom": _ARR, "apiServer": _ARR, "extraEgress": _ARR}),
        "resources": _OBJ,
        "podSecurityContext": _OBJ,
        "securityContext": _OBJ,
        "podAnnotations": _LABELS,
        "podLabels": _LABELS,
        "priorityClassName": _STR,
        "nodeSelector": _LABELS,
        "tolerations": _ARR,
        "affinity": _OBJ,
    }


def render() -> str:
    return json.dumps(chart_schema(), indent=2, sort_keys=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is out of date: run python scripts/chart_schema.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
