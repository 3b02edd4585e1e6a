"""fieldsV1 decoding and readable paths, on tries recorded from a real kube-apiserver."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.captures import RELEASE_CAPTURES, events
from watcher.detection.events import event_object
from watcher.detection.managed_fields import (
    FieldSetCache,
    FieldsV1Error,
    decode,
    keep_entry,
    leaf_paths,
    pack_entries,
    raw_entries,
    stamp,
    unpack_entries,
)
from watcher.detection.values import LeafHashes, body_leaves, meta_table
from watcher.model import JSONObject


def _owned(scenario: str, kind: str, manager: str) -> set[str]:
    """What `manager` owned at some point on objects of `kind` in a scenario's capture."""
    found: set[str] = set()
    for event in events(scenario):
        if event.kind == kind:
            for entry in event_object(event)["metadata"].get("managedFields", []):
                if entry["manager"] == manager:
                    found |= leaf_paths(entry["fieldsV1"])
    return found


@pytest.mark.parametrize(
    ("scenario", "kind", "manager", "path"),
    [
        ("fight-apply-vs-update-replicas", "Deployment", "argocd-controller", "spec.replicas"),
        ("fight-apply-vs-update-replicas", "Deployment", "argocd-controller", "metadata.labels.app"),
        (
            "fight-apply-vs-update-replicas",
            "Deployment",
            "argocd-controller",
            "spec.template.spec.containers[name=web].image",
        ),
        (
            "fight-cabundle",
            "ValidatingWebhookConfiguration",
            "cainjector",
            "webhooks[name=validate.example.com].clientConfig.caBundle",
        ),
        ("hot-loop-timestamp", "ConfigMap", "reconciler", "metadata.annotations[example.com/last-reconciled]"),
        ("fight-status", "Widget", "widget-operator", "status.phase"),
        ("fight-data", "ConfigMap", "gitops-sync", "data.endpoint"),
    ],
)
def test_real_tries_decode_to_readable_leaf_paths(scenario: str, kind: str, manager: str, path: str) -> None:
    assert path in _owned(scenario, kind, manager)


@pytest.mark.parametrize(
    ("trie", "paths"),
    [
        (
            {"f:metadata": {"f:finalizers": {".": {}, 'v:"example.com/cleanup"': {}}}},
            {"metadata.finalizers[example.com/cleanup]"},
        ),
        ({"f:spec": {"f:args": {"i:0": {}}}}, {"spec.args[0]"}),
        (
            {"f:spec": {"f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}}}},
            {"spec.ports[port=80,protocol=TCP].port"},
        ),
        (
            {"f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/name": {}}}},
            {"metadata.labels[app.kubernetes.io/name]"},
        ),
        ({"f:metadata": {"f:labels": {}}}, {"metadata.labels"}),
        ({}, set()),
    ],
)
def test_every_kind_of_trie_key(trie: dict[str, object], paths: set[str]) -> None:
    assert leaf_paths(trie) == paths


@pytest.mark.parametrize(
    "trie", [{"x:spec": {}}, {"f:spec": "replicas"}, {"f:spec": {"k:{not json": {}}}, {"f:spec": {"k:[1]": {}}}]
)
def test_malformed_tries_are_rejected_with_the_place(trie: dict[str, object]) -> None:
    with pytest.raises(FieldsV1Error, match="fieldsV1"):
        leaf_paths(trie)


def test_ownership_and_values_name_the_same_leaf_the_same_way() -> None:
    """An owned leaf we can see a value for is named as the value renderer names it, or as its ancestor/descendant.

    (A trie may own a struct as a whole, `spec.selector`; a list without merge keys is one value, `...ports`.)
    """
    checked = 0
    for release, captures in RELEASE_CAPTURES.items():
        for path in sorted(captures.glob("*.jsonl")):
            checked += _check_leaves(path, release)
    assert checked > 100


def leaf_hashes(obj: JSONObject) -> LeafHashes:
    """Every visible leaf path of an object and the (cut) hash of its value, named as the engine's tables name them."""
    meta = meta_table(obj.get("metadata") or {})
    return dict(zip(meta.positions, meta, strict=True)) | body_leaves(obj)


def _check_leaves(path: Path, release: str) -> int:
    checked = 0
    for event in events(path.stem, release=release):
        obj = event_object(event)
        values = leaf_hashes(obj)
        for entry in obj["metadata"].get("managedFields", []):
            if entry.get("apiVersion", obj["apiVersion"]) != obj["apiVersion"]:
                continue  # (a manager's fields as it wrote them, in another version: an HPA's v2 fields of its v1 view)
            for leaf in leaf_paths(entry["fieldsV1"]):
                if leaf.startswith(("status", "metadata.")) and not leaf.startswith(
                    ("metadata.labels", "metadata.annotations")
                ):
                    continue
                if leaf in ("metadata.labels", "metadata.annotations"):
                    continue
                checked += 1
                related = (
                    p for p in values if p.startswith((leaf + ".", leaf + "[")) or leaf.startswith((p + ".", p + "["))
                )
                assert leaf in values or any(related), (release, path.name, leaf)
    return checked


def test_writers_under_two_api_versions_are_merged() -> None:
    entries = [
        {
            "manager": "m",
            "operation": "Update",
            "apiVersion": "apps/v1beta1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        },
        {
            "manager": "m",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-01-01T00:00:05Z",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}},
        },
    ]
    ((writer, (time, tries)),) = raw_entries(entries).items()
    assert (writer.manager, writer.operation, writer.subresource, time) == ("m", "Update", "", "2026-01-01T00:00:05Z")

    assert decode(FieldSetCache(), tries) == {"spec.replicas", "metadata.labels.a"}


def test_identical_tries_share_one_set() -> None:
    cache = FieldSetCache()
    a = cache.get({"f:spec": {"f:replicas": {}}})
    b = cache.get({"f:spec": {"f:replicas": {}}})
    assert a is b


def test_entries_are_kept_with_their_times_and_fields() -> None:
    """Entries packed as an object keeps them (every time in one int) come back as they were, from real objects."""
    checked = 0
    for path in sorted(RELEASE_CAPTURES["current"].glob("*.jsonl")):
        for event in events(path.stem):
            raw = raw_entries(event_object(event)["metadata"].get("managedFields", []))
            entries = [keep_entry(w, stamp(t), decode(FieldSetCache(), f)) for w, (t, f) in raw.items()]
            assert unpack_entries(pack_entries(entries)) == {e.writer: e for e in entries}
            checked += len(entries)
    assert checked > 100
    assert unpack_entries(pack_entries([])) == {}


def test_times_are_kept_to_the_second() -> None:
    assert stamp("2021-03-04T05:06:07Z") == 1614834367
    assert stamp("2021-03-04T05:06:07Z") < stamp("2021-03-04T05:06:08Z")
    assert stamp("") == 0
