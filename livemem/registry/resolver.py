"""The serving-side resolver: which programs serve this ZIP / county, from a version's published registry,
loaded once per version into dictionaries keyed by id, ZIP, county, every resource type of a row and its taxonomy
terms (code, code prefix, name).

A registry may cover several states (``registry.states``): ZIPs of any of them are answered, a county is looked up
in each, and a row whose service area is its whole state (``service_area`` "Statewide", "State of Florida", ...)
is listed after the county's programs for any place of that state. Undated rows (no ``last_verified_at``) follow
the version's ``undated`` policy: ``unverified_shown`` lists them without ``include_stale``, marked
(``verification_note``: "listed 2019-08-19, not verified since").
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from livemem.dates import utc_now
from livemem.errors import LivingMemoryError
from livemem.geo.names import county_key
from livemem.geo.zips import state_counties, zip_data
from livemem.registry.fields import DAY_S, FIELDS, RESOURCE_TYPES, decode_published
from livemem.version import connect


class RegistryQueryError(LivingMemoryError):
    """A resolver hint that cannot be answered (ZIP outside the state, unknown county)."""


STATEWIDE = re.compile(r"\b(?:state[\s-]?wide|entire state|whole state|all counties|all of the state)\b", re.I)
UNDATED_NOTE = "not verified (the source gives no verification date)"


def _state_name(abbr: str) -> str:
    try:
        from livemem.geo.places import state_name
    except ImportError:  # pragma: no cover - the gazetteer's names are optional here
        return abbr
    return state_name(abbr)


def is_statewide(service_area: str | None, state: str | None) -> bool:
    """Whether a row's service area is its whole state ("Statewide", "State of Florida", "Florida", "All counties")."""
    if not service_area:
        return False
    text = " ".join(service_area.casefold().replace(".", " ").split())
    if STATEWIDE.search(text):
        return True
    if not state:
        return False
    name = _state_name(state).casefold()
    return text in {name, f"state of {name}", f"{name} state", f"all of {name}", f"{name} residents", state.casefold()}


def verification_note(row: dict[str, Any], status: str) -> str | None:
    """How an answer marks a row whose status does not rest on a verification: "listed 2019-08-19, not verified
    since" (undated rows with the source's listing date), or that it was never verified."""
    if row.get("last_verified_at"):
        return None
    listed = row.get("listed_at")
    if listed:
        return f"listed {str(listed)[:10]}, not verified since"
    return UNDATED_NOTE if status == "unverified" else None


def _by_zip(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """ZIP -> rows: those of that ZIP first, then those whose coverage includes it (each in row order)."""
    by_zip: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_zip.setdefault(row["zip"], []).append(i)
    for i, row in enumerate(rows):
        for z in row["zip_coverage"]:
            if z != row["zip"]:
                by_zip.setdefault(z, []).append(i)
    return by_zip


def _places_and_terms(
    rows: list[dict[str, Any]],
) -> tuple[dict[str, list[int]], dict[str, list[int]], list[tuple[str, int]], list[tuple[str, int]]]:
    """("ST|county key" -> rows, state -> its statewide rows (no ZIP coverage), (casefolded term code, row),
    (casefolded term name, row))."""
    by_county: dict[str, list[int]] = {}
    statewide: dict[str, list[int]] = {}
    codes: list[tuple[str, int]] = []
    names: list[tuple[str, int]] = []
    for i, row in enumerate(rows):
        by_county.setdefault(f"{row['state']}|{county_key(row['county'])}", []).append(i)
        if is_statewide(row.get("service_area"), row["state"]) and not row["zip_coverage"]:
            statewide.setdefault(row["state"], []).append(i)
        for term in row["taxonomy_terms"]:
            if isinstance(term, dict):
                if term.get("code"):
                    codes.append((str(term["code"]).casefold(), i))
                if term.get("name"):
                    names.append((str(term["name"]).casefold(), i))
    return by_county, statewide, codes, names


@dataclass
class RegistryIndex:
    """A version's published registry in memory, with lookups by id, ZIP (own ZIP or coverage), county (per state),
    resource type (every type of a row), taxonomy term and statewide lines."""

    version_id: str
    state: str
    freshness_days: int
    rows: list[dict[str, Any]]
    verified_day: np.ndarray  # days since the epoch of what the status rests on (NaN when nothing)
    recorded_verified: np.ndarray
    resource_type: np.ndarray
    by_id: dict[str, int]
    by_zip: dict[str, list[int]]
    by_county: dict[str, list[int]]  # "ST|county key" -> rows
    ordered: list[int]
    states: tuple[str, ...] = ()
    undated_policy: str = "hidden"
    types: list[frozenset[str]] = field(default_factory=list)
    undated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    statewide: dict[str, list[int]] = field(default_factory=dict)
    term_codes: list[tuple[str, int]] = field(default_factory=list)  # (casefolded code, row)
    term_names: list[tuple[str, int]] = field(default_factory=list)  # (casefolded name, row)

    @classmethod
    def from_rows(
        cls,
        rows: list[dict[str, Any]],
        version_id: str,
        state: str,
        freshness_days: int,
        *,
        states: Sequence[str] = (),
        undated: str = "hidden",
    ) -> RegistryIndex:
        """``rows`` in the order results are listed in within a tier (county, type, name, id)."""
        zips = zip_data()
        for row in rows:
            decode_published(row)
            if not row.get("state"):
                row["state"] = (zips.get(row["zip"]) or (state,))[0]
        basis = [r.get("verified_as_of") or r.get("last_verified_at") for r in rows]
        verified = pd.to_datetime(pd.Series(basis, dtype=object), utc=True, errors="coerce", format="ISO8601")
        verified = verified.astype("datetime64[ns, UTC]")
        days = (verified - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64) / DAY_S
        by_county, statewide, codes, names = _places_and_terms(rows)
        return cls(
            version_id=version_id,
            state=state,
            freshness_days=freshness_days,
            rows=rows,
            verified_day=days,
            recorded_verified=np.array([r["verification_status"] == "verified" for r in rows], dtype=bool),
            resource_type=np.array([r["resource_type"] for r in rows], dtype=object),
            by_id={row["local_resource_id"]: i for i, row in enumerate(rows)},
            by_zip=_by_zip(rows),
            by_county=by_county,
            ordered=list(range(len(rows))),
            states=tuple(dict.fromkeys((state, *states))),
            undated_policy=undated,
            types=[frozenset(r["resource_types"]) for r in rows],
            undated=np.array([not r.get("last_verified_at") for r in rows], dtype=bool),
            statewide=statewide,
            term_codes=codes,
            term_names=names,
        )

    def status_and_age(self, i: int, today: float) -> tuple[str, int | None]:
        day = self.verified_day[i]
        if day != day:
            return "unverified", None
        age = max(0, int(today - day))
        if not self.recorded_verified[i]:
            return "unverified", age
        return ("stale" if age > self.freshness_days else "verified"), age

    def shown(self, i: int, status: str, include_stale: bool) -> bool:
        """Whether a row of this status is listed: verified rows always; stale and unverified ones with
        ``include_stale``; undated unverified ones too under the policy ``unverified_shown``."""
        if status == "verified" or include_stale:
            return True
        return self.undated_policy == "unverified_shown" and status == "unverified" and bool(self.undated[i])

    def taxonomy_rows(self, query: str) -> set[int]:
        """Rows with a taxonomy term whose code is ``query`` or starts with it (``BD-1800`` finds
        ``BD-1800.2000``), or whose name holds every word of it (case-insensitive)."""
        key = " ".join(query.casefold().split())
        found = {i for code, i in self.term_codes if code.startswith(key)}
        words = key.split()
        found |= {i for name, i in self.term_names if key in name or all(w in name for w in words)}
        return found


@dataclass
class Resolution:
    rows: list[dict[str, Any]]
    county: str | None  # the county searched (given, or the ZIP's)
    total: int


def load_registry_index(version_dir: str | os.PathLike[str]) -> RegistryIndex | None:
    """The registry of a version (None when it has none), loaded once per version directory."""
    return _cached_index(str(Path(version_dir).resolve()))


@lru_cache(maxsize=4)
def _cached_index(version_dir: str) -> RegistryIndex | None:
    path = Path(version_dir)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    section = manifest.get("registry")
    if not section:
        return None
    con = connect(path)
    try:
        present = {
            c for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'registry'"
            ).fetchall()
        }  # fmt: skip
        # a version published before registry-v2 lacks the newer columns: read as empty
        columns = [c for c in (*FIELDS, "verified_as_of", "flagged_fields") if c in present]
        found = con.execute(
            f"SELECT {', '.join(columns)} FROM registry ORDER BY county, resource_type, name, local_resource_id"
        ).fetchall()
    finally:
        con.close()
    missing = dict.fromkeys(c for c in (*FIELDS, "verified_as_of", "flagged_fields") if c not in present)
    rows = [{**missing, **dict(zip(columns, r, strict=True))} for r in found]
    return RegistryIndex.from_rows(
        rows,
        manifest["version_id"],
        section["state"],
        section["freshness_days"],
        states=section.get("states") or (),
        undated=section.get("undated_policy", "hidden"),
    )


def _searched(index: RegistryIndex, zip: str | None, county: str | None) -> list[tuple[str, str]]:
    """The (state, county) pairs a ZIP or county hint searches (a county in every covered state that has it); a
    ZIP that does not exist or lies outside the covered states and an unknown county are errors."""
    states = index.states or (index.state,)
    covers = ", ".join(states)
    search: list[tuple[str, str]] = []
    if zip is not None:
        found = zip_data().get(zip)
        if found is None:
            raise RegistryQueryError(f"ZIP {zip} does not exist")
        if found[0] not in states:
            raise RegistryQueryError(f"ZIP {zip} is in {found[0]}; the registry covers {covers}")
        search = [(found[0], found[1])]
    if county is not None:
        key = county_key(county)
        search = [(st, state_counties(st)[key]) for st in states if key in state_counties(st)]
        if not search:
            spelled = {k: name for st in states for k, name in state_counties(st).items()}
            close = difflib.get_close_matches(key, list(spelled), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(spelled[c] for c in close)}?)" if close else ""
            raise RegistryQueryError(f"{county!r} is not a county of {covers}{hint}")
    return search


def _tiers(index: RegistryIndex, ids: list[str], zip: str | None, search: list[tuple[str, str]],
           local_resource_id: str | None) -> list[tuple[str, Sequence[int]]]:  # fmt: skip
    """(match, rows) in the order they are listed: the ids, the ZIP, the counties, their states' statewide rows;
    ``local_resource_id`` keeps only that row of them (or is the one tier without place hints); every row when
    there is no hint at all."""
    tiers: list[tuple[str, Sequence[int]]] = []
    if ids:
        tiers.append(("id", [index.by_id[i] for i in ids if i in index.by_id]))
    if zip is not None:
        tiers.append(("zip", index.by_zip.get(zip, [])))
    for st, name in search:
        tiers.append(("county", index.by_county.get(f"{st}|{county_key(name)}", [])))
    for st in dict.fromkeys(st for st, _ in search):
        tiers.append(("state", index.statewide.get(st, [])))
    if local_resource_id is not None:
        wanted = index.by_id.get(local_resource_id)
        if wanted is None:
            tiers = []
        elif tiers:  # a filter on the place hints: the row only if they reach it
            tiers = [(match, [i for i in rows if i == wanted]) for match, rows in tiers]
        else:
            tiers = [("id", [wanted])]
    elif not tiers:
        tiers.append(("filter", index.ordered))
    return tiers


def _listed(index: RegistryIndex, tiers: list[tuple[str, Sequence[int]]], resource_type: str | None,
            terms: set[int] | None, include_stale: bool, limit: int | None, now: datetime | None,
            offset: int) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
    """(the rows listed, ``offset`` skipped and at most ``limit``, with their status, age, match and note; how many
    passed the filters): each row once, in its first tier."""
    today = (now or utc_now()).timestamp() / DAY_S
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    total = 0
    for match, candidates in tiers:
        for i in candidates:
            if i in seen or (resource_type is not None and resource_type not in index.types[i]):
                continue
            if terms is not None and i not in terms:
                continue
            seen.add(i)
            status, age = index.status_and_age(i, today)
            if not index.shown(i, status, include_stale):
                continue
            total += 1
            if total > offset and (limit is None or len(out) < limit):
                row = index.rows[i]
                out.append({**row, "verification_status": status, "age_days": age, "match": match,
                            "verification_note": verification_note(row, status)})  # fmt: skip
    return out, total


def resolve(
    source: RegistryIndex | str | os.PathLike[str] | Any,
    *,
    zip: str | None = None,
    county: str | None = None,
    resource_type: str | None = None,
    local_resource_id: str | None = None,
    ids: Iterable[str] = (),
    taxonomy: str | None = None,
    include_stale: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
    offset: int = 0,
) -> Resolution:
    """Programs for the hints, most specific first: ``ids`` (found in retrieval metadata) in their order, then
    programs whose own ZIP or coverage includes ``zip``, then those of ``county`` (default: the ZIP's county), then
    the statewide lines of that state. ``resource_type`` (any of a row's types), ``taxonomy`` (a term's code or code
    prefix, or words of its name) and ``local_resource_id`` filter; only verified rows unless ``include_stale``
    (then stale and unverified rows too; undated rows also under the policy ``unverified_shown``). With no place
    hint, every row that passes the filters. ``offset`` skips that many of the rows first (paging: ``total`` still
    counts them). ``source`` is a RegistryIndex, a version directory or a snapshot (anything with ``.path``)."""
    index = source if isinstance(source, RegistryIndex) else load_registry_index(getattr(source, "path", source))
    if index is None:
        raise RegistryQueryError("this index version holds no registry: materialize registry_verification")
    search = _searched(index, zip, county)  # (state, county) searched
    if resource_type is not None and resource_type not in RESOURCE_TYPES:
        raise RegistryQueryError(f"unknown resource_type {resource_type!r}; known: {', '.join(RESOURCE_TYPES)}")
    terms = index.taxonomy_rows(taxonomy) if taxonomy is not None else None
    tiers = _tiers(index, list(ids), zip, search, local_resource_id)
    out, total = _listed(index, tiers, resource_type, terms, include_stale, limit, now, offset)
    return Resolution(rows=out, county=search[0][1] if search else None, total=total)
