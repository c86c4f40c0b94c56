"""ZIP codes: state, county and whether in use (the ``zipcodes`` package, loaded once), and each state's
counties by their comparison key."""

from __future__ import annotations

from functools import cache

from livemem.geo.names import county_key, without_county_word


@cache
def zip_data() -> dict[str, tuple[str, str, bool]]:
    """ZIP -> (state, county without the word County, in use), from the zipcodes package (loaded once)."""
    return {
        code: (z["state"], without_county_word(z["county"] or ""), bool(z["active"])) for code, z in _zip_rows().items()
    }


@cache
def zip_columns() -> tuple[dict[str, str], dict[str, str], dict[str, bool]]:
    """zip_data() as three dicts (state, county, in use) for vectorised lookups."""
    data = zip_data()
    return (
        {z: v[0] for z, v in data.items()},
        {z: v[1] for z, v in data.items()},
        {z: v[2] for z, v in data.items()},
    )


@cache
def state_counties(state: str) -> dict[str, str]:
    """county key -> county name, for the counties of a state."""
    return {county_key(c): c for s, c, _ in zip_data().values() if s == state and c}


@cache
def _zip_rows() -> dict[str, dict]:
    """ZIP -> the zipcodes package's row, read once, in a child process: ``zipcodes.list_all()`` is one C call that
    holds the GIL for seconds (6.4 s on a busy 2-core machine), during which no other thread of this process runs,
    such as a uvicorn worker's answer to its supervisor's health ping (unanswered for 5 s, the worker is killed;
    issue 49). The child hands the rows back pickled while this process waits without the GIL; where no child can
    be started (a daemonic process), they are read here."""
    import multiprocessing

    try:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return pool.apply(_read_zip_rows)
    except (OSError, AssertionError):  # no child process here
        return _read_zip_rows()


def _read_zip_rows() -> dict[str, dict]:
    import zipcodes

    return {z["zip_code"]: z for z in zipcodes.list_all()}


def zip_city(code: str) -> str | None:
    """The post office town of a ZIP code (its primary city name), None when unknown."""
    row = _zip_rows().get(code)
    return row["city"].title() if row and row.get("city") else None


@cache
def zip_towns(state: str) -> dict[str, tuple[str, ...]]:
    """lower-case town name (the primary and acceptable city names of the state's ZIP codes) → every county its
    ZIP codes are filed under, most ZIP codes first (ties: alphabetical)."""
    from collections import Counter

    counts: dict[str, Counter] = {}
    for z in _zip_rows().values():
        if z["state"] != state or not z["county"]:
            continue
        county = without_county_word(z["county"])
        for name in {z["city"], *(z.get("acceptable_cities") or [])}:
            counts.setdefault(name.lower(), Counter())[county] += 1
    return {t: tuple(sorted(c, key=lambda k: (-c[k], k))) for t, c in counts.items()}


def zip_point(code: str) -> tuple[float, float] | None:
    """(lat, lon) of a ZIP code's point in the ZIP data, None when unknown."""
    row = _zip_rows().get(code)
    try:
        return (float(row["lat"]), float(row["long"])) if row else None
    except (KeyError, TypeError, ValueError):
        return None


@cache
def town_zip_codes() -> dict[str, tuple[str, ...]]:
    """lower-case post office town → the ZIP codes it is the primary city of (every state)."""
    found: dict[str, list[str]] = {}
    for code, row in _zip_rows().items():
        if row.get("city"):
            found.setdefault(row["city"].lower(), []).append(code)
    return {town: tuple(codes) for town, codes in found.items()}


@cache
def county_point(state: str, county: str) -> tuple[float, float] | None:
    """The middle of a county: the mean of its ZIP codes' points in the ZIP data (None when it has none)."""
    key = county_key(county)
    points = [
        p for code, (s, c, _) in zip_data().items() if s == state and county_key(c) == key and (p := zip_point(code))
    ]
    if not points:
        return None
    return (sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points))
