"""A generator of 211 exports shaped like the real ones: HSDS 1.0 / 1.1 / 2.0 tabular data packages (and 3.0, through
the registry's own exporter) of N services, deterministic from a seed.

What real 211 exports look like and this reproduces: integer ids; a third as many organizations as services, a
state agency (``Florida DCF ACCESS``) whose services are named after its offices ("HIALEAH", "CENTRAL"); AIRS
taxonomy terms (code and name); messy phone cells ("(305) 621-2929 (24 hrs)", "800-447-8223 (toll-free, 24
hrs)", "305-469-4550, ext. 228", "305-891-8850 xOPT2", two numbers in one cell, "211"); one regular_schedule row
per weekday with the same hours; undated services (no metadata, no package date); services in the neighbouring
states' border counties; statewide lines without an address; services whose organization is missing; a few that
nobody could reach (no address, phone, URL or e-mail); an e-mail cell holding a web address. Addresses use real
Florida ZIP codes, cities and counties (the ``zipcodes`` package).

    from support.hsds211 import write_package
    write_package(tmp_path / "pkg", services=4000, version="1.0", seed=7)
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
HSDS_DIR = PROJECT / "schemas" / "hsds"

# (AIRS code, name) of the terms services are filed under; the last few map to no registry type on purpose
TERMS = (
    ("BD-1800.2000", "Food Pantries"),
    ("BD-1800.6000", "Ongoing Emergency Food Assistance"),
    ("BD-5000.8300", "Soup Kitchens"),
    ("BD-5000.3500", "Home Delivered Meals"),
    ("BH-1800.8500", "Homeless Shelter"),
    ("BH-3800.7000", "Rent Payment Assistance"),
    ("BV-8900.1800", "Electric Service Payment Assistance"),
    ("BV-8900.9300", "Water Service Payment Assistance"),
    ("NL-6000.2000", "Food Stamps/SNAP"),
    ("NL-6000.9500", "WIC"),
    ("NL-5000.5000", "Medicaid"),
    ("LN-1500", "Community Clinics"),
    ("LV-1600", "Dental Care"),
    ("RP-1400.8000", "Outpatient Mental Health Facilities"),
    ("RX-8250", "Substance Use Disorder Treatment Programs"),
    ("FT-3200.2500", "General Legal Aid"),
    ("BT-4500.6500", "Medical Appointments Transportation"),
    ("PH-1250.1000", "Child Care Centers"),
    ("ND-6500", "Job Search/Placement"),
    ("HH-0500.8000", "GED/High School Equivalency Test Instruction"),
    ("BM-6500.1500", "Clothing"),
    ("TJ-3000.8000", "Specialized Information and Referral"),
    ("DT-8800", "Tax Preparation Assistance"),
    ("PN-8100", "Volunteer Opportunities"),
)
UNMAPPED = 3  # the last TERMS
SECONDARY = (("YB-8000", "Older Adults"), ("YF-5000", "Homeless People"), ("YJ-1000", "Veterans"))
DCF_OFFICES = ("HIALEAH", "CENTRAL", "NORTH MIAMI", "LITTLE HAVANA", "HOMESTEAD", "KENDALL", "OPA-LOCKA", "WEST DADE")
WORDS = (
    "Community",
    "Family",
    "Hope",
    "Harbor",
    "Sunshine",
    "Coastal",
    "Citrus",
    "Bay",
    "Gulf",
    "Palm",
    "Unity",
    "Grace",
)
KINDS = ("Services", "Ministries", "Center", "Alliance", "Outreach", "Coalition", "Network", "Mission")
STREETS = ("Main St", "NW 7th Ave", "Biscayne Blvd", "W Flagler St", "Palm Ave", "Orange Ave", "Gulf Blvd", "1st St N")
LANGS = ("English", "Spanish", "Haitian Creole", "Portuguese", "Vietnamese")
ACCESS = ("wheelchair", "ramp", "elevator", "disabled_parking", "tty")
FEES = ("None.", "Sliding scale based on income.", "$5 per visit.", "Free.")
ELIGIBILITY = ("adult", "family", "child", "teen", "female")
BORDER = {"GA": ("Thomas", "Lowndes", "Decatur", "Camden", "Grady"), "AL": ("Houston", "Geneva", "Escambia", "Baldwin")}
PACKAGE_DATE = "2019-08-19"


@dataclass
class _Place:
    zip: str
    city: str
    county: str
    state: str
    area: str
    lat: str
    lon: str


def _places(state: str, counties: Iterable[str] | None = None) -> list[_Place]:
    import zipcodes

    wanted = {f"{c} County" for c in counties} if counties else None
    out = []
    for z in zipcodes.filter_by(state=state):
        if z["zip_code_type"] != "STANDARD" or not z["active"] or not z["county"]:
            continue
        if wanted and z["county"] not in wanted:
            continue
        area = (z.get("area_codes") or ["305"])[0]
        out.append(
            _Place(
                z["zip_code"], z["city"].title(), z["county"].removesuffix(" County"), state, area, z["lat"], z["long"]
            )
        )
    return sorted(out, key=lambda p: p.zip)


def _phone(rng: random.Random, area: str) -> str:
    exchange, line = rng.randint(200, 989), rng.randint(0, 9999)
    plain = f"({area}) {exchange}-{line:04d}"
    dashed = f"{area}-{exchange}-{line:04d}"
    roll = rng.random()
    if roll < 0.55:
        return plain
    if roll < 0.65:
        return f"{plain} (24 hrs)"
    if roll < 0.72:
        return f"800-{exchange}-{line:04d} (toll-free, 24 hrs)"
    if roll < 0.80:
        return f"{dashed}, ext. {rng.randint(100, 399)}"
    if roll < 0.84:
        return f"{dashed} xOPT{rng.randint(1, 4)}"
    if roll < 0.92:
        return f"{dashed} / {area}-{rng.randint(200, 989)}-{rng.randint(0, 9999):04d}"
    if roll < 0.96:
        return f"{area}.{exchange}.{line:04d}"
    return "211"


@dataclass
class Tables:
    """The generated records, per HSDS 1.x table (2.0 / 3.0 are written from these)."""

    organizations: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    services_at_location: list[dict[str, Any]] = field(default_factory=list)
    physical_addresses: list[dict[str, Any]] = field(default_factory=list)
    phones: list[dict[str, Any]] = field(default_factory=list)
    regular_schedules: list[dict[str, Any]] = field(default_factory=list)
    services_taxonomy: list[dict[str, Any]] = field(default_factory=list)
    taxonomy: list[dict[str, Any]] = field(default_factory=list)
    service_areas: list[dict[str, Any]] = field(default_factory=list)
    languages: list[dict[str, Any]] = field(default_factory=list)
    accessibility_for_disabilities: list[dict[str, Any]] = field(default_factory=list)
    eligibility: list[dict[str, Any]] = field(default_factory=list)
    fees: list[dict[str, Any]] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    funding: list[dict[str, Any]] = field(default_factory=list)
    expected: dict[str, Any] = field(default_factory=dict)  # what the generator put in (for the tests' checks)


def generate(services: int, *, seed: int = 0) -> Tables:
    """The records of a 211 export of ``services`` services (see the module docstring)."""
    rng = random.Random(seed)
    home = _places("FL")
    border = [p for state, counties in BORDER.items() for p in _places(state, counties)]
    miami = [p for p in home if p.county == "Miami-Dade"]
    t = Tables()
    t.taxonomy = [{"id": code, "name": name, "parent_id": code.split(".")[0] if "." in code else code[:2],
                   "parent_name": None, "vocabulary": "AIRS"} for code, name in (*TERMS, *SECONDARY)]  # fmt: skip
    n_orgs = max(2, services // 3)
    t.organizations.append({"id": 1, "name": "Florida DCF ACCESS", "description": "Florida Department of Children "
                            "and Families: SNAP, Medicaid and cash assistance.", "url": "https://www.myflfamilies.com",
                            "email": "access@myflfamilies.com"})  # fmt: skip
    for o in range(2, n_orgs + 1):
        name = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(KINDS)}"
        t.organizations.append({"id": o, "name": f"{name} {o}", "description": f"{name}: a nonprofit provider.",
                                "url": f"https://org{o}.example.org" if rng.random() < 0.7 else None,
                                "email": f"info@org{o}.example.org" if rng.random() < 0.5 else None})  # fmt: skip
    counts = {"out_of_state": 0, "statewide": 0, "unreachable": 0, "missing_org": 0, "dated": 0, "dcf": 0}
    ids = iter(range(1, 10**9))
    for s in range(1, services + 1):
        roll = rng.random()
        org_id: int | None = rng.randint(2, n_orgs)
        name_term = (
            TERMS[rng.randrange(len(TERMS) - UNMAPPED)] if rng.random() < 0.95 else rng.choice(TERMS[-UNMAPPED:])
        )
        place = rng.choice(home)
        kind = "local"
        if roll < 0.04:
            kind, place = "out_of_state", rng.choice(border)
        elif roll < 0.06:
            kind = "statewide"
        elif roll < 0.07:
            kind = "unreachable"
        elif roll < 0.10:
            org_id = rng.choice([None, n_orgs + 1000 + s])  # no organization / one the export left out
            counts["missing_org"] += 1
        elif roll < 0.13:
            kind, org_id, place = "dcf", 1, rng.choice(miami)
            name_term = rng.choice([TERMS[8], TERMS[10]])
        counts[kind] = counts.get(kind, 0) + 1
        name = rng.choice(DCF_OFFICES) if kind == "dcf" else f"{name_term[1]} - {rng.choice(WORDS)} Site {s}"
        email = None
        if kind != "unreachable" and rng.random() < 0.3:
            email = f"help{s}@example.org" if rng.random() < 0.9 else f"www.site{s}.example.org"  # a URL, sometimes
        service = {"id": s, "organization_id": org_id, "name": name, "description": f"{name_term[1]} for residents.",
                   "url": None, "email": email, "status": "active" if rng.random() < 0.98 else "inactive",
                   "fees": rng.choice(FEES) if rng.random() < 0.4 else None}  # fmt: skip
        if kind == "unreachable":
            service["organization_id"] = None
        t.services.append(service)
        terms = [name_term[0]] + ([rng.choice(SECONDARY)[0]] if rng.random() < 0.3 else [])
        if rng.random() < 0.15:
            extra = TERMS[rng.randrange(len(TERMS) - UNMAPPED)][0]
            terms += [extra] if extra not in terms else []
        for code in terms:
            t.services_taxonomy.append({"id": next(ids), "service_id": s, "taxonomy_id": code})
        if kind == "statewide":
            t.phones.append({"id": next(ids), "service_id": s, "number": rng.choice(["211", "1-800-962-2873 (toll-free, 24 hrs)"]), "type": "voice"})  # fmt: skip
            t.service_areas.append({"id": next(ids), "service_id": s, "service_area": "Statewide"})
            continue
        if kind == "unreachable":
            continue
        loc = s
        t.locations.append(
            {"id": loc, "organization_id": org_id, "name": name, "latitude": place.lat, "longitude": place.lon}
        )
        t.services_at_location.append({"id": next(ids), "service_id": s, "location_id": loc})
        t.physical_addresses.append({"id": next(ids), "location_id": loc, "address_1": f"{rng.randint(10, 9999)} {rng.choice(STREETS)}",
                                     "city": place.city, "region": f"{place.county} County" if rng.random() < 0.5 else None,
                                     "state_province": place.state, "postal_code": place.zip, "country": "US"})  # fmt: skip
        if rng.random() < 0.93:
            t.phones.append({"id": next(ids), "service_id": s, "number": _phone(rng, place.area), "type": "voice"})
        if rng.random() < 0.1:
            t.phones.append({"id": next(ids), "service_id": s, "number": f"({place.area}) {rng.randint(200, 989)}-{rng.randint(0, 9999):04d}", "type": "fax"})  # fmt: skip
        if rng.random() < 0.75:
            sat = rng.random() < 0.25
            for day in range(1, 6 + sat):
                opens, closes = ("10:00", "14:00") if day == 6 else ("09:00", "17:00")
                t.regular_schedules.append({"id": next(ids), "service_id": s, "weekday": day, "opens_at": opens, "closes_at": closes})  # fmt: skip
        if rng.random() < 0.5:
            t.service_areas.append({"id": next(ids), "service_id": s, "service_area": f"{place.county} County"})
        for lang in ["English", *rng.sample(LANGS[1:], rng.randint(0, 2))]:
            t.languages.append({"id": next(ids), "service_id": s, "language": lang})
        if rng.random() < 0.3:
            t.accessibility_for_disabilities.append(
                {"id": next(ids), "location_id": loc, "accessibility": rng.choice(ACCESS)}
            )
        if rng.random() < 0.3:
            t.eligibility.append({"id": next(ids), "service_id": s, "eligibility": rng.choice(ELIGIBILITY)})
        if rng.random() < 0.4:
            counts["dated"] += 1
            t.metadata.append({"id": next(ids), "resource_id": s, "last_action_date": f"20{rng.randint(17, 24)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                               "resource_type": "service", "last_action_type": "update", "field_name": "service", "previous_value": "-",
                               "replacement_value": "-", "updated_by": "211 data team"})  # fmt: skip
        if rng.random() < 0.2:
            t.funding.append({"id": next(ids), "service_id": s, "source": "United Way"})
    t.expected = {"services": services, "organizations": len(t.organizations), **counts}
    return t


# the columns each version's tables are written with (the version's own field names)
def _fields(version: str) -> dict[str, list[str]]:
    package = json.loads((HSDS_DIR / f"v{version}" / "datapackage.json").read_text(encoding="utf-8"))
    return {Path(r["path"]).stem: [f["name"] for f in r["schema"]["fields"]] for r in package["resources"]}


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _legacy_tables(t: Tables, version: str) -> dict[str, list[dict[str, Any]]]:
    """The records as the tables of an HSDS 1.0 / 1.1 / 2.0 package."""
    tables: dict[str, list[dict[str, Any]]] = {
        "organizations": t.organizations, "services": t.services, "locations": t.locations,
        "services_at_location": t.services_at_location, "physical_addresses": t.physical_addresses,
        "phones": t.phones, "service_areas": t.service_areas, "languages": t.languages,
        "accessibility_for_disabilities": t.accessibility_for_disabilities, "metadata": t.metadata,
        "funding": t.funding,
    }  # fmt: skip
    if version in ("1.0", "1.1"):
        tables["regular_schedules"] = t.regular_schedules
        tables["taxonomy"] = t.taxonomy
        tables["eligibility"] = t.eligibility
    if version == "1.0":  # 1.0: a service lists its terms in taxonomy_ids, fees in fees.csv
        by_service: dict[int, list[str]] = {}
        for link in t.services_taxonomy:
            by_service.setdefault(link["service_id"], []).append(link["taxonomy_id"])
        tables["services"] = [{**s, "taxonomy_ids": ",".join(by_service.get(s["id"], []))} for s in t.services]
        tables["fees"] = [
            {"id": f"fee-{s['id']}", "service_id": s["id"], "fee": s["fees"]} for s in t.services if s.get("fees")
        ]
    elif version == "1.1":
        tables["services_taxonomy"] = t.services_taxonomy
    else:  # 2.0: one schedules row per weekday (byday), terms as service_attributes of taxonomy_terms
        days = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
        tables["schedules"] = [
            {"id": r["id"], "service_id": r["service_id"], "freq": "WEEKLY", "byday": days[r["weekday"] - 1],
             "opens_at": r["opens_at"], "closes_at": r["closes_at"],
             "description": "Mon-Fri 9am-5pm" if r["weekday"] < 6 else "Sat 10am-2pm"}
            for r in t.regular_schedules
        ]  # fmt: skip
        tables["service_attributes"] = [
            {"id": r["id"], "service_id": r["service_id"], "taxonomy_term_id": r["taxonomy_id"]}
            for r in t.services_taxonomy
        ]
        tables["taxonomy_terms"] = [
            {
                "id": r["id"],
                "term": r["name"],
                "description": r["name"],
                "parent_id": r["parent_id"],
                "taxonomy": "AIRS",
            }
            for r in t.taxonomy
        ]
        tables["eligibility"] = [{"id": r["id"], "service_id": r["service_id"]} for r in t.eligibility]
    return tables


def write_package(
    directory: str | Path, *, services: int = 4000, version: str = "1.0", seed: int = 0, dated: bool = False
) -> Path:
    """Write a 211 export of ``services`` services as an HSDS ``version`` (1.0, 1.1, 2.0, 3.0) tabular package into
    ``directory``; ``dated``: the package says when it was made (``last_modified``: every row is then dated)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    t = generate(services, seed=seed)
    if version == "3.0":
        return _write_v3(directory, t)
    fields = _fields(version)
    tables = _legacy_tables(t, version)
    package = json.loads((HSDS_DIR / f"v{version}" / "datapackage.json").read_text(encoding="utf-8"))
    package["title"] = "211 Florida (synthetic) community resources"
    package["resources"] = [r for r in package["resources"] if Path(r["path"]).stem in tables]
    if dated:
        package["last_modified"] = PACKAGE_DATE
    (directory / "datapackage.json").write_text(json.dumps(package, indent=1) + "\n", encoding="utf-8")
    for stem, rows in tables.items():
        _write_csv(directory / f"{stem}.csv", fields[stem], rows)
    (directory / "expected.json").write_text(json.dumps(t.expected, indent=1) + "\n", encoding="utf-8")
    return directory


def _write_v3(directory: Path, t: Tables) -> Path:
    """HSDS 3.0: the 1.1 records imported and written back by the registry's own HSDS 3.0 exporter (tabular/)."""
    import tempfile

    from livemem.registry import hsds
    from livemem.registry.hsds_legacy import import_package

    with tempfile.TemporaryDirectory() as scratch:
        legacy = Path(scratch) / "v1"
        legacy.mkdir()
        fields = _fields("1.1")
        for stem, rows in _legacy_tables(t, "1.1").items():
            _write_csv(legacy / f"{stem}.csv", fields[stem], rows)
        rows = [r for r in import_package(legacy).rows if r.get("zip") and r.get("county")]
    # what HSDS 3.0 cannot hold as such (an e-mail cell with a URL) is left out, as a 3.0 publisher would
    clean = [
        {**r, "contact_email": r["contact_email"] if "@" in (r.get("contact_email") or "@") else None} for r in rows
    ]
    hsds.write_export(hsds.export_services(clean), directory)
    return directory / hsds.TABULAR_DIR


# the cases the committed fixture (tests/fixtures/hsds_v1_211/) holds for sure, service id -> phone cell
FIXTURE_PHONES = {
    1: "(415) 621-2929 (24 hrs)",
    2: "800-447-8223 (toll-free, 24 hrs)",
    3: "415-469-4550, ext. 228",
    4: "305-891-8850 xOPT2",
    5: "305-555-1234 / 786-555-9876",
    6: "211",
    7: "311",
}


def write_fixture(directory: str | Path) -> Path:
    """The committed fixture ``tests/fixtures/hsds_v1_211``: 30 services as an HSDS 1.1 package whose
    ``datapackage.json`` says ``"version": "1.0"`` (as 1.1's own does), with the phone cells of ``FIXTURE_PHONES``,
    Florida DCF ACCESS offices named after their sites, a CSV no HSDS version defines (``notes.csv``) and one
    (``programs.csv``) the importer does not read. Regenerate: ``python -c "from support.hsds211 import
    write_fixture; write_fixture('fixtures/hsds_v1_211')"`` from ``tests/``."""
    directory = Path(directory)
    write_package(directory, services=30, version="1.1", seed=211)
    phones = _read(directory / "phones.csv")
    columns = list(phones[0])
    by_service = {int(p["service_id"]): p for p in phones}
    for sid, cell in FIXTURE_PHONES.items():
        if sid in by_service:
            by_service[sid]["number"] = cell
        else:
            phones.append({**dict.fromkeys(columns, ""), "id": f"9{sid:03d}", "service_id": str(sid), "number": cell})
    _write_csv(directory / "phones.csv", columns, phones)
    offices = {
        "21": ("HIALEAH", "33010", "Hialeah"),
        "22": ("CENTRAL", "33125", "Miami"),
        "23": ("NORTH MIAMI", "33161", "North Miami"),
    }
    services = _read(directory / "services.csv")
    for service in services:
        if service["id"] in offices:
            service.update(
                organization_id="1", name=offices[service["id"]][0], description="SNAP and Medicaid applications."
            )
    _write_csv(directory / "services.csv", list(services[0]), services)
    addresses = _read(directory / "physical_addresses.csv")
    for address in addresses:
        if address["location_id"] in offices:
            _, zip5, city = offices[address["location_id"]]
            address.update(postal_code=zip5, city=city, region="Miami-Dade County", state_province="FL")
    _write_csv(directory / "physical_addresses.csv", list(addresses[0]), addresses)
    links = [r for r in _read(directory / "services_taxonomy.csv") if r["service_id"] not in offices]
    for sid in offices:
        for n, code in enumerate(("NL-6000.2000", "NL-5000.5000")):
            links.append({"id": f"8{sid}{n}", "service_id": sid, "taxonomy_id": code, "taxonomy_detail": ""})
    _write_csv(directory / "services_taxonomy.csv", list(links[0]), links)
    _write_csv(
        directory / "programs.csv",
        ["id", "organization_id", "name"],
        [{"id": 1, "organization_id": 1, "name": "ACCESS"}],
    )
    _write_csv(directory / "notes.csv", ["id", "note"], [{"id": 1, "note": "exported by the 211's CMS"}])
    (directory / "expected.json").unlink()
    return directory
