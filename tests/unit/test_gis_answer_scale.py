"""The /context and /chat paths over the GIS part at scale (issue 38): the spatial evidence, the graph's label and
relation lookups and the eligible datasets no longer walk every entity per request, and give on small data exactly
what the walks gave (the walks are kept here, as they were, as the reference): same evidence, same order."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from livemem.answer import graph
from livemem.answer.evidence import spatial_item, spatial_search
from livemem.answer.gis_rank import rank_entities
from livemem.answer.routing import SelfQuery
from livemem.gbim import find_entities, normalize_name
from livemem.gbim.export import _write_gis_snapshot, _write_tables
from livemem.geo.places import county_name
from livemem.query.gis_index import load_gis_index
from livemem.version.store import IndexHome, write_manifest

N = 2500
COUNTIES = ["Fayette", "Kanawha", "Raleigh", "McDowell", None]
TOWNS = ["Oak Hill", "Beckley", "Mount Hope", "Fayetteville", "oak hill", None]
LABELS = ["Mount Hope Food Pantry", "Beckley DHHR Office", "Food Pantry", "Oak Hill Benefits Hub", "Clinic",
          "Beckley DHHR Office Annex", "mount hope  FOOD-pantry", "Raleigh County Food Bank Pantry (old site)",
          "Ünïcode Straße Center", "St. Mary's Food Pantry"]  # fmt: skip
PROGRAMS = ["SNAP", "WIC", "Medicaid", "WV WORKS"]
ACCESS = {"public": frozenset({"public"}), "internal": frozenset({"public", "internal"})}


def make_entities(n: int, seed: int = 4) -> tuple[list[dict], list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    entities, relations = [], []
    for i in range(n):
        county = COUNTIES[i % len(COUNTIES)]
        eid = f"gbim:s:{i:05d}"
        label = LABELS[i % len(LABELS)] if i % 3 == 0 else f"{LABELS[i % len(LABELS)]} {i}"
        town = TOWNS[i % len(TOWNS)]
        attributes = {"n": i} if town is None else {"city": town, "zip": f"25{i % 900:03d}", "n": i}
        entities.append({
            "entity_id": eid, "source": "s", "worldview_id": "wv", "dataset": ["a", "b", "c"][i % 3],
            "county": f"{county} County" if county else None, "gbim_entity": "facility", "label": label,
            "description": f"Place {i}", "centroid_x": float(i), "centroid_y": float(-i), "srid": 26917,
            "lon": float(rng.uniform(-82.6, -77.7)), "lat": float(rng.uniform(37.2, 40.6)), "source_table": "s",
            "source_pk": str(i), "attributes": attributes,
            "access": "internal" if i % 4 == 0 or i % 3 == 2 else "public", "collection": "gis_s",
            "geometry_type": "Point", "county_source": county, "county_spatial": county,
            "flags": {"geometry_repaired": False, "outside_region": False, "county_disagreement": False},
        })  # fmt: skip
        rel = [("located_in", county, "county")] if county else []
        rel += [("serves_program", PROGRAMS[(i + k) % len(PROGRAMS)], "program") for k in range(i % 3)]
        rel += [("operated_by", "Fayette County Food Network", "organization")] if i % 7 == 0 else []
        rel += [("serves_zip", f"25{i % 900:03d}", "zip")] if i % 2 else []
        rel += [("near", f"gbim:s:{(i + 1) % n:05d}", "entity")] if i % 5 == 0 else []
        relations += [{"subject": eid, "predicate": p, "object": o, "object_kind": k, "provenance": {"i": i}}
                      for p, o, k in rel]  # fmt: skip
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    vectors[30:40] = vectors[20]  # exact ties: the lower row first
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return entities, relations, vectors


@pytest.fixture(scope="module")
def gis(tmp_path_factory):
    home = IndexHome(tmp_path_factory.mktemp("gis-answer") / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities, relations, vectors = make_entities(N)
    _write_tables(staged, entities, relations)
    _write_gis_snapshot(staged, entities, vectors)
    write_manifest(staged, {"version_id": "v1", "gbim": {"input_hash": "x", "exported_at": "now"}})
    return load_gis_index(Path(staged))


# --- the walks as they were (the reference) ---------------------------------------------------------------------
def walked_spatial(gis, access, vector, sq, k, min_score):
    mask = gis.mask(access, counties=tuple(sq.counties))
    towns = {t.lower() for t in sq.towns}
    if towns and sq.counties:
        anywhere = gis.mask(access, counties=())
        for row in np.flatnonzero(anywhere & ~mask):
            if str(gis.entities[int(row)]["attributes"].get("city", "")).lower() in towns:
                mask[row] = True
    ranked = rank_entities(gis, vector, int(mask.sum()), mask)
    picked = []
    for row, score in zip(ranked.rows, ranked.scores, strict=True):
        in_town = str(gis.entities[int(row)]["attributes"].get("city", "")).lower() in towns
        if in_town or sq.counties or score >= min_score:
            picked.append((int(row), float(score), in_town))
    picked.sort(key=lambda p: (not p[2], -p[1]))
    return [spatial_item(gis.entities[row], score, in_town) for row, score, in_town in picked[:k]]


def walked_visible(gis, access):
    return [e for e, a in zip(gis.entities, gis.access, strict=True) if a in access]


def walked_resolve(gis, access, term):
    visible = walked_visible(gis, access)
    wanted = normalize_name(term)
    exact = [e for e in visible if normalize_name(e["label"]) == wanted]
    if exact:
        return [{"kind": "entity", "value": e["entity_id"], "label": e["label"]} for e in exact]
    if county_name(term) or re.fullmatch(r"(?:zip(?: code)?\s*)?(\d{5})", term.strip(), re.I):
        return None  # not a walk: the same code before and after
    entities = find_entities(visible, term)[: graph.MAX_RESOLVED]
    if entities:
        return [{"kind": "entity", "value": e["entity_id"], "label": e["label"]} for e in entities]
    for e in visible:
        for rel in gis.relations.get(e["entity_id"], ()):
            if (
                rel["object_kind"] in ("program", "organization", "worldview")
                and normalize_name(rel["object"]) == wanted
            ):
                return [{"kind": rel["object_kind"], "value": rel["object"], "label": rel["object"]}]
    return []


def walked_through(gis, access, a, b):
    found, triples = [], []
    for e in walked_visible(gis, access):
        rels = gis.relations.get(e["entity_id"], ())
        to_a = next((r for r in rels if graph._matches(r, a)), None)
        to_b = next((r for r in rels if graph._matches(r, b)), None)
        if to_a and to_b:
            found.append({"kind": "through", "from": a["label"], "to": b["label"], "via": e["label"],
                          "predicates": [to_a["predicate"], to_b["predicate"]]})  # fmt: skip
            triples += [(e["entity_id"], to_a), (e["entity_id"], to_b)]
    return found, triples


def walked_named(gis, access, passages):
    rows: dict[str, list[int]] = defaultdict(list)
    for row, e in enumerate(gis.entities):
        label = normalize_name(e["label"])
        if len(label.split()) >= graph.MIN_LABEL_WORDS:
            rows[label].append(row)
    alternatives = sorted(rows, key=len, reverse=True)
    pattern = re.compile(
        r"\b(?:" + "|".join(r"\W+".join(map(re.escape, label.split())) for label in alternatives) + r")\b", re.I
    )
    out: dict[int, str] = {}
    for p in passages:
        for m in pattern.finditer(p["content"]):
            for row in rows.get(normalize_name(m.group(0)), []):
                if gis.access[row] in access and row not in out:
                    out[row] = p["chunk_id"]
            if len(out) >= graph.MAX_NAMED:
                return list(out.items())
    return list(out.items())


# --- the same answers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["public", "internal"])
@pytest.mark.parametrize(
    ("counties", "towns"),
    [((), ()), (("Fayette",), ()), (("Raleigh", "Kanawha"), ()), (("Fayette",), ("Oak Hill",)),
     (("McDowell",), ("Beckley", "Mount Hope")), ((), ("Oak Hill",)), (("Fayette",), ("Nowhere",))],
)  # fmt: skip
def test_spatial_evidence_is_the_walks_top_k_in_the_same_order(gis, role, counties, towns) -> None:
    rng = np.random.default_rng(len(counties) * 7 + len(towns))
    for k, min_score in ((5, 0.0), (12, 0.25), (40, -1.0), (3, 0.9)):
        vector = gis.dense[20] if k == 40 else rng.standard_normal(16).astype(np.float32)  # k 40: with the ties
        vector = vector / np.linalg.norm(vector)
        sq = SelfQuery(counties=list(counties), towns=list(towns))
        got = spatial_search(gis, ACCESS[role], vector, sq, k, min_score)
        assert got == walked_spatial(gis, ACCESS[role], vector, sq, k, min_score)
        if towns and towns != ("Nowhere",):  # the named town's entities first, whatever county they are filed in
            assert got and got[0]["matched_town"]


def test_eligible_datasets_are_read_from_the_codes(gis) -> None:
    for access in (*ACCESS.values(), frozenset(), frozenset({"internal"})):
        walked = sorted({str(d) for d, a in zip(gis.dataset, gis.access, strict=True) if a in access})
        assert gis.datasets(access) == walked
    assert gis.datasets(ACCESS["public"]) == ["a", "b"]  # dataset c is internal only here


@pytest.mark.parametrize("role", ["public", "internal"])
@pytest.mark.parametrize(
    "term",
    ["Mount Hope Food Pantry", "mount hope food-pantry", "Beckley DHHR Office", "Beckley DHHR", "Food Pantry",
     "pantry food", "Beckley DHHR Office Annex 1 extra", "Raleigh County Food Bank Pantry", "Straße", "st mary",
     "SNAP", "wv works", "Fayette County Food Network", "Clinic 4", "Nothing Like It", "Oak Hill Benefits Hub 3",
     "(old site)", "Raleigh County", "25880"],
)  # fmt: skip
def test_names_resolve_as_the_walk_resolved_them(gis, role, term) -> None:
    walked = walked_resolve(gis, ACCESS[role], term)
    got = graph.resolve(gis, ACCESS[role], term)
    if walked is not None:
        assert got == walked
    else:  # a county or a ZIP
        assert [n["kind"] for n in got] in (["county"], ["zip"])


@pytest.mark.parametrize("role", ["public", "internal"])
def test_through_connections_are_the_walks(gis, role) -> None:
    nodes = [
        graph.resolve(gis, ACCESS[role], "Fayette County")[0],
        graph.resolve(gis, ACCESS[role], "WIC")[0],
        graph.resolve(gis, ACCESS[role], "ZIP 25012")[0],
        {"kind": "organization", "value": "fayette county food network", "label": "the network"},
    ]
    met = 0
    for a in nodes:
        for b in nodes:
            if a is b:
                continue
            found, triples = graph.connections(gis, ACCESS[role], [a], [b])
            assert (found, triples) == walked_through(gis, ACCESS[role], a, b)
            met += len(found)
    assert met  # the county, the program, the ZIP and the organisation meet at some entities


@pytest.mark.parametrize("role", ["public", "internal"])
def test_entities_named_in_passages_are_the_label_expressions(gis, role) -> None:
    passages = [
        {"chunk_id": "c1", "content": "Go to the Beckley DHHR Office Annex 6, or the beckley dhhr office; call first."},
        {"chunk_id": "c2", "content": "The Mount Hope  Food-Pantry 13 and St. Mary's Food Pantry 19 help."},
        {"chunk_id": "c3", "content": "Food Pantry food pantry 2, Oak Hill Benefits Hub 3 and Ünïcode Straße Center"},
        {"chunk_id": "c4", "content": "nothing here but a Clinic and words"},
    ]
    for chosen in (passages, passages[1:], passages[3:], passages[:1], [passages[2]]):
        got = graph.named_entities(gis, ACCESS[role], chosen)
        assert got == walked_named(gis, ACCESS[role], chosen)
    assert graph.named_entities(gis, ACCESS[role], passages[:2])


def test_the_label_index_is_built_once_per_index_and_kept_with_it(gis) -> None:
    """No request walks the labels: the index is built on the first and the same object serves every later one."""
    first = graph.Labels.of(gis)
    graph.resolve(gis, ACCESS["public"], "Food Pantry")
    graph.named_entities(gis, ACCESS["public"], [{"chunk_id": "c", "content": "Beckley DHHR Office"}])
    assert graph.Labels.of(gis) is first and first.size == len(gis.table.dictionary("label")) - 1


def test_a_request_builds_only_the_records_it_shows(gis, monkeypatch) -> None:
    """What made /context cost seconds at a million entities: a record built for every candidate entity (the
    spatial evidence) and every label walked (the graph). A fresh worker's index (nothing cached yet) now builds
    the records it shows and none besides."""
    from livemem.query import gis_index

    fresh = load_gis_index(gis.path)
    built: list[int] = []
    real = gis_index.row_to_entity
    monkeypatch.setattr(gis_index, "row_to_entity", lambda row: built.append(1) or real(row))
    vector = gis.dense[7]
    sq = SelfQuery(counties=["Fayette"], towns=["Oak Hill", "Beckley"])
    assert len(spatial_search(fresh, ACCESS["internal"], vector, sq, 5, 0.0)) == 5
    assert len(built) == 5
    built.clear()
    assert graph.resolve(fresh, ACCESS["public"], "Beckley DHHR")
    assert graph.resolve(fresh, ACCESS["public"], "WIC")[0]["kind"] == "program"
    county, program = graph.resolve(fresh, ACCESS["public"], "Fayette County"), [{"kind": "program", "value": "WIC"}]
    assert graph.connections(fresh, ACCESS["public"], county, [{**program[0], "label": "WIC"}])[0]
    passages = [{"chunk_id": "c", "content": "the Beckley DHHR Office and Mount Hope Food Pantry 3"}]
    assert graph.named_entities(fresh, ACCESS["public"], passages)
    assert built == []
