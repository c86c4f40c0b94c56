"""Open Referral HSDS 3.0 ↔ the ``local_resources`` registry.

Community-resource directories exchange data as the Human Services Data Specification (HSDS 3.0, schemas vendored
in ``schemas/hsds/``). This module

- **imports** an HSDS export directory into the registry's input format (the rows of
  ``schemas/local_resource.schema.json``): each table as ``<table>.csv`` (the tabular data package: ``services.csv``,
  ``organizations.csv``, ``locations.csv``, ``service_at_location.csv``, ``service_areas.csv``, ``addresses.csv``,
  ``phones.csv``, ``schedules.csv``, ``attributes.csv``, ``taxonomy_terms.csv``, ``metadata.csv``) or as
  ``<table>.json`` (one record, a list of records or an API page, flat or nested as the HSDS API serves them).
  Every record is validated against its HSDS schema; a bad record is reported with its file, row and id and left
  out, good ones are kept. A record nested in several places with the same fields is one record. One registry row
  per service: its first location with a postal code gives ``zip`` / ``county`` / ``address``.
- **exports** registry rows as HSDS 3.0: ``services.json`` (service objects with their organization, locations,
  addresses, phones, schedules, service areas and taxonomy attributes nested), ``organizations.json`` (one per
  provider) and ``tabular/`` (the same records as the tabular data package: ``datapackage.json``, from the official
  profile, and a CSV per table), valid per the vendored schemas.

The registry's own verification (``livemem.registry.verify``) still checks the imported rows (ZIP in state and
county, phone, e-mail, URL, freshness): import only reports what it can see in the HSDS data itself.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from livemem.errors import LivingMemoryError
from livemem.geo.names import without_county_word
from livemem.geo.zips import zip_data
from livemem.registry.fields import FIELDS, RESOURCE_TYPES, csv_cell, csv_text
from livemem.registry.listing import access_text, clock, day_codes, hours_line, merge_schedules, structured, unique
from livemem.registry.taxonomy import types_of_terms
from livemem.schemas import SCHEMA_DIR

HSDS_DIR = SCHEMA_DIR / "hsds"
HSDS_VERSION = "3.0.0"
# The tables import reads, in the order they are read (schema file stem; the file name comes from its "path").
TABLES = (
    "service", "organization", "location", "service_at_location", "service_area", "address", "phone", "schedule",
    "attribute", "taxonomy_term", "metadata",
)  # fmt: skip
# Tables import also reads (what the registry row keeps of them: languages, accessibility, fees) but export does not
# write: the registry keeps them as text, not as the records they were.
DETAIL_TABLES = ("language", "accessibility", "cost_option")
READ_TABLES = (*TABLES, *DETAIL_TABLES)
TEMPORARILY_CLOSED = "Temporarily closed."  # how a temporarily closed service's hours start in the registry
# Ids that HSDS needs but the registry does not have (locations, phones, ...) are UUID5 under this namespace, so an
# export of the same rows is identical every time.
NAMESPACE = uuid.UUID("6f1c2f4e-5b0a-4c47-9a53-2d8f3e0b7a61")
RESOURCE_TYPE_TAXONOMY = "Living Memory resource types"
ID_TERM = "local_resource_id"  # attribute term whose value keeps a registry id that is not a UUID
PROVIDER_SEPARATOR = re.compile(r"\s+[–—-]\s+")  # "Fayette County DHHR Office – SNAP": provider – program
PREVIOUS_UNKNOWN = "not recorded"  # metadata previous_value of a verification export records (the registry keeps none)
PHONE_TYPES = ("text", "voice", "fax", "cell", "video", "pager", "textphone")  # RFC 6350, as HSDS lists them
TABULAR_DIR = "tabular"  # where export writes the tabular data package, beside services.json
ZIP5 = re.compile(r"\b(\d{5})(?:-\d{4})?\b")
ADDRESS = re.compile(r"^(?P<street>.+?),\s*(?P<city>[^,]+),\s*(?P<state>[A-Z]{2})\s+(?P<zip>\d{5}(?:-\d{4})?)$")


class HsdsError(LivingMemoryError):
    """An HSDS export that cannot be read at all (no such directory, no services table, unreadable file)."""


# --- schemas -----------------------------------------------------------------------------------------------------
@cache
def hsds_schema(table: str) -> dict[str, Any]:
    """The vendored HSDS 3.0 schema of a table (``service``, ``location``, ...)."""
    return json.loads((HSDS_DIR / f"{table}.json").read_text(encoding="utf-8"))


@cache
def _schema_registry() -> Registry:
    """Every vendored schema under its file name, which is how they ``$ref`` each other (``"$ref": "phone.json"``)."""
    return Registry().with_resources(
        (p.name, Resource.from_contents(json.loads(p.read_text(encoding="utf-8")), default_specification=DRAFT202012))
        for p in sorted(HSDS_DIR.glob("*.json"))
        if p.name not in ("openapi.json", "datapackage.json")  # the API and the tabular profile: no table schemas
    )


@cache
def hsds_validator(table: str, tabular: bool = False) -> Draft202012Validator:
    """A validator for one table's records, checking formats (uuid, email, date-time). ``tabular``: also the fields
    the tabular format requires (``tabular_required``, e.g. a service's ``organization_id``)."""
    schema = dict(hsds_schema(table))
    if tabular:
        schema["required"] = [*schema.get("required", []), *schema.get("tabular_required", [])]
    return Draft202012Validator(schema, registry=_schema_registry(), format_checker=FormatChecker())


def validate_services(services: list[dict[str, Any]]) -> list[str]:
    """Every violation of the HSDS 3.0 service schema (nested objects included), as ``[i].path: message``."""
    validator = hsds_validator("service")
    return [
        f"[{i}]{_path(err.absolute_path)}: {err.message}"
        for i, service in enumerate(services)
        for err in sorted(validator.iter_errors(service), key=lambda e: list(map(str, e.absolute_path)))
    ]


def _path(parts: Iterable[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


# --- import: reading the tables ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """A record import could not use (error: left out) or used with a caveat (warning)."""

    where: str  # file and row: services.csv:4 (line), services.json[2].phones[0]
    table: str
    record_id: str | None
    severity: str  # error | warning
    message: str

    def __str__(self) -> str:
        what = f"{self.table} {self.record_id}" if self.record_id else self.table
        return f"{self.where}: {self.severity}: {what}: {self.message}"


@dataclass
class HsdsImport:
    """Registry rows (one per usable service) and every problem found on the way."""

    rows: list[dict[str, Any]]
    problems: list[Problem]
    services_read: int
    files: list[str] = field(default_factory=list)
    # the import-fidelity report (hsds_legacy.fidelity_report): version, tables read / not read, kept, typed, flagged
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def summary(self) -> str:
        left_out = self.services_read - len(self.rows)
        return (
            f"{self.services_read} services read ({len(self.files)} files): {len(self.rows)} registry rows, "
            f"{left_out} services left out, {len(self.errors)} errors and "
            f"{len(self.problems) - len(self.errors)} warnings"
        )


@dataclass
class _Record:
    data: dict[str, Any]
    where: str
    # ids that nesting implies and the record does not give itself (a phone nested in a service: its service_id)
    links: dict[str, str] = field(default_factory=dict)


@dataclass
class _Kept:
    """A valid record as import uses it: its fields with the ids nesting implied, where it was first found, and the
    further parents a repeat of it was nested in (the same phone under two services: ``service_id`` -> [the other])."""

    data: dict[str, Any]
    where: str
    also: dict[str, list[str]] = field(default_factory=dict)

    def ids(self, key: str) -> list[str]:
        """Every id this record is linked to by ``key`` (``service_id``), its own first."""
        own = self.data.get(key)
        return [*([own] if isinstance(own, str) else []), *self.also.get(key, [])]


def table_file(table: str) -> str:
    """``service`` -> ``services``: the file stem the tabular format gives the table (its schema's ``path``)."""
    return Path(hsds_schema(table)["path"]).stem


def _is_text(prop: dict[str, Any]) -> bool:
    """Whether a table field is text in the tabular format (not a number, date, time or datetime): the cells the
    formula neutraliser may prefix with ``'``."""
    return prop.get("datapackage_type", prop.get("type")) == "string"


def _coerce(table: str, raw: dict[str, str]) -> dict[str, Any]:
    """A CSV row typed per the table schema: empty cells are absent, numbers become numbers (a value that is not
    one stays text, for the schema to report), a text cell loses the ``'`` that ``fields.csv_cell`` adds before a
    formula character (``'=x`` -> ``=x``; ``'Tis`` stays as it is)."""
    props = hsds_schema(table)["properties"]
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key is None or value is None or value.strip() == "":
            continue
        text = value.strip()
        cell: str | int | float = text
        if _is_text(props.get(key, {})):
            cell = csv_text(text)  # the ' a CSV writer (ours: write_export) put before = + - @ tab CR, and only that
        elif props.get(key, {}).get("type") == "number":
            try:
                number = float(text)
                cell = int(number) if number.is_integer() else number
            except ValueError:
                pass
        out[key] = cell
    return out


def _read_table(directory: Path, table: str) -> tuple[list[_Record], bool, str | None]:
    """The records of one table (from CSV or JSON), whether they came from CSV, and the file read."""
    stem = table_file(table)
    csv_path, json_path = directory / f"{stem}.csv", directory / f"{stem}.json"
    try:
        if csv_path.is_file():
            with open(csv_path, encoding="utf-8-sig", newline="") as fh:
                reader = csv.DictReader(fh)
                records, line = [], 2  # the line a row starts on (the header is line 1; quoted values may span lines)
                for row in reader:
                    records.append(_Record(_coerce(table, row), f"{csv_path.name}:{line}"))
                    line = reader.line_num + 1
                return records, True, csv_path.name
        if json_path.is_file():
            data = json.loads(json_path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("contents"), list):
                data = data["contents"]  # an HSDS API page (/services?page=1) saved as a file
            elif isinstance(data, dict):  # one record, as the API serves /services/{id} (the spec's service_full.json)
                return [_Record(data, json_path.name)], False, json_path.name
            if not isinstance(data, list):
                raise HsdsError(
                    f"{json_path}: expected a {table} record, a list of them or an API page with contents, "
                    f"not {type(data).__name__}"
                )
            return [_Record(item, f"{json_path.name}[{i}]") for i, item in enumerate(data)], False, json_path.name
    except (OSError, UnicodeDecodeError, csv.Error, json.JSONDecodeError) as exc:
        raise HsdsError(f"HSDS table {table} cannot be read: {exc}") from exc
    return [], False, None


def _nested(table: str) -> dict[str, tuple[str, bool]]:
    """property -> (table, is a list) for the properties of a table that nest another table's records."""
    out: dict[str, tuple[str, bool]] = {}
    for name, prop in hsds_schema(table)["properties"].items():
        ref = prop.get("$ref") or prop.get("items", {}).get("$ref")
        if ref:
            out[name] = (Path(ref).stem, prop.get("type") == "array")
    return out


def _link(parent_table: str, parent: _Record, child_table: str, child: dict[str, Any], many: bool) -> dict[str, str]:
    """The id fields nesting implies for the child (a phone nested in a service: its ``service_id``), those the
    child does not give itself; a parent that nests one record (a service's ``organization``) gets its id."""
    pid, cid = parent.data.get("id"), child.get("id")
    implied: dict[str, Any] = {}
    if child_table == "attribute":
        implied = {"link_id": pid, "link_entity": parent_table}
    elif child_table == "metadata":
        implied = {"resource_id": pid, "resource_type": parent_table}
    elif many and f"{parent_table}_id" in hsds_schema(child_table)["properties"]:
        implied = {f"{parent_table}_id": pid}
    key = f"{child_table}_id"
    if not many and key in hsds_schema(parent_table)["properties"] and key not in parent.data and cid is not None:
        parent.links.setdefault(key, cid)
    return {k: v for k, v in implied.items() if k not in child and v is not None}


def _flatten(table: str, record: _Record, out: dict[str, list[_Record]]) -> None:
    """Split a (possibly nested) record into flat records per table; nested ones keep where they were found, and
    the ids their nesting implies apart from their own fields (``_Record.links``)."""
    if not isinstance(record.data, dict):
        out.setdefault(table, []).append(record)
        return
    nested = _nested(table)
    flat = _Record({k: v for k, v in record.data.items() if k not in nested}, record.where, dict(record.links))
    out.setdefault(table, []).append(flat)
    for name, (child_table, many) in nested.items():
        value = record.data.get(name)
        if value is None:
            continue
        items = value if many and isinstance(value, list) else [value]
        for i, item in enumerate(items):
            where = f"{record.where}.{name}" + (f"[{i}]" if many else "")
            links = _link(table, flat, child_table, item, many) if isinstance(item, dict) else {}
            _flatten(child_table, _Record(item, where, links), out)


def _valid_records(records: list[_Record], table: str, tabular: bool, problems: list[Problem]) -> dict[str, _Kept]:
    """id -> the record, for the records valid per the table schema; the others reported and left out.

    The same record nested in several places (the same location under two services, the same phone under a service,
    its location and its organization, as the spec's ``service_full.json`` has it) is one record: repeats with the
    same fields are merged, each adding the parent ids its nesting implies. The same id with other fields is an
    error naming both places (the first is kept)."""
    validator = hsds_validator(table, tabular)
    kept: dict[str, _Kept] = {}
    own: dict[str, dict[str, Any]] = {}  # id -> the first record's own fields (what a repeat is compared with)
    for rec in records:
        data = rec.data
        if not isinstance(data, dict):
            problems.append(Problem(rec.where, table, None, "error", f"not an object: {type(data).__name__}"))
            continue
        rid = data.get("id") if isinstance(data.get("id"), str) else None
        full = {**data, **rec.links}
        errors = sorted(validator.iter_errors(full), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            message = "; ".join(f"{_path(e.absolute_path)[1:] or '(record)'}: {e.message}" for e in errors)
            problems.append(Problem(rec.where, table, rid, "error", message))
            continue
        assert rid is not None  # every HSDS table requires a (uuid) id
        first = kept.get(rid)
        if first is None:
            kept[rid], own[rid] = _Kept(full, rec.where), data
        elif own[rid] != data:
            problems.append(
                Problem(rec.where, table, rid, "error", f"id already used by {first.where} with other fields "
                                                        "(the first is kept)")
            )  # fmt: skip
        else:
            for key, value in rec.links.items():
                if key not in first.data:
                    first.data[key] = value
                elif value not in first.ids(key):
                    first.also.setdefault(key, []).append(value)
    return kept


Tables = dict[str, dict[str, _Kept]]


def read_export(directory: str | Path) -> tuple[Tables, list[Problem], list[str], dict[str, int]]:
    """Every table of an export directory: table -> id -> record; problems; the files read; how many records of
    each table were read (valid or not)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HsdsError(f"HSDS export {directory} is not a directory")
    flat: dict[str, list[_Record]] = {}
    tabular: dict[str, bool] = {}
    files: list[str] = []
    for table in READ_TABLES:
        records, from_csv, name = _read_table(directory, table)
        if name:
            files.append(name)
        tabular[table] = from_csv
        for rec in records:
            _flatten(table, rec, flat)
    if not any(f.startswith(f"{table_file('service')}.") for f in files):
        raise HsdsError(f"HSDS export {directory} has no {table_file('service')}.csv or {table_file('service')}.json")
    problems: list[Problem] = []
    tables = {t: _valid_records(flat.get(t, []), t, tabular.get(t, False), problems) for t in READ_TABLES}
    return tables, problems, files, {t: len(flat.get(t, [])) for t in READ_TABLES}


# --- import: services -> registry rows ---------------------------------------------------------------------------
def _by(records: dict[str, _Kept], key: str) -> dict[str, list[dict[str, Any]]]:
    """The records by each id they are linked to with ``key`` (a phone under two services is under both)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kept in records.values():
        for value in kept.ids(key):
            out.setdefault(value, []).append(kept.data)
    return out


def _type_key(text: str) -> str:
    return re.sub(r"[\s/-]+", "_", text.strip().lower())


def _resource_type(terms: list[dict[str, Any]]) -> str | None:
    """The first taxonomy term whose code or name is a registry resource_type (``Food Pantry`` → food_pantry)."""
    for term in terms:
        for text in (term.get("code"), term.get("name")):
            if isinstance(text, str):
                key = _type_key(text)
                for candidate in (key, re.sub("ies$", "y", key), key.removesuffix("s")):  # Food Pantries
                    if candidate in RESOURCE_TYPES:
                        return candidate
    return None


def _phone_text(phone: dict[str, Any]) -> str:
    ext = phone.get("extension")
    return phone["number"] + (f" x{int(ext)}" if isinstance(ext, int | float) else "")


def _phone_entry(phone: dict[str, Any]) -> dict[str, Any]:
    """An HSDS phone as a registry phone entry (number, extension, type, note)."""
    ext = phone.get("extension")
    return {
        "number": phone["number"],
        "extension": str(int(ext)) if isinstance(ext, int | float) else (str(ext) if ext else None),
        "type": phone.get("type"),
        "note": phone.get("description") or None,
    }


def _schedule_entry(schedule: dict[str, Any]) -> dict[str, Any]:
    """An HSDS schedule as a registry schedule entry (days, opens_at, closes_at, description)."""
    return {
        "days": day_codes(schedule.get("byday")),
        "opens_at": clock(schedule.get("opens_at")),
        "closes_at": clock(schedule.get("closes_at")),
        "description": schedule.get("description") or None,
    }


def _address_text(address: dict[str, Any]) -> str:
    street = ", ".join(address[k] for k in ("address_1", "address_2") if address.get(k))
    return f"{street}, {address['city']}, {address['state_province']} {address['postal_code']}"


def _date(value: str) -> str:
    return value[:10] if re.match(r"^\d{4}-\d{2}-\d{2}", value) else value


class _Lookups:
    """The valid records of an export, indexed the ways a service's row needs them."""

    def __init__(self, t: Tables) -> None:
        self.services, self.organizations, self.locations = t["service"], t["organization"], t["location"]
        self.terms = t["taxonomy_term"]
        self.sal_by_service = _by(t["service_at_location"], "service_id")
        self.addresses_by_location = _by(t["address"], "location_id")
        self.areas_by_service = _by(t["service_area"], "service_id")
        owners = ("service", "service_at_location", "location", "organization")
        self.schedules = {k: _by(t["schedule"], f"{k}_id") for k in owners}
        self.phones = {k: _by(t["phone"], f"{k}_id") for k in owners}
        self.attributes_by_link = _by(t["attribute"], "link_id")
        self.metadata_by_resource = _by(t["metadata"], "resource_id")
        self.languages = {k: _by(t.get("language", {}), f"{k}_id") for k in ("service", "location")}
        self.accessibility_by_location = _by(t.get("accessibility", {}), "location_id")
        self.costs_by_service = _by(t.get("cost_option", {}), "service_id")

    def first(self, kind: str, owners: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
        """The phones / schedules of the first owner that has any (service, then service-at-location, ...)."""
        by_owner = self.phones if kind == "phone" else self.schedules
        return next((by_owner[k][i] for k, i in owners if i and by_owner[k].get(i)), [])

    def places(self, sid: str) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        """(service_at_location, location, its physical or else postal address) for each place with an address."""
        out = []
        for sal in self.sal_by_service.get(sid, []):
            if sal.get("location_id") not in self.locations:
                continue
            addresses = sorted(
                (a for a in self.addresses_by_location.get(sal["location_id"], []) if a["address_type"] != "virtual"),
                key=lambda a: a["address_type"] != "physical",
            )
            if addresses:
                out.append((sal, self.locations[sal["location_id"]].data, addresses[0]))
        return out

    def service_terms(self, sid: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(attribute, taxonomy term) for the service's attributes."""
        return [
            (a, self.terms[a["taxonomy_term_id"]].data)
            for a in self.attributes_by_link.get(sid, [])
            if a.get("taxonomy_term_id") in self.terms
        ]


def _county(address: dict[str, Any], zip5: str) -> str | None:
    """The address's region without "County", else the ZIP's county."""
    if address.get("region"):
        return without_county_word(address["region"])
    return zip_data()[zip5][1] if zip5 in zip_data() else None


def _cost_text(cost: dict[str, Any]) -> str | None:
    """A cost option as one phrase: "Sliding scale: 5 USD (per visit)"."""
    amount = cost.get("amount")
    if isinstance(amount, (int, float)):
        amount = f"{amount:g}"
    money = f"{amount} {cost.get('currency') or ''}".strip() if amount not in (None, "") else None
    said = ": ".join(p for p in (cost.get("option"), money) if p)
    note = cost.get("amount_description")
    return f"{said} ({note})" if said and note else said or note


_Report = Callable[[str, str], None]  # report(severity, message): a problem of the service being imported


def _located(sid: str, look: _Lookups, report: _Report) -> tuple[list[tuple[Any, ...]], str, str] | None:
    """(its places, the first one's ZIP and county), or None (reported) when the service has no place with an
    address, the first has no US ZIP code or its county is unknown."""
    places = look.places(sid)
    if not places:
        links = len(look.sal_by_service.get(sid, []))
        report("error", f"no location with a physical or postal address (the registry needs a ZIP): {links} "
                        "service_at_location records link it to locations")  # fmt: skip
        return None
    address = places[0][2]
    match = ZIP5.match(address["postal_code"])
    if match is None:
        report("error", f"postal_code {address['postal_code']!r} of address {address['id']} is not a US ZIP code")
        return None
    zip5 = match.group(1)
    county = _county(address, zip5)
    if not county:
        report("error", f"county unknown: address {address['id']} has no region and ZIP {zip5} is not in the ZIP data")
        return None
    return places, zip5, county


def _coverage(sid: str, places: list[tuple[Any, ...]], zip5: str, look: _Lookups) -> list[str]:
    """The ZIPs of its other places, then those its service areas list (as listed: they may name its own)."""
    coverage = [
        m.group(1) for _, _, a in places[1:] for m in [ZIP5.match(a["postal_code"])] if m and m.group(1) != zip5
    ]
    for area in look.areas_by_service.get(sid, []):
        if area.get("extent_type") in (None, "text") and area.get("extent"):
            coverage += ZIP5.findall(area["extent"])
    return coverage


def closed_hours(hours: str | None) -> str:
    """The hours of a temporarily closed service: ``Temporarily closed.``, then what they were."""
    return f"{TEMPORARILY_CLOSED} {hours}" if hours else TEMPORARILY_CLOSED


def _schedules_and_hours(service: dict[str, Any], owners: list[tuple[str, str | None]],
                         look: _Lookups) -> tuple[list[dict[str, Any]], str | None]:  # fmt: skip
    """The first owner's schedules merged, and their hours line (saying so for a temporarily closed service)."""
    schedules = merge_schedules(map(_schedule_entry, look.first("schedule", owners)))
    hours = hours_line(schedules)
    if service["status"] == "temporarily closed":
        hours = closed_hours(hours)
    return schedules, hours


def _details(service: dict[str, Any], places: list[tuple[Any, ...]], look: _Lookups) -> tuple[list[str], ...]:
    """(languages, accessibility, fees) of the service and its places, each once, in order."""
    sid = service["id"]
    location_ids = [loc["id"] for _, loc, _ in places]
    languages = unique([
        *(r.get("name") or r.get("code") for r in look.languages["service"].get(sid, [])),
        *(r.get("name") or r.get("code") for lid in location_ids for r in look.languages["location"].get(lid, [])),
    ])  # fmt: skip
    access = unique(
        access_text(r.get("description"), r.get("details"))
        for lid in location_ids for r in look.accessibility_by_location.get(lid, [])
    )  # fmt: skip
    fees = unique([service.get("fees_description"), service.get("fees"),
                   *map(_cost_text, look.costs_by_service.get(sid, []))])  # fmt: skip
    return languages, access, fees


def _service_types(sid: str, look: _Lookups, report: _Report) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(the registry ids an export kept, the registry types its terms give, the source's terms to keep); no type is
    reported."""
    terms = look.service_terms(sid)
    own_ids = [a["value"] for a, term in terms if term.get("code") == ID_TERM and a.get("value")]
    exact = _resource_type([term for _, term in terms])  # a term named like a registry type (what export writes)
    source_terms = [term for _, term in terms if term.get("code") != ID_TERM]
    types = list(dict.fromkeys([*([exact] if exact else []), *types_of_terms(source_terms)]))
    if not types:
        report("warning", "no taxonomy term maps to a registry resource_type: imported as other")
    kept_terms = [
        {"code": t.get("code"), "name": t["name"], "taxonomy": t.get("taxonomy")}
        for t in source_terms
        if t.get("taxonomy") != RESOURCE_TYPE_TAXONOMY and isinstance(t.get("name"), str)
    ]
    return own_ids, types, kept_terms


def _assurance(service: dict[str, Any], look: _Lookups) -> tuple[str | None, str | None]:
    """(assured_date, who assured it: assurer_email, else the latest metadata change of assured_date)."""
    assured = service.get("assured_date")
    verified_by = service.get("assurer_email")
    if assured and not verified_by:  # who assured it may be recorded as a change of assured_date
        changes = [m for m in look.metadata_by_resource.get(service["id"], []) if m["field_name"] == "assured_date"]
        if changes:
            verified_by = max(changes, key=lambda m: m["last_action_date"])["updated_by"]
    return assured, verified_by


def _ending(service: dict[str, Any], now: datetime) -> tuple[str | None, str | None]:
    """(deprecated_at: when an inactive or defunct service ended, else None; listed_at: when an offered one was
    last changed)."""
    deprecated_at = listed_at = None
    if service["status"] in ("inactive", "defunct"):
        # the registry's way to say "no longer offered": the row leaves the published slice from that day
        deprecated_at = _date(service.get("last_modified") or now.date().isoformat())
    elif service.get("last_modified"):  # when the directory last changed the listing ("listed ..., not verified")
        listed_at = _date(service["last_modified"])
    return deprecated_at, listed_at


def _service_row(sid: str, where: str, look: _Lookups, problems: list[Problem], now: datetime) -> dict[str, Any] | None:
    """The registry row of one service, or None (the reason reported) when it cannot be one."""
    service = look.services[sid].data

    def report(severity: str, message: str) -> None:
        problems.append(Problem(where, "service", sid, severity, message))

    found = look.organizations.get(service.get("organization_id") or "")
    org = found.data if found else {}
    if service.get("organization_id") and not org:
        report("warning", f"organization {service['organization_id']} not found")
    located = _located(sid, look, report)
    if located is None:
        return None
    places, zip5, county = located
    sal, location, address = places[0]
    owners = [("service", sid), ("service_at_location", sal["id"]), ("location", location["id"])]
    phones = look.first("phone", [*owners, ("organization", org.get("id"))])
    schedules, hours = _schedules_and_hours(service, owners, look)
    languages, access, fees = _details(service, places, look)
    own_ids, types, kept_terms = _service_types(sid, look, report)
    assured, verified_by = _assurance(service, look)
    deprecated_at, listed_at = _ending(service, now)
    return {
        "local_resource_id": own_ids[0] if own_ids else sid,
        "name": service["name"],
        "description": service.get("description") or (None if _made_by_export(org) else org.get("description")),
        "resource_type": types[0] if types else "other",
        "resource_types": types or ["other"],
        "taxonomy_terms": kept_terms or None,
        "county": county,
        "zip": zip5,
        "zip_coverage": list(dict.fromkeys(_coverage(sid, places, zip5, look))),
        "address": _address_text(address),
        "state": address["state_province"].upper() if re.fullmatch(r"[A-Za-z]{2}", address["state_province"]) else None,
        "contact_phone": _phone_text(phones[0]) if phones else None,
        "phones": [_phone_entry(p) for p in phones] or None,
        "contact_email": service.get("email") or org.get("email"),
        "url": service.get("url") or org.get("website"),
        "eligibility": service.get("eligibility_description"),
        "languages": languages,
        "accessibility": "; ".join(access) or None,
        "fees": "; ".join(fees) or None,
        "hours": hours,
        # structured hours only when there is structure (days or times): a text-only schedule is its hours line
        "schedules": schedules if structured(schedules) else None,
        "verification_status": "verified" if assured else "unverified",
        "last_verified_at": _date(assured) if assured else None,
        "verified_by": verified_by,
        "deprecated_at": deprecated_at,
        "organization": _recorded_organization(org) if org else None,
        "listed_at": listed_at,
        "source_id": None if own_ids else sid,  # an id export derived from a registry id is not the source's
    }


def import_export(directory: str | Path, *, now: datetime | None = None) -> HsdsImport:
    """Registry rows from an HSDS 3.0 export directory (see the module docstring); never raises for bad records."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    tables, problems, files, read = read_export(directory)
    look = _Lookups(tables)
    for sal in tables["service_at_location"].values():
        for key, known in (("service_id", look.services), ("location_id", look.locations)):
            if sal.data.get(key) and sal.data[key] not in known:
                problems.append(
                    Problem(
                        sal.where, "service_at_location", sal.data["id"], "warning", f"{key} {sal.data[key]} not found"
                    )
                )
    rows = [_service_row(sid, kept.where, look, problems, now) for sid, kept in look.services.items()]
    return HsdsImport(
        rows=[r for r in rows if r is not None], problems=problems, services_read=read["service"], files=files
    )


def write_registry_file(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """The rows as a registry input file: CSV (``zip_coverage`` space-separated, the other list and object fields
    — ``phones``, ``taxonomy_terms``, ``schedules``, ... — as JSON in their cell; a cell starting with ``=``, ``+``,
    ``-``, ``@``, tab or CR prefixed with ``'``, ``fields.csv_cell``) or JSON, by the file's suffix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".json":
        clean = [{k: row.get(k) for k in FIELDS if row.get(k) not in (None, [])} for row in rows]
        path.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(FIELDS))
        writer.writeheader()
        for row in rows:
            out = {k: _csv_value(row.get(k)) for k in FIELDS}
            out["zip_coverage"] = " ".join(row.get("zip_coverage") or [])
            writer.writerow({k: csv_cell(str(v)) for k, v in out.items()})  # no cell a spreadsheet runs
    return path


def _csv_value(value: Any) -> str:
    """A registry field as CSV text: lists and objects as JSON (an empty list as an empty cell)."""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else ""
    return "" if value is None else str(value)


# --- export ------------------------------------------------------------------------------------------------------
def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "\x1f".join(parts)))


def service_id(local_resource_id: str) -> str:
    """The HSDS service id of a registry row: its own id when that is a UUID (as imported rows have), else a UUID5."""
    try:
        return str(uuid.UUID(local_resource_id))
    except ValueError:
        return _uuid("service", local_resource_id)


def _term(code: str, name: str, description: str) -> dict[str, Any]:
    return {
        "id": _uuid("taxonomy_term", code),
        "code": code,
        "name": name,
        "description": description,
        "taxonomy": RESOURCE_TYPE_TAXONOMY,
    }


def _attribute(sid: str, term: dict[str, Any], value: str | None = None) -> dict[str, Any]:
    out = {
        "id": _uuid("attribute", sid, term["code"]),
        "link_id": sid,
        "link_type": "service_type" if value is None else "identifier",
        "link_entity": "service",
        "taxonomy_term_id": term["id"],
        "taxonomy_term": term,
    }
    return out if value is None else {**out, "value": value}


def _export_phone(phone: dict[str, Any], rid: str, sid: str, i: int) -> dict[str, Any]:
    """A registry phone entry as an HSDS 3.0 phone (a numeric extension as a number, the note as its description)."""
    out: dict[str, Any] = {"id": _uuid("phone", rid) if i == 0 else _uuid("phone", rid, str(i)), "service_id": sid}
    out.update(_published_phone(phone["number"]))
    ext = phone.get("extension")
    if ext and str(ext).isdigit():
        out["extension"] = int(ext)
    out["type"] = phone.get("type") if phone.get("type") in PHONE_TYPES else "voice"
    if phone.get("note"):
        out["description"] = phone["note"]
    return out


def _export_schedule(entry: dict[str, Any], rid: str, sid: str, i: int) -> dict[str, Any]:
    """A registry schedule entry as an HSDS 3.0 schedule (weekly on its days)."""
    out: dict[str, Any] = {
        "id": _uuid("schedule", rid) if i == 0 else _uuid("schedule", rid, str(i)),
        "service_id": sid,
    }
    if entry.get("days"):
        out.update(freq="WEEKLY", byday=",".join(entry["days"]))
    for key in ("opens_at", "closes_at", "description"):
        if entry.get(key):
            out[key] = entry[key]
    return out


def _source_attribute(sid: str, term: dict[str, Any]) -> dict[str, Any]:
    """A taxonomy term the source gave (an AIRS code and name, ...) as the service's attribute."""
    code, name, taxonomy = term.get("code"), term["name"], term.get("taxonomy")
    hsds_term = {
        "id": _uuid("taxonomy_term", taxonomy or "", code or "", name),
        "name": name,
        "description": name,
        **({"code": code} if code else {}),
        **({"taxonomy": taxonomy} if taxonomy else {}),
    }
    return {
        "id": _uuid("attribute", sid, hsds_term["id"]),
        "link_id": sid,
        "link_type": "service_type",
        "link_entity": "service",
        "taxonomy_term_id": hsds_term["id"],
        "taxonomy_term": hsds_term,
    }


def _split_address(row: dict[str, Any]) -> dict[str, str]:
    """address_1 / city / state_province / postal_code from the registry's one-line address (``street, city, ST ZIP``, the
    form import writes); other text is the street, and the city and state are the ZIP's."""
    import zipcodes

    text = row.get("address") or ""
    match = ADDRESS.match(text)
    if match and match.group("zip")[:5] == row["zip"]:
        return {
            "address_1": match.group("street"),
            "city": match.group("city"),
            "state_province": match.group("state"),
            "postal_code": match.group("zip"),  # ZIP+4 when the address has it
        }
    place = zipcodes.matching(row["zip"])
    city = place[0]["city"] if place else row["county"]
    state = place[0]["state"] if place else ""
    return {"address_1": text or city, "city": city, "state_province": state, "postal_code": row["zip"]}


def _published_phone(phone: str) -> dict[str, Any]:
    """``+13045550101;ext=2`` (how verification publishes numbers) or raw text -> number and extension."""
    number, _, ext = phone.partition(";ext=")
    if not ext:
        match = re.search(r"\s*(?:x|ext\.?|extension)\s*(\d{1,6})\s*$", number, re.IGNORECASE)
        if match:
            number, ext = number[: match.start()], match.group(1)
    return {"number": number.strip(), **({"extension": int(ext)} if ext else {})}


def hsds_status(row: dict[str, Any], now: datetime) -> str:
    """active, or defunct once ``deprecated_at`` has passed, or temporarily closed (hours say so)."""
    if row.get("deprecated_at"):
        when = datetime.fromisoformat(str(row["deprecated_at"]).replace("Z", "+00:00"))
        if (when if when.tzinfo else when.replace(tzinfo=UTC)) <= now:
            return "defunct"
    if (row.get("hours") or "").startswith(TEMPORARILY_CLOSED):
        return "temporarily closed"
    return "active"


def _export_location(row: dict[str, Any], rid: str) -> dict[str, Any]:
    """The row's place as an HSDS 3.0 physical location with its one address."""
    location_id = _uuid("location", rid)
    address = {
        "id": _uuid("address", rid),
        "location_id": location_id,
        **_split_address(row),
        "region": row["county"],
        "country": "US",
        "address_type": "physical",
    }
    return {"id": location_id, "location_type": "physical", "name": row["name"], "addresses": [address]}


def _export_last_modified(row: dict[str, Any], status: str) -> str | None:
    """When a defunct service ended, else when the source last listed it (importing the export sets
    ``deprecated_at`` / ``listed_at`` from it again), as a date-time."""
    if status == "defunct":
        ended = str(row["deprecated_at"])
        return ended if "T" in ended else f"{ended}T00:00:00Z"
    if row.get("listed_at"):
        listed = str(row["listed_at"])
        return listed if "T" in listed else f"{listed}T00:00:00Z"
    return None


def _export_phones(row: dict[str, Any], rid: str, sid: str) -> list[dict[str, Any]] | None:
    """Every phone, as verification published them (the first is the contact phone), else the contact phone."""
    listed = [p for p in row.get("phones") or [] if isinstance(p, dict) and p.get("number")]
    if listed:
        return [_export_phone(p, rid, sid, i) for i, p in enumerate(listed)]
    if row.get("contact_phone"):
        return [
            {"id": _uuid("phone", rid), "service_id": sid, "type": "voice", **_published_phone(row["contact_phone"])}
        ]
    return None


def _export_hours(row: dict[str, Any], rid: str, sid: str, status: str) -> dict[str, Any]:
    """``alert`` (a temporarily closed service) and ``schedules``: structured, as imported (importing the export
    merges them the same way again), else the hours line as a schedule's description."""
    out: dict[str, Any] = {}
    hours = row.get("hours") or ""
    if status == "temporarily closed":
        out["alert"] = TEMPORARILY_CLOSED
        hours = hours.removeprefix(TEMPORARILY_CLOSED).strip()
    if row.get("schedules"):
        out["schedules"] = [_export_schedule(entry, rid, sid, i) for i, entry in enumerate(row["schedules"])]
    elif hours:
        out["schedules"] = [{"id": _uuid("schedule", rid), "service_id": sid, "description": hours}]
    return out


def _export_assurance(row: dict[str, Any], rid: str, sid: str) -> dict[str, Any]:
    """A verified row's ``assured_date`` and who assured it: ``assurer_email``, or a name in the ``metadata`` of the
    change (HSDS records who changed a field there)."""
    if row.get("verification_status") != "verified" or not row.get("last_verified_at"):
        return {}
    assured = _date(str(row["last_verified_at"]))
    out: dict[str, Any] = {"assured_date": assured}
    verified_by = row.get("verified_by")
    if verified_by and FormatChecker().conforms(verified_by, "email"):
        out["assurer_email"] = verified_by
    elif verified_by:
        out["metadata"] = [
            {
                "id": _uuid("metadata", rid, "assured_date"),
                "resource_id": sid,
                "resource_type": "service",
                "last_action_date": assured,
                "last_action_type": "verified",
                "field_name": "assured_date",
                "previous_value": PREVIOUS_UNKNOWN,  # required, and an empty cell is a missing value
                "replacement_value": assured,
                "updated_by": verified_by,
            }
        ]
    return out


def _export_attributes(row: dict[str, Any], rid: str, sid: str) -> list[dict[str, Any]]:
    """The row's resource types and the source's taxonomy terms as attributes, and its registry id when that is not
    the service id (so importing this export gives the same rows back)."""
    types = list(dict.fromkeys([row["resource_type"], *(row.get("resource_types") or [])]))
    attributes = [
        _attribute(sid, _term(kind, kind.replace("_", " ").capitalize(), f"Registry resource_type {kind}"))
        for kind in types
    ]
    attributes += [_source_attribute(sid, term) for term in row.get("taxonomy_terms") or [] if term.get("name")]
    if sid != rid:
        attributes.append(_attribute(sid, _term(ID_TERM, "Registry id", "The local_resources registry id"), rid))
    return attributes


def export_service(row: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """One registry row (normalised, as verification publishes it) as an HSDS 3.0 service object."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    rid = row["local_resource_id"]
    sid = service_id(rid)
    status = hsds_status(row, now)
    provider = row.get("organization") or provider_name(row["name"])  # the real organization when rows keep it
    location = _export_location(row, rid)
    sal_id = _uuid("service_at_location", rid)
    service: dict[str, Any] = {
        "id": sid,
        "organization_id": organization_id(provider),
        "organization": export_organization(
            provider, recorded=bool(row.get("organization"))
        ),  # nested, as the HSDS API serves /services/{id}
        "name": row["name"],
        "status": status,
        "service_at_locations": [
            {"id": sal_id, "service_id": sid, "location_id": location["id"], "location": location}
        ],
    }
    last_modified = _export_last_modified(row, status)
    if last_modified is not None:
        service["last_modified"] = last_modified
    for key, value in (
        ("description", row.get("description")),
        ("email", row.get("contact_email")),
        ("url", row.get("url")),
        ("eligibility_description", row.get("eligibility")),
    ):
        if value:
            service[key] = value
    phones = _export_phones(row, rid, sid)
    if phones is not None:
        service["phones"] = phones
    service.update(_export_hours(row, rid, sid, status))
    if row.get("zip_coverage"):
        service["service_areas"] = [
            {
                "id": _uuid("service_area", rid),
                "service_id": sid,
                "name": "ZIP codes served",
                "extent": " ".join(row["zip_coverage"]),
                "extent_type": "text",
            }
        ]
    service.update(_export_assurance(row, rid, sid))
    service["attributes"] = _export_attributes(row, rid, sid)
    return service


def export_services(rows: Iterable[dict[str, Any]], *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Registry rows as HSDS 3.0 services, in the order given."""
    now = now or datetime.now(UTC)
    return [export_service(row, now=now) for row in rows]


def provider_name(name: str) -> str:
    """The provider a registry program's name gives before a spaced dash (``Fayette County DHHR Office – SNAP`` ->
    ``Fayette County DHHR Office``); a name without one is its own provider. The registry has no provider column."""
    head = PROVIDER_SEPARATOR.split(name.strip(), maxsplit=1)[0].strip()
    return head or name.strip()


def organization_id(provider: str) -> str:
    """The HSDS organization id of a provider: a UUID5 of its name (case and spacing ignored), the same every time."""
    return _uuid("organization", " ".join(provider.split()).casefold())


def _made_by_export(organization: dict[str, Any]) -> bool:
    """Whether an organization is one ``export_organizations`` wrote (its id is the UUID5 of its name): its
    description says what the registry knows of it, not what its programs are."""
    return isinstance(organization.get("name"), str) and organization.get("id") == organization_id(organization["name"])


def export_organization(provider: str, *, recorded: bool = False) -> dict[str, Any]:
    """The HSDS organization of a provider: what the registry knows of it is its name. ``recorded``: the rows name
    it (their ``organization``, as a 211 export gave it), else it is ``provider_name`` of a program's name."""
    what = "organization of programs in" if recorded else "provider of programs in"
    return {
        "id": organization_id(provider),
        "name": provider,
        "description": f"{provider}: {what} the Living Memory local_resources registry.",
    }


def _recorded_organization(organization: dict[str, Any]) -> str | None:
    """The organization name a row should keep: the organization's name, unless export made it up from a
    program's name (``provider_name``), which the row never had."""
    name = organization.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    invented = (
        _made_by_export(organization) and organization.get("description") == export_organization(name)["description"]
    )
    return None if invented else name.strip()


def export_organizations(services: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The organizations of the exported services, one per id, in the order they first appear."""
    out: dict[str, dict[str, Any]] = {}
    for service in services:
        organization = service.get("organization") or export_organization(provider_name(service["name"]))
        out.setdefault(organization["id"], dict(organization))
    return list(out.values())


def validate_organizations(organizations: list[dict[str, Any]]) -> list[str]:
    """Every violation of the HSDS 3.0 organization schema, as ``organizations[i].path: message``."""
    validator = hsds_validator("organization")
    return [
        f"organizations[{i}]{_path(err.absolute_path)}: {err.message}"
        for i, organization in enumerate(organizations)
        for err in sorted(validator.iter_errors(organization), key=lambda e: list(map(str, e.absolute_path)))
    ]


# --- export: the tabular data package ----------------------------------------------------------------------------
@cache
def tabular_profile() -> dict[str, Any]:
    """The official HSDS 3.0 tabular data package (``schemas/hsds/datapackage.json``: every table's CSV file,
    fields, types, constraints and foreign keys)."""
    return json.loads((HSDS_DIR / "datapackage.json").read_text(encoding="utf-8"))


def datapackage(tables: Iterable[str] = TABLES) -> dict[str, Any]:
    """The official tabular profile cut to the tables written: their resources as published, foreign keys to tables
    not written dropped (what the spec's ``examples/make_datapackages.py`` does for its examples)."""
    names = set(tables)
    package = copy.deepcopy(tabular_profile())
    package["resources"] = [r for r in package["resources"] if r["name"] in names]
    for resource in package["resources"]:
        schema = resource["schema"]
        keys = [fk for fk in schema.pop("foreignKeys", []) if fk["reference"]["resource"] in names]
        if keys:
            schema["foreignKeys"] = keys
    return package


def tabular_tables(
    services: list[dict[str, Any]], organizations: list[dict[str, Any]]
) -> tuple[dict[str, list[dict[str, Any]]], list[Problem]]:
    """The exported records as the tabular format's rows: nested records split into their tables, one row per id,
    each with the ids of the records it belongs to (``service_id``, ...), checked against the table schemas with
    the fields the tabular format requires. Problems: what a table cannot hold (none for a valid export)."""
    flat: dict[str, list[_Record]] = {}
    for table, records in (("organization", organizations), ("service", services)):
        for i, item in enumerate(records):
            _flatten(table, _Record(item, f"{table_file(table)}.json[{i}]"), flat)
    problems: list[Problem] = []
    kept = {t: _valid_records(flat.get(t, []), t, True, problems) for t in TABLES}
    columns = {r["name"]: [f["name"] for f in r["schema"]["fields"]] for r in datapackage()["resources"]}
    for table, by_id in kept.items():
        for rid, record in by_id.items():
            for key in record.also:  # a row has one value per column
                problems.append(Problem(record.where, table, rid, "error", f"linked to several by {key}"))
            for key in sorted(set(record.data) - set(columns[table])):
                problems.append(
                    Problem(record.where, table, rid, "error", f"{key}: no such column in {table_file(table)}.csv")
                )
    return {t: [r.data for r in records.values()] for t, records in kept.items()}, problems


def _cell(prop: dict[str, Any], value: Any) -> str:
    """A field's value as a CSV cell: text through ``fields.csv_cell`` (a cell no spreadsheet runs), numbers as
    numbers, booleans as ``true`` / ``false``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return csv_cell(value) if _is_text(prop) else value
    return str(value)


def tabular_files(tables: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """File name -> text of the tabular data package: ``datapackage.json`` and one CSV per table (header only when
    it has no rows), columns in the profile's order."""
    package = datapackage(tables)
    files = {"datapackage.json": json.dumps(package, indent=1, ensure_ascii=False) + "\n"}
    for resource in package["resources"]:
        table, fields = resource["name"], [f["name"] for f in resource["schema"]["fields"]]
        props = hsds_schema(table)["properties"]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="raise")
        writer.writeheader()
        for record in tables[table]:
            writer.writerow({k: _cell(props.get(k, {}), v) for k, v in record.items()})
        files[resource["path"]] = buffer.getvalue()
    return files


def validate_export(services: list[dict[str, Any]], organizations: list[dict[str, Any]]) -> list[str]:
    """Every reason the export would not be valid HSDS 3.0: services and organizations against their schemas, and
    the tabular rows against the tables' (with the fields the tabular format requires)."""
    _, problems = tabular_tables(services, organizations)
    return [*validate_services(services), *validate_organizations(organizations), *map(str, problems)]


def write_export(services: list[dict[str, Any]], directory: str | Path) -> list[Path]:
    """The services as an HSDS 3.0 export directory, every file importable again:

    - ``services.json``: the services, each with its related records nested (as the HSDS API serves them);
    - ``organizations.json``: their providers (``export_organizations``);
    - ``tabular/``: the same records as the HSDS tabular data package, ``datapackage.json`` and a CSV per table.

    Everything is written to a scratch folder first and moved into place file by file, so a failure leaves the
    files as they were. Raises HsdsError for records the tabular format cannot hold."""
    directory = Path(directory)
    organizations = export_organizations(services)
    tables, problems = tabular_tables(services, organizations)
    if problems:
        raise HsdsError("the export is not a valid HSDS tabular package: " + "; ".join(map(str, problems[:10])))
    files = {
        f"{table_file('service')}.json": json.dumps(services, indent=1, ensure_ascii=False) + "\n",
        f"{table_file('organization')}.json": json.dumps(organizations, indent=1, ensure_ascii=False) + "\n",
        **{f"{TABULAR_DIR}/{name}": text for name, text in tabular_files(tables).items()},
    }
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".hsds-export-", dir=directory) as scratch:
        for name, text in files.items():
            (Path(scratch) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(scratch) / name).write_text(text, encoding="utf-8", newline="")
        for name in files:
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(scratch) / name, directory / name)
    return [directory / name for name in files]


def _iter_rows(frame: Any) -> Iterator[dict[str, Any]]:
    for record in frame.to_dict("records"):
        yield {k: record.get(k) for k in FIELDS}


def verified_rows(verification: Any) -> list[dict[str, Any]]:
    """The rows a registry verification (``livemem.registry.verify``) accepted, deprecated ones included."""
    return list(_iter_rows(verification.rows[verification.rows["valid"]]))
