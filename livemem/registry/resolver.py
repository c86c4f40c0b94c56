"""The serving-side resolver: which programs serve this ZIP / county, from a version's published registry,
loaded once per version into dictionaries keyed by id, ZIP and county."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
from livemem.registry.fields import DAY_S, FIELDS, RESOURCE_TYPES
from livemem.version import connect


class RegistryQueryError(LivingMemoryError):
    """A resolver hint that cannot be answered (ZIP outside the state, unknown county)."""


@dataclass
class RegistryIndex:
    """A version's published registry in memory, with lookups by id, ZIP (own ZIP or coverage) and county."""

    version_id: str
    state: str
    freshness_days: int
    rows: list[dict[str, Any]]
    verified_day: np.ndarray  # days since the epoch of last_verified_at (NaN when never verified)
    recorded_verified: np.ndarray
    resource_type: np.ndarray
    by_id: dict[str, int]
    by_zip: dict[str, list[int]]
    by_county: dict[str, list[int]]
    ordered: list[int]

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], version_id: str, state: str, freshness_days: int) -> RegistryIndex:
        """``rows`` in the order results are listed in within a tier (county, type, name, id)."""
        for row in rows:
            row["zip_coverage"] = list(row["zip_coverage"] or [])
        verified = pd.to_datetime(
            pd.Series([r["last_verified_at"] for r in rows], dtype=object), utc=True, errors="coerce", format="ISO8601"
        )
        days = (verified - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64) / DAY_S
        by_zip: dict[str, list[int]] = {}
        for i, row in enumerate(rows):  # own ZIP first, then coverage (each in row order)
            by_zip.setdefault(row["zip"], []).append(i)
        for i, row in enumerate(rows):
            for z in row["zip_coverage"]:
                if z != row["zip"]:
                    by_zip.setdefault(z, []).append(i)
        by_county: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            by_county.setdefault(county_key(row["county"]), []).append(i)
        return cls(
            version_id=version_id,
            state=state,
            freshness_days=freshness_days,
            rows=rows,
            verified_day=days,
            recorded_verified=np.array([r["verification_status"] == "verified" for r in rows], dtype=bool),
            resource_type=np.array([r["resource_type"] for r in rows], dtype=object),
            by_id={row["local_resource_id"]: i for i, row in enumerate(rows)},
            by_zip=by_zip,
            by_county=by_county,
            ordered=list(range(len(rows))),
        )

    def status_and_age(self, i: int, today: float) -> tuple[str, int | None]:
        day = self.verified_day[i]
        if day != day:
            return "unverified", None
        age = max(0, int(today - day))
        if not self.recorded_verified[i]:
            return "unverified", age
        return ("stale" if age > self.freshness_days else "verified"), age


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
        found = con.execute(
            f"SELECT {', '.join(FIELDS)} FROM registry ORDER BY county, resource_type, name, local_resource_id"
        ).fetchall()
    finally:
        con.close()
    rows = [dict(zip(FIELDS, r, strict=True)) for r in found]
    return RegistryIndex.from_rows(rows, manifest["version_id"], section["state"], section["freshness_days"])


def resolve(
    source: RegistryIndex | str | os.PathLike[str] | Any,
    *,
    zip: str | None = None,
    county: str | None = None,
    resource_type: str | None = None,
    local_resource_id: str | None = None,
    ids: Iterable[str] = (),
    include_stale: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
) -> Resolution:
    """Programs for the hints, most specific first: ``ids`` (found in retrieval metadata) in their order, then
    programs whose own ZIP or coverage includes ``zip``, then those of ``county`` (default: the ZIP's county).
    ``resource_type`` and ``local_resource_id`` filter; only verified rows unless ``include_stale`` (then stale and
    unverified rows too). With no place hint, every row that passes the filters. ``source`` is a RegistryIndex, a
    version directory or a snapshot (anything with ``.path``)."""
    index = source if isinstance(source, RegistryIndex) else load_registry_index(getattr(source, "path", source))
    if index is None:
        raise RegistryQueryError("this index version holds no registry: materialize registry_verification")
    search_county = None
    if zip is not None:
        found = zip_data().get(zip)
        if found is None:
            raise RegistryQueryError(f"ZIP {zip} does not exist")
        if found[0] != index.state:
            raise RegistryQueryError(f"ZIP {zip} is in {found[0]}; the registry covers {index.state}")
        search_county = found[1]
    if county is not None:
        names = state_counties(index.state)
        key = county_key(county)
        if key not in names:
            close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(names[c] for c in close)}?)" if close else ""
            raise RegistryQueryError(f"{county!r} is not a county of {index.state}{hint}")
        search_county = names[key]
    if resource_type is not None and resource_type not in RESOURCE_TYPES:
        raise RegistryQueryError(f"unknown resource_type {resource_type!r}; known: {', '.join(RESOURCE_TYPES)}")

    ids = list(ids)
    tiers: list[tuple[str, Sequence[int]]] = []
    if ids:
        tiers.append(("id", [index.by_id[i] for i in ids if i in index.by_id]))
    if zip is not None:
        tiers.append(("zip", index.by_zip.get(zip, [])))
    if search_county is not None:
        tiers.append(("county", index.by_county.get(county_key(search_county), [])))
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

    today = (now or utc_now()).timestamp() / DAY_S
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    total = 0
    for match, candidates in tiers:
        for i in candidates:
            if i in seen or (resource_type is not None and index.resource_type[i] != resource_type):
                continue
            seen.add(i)
            status, age = index.status_and_age(i, today)
            if status != "verified" and not include_stale:
                continue
            total += 1
            if limit is None or len(out) < limit:
                out.append({**index.rows[i], "verification_status": status, "age_days": age, "match": match})
    return Resolution(rows=out, county=search_county, total=total)
