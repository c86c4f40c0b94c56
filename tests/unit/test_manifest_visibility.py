"""What /manifest shows a role: nothing about collections or spatial sources it may not read."""

from types import SimpleNamespace

from serving.deps import visible_manifest
from serving.state import Role

MANIFEST = {
    "collections": {"docs": {"access": "public", "chunks": 3}, "notes": {"access": "internal", "chunks": 2}},
    "sources": {"a": {"collection": "docs", "chunks": 3}, "b": {"collection": "notes", "chunks": 2}},
    "total_chunks": 5,
    "changes": {"per_source": {"a": {}, "b": {}}},
    "gbim": {
        "entities": 7,
        "per_dataset": {"clinics": 4, "shelters": 3},
        "sources": {"clinics": {"access": "public"}, "shelters": {"access": "internal"}},
        "quarantined": [{"source": "clinics", "reason": "empty"}, {"source": "shelters", "reason": "empty"}],
        "quarantined_count": 2,
    },
}
SNAP = SimpleNamespace(manifest=MANIFEST, access_of={"docs": "public", "notes": "internal"})


def test_public_role_sees_only_public_collections_and_spatial_sources() -> None:
    shown = visible_manifest(SNAP, Role("public", frozenset({"public"})))
    assert set(shown["collections"]) == {"docs"} and set(shown["sources"]) == {"a"}
    assert shown["total_chunks"] == 3 and set(shown["changes"]["per_source"]) == {"a"}
    assert set(shown["gbim"]["sources"]) == {"clinics"}
    assert [q["source"] for q in shown["gbim"]["quarantined"]] == ["clinics"]
    assert "per_dataset" not in shown["gbim"] and "entities" not in shown["gbim"]
    assert "shelters" not in str(shown) and "notes" not in str(shown)


def test_internal_role_sees_everything() -> None:
    assert visible_manifest(SNAP, Role("internal", frozenset({"public", "internal"}))) == MANIFEST
