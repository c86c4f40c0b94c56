"""Open Referral HSDS 1.0, 1.1 and 2.0 tabular data packages → registry rows, and the import-fidelity report.

Most 211 data in the wild is an HSDS 1.x or 2.0 *tabular data package*: a ``datapackage.json`` and one CSV per
table, ids that are integers or the 211's own strings, AIRS taxonomy terms. ``import_hsds`` reads any HSDS
directory: it detects the version (``detect_version``: the package's ``"version"``, told apart by its tables where
the spec left the field unchanged; without a package, by the tables alone, and the report says so), hands HSDS 3.0
to ``livemem.registry.hsds.import_export`` and reads 1.x / 2.0 here, against the ``datapackage.json`` of that
version vendored in ``schemas/hsds/v1.0``, ``v1.1``, ``v2.0`` (fields, types, required fields, enums; ids need not
be UUIDs).

What is kept, one registry row per service (the fields of ``schemas/local_resource.schema.json``):

- the service's own id as ``source_id`` and, made to fit the registry's id pattern (``listing.registry_id``), as
  ``local_resource_id``; its organization's name as ``organization``;
- its address (the service's locations: ``services_at_location``, a 1.0 service's ``location_id``, else its
  organization's), ``zip`` / ``county`` / ``state``; the ZIPs of its other places and of its service areas as
  ``zip_coverage``; the service areas as words in ``service_area``;
- every phone (``listing.parse_phones``: notes, extensions, several numbers in one cell, N11 lines) in ``phones``,
  the first as ``contact_phone``; e-mail (an e-mail cell holding a web address is used as the URL), URL;
- every taxonomy term (code, name, taxonomy) in ``taxonomy_terms``, and the needs they map to
  (``livemem.registry.taxonomy``) in ``resource_types`` / ``resource_type``;
- languages, accessibility, fees, eligibility; schedules merged (``listing.merge_schedules``) and ``hours``;
- ``listed_at``: the service's latest ``metadata.last_action_date``, else the package's ``last_modified`` /
  ``created``; rows are imported unverified (the registry's policy for undated imports decides what that means).

A field that breaks its version's rules is reported (``flagged``, counted per table, field and rule) and the program
kept; only a service nobody could reach or find (no address or ZIP and no phone, URL or e-mail) is left out, with
the reason. Every table the version defines is read or reported "not read" with its row count; CSVs the version does
not define are reported too (and read when another HSDS version defines them).
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from livemem.geo.names import without_county_word
from livemem.geo.zips import zip_data
from livemem.registry.hsds import (
    HSDS_DIR,
    HsdsError,
    HsdsImport,
    Problem,
    closed_hours,
    import_export,
    table_file,
)
from livemem.registry.listing import (
    access_text,
    clock,
    day_code,
    day_codes,
    hours_line,
    merge_schedules,
    parse_phones,
    phone_text,
    registry_id,
    structured,
    unique,
)
from livemem.registry.taxonomy import is_airs_code, name_types, term_types

LEGACY_VERSIONS = ("1.0", "1.1", "2.0")
PACKAGE = "datapackage.json"
# the tables this reader uses (file stems); every other table of a version is reported "not read" with its count
READ_TABLES = (
    "services", "organizations", "locations", "services_at_location", "physical_addresses", "postal_addresses",
    "phones", "contacts", "regular_schedules", "schedules", "services_taxonomy", "taxonomy", "service_attributes",
    "other_attributes", "taxonomy_terms", "eligibility", "service_areas", "languages", "interpretation_services",
    "accessibility_for_disabilities", "fees", "metadata",
)  # fmt: skip
MAX_PROBLEMS = 500  # field flags listed one by one (all are counted in the report)
ZIP5 = re.compile(r"\b(\d{5})(?:-\d{4})?\b")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
URLISH = re.compile(r"^(?:https?://|www\.)\S+$|^[a-z0-9-]+(?:\.[a-z0-9-]+)+(?:/\S*)?$", re.IGNORECASE)
STATE_NAMES = {
    "florida": "FL", "georgia": "GA", "alabama": "AL", "west virginia": "WV", "virginia": "VA", "kentucky": "KY",
    "ohio": "OH", "pennsylvania": "PA", "maryland": "MD", "california": "CA",
}  # fmt: skip


# --- the vendored profiles -----------------------------------------------------------------------------------------
@cache
def legacy_profile(version: str) -> dict[str, Any]:
    """The vendored ``datapackage.json`` of HSDS ``version`` (1.0, 1.1, 2.0)."""
    return json.loads((HSDS_DIR / f"v{version}" / PACKAGE).read_text(encoding="utf-8"))


@cache
def version_tables(version: str) -> dict[str, list[dict[str, Any]]]:
    """file stem -> its fields (name, type, constraints) for every table HSDS ``version`` defines."""
    return {Path(r["path"]).stem: r["schema"]["fields"] for r in legacy_profile(version)["resources"]}


@cache
def _any_version_fields() -> dict[str, list[dict[str, Any]]]:
    """file stem -> fields, for every table any legacy version defines (the newest definition)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for version in LEGACY_VERSIONS:
        out.update(version_tables(version))
    return out


V3_TABLES = ("services", "addresses", "service_at_location", "attributes", "schedules", "taxonomy_terms")


def detect_version(directory: Path) -> tuple[str, str]:
    """(version, how it was told): ``1.0`` / ``1.1`` / ``2.0`` / ``3.0``."""
    stems = {p.stem for p in directory.glob("*.csv")} | {p.stem for p in directory.glob("*.json")} - {"datapackage"}
    package = _package(directory)
    declared = str(package.get("version") or "").strip() if package else ""
    if package:
        stems |= {Path(str(r.get("path", ""))).stem for r in package.get("resources", []) if isinstance(r, dict)}
    by_tables = _version_by_tables(stems)
    if declared:
        major = declared.lstrip("vV").split(".")
        if major[0] == "3":
            return "3.0", f"declared by {PACKAGE} (version {declared!r})"
        if major[0] == "2":
            return "2.0", f"declared by {PACKAGE} (version {declared!r})"
        if major[0] == "1":
            if len(major) > 1 and major[1] == "1":
                return "1.1", f"declared by {PACKAGE} (version {declared!r})"
            if by_tables == "1.1":  # HSDS 1.1's own datapackage.json still says "1.0"
                return (
                    "1.1",
                    f"{PACKAGE} declares {declared!r}; services_taxonomy.csv is HSDS 1.1's (1.1 kept the field)",
                )
            return "1.0", f"declared by {PACKAGE} (version {declared!r})"
    where = f"{PACKAGE} has no version" if package else f"no {PACKAGE}"
    if by_tables is None:
        raise HsdsError(f"HSDS export {directory}: {where} and no services table")
    return by_tables, f"{where}: detected by its tables"


def _version_by_tables(stems: set[str]) -> str | None:
    if "services" not in stems:
        return None
    if {"addresses", "attributes", "service_at_location"} & stems:
        return "3.0"
    if {"service_attributes", "other_attributes", "taxonomy_terms"} & stems or (
        "schedules" in stems and "regular_schedules" not in stems
    ):
        return "2.0"
    if "services_taxonomy" in stems:
        return "1.1"
    return "1.0" if {"physical_addresses", "postal_addresses", "regular_schedules", "taxonomy"} & stems else "3.0"


def _package(directory: Path) -> dict[str, Any] | None:
    path = directory / PACKAGE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HsdsError(f"{path} cannot be read: {exc}") from exc
    return data if isinstance(data, dict) else None


# --- reading and checking the tables -------------------------------------------------------------------------------
@dataclass
class _Table:
    rows: list[dict[str, str]]
    lines: list[int]
    columns: list[str]
    encoding: str = "utf-8-sig"


def _read_csv(path: Path) -> _Table:
    """A table's rows: cells stripped, empty ones absent, column names in lower case. A file that is not UTF-8 is
    read as Windows-1252 (what spreadsheet exports on Windows write), and the table says so (``encoding``)."""
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            with open(path, encoding=encoding, newline="") as fh:
                reader = csv.DictReader(fh)
                reader.fieldnames = [c.strip().lower() for c in reader.fieldnames or []]
                rows, lines, line = [], [], 2
                for raw in reader:
                    rows.append({k: v.strip() for k, v in raw.items() if k and isinstance(v, str) and v.strip()})
                    lines.append(line)
                    line = reader.line_num + 1
                return _Table(rows, lines, list(reader.fieldnames), encoding)
        except UnicodeDecodeError as exc:
            if encoding == "cp1252":
                raise HsdsError(f"HSDS table {path.name} cannot be read: {exc}") from exc
        except (OSError, csv.Error) as exc:
            raise HsdsError(f"HSDS table {path.name} cannot be read: {exc}") from exc
    raise AssertionError("unreachable")


def _count_rows(path: Path) -> int:
    try:
        with open(path, encoding="utf-8-sig", newline="", errors="replace") as fh:
            return sum(1 for _ in csv.DictReader(fh))
    except (OSError, csv.Error):
        return 0


_TYPE_CHECKS = {
    "integer": re.compile(r"^[+-]?\d+(?:\.0+)?$"),
    "number": re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"),
    "boolean": re.compile(r"^(?:true|false|yes|no|1|0|t|f|y|n)$", re.IGNORECASE),
    "date": re.compile(r"^\d{4}(?:-\d{2}-\d{2})?$"),
    "datetime": re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$"),
    "time": re.compile(r"^\d{1,2}:\d{2}(?::\d{2})?(?:\s*[AaPp][Mm])?$"),
}


def _field_flags(stem: str, fields: list[dict[str, Any]], table: _Table) -> Iterable[tuple[int, str, str, str]]:
    """(row index, field, rule, message) for each value that breaks the version's field rules (required, type,
    enum, e-mail / URL format); ids are not held to ``format: uuid`` (211 ids are integers or their own text)."""
    for field_spec in fields:
        name = field_spec["name"]
        constraints = field_spec.get("constraints") or {}
        kind, fmt = field_spec.get("type"), field_spec.get("format")
        enum = {str(v).casefold() for v in constraints.get("enum") or []}
        check = _TYPE_CHECKS.get(kind or "")
        for i, row in enumerate(table.rows):
            value = row.get(name)
            if value is None:
                if constraints.get("required"):
                    yield i, name, "required", f"{name} is required and empty"
                continue
            if name == "weekday" and day_code(value):
                continue  # the spec's own vocabulary gives "Monday" for this integer field
            if check and not check.match(value) and not (kind == "time" and clock(value)):
                yield i, name, kind or "type", f"{name} {value[:60]!r} is not a {kind}"
            elif enum and value.casefold() not in enum:
                yield i, name, "enum", f"{name} {value[:60]!r} is not one of the spec's values"
            elif fmt == "email" and not EMAIL.match(value):
                yield i, name, "email", f"{name} {value[:60]!r} is not an e-mail address"


@dataclass
class LegacyPackage:
    """The tables of a package as read: file stem -> rows (cells stripped, empty ones absent)."""

    version: str
    how: str
    tables: dict[str, _Table]
    read: dict[str, int]
    not_read: dict[str, int]
    unknown: dict[str, int]
    columns_not_read: dict[str, list[str]]
    package: dict[str, Any]
    files: list[str]
    flags: Counter = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)

    def rows(self, stem: str) -> list[dict[str, str]]:
        table = self.tables.get(stem)
        return table.rows if table else []


def read_package(directory: str | Path) -> LegacyPackage:
    """Every CSV of an HSDS 1.x / 2.0 package, read (the tables this importer uses) or counted, and checked against
    its version's fields."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HsdsError(f"HSDS export {directory} is not a directory")
    version, how = detect_version(directory)
    if version == "3.0":
        raise HsdsError(f"HSDS export {directory} is HSDS 3.0 ({how}): read it with hsds.import_export")
    defined = version_tables(version)
    others = _any_version_fields()
    package = _package(directory) or {}
    csvs = {p.stem: p for p in sorted(directory.glob("*.csv"))}
    if "services" not in csvs:
        raise HsdsError(f"HSDS export {directory} has no services.csv")
    result = LegacyPackage(version, how, {}, {}, {}, {}, {}, package, sorted(p.name for p in csvs.values()))
    for stem, path in csvs.items():
        fields = defined.get(stem) or others.get(stem)
        if stem not in READ_TABLES or fields is None:
            (result.not_read if stem in defined else result.unknown)[path.name] = _count_rows(path)
            continue
        table = _read_csv(path)
        result.tables[stem] = table
        result.read[path.name] = len(table.rows)
        if table.encoding != "utf-8-sig":
            result.flags[f"{path.name}: not UTF-8, read as Windows-1252"] += 1
        if stem not in defined:
            result.unknown[path.name] = len(table.rows)  # read all the same: another HSDS version defines it
        known = {f["name"] for f in fields} | _EXTRA_COLUMNS.get(stem, set())
        extra = [c for c in table.columns if c and c not in known]
        if extra:
            result.columns_not_read[path.name] = extra
        for i, name, rule, message in _field_flags(stem, fields, table):
            result.flags[f"{path.name} {name}: {rule}"] += 1
            if len(result.problems) < MAX_PROBLEMS:
                row = table.rows[i]
                result.problems.append(
                    Problem(f"{path.name}:{table.lines[i]}", stem, row.get("id"), "warning", message)
                )
    return result


# columns 211 exports add that this reader uses (besides the spec's fields)
_EXTRA_COLUMNS = {
    "services": {"eligibility_description", "eligibility", "hours", "service_area", "languages", "last_modified"},
    "phones": {"service_at_location_id", "description", "language"},
    "taxonomy": {"code", "vocabulary", "taxonomy"},
}


# --- the rows ------------------------------------------------------------------------------------------------------
def _group(rows: list[dict[str, str]], key: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if row.get(key):
            out.setdefault(row[key], []).append(row)
    return out


def _date(value: str | None) -> str | None:
    if not value:
        return None
    match = re.match(r"^(\d{4}-\d{2}-\d{2})", value.strip())
    return match.group(1) if match else None


def _state(value: str | None, zip5: str | None) -> str | None:
    text = (value or "").strip()
    if re.fullmatch(r"[A-Za-z]{2}", text):
        return text.upper()
    if text.lower() in STATE_NAMES:
        return STATE_NAMES[text.lower()]
    return zip_data()[zip5][0] if zip5 and zip5 in zip_data() else None


class _Look:
    """The package's rows indexed the ways a service's row needs them."""

    def __init__(self, pkg: LegacyPackage) -> None:
        self.orgs = {r["id"]: r for r in pkg.rows("organizations") if r.get("id")}
        self.locations = {r["id"]: r for r in pkg.rows("locations") if r.get("id")}
        self.locations_by_org = _group(pkg.rows("locations"), "organization_id")
        self.sal_by_service = _group(pkg.rows("services_at_location"), "service_id")
        self.physical = _group(pkg.rows("physical_addresses"), "location_id")
        self.postal = _group(pkg.rows("postal_addresses"), "location_id")
        self.phones = {
            k: _group(pkg.rows("phones"), f"{k}_id")
            for k in ("service", "service_at_location", "location", "organization")
        }
        self.contacts = _group(pkg.rows("contacts"), "service_id")
        sched = [*pkg.rows("regular_schedules"), *pkg.rows("schedules")]
        self.schedules = {k: _group(sched, f"{k}_id") for k in ("service", "service_at_location", "location")}
        self.taxonomy = {r["id"]: r for r in [*pkg.rows("taxonomy"), *pkg.rows("taxonomy_terms")] if r.get("id")}
        self.service_terms = _group(pkg.rows("services_taxonomy"), "service_id")
        self.attributes = _group(pkg.rows("service_attributes"), "service_id")
        self.other_attributes = _group(
            [r for r in pkg.rows("other_attributes") if r.get("link_type", "service") == "service"], "link_id"
        )
        self.eligibility = _group(pkg.rows("eligibility"), "service_id")
        self.areas = _group(pkg.rows("service_areas"), "service_id")
        languages = [*pkg.rows("languages"), *pkg.rows("interpretation_services")]
        self.languages = {k: _group(languages, f"{k}_id") for k in ("service", "location")}
        self.access = _group(pkg.rows("accessibility_for_disabilities"), "location_id")
        self.fees = _group(pkg.rows("fees"), "service_id")
        self.metadata = _group(pkg.rows("metadata"), "resource_id")
        created = package_date(pkg.package)
        self.package_date = created

    def term(self, term_id: str) -> dict[str, str | None]:
        """The taxonomy term an id names: ``{"code", "name", "taxonomy"}`` (an unknown id is kept as its own name)."""
        row = self.taxonomy.get(term_id, {})
        code = row.get("code") or (term_id if is_airs_code(term_id) else None)
        name = row.get("name") or row.get("term") or term_id
        return {"code": code, "name": name, "taxonomy": row.get("vocabulary") or row.get("taxonomy") or (
            "AIRS/211" if code and is_airs_code(code) else None)}  # fmt: skip


def package_date(package: dict[str, Any]) -> str | None:
    """The date a package says it was made or last changed (``last_modified``, ``created``, ``lastUpdated``)."""
    for key in ("last_modified", "lastModified", "updated", "created"):
        found = _date(str(package.get(key) or ""))
        if found:
            return found
    return None


def _terms(service: dict[str, str], look: _Look) -> list[dict[str, str | None]]:
    ids: list[str] = []
    for cell in (service.get("taxonomy_ids") or "").split(","):
        ids += [p.strip() for p in cell.split("*") if p.strip()]  # 'Food Pantry*Homeless': both terms
    sid = service["id"]
    ids += [r["taxonomy_id"] for r in look.service_terms.get(sid, []) if r.get("taxonomy_id")]
    ids += [r["taxonomy_term_id"] for r in look.attributes.get(sid, []) if r.get("taxonomy_term_id")]
    ids += [r["taxonomy_term_id"] for r in look.other_attributes.get(sid, []) if r.get("taxonomy_term_id")]
    terms = [look.term(i) for i in dict.fromkeys(ids)]
    return [t for i, t in enumerate(terms) if t not in terms[:i]]


def _place(service: dict[str, str], look: _Look) -> tuple[dict[str, str] | None, list[str], list[str]]:
    """(the first address with a ZIP, the location ids in order, ids of the service-at-location records)."""
    sals = look.sal_by_service.get(service["id"], [])
    location_ids = unique([*(s.get("location_id") for s in sals), service.get("location_id")])
    if not location_ids and service.get("organization_id"):
        location_ids = [r["id"] for r in look.locations_by_org.get(service["organization_id"], []) if r.get("id")]
    address = None
    for lid in location_ids:
        for candidate in [*look.physical.get(lid, []), *look.postal.get(lid, [])]:
            if ZIP5.search(candidate.get("postal_code") or ""):
                address = address or candidate
    return address, location_ids, [s["id"] for s in sals if s.get("id")]


def _address_text(address: dict[str, str]) -> str:
    street = ", ".join(address[k] for k in ("address_1", "address_2", "address_3", "address_4") if address.get(k))
    place = " ".join(p for p in (address.get("state_province"), address.get("postal_code")) if p)
    return ", ".join(p for p in (street, address.get("city"), place) if p)


def _schedule_entries(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        days = day_codes(r.get("byday")) if r.get("byday") else [d for d in [day_code(r.get("weekday"))] if d]
        out.append({
            "days": days, "opens_at": clock(r.get("opens_at")), "closes_at": clock(r.get("closes_at")),
            "description": r.get("description"),
        })  # fmt: skip
    return out


@dataclass
class _Stats:
    typed_by_name: int = 0
    unmapped: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)
    fields: Counter = field(default_factory=Counter)


_Flag = Callable[[str, str], None]


def _flagger(where: str, sid: str, stats: _Stats, problems: list[Problem]) -> _Flag:
    """``flag(rule, message)``: count a field flag of one service and list it (up to ``2 * MAX_PROBLEMS``)."""

    def flag(rule: str, message: str) -> None:
        stats.fields[rule] += 1
        if len(problems) < MAX_PROBLEMS * 2:
            problems.append(Problem(where, "service", sid, "warning", message))

    return flag


def _zip_and_county(address: dict[str, str] | None) -> tuple[str | None, str | None]:
    """The address's ZIP, and its region without "County", else the ZIP's county."""
    zip5 = None
    if address:
        zip5 = ZIP5.search(address["postal_code"]).group(1)  # type: ignore[union-attr]
    county = None
    if address and address.get("region"):
        county = without_county_word(address["region"])
    elif zip5 and zip5 in zip_data():
        county = zip_data()[zip5][1] or None
    return zip5, county


def _phones(owners: list[tuple[str, list[str]]], org: dict[str, str], look: _Look, flag: _Flag) -> list[dict[str, Any]]:
    """The phones of the first owner that has any (service, service-at-location, location, else the organization),
    every number of every cell (``listing.parse_phones``); a cell without a recognisable number is flagged."""
    phone_rows = next((rows for kind, ids in owners for i2 in ids if (rows := look.phones[kind].get(i2))), None)
    if phone_rows is None and org.get("id"):
        phone_rows = look.phones["organization"].get(org["id"], [])
    phones = [
        p
        for r in phone_rows or []
        for p in parse_phones(
            r.get("number"),
            extension=r.get("extension"),
            phone_type=r.get("type"),
            note=r.get("description") or r.get("department"),
        )
    ]
    if any(not re.search(r"\d{3}", p["number"] or "") for p in phones):
        flag("phone without a number", "a phone cell holds no recognisable number (kept as written)")
    return phones


def _email_and_url(
    service: dict[str, str], org: dict[str, str], look: _Look, flag: _Flag
) -> tuple[str | None, str | None]:
    """(e-mail, URL) of the service, its contacts, else its organization; an e-mail cell holding a web address is
    the URL when there is none, another e-mail that is not an address is kept and flagged."""
    sid = service["id"]
    email = service.get("email") or next((c["email"] for c in look.contacts.get(sid, []) if c.get("email")), None)
    email = email or org.get("email")
    url = service.get("url") or org.get("url")
    if email and not EMAIL.match(email):
        if URLISH.match(email) and not url:
            url, email = email, None
            flag("email holds a URL", "the e-mail cell holds a web address: used as the URL")
        else:
            flag("email not an address", f"email {email[:60]!r} is not an e-mail address (kept, flagged)")
    return email, url


def _types(service: dict[str, str], terms: list[dict[str, str | None]], stats: _Stats) -> list[str]:
    """The registry types the taxonomy terms map to (unmapped terms counted), else those the service's name or
    description gives (counted as typed by name)."""
    types: list[str] = []
    for term in terms:
        found = term_types(term["code"], term["name"])
        if not found:
            stats.unmapped[f"{term['code'] + ' ' if term['code'] else ''}{term['name']}"] += 1
        types += [t for t in found if t not in types]
    if not types:
        types = list(name_types(service.get("name"))) or list(name_types(service.get("description")))
        stats.typed_by_name += bool(types)
    return types


def _coverage(
    service: dict[str, str], location_ids: list[str], zip5: str | None, look: _Look
) -> tuple[list[str], list[str]]:
    """(the other ZIPs of its places and of its service areas' words, those words)."""
    coverage: list[str] = []
    for lid in location_ids:
        for a in [*look.physical.get(lid, []), *look.postal.get(lid, [])]:
            m = ZIP5.search(a.get("postal_code") or "")
            if m and m.group(1) != zip5:
                coverage.append(m.group(1))
    areas = look.areas.get(service["id"], [])
    area_words = unique([*(a.get("service_area") or a.get("description") for a in areas), service.get("service_area")])
    for text in area_words:
        coverage += [z for z in ZIP5.findall(text) if z != zip5]
    return coverage, area_words


def _schedules_and_hours(service: dict[str, str], owners: list[tuple[str, list[str]]], look: _Look,
                         flag: _Flag) -> tuple[list[dict[str, Any]], str | None]:  # fmt: skip
    """The first owner's schedules merged, and the hours line they give (else the service's hours cell), cut to
    500 characters (flagged)."""
    sched_rows = next((rows for kind, ids in owners for i2 in ids if (rows := look.schedules[kind].get(i2))), [])
    schedules = merge_schedules(_schedule_entries(sched_rows))
    hours = hours_line(schedules) or service.get("hours")
    if hours and len(hours) > 500:
        flag("hours too long", f"hours are {len(hours)} characters: cut to 500")
        hours = hours[:497] + "..."
    return schedules, hours


def _details(service: dict[str, str], location_ids: list[str], look: _Look) -> tuple[list[str], ...]:
    """(languages, accessibility, fees, eligibility) of the service and its locations, each once, in order."""
    sid = service["id"]
    languages = unique([
        *(r.get("language") for r in look.languages["service"].get(sid, [])),
        *(r.get("language") for lid in location_ids for r in look.languages["location"].get(lid, [])),
        *re.split(r"[,;]", service.get("interpretation_services") or service.get("languages") or ""),
    ])  # fmt: skip
    access = unique(
        access_text(r.get("accessibility"), r.get("details")) for lid in location_ids for r in look.access.get(lid, [])
    )
    fees = unique([service.get("fees"), *(r.get("fee") for r in look.fees.get(sid, []))])
    eligibility = unique([
        service.get("eligibility_description") or service.get("eligibility"),
        *(r.get("eligibility") for r in look.eligibility.get(sid, [])),
    ])  # fmt: skip
    return languages, access, fees, eligibility


def _listing(service: dict[str, str], hours: str | None, look: _Look,
             now: datetime) -> tuple[str | None, str | None, str | None]:  # fmt: skip
    """(listed_at: its latest change, else its or the package's date; deprecated_at: that date, else today, for an
    inactive or defunct service; its hours, saying so for a temporarily closed one)."""
    changes = [d for m in look.metadata.get(service["id"], []) if (d := _date(m.get("last_action_date")))]
    listed_at = max(changes) if changes else (_date(service.get("last_modified")) or look.package_date)
    status = (service.get("status") or "active").lower()
    deprecated_at = (listed_at or now.date().isoformat()) if status in ("inactive", "defunct") else None
    if status == "temporarily closed":
        hours = closed_hours(hours)
    return listed_at, deprecated_at, hours


def _name(service: dict[str, str], org: dict[str, str], flag: _Flag) -> str:
    """The service's name, else its alternate name, its organization's or ``Service <id>``; one of fewer than two
    characters is prefixed with its organization's name; any name but the service's own is flagged."""
    sid = service["id"]
    name = service.get("name") or service.get("alternate_name") or org.get("name") or f"Service {sid}"
    if len(name.strip()) < 2:  # the registry needs two characters: "X" of an organization is "Org — X"
        name = f"{org['name']} — {name.strip()}" if org.get("name") else f"Service {sid}: {name.strip()}"
    if not service.get("name") or name != service["name"]:
        flag("name missing or too short", f"service has no usable name: named {name!r}")
    return name


def _service_row(i: int, service: dict[str, str], where: str, look: _Look, stats: _Stats, problems: list[Problem],
                 now: datetime) -> dict[str, Any] | None:  # fmt: skip
    """The registry row of one service (the module docstring says what is kept), or None, the reason reported and
    counted, when nobody could reach or find it (no address with a ZIP and no phone, URL or e-mail)."""
    sid = service["id"]
    flag = _flagger(where, sid, stats, problems)
    org = look.orgs.get(service.get("organization_id") or "", {})
    if service.get("organization_id") and not org:
        flag("organization not found", f"organization {service['organization_id']} not found")
    address, location_ids, sal_ids = _place(service, look)
    zip5, county = _zip_and_county(address)
    owners = [("service", [sid]), ("service_at_location", sal_ids), ("location", location_ids)]
    phones = _phones(owners, org, look, flag)
    email, url = _email_and_url(service, org, look, flag)
    if not zip5 and not phones and not url and not email:
        reason = "no address with a ZIP and no phone, URL or e-mail: nobody could reach or find it"
        stats.dropped[reason] += 1
        problems.append(Problem(where, "service", sid, "error", reason))
        return None
    terms = _terms(service, look)
    types = _types(service, terms, stats)
    coverage, area_words = _coverage(service, location_ids, zip5, look)
    schedules, hours = _schedules_and_hours(service, owners, look, flag)
    languages, access, fees, eligibility = _details(service, location_ids, look)
    listed_at, deprecated_at, hours = _listing(service, hours, look, now)
    name = _name(service, org, flag)
    for key, value in (("organization", org.get("name")), ("zip", zip5), ("county", county)):
        if not value:
            stats.fields[f"{key} missing"] += 1
    return {
        "local_resource_id": registry_id(sid),
        "name": name,
        "description": service.get("description") or None,
        "resource_type": types[0] if types else "other",
        "resource_types": types or ["other"],
        "county": county,
        "zip": zip5,
        "zip_coverage": list(dict.fromkeys(coverage)),
        "address": _address_text(address) if address else None,
        "state": _state(address.get("state_province") if address else None, zip5),
        "contact_phone": phone_text(phones[0]) if phones else None,
        "phones": phones,
        "contact_email": email,
        "url": url,
        "eligibility": "; ".join(eligibility) or None,
        "hours": hours,
        "schedules": schedules if structured(schedules) else [],
        "organization": org.get("name"),
        "taxonomy_terms": terms,
        "languages": languages,
        "accessibility": "; ".join(access) or None,
        "fees": "; ".join(fees) or None,
        "service_area": "; ".join(area_words) or None,
        "listed_at": listed_at,
        "source_id": sid,
        "verification_status": "unverified",
        "last_verified_at": None,
        "verified_by": None,
        "deprecated_at": deprecated_at,
    }


@cache
def _limits() -> dict[str, Any]:
    """field -> maxLength, and for list fields of objects: field -> {key: maxLength} (the registry row schema)."""
    from livemem.schemas import load_schema

    out: dict[str, Any] = {}
    for name, prop in load_schema("local_resource")["properties"].items():
        if "maxLength" in prop:
            out[name] = prop["maxLength"]
        items = prop.get("items") or {}
        if items.get("type") == "object":
            out[name] = {k: v["maxLength"] for k, v in items.get("properties", {}).items() if "maxLength" in v}
        elif "maxLength" in items:
            out[name] = {"": items["maxLength"]}
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fit(row: dict[str, Any]) -> list[str]:
    """Cut what is longer than the registry row allows (a 4,000-character description, a 300-character phone note),
    so a long field never costs the program its place; one message per field cut."""
    cut: list[str] = []
    for name, limit in _limits().items():
        value = row.get(name)
        if isinstance(limit, int) and isinstance(value, str) and len(value) > limit:
            row[name] = _cut(value, limit)
            cut.append(f"{name}: {len(value)} characters, cut to {limit}")
        elif isinstance(limit, dict) and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str) and "" in limit and len(item) > limit[""]:
                    value[i] = _cut(item, limit[""])
                    cut.append(f"{name}: an item of {len(item)} characters, cut to {limit['']}")
                elif isinstance(item, dict):
                    for key, most in limit.items():
                        if isinstance(item.get(key), str) and len(item[key]) > most:
                            cut.append(f"{name}: {key} of {len(item[key])} characters, cut to {most}")
                            item[key] = _cut(item[key], most)
    return cut


def import_package(directory: str | Path, *, now: datetime | None = None) -> HsdsImport:
    """Registry rows from an HSDS 1.0 / 1.1 / 2.0 tabular package (module docstring), with its fidelity report."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    pkg = read_package(directory)
    look = _Look(pkg)
    stats = _Stats()
    problems = list(pkg.problems)
    services = pkg.tables["services"]
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for i, service in enumerate(services.rows):
        where = f"services.csv:{services.lines[i]}"
        if not service.get("id"):
            service = {**service, "id": f"row-{services.lines[i]}"}
            stats.fields["service id missing"] += 1
        row = _service_row(i, service, where, look, stats, problems, now)
        if row is None:
            continue
        for message in _fit(row):
            stats.fields[message.split(":", 1)[0] + ": cut to its maximum length"] += 1
            if len(problems) < MAX_PROBLEMS * 2:
                problems.append(Problem(where, "service", service["id"], "warning", message))
        if row["local_resource_id"] in seen:
            problems.append(
                Problem(where, "service", service["id"], "warning", f"id also used by {seen[row['local_resource_id']]}")
            )
            stats.fields["duplicate id"] += 1
        seen.setdefault(row["local_resource_id"], where)
        rows.append(row)
    result = HsdsImport(rows=rows, problems=problems, services_read=len(services.rows), files=pkg.files)
    result.report = fidelity_report(pkg.version, pkg.how, rows, len(services.rows), stats, pkg)
    return result


def fidelity_report(version: str, how: str, rows: list[dict[str, Any]], services_read: int, stats: _Stats | None,
                    pkg: LegacyPackage | None) -> dict[str, Any]:  # fmt: skip
    """What the import read, kept, typed and flagged (the import-fidelity report, a plain structure)."""
    kept = len(rows)
    typed = sum(1 for r in rows if r.get("resource_type") and r["resource_type"] != "other")
    organizations = {r["organization"] for r in rows if r.get("organization")}
    states = Counter(r.get("state") or "unknown" for r in rows)
    return {
        "version": version,
        "version_detected": how,
        "services": {
            "read": services_read,
            "kept": kept,
            "dropped": services_read - kept,
            "typed": typed,
            "typed_by_service_name": stats.typed_by_name if stats else 0,
            "with_organization": sum(1 for r in rows if r.get("organization")),
            "organizations": len(organizations),
            "with_zip": sum(1 for r in rows if r.get("zip")),
            "with_phone": sum(1 for r in rows if r.get("contact_phone")),
            "several_phones": sum(1 for r in rows if len(r.get("phones") or []) > 1),
            "with_schedule": sum(1 for r in rows if r.get("schedules")),
            "undated": sum(1 for r in rows if not r.get("listed_at") and not r.get("last_verified_at")),
        },
        "share": {
            "kept": round(kept / services_read, 4) if services_read else 0.0,
            "typed": round(typed / kept, 4) if kept else 0.0,
            "with_organization": round(sum(1 for r in rows if r.get("organization")) / kept, 4) if kept else 0.0,
        },
        "states": dict(states.most_common()),
        "resource_types": dict(Counter(t for r in rows for t in r.get("resource_types") or []).most_common()),
        "tables": {
            "read": dict(pkg.read) if pkg else {},
            "not_read": dict(pkg.not_read) if pkg else {},
            "unknown": dict(pkg.unknown) if pkg else {},
            "columns_not_read": dict(pkg.columns_not_read) if pkg else {},
        },
        "flagged": dict((pkg.flags if pkg else Counter()) + (stats.fields if stats else Counter())),
        "dropped_reasons": dict(stats.dropped) if stats else {},
        "unmapped_terms": dict((stats.unmapped if stats else _unmapped(rows)).most_common()),
    }


def _unmapped(rows: list[dict[str, Any]]) -> Counter:
    """The rows' taxonomy terms that map to no registry type, counted (what the 3.0 importer leaves uncounted)."""
    found: Counter = Counter()
    for row in rows:
        for term in row.get("taxonomy_terms") or []:
            if not term_types(term.get("code"), term.get("name")):
                found[f"{term['code'] + ' ' if term.get('code') else ''}{term['name']}"] += 1
    return found


def report_lines(report: dict[str, Any]) -> list[str]:
    """The fidelity report as lines for a terminal."""
    s, share, t = report["services"], report["share"], report["tables"]
    lines = [
        f"HSDS {report['version']} ({report['version_detected']})",
        f"services: {s['read']} read, {s['kept']} kept ({share['kept']:.1%}), {s['dropped']} left out; "
        f"{s['typed']} typed by need ({share['typed']:.1%}; {s['typed_by_service_name']} by the service's name); "
        f"{s['with_organization']} with their organization ({s['organizations']} organizations); "
        f"{s['with_zip']} with a ZIP, {s['with_phone']} with a phone ({s['several_phones']} several), "
        f"{s['with_schedule']} with schedules, {s['undated']} undated",
        "states: " + ", ".join(f"{k} {v}" for k, v in report["states"].items()),
        "types: " + ", ".join(f"{k} {v}" for k, v in report["resource_types"].items()),
        "tables read: " + (", ".join(f"{k} ({v})" for k, v in t["read"].items()) or "none"),
        "tables not read: " + (", ".join(f"{k} ({v} rows)" for k, v in t["not_read"].items()) or "none"),
    ]
    if t["unknown"]:
        lines.append(
            "CSVs the version does not define: " + ", ".join(f"{k} ({v} rows)" for k, v in t["unknown"].items())
        )
    for name, columns in t["columns_not_read"].items():
        lines.append(f"columns not read in {name}: {', '.join(columns)}")
    for reason, count in report["dropped_reasons"].items():
        lines.append(f"left out ({count}): {reason}")
    if report["flagged"]:
        lines.append(
            "flagged: " + ", ".join(f"{k} {v}" for k, v in sorted(report["flagged"].items(), key=lambda kv: -kv[1]))
        )
    if report["unmapped_terms"]:
        top = list(report["unmapped_terms"].items())[:15]
        lines.append(
            f"unmapped taxonomy terms ({len(report['unmapped_terms'])}): " + ", ".join(f"{k} ({v})" for k, v in top)
        )
    return lines


def import_hsds(directory: str | Path, *, now: datetime | None = None) -> HsdsImport:
    """Registry rows from any HSDS directory: 1.0 / 1.1 / 2.0 tabular packages here, HSDS 3.0 (JSON or tabular) by
    ``hsds.import_export``; the result's ``report`` says the version and what was read, kept, typed and flagged."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HsdsError(f"HSDS export {directory} is not a directory")
    version, how = detect_version(directory)
    if version != "3.0":
        return import_package(directory, now=now)
    result = import_export(directory, now=now)
    present = {p.name for p in directory.iterdir() if p.suffix in (".csv", ".json") and p.name != PACKAGE}
    known = {f"{table_file(t)}.{ext}" for t in _v3_tables() for ext in ("csv", "json")}
    pkg = LegacyPackage(version, how, {}, {}, {}, {}, {}, {}, result.files)
    pkg.read = {name: _count_records(directory / name) for name in result.files}
    pkg.unknown = {name: 0 for name in sorted(present - known)}
    result.report = fidelity_report(version, how, result.rows, result.services_read, None, pkg)
    return result


def _count_records(path: Path) -> int:
    """Rows of a CSV table, records of a JSON one (a list, an API page or one record)."""
    if path.suffix == ".csv":
        return _count_rows(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return 0
    if isinstance(data, dict):
        return len(data["contents"]) if isinstance(data.get("contents"), list) else 1
    return len(data) if isinstance(data, list) else 0


def _v3_tables() -> tuple[str, ...]:
    from livemem.registry.hsds import READ_TABLES

    return READ_TABLES
