"""The registry row: its fields (``schemas/local_resource.schema.json``), resource types, statuses, the tables a
verification stages, and the rules that check a row."""

from __future__ import annotations

import json
from typing import Any

from livemem.schemas import load_schema

FIELDS: tuple[str, ...] = tuple(load_schema("local_resource")["properties"])
RESOURCE_TYPES: tuple[str, ...] = tuple(load_schema("local_resource")["properties"]["resource_type"]["enum"])
REQUIRED: tuple[str, ...] = tuple(load_schema("local_resource")["required"])
# list fields: a list in JSON and Postgres (text[] / json), in a CSV cell a JSON list or (string lists) separated text
STRING_LISTS = ("zip_coverage", "resource_types", "languages")
OBJECT_LISTS = ("taxonomy_terms", "phones", "schedules")  # published as JSON text (the DuckDB column is VARCHAR)
LIST_FIELDS = (*STRING_LISTS, *OBJECT_LISTS)
# fields added with the HSDS imports (registry-v2): they enter a row's content hash only when they say something the
# v1 fields do not, so rows verified before keep their hash (and their history no spurious "updated")
V2_FIELDS = (
    "organization", "resource_types", "taxonomy_terms", "phones", "languages", "accessibility", "fees",
    "service_area", "state", "listed_at", "source_id", "schedules",
)  # fmt: skip
VERIFICATION_FIELDS = ("verification_status", "last_verified_at", "verified_by", "listed_at")
CONTENT_FIELDS = tuple(f for f in FIELDS if f not in (*VERIFICATION_FIELDS, "deprecated_at"))
STATUSES = ("verified", "stale", "unverified")
HISTORY_CHANGES = ("created", "updated", "verified", "deprecated", "restored", "removed")
DAY_S = 86_400.0

# rule name -> what it checks (the severity is per issue: error drops the row, warning / info only report)
RULES: dict[str, str] = {
    "schema": "the row is valid per schemas/local_resource.schema.json (required fields, types, vocabulary, dates)",
    "phone": "contact_phone is a well-formed North American number (published as +1XXXXXXXXXX)",
    "email": "contact_email is a well-formed address (domain published in lower case)",
    "url": "url is a well-formed http(s) address (scheme and host published in lower case)",
    "zip_in_state": "zip exists, is in use and lies in the configured state",
    "zip_county": "zip lies in the row's county (ZIP data of the zipcodes package)",
    "zip_coverage": "every zip_coverage ZIP exists and lies in the configured state",
    "freshness": "last_verified_at is not in the future and not older than freshness_days (warning: stale)",
    "duplicate_id": "local_resource_id is used by one row only (later rows are dropped)",
    "duplicate_program": "no other id has the same name, ZIP and resource_type (warning)",
    "deprecated": "rows with deprecated_at in the past leave the published slice (info)",
    "reachable": "the row has an address, or a phone, e-mail or web address that passed its rule (else nobody can "
    "reach or find the program: error)",
    "state": "the row's state is its ZIP's state (warning: the ZIP's state is published)",
}
FIELD_RULES = ("phone", "email", "url", "schema")  # rules that flag a field (invalid_fields: flag) rather than a row


# computed columns of the published table: status, the date it rests on (last_verified_at, or listed_at under the
# undated policy ``listed``), and the fields flagged and left out (invalid_fields: flag)
REGISTRY_COLUMNS = (*FIELDS, "status", "verified_as_of", "flagged_fields", "source_row", "content_hash")
ISSUE_COLUMNS = ("source_row", "local_resource_id", "rule", "severity", "message")
HISTORY_COLUMNS = (
    "local_resource_id", "change", "valid_from", "valid_to", "version_id", "content_hash", "verification_hash",
    "status", "last_verified_at", "deprecated_at", "note", "data",
)  # fmt: skip


# CSV cells a spreadsheet would run as a formula (OWASP "CSV injection"): a cell starting with one of these is
# written with a leading ``'`` (``csv_cell``), which spreadsheets show as text and hide; reading a registry CSV takes
# it off again (``csv_text``), so a file the project writes reads back exactly. Phone numbers in E.164 form
# (``+13045550101``) are prefixed too: a spreadsheet reads ``+1304...`` as a formula or a number, never as the text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """``value`` as a CSV cell no spreadsheet runs: prefixed with ``'`` when it starts (after any ``'``) with a
    formula character; ``csv_text(csv_cell(v)) == v`` for every string."""
    return "'" + value if value.lstrip("'")[:1] in FORMULA_STARTS else value


def csv_text(cell: str) -> str:
    """The value of a CSV cell written by ``csv_cell`` (a cell a spreadsheet saved with the same ``'`` too)."""
    return cell[1:] if cell.startswith("'") and cell.lstrip("'")[:1] in FORMULA_STARTS else cell


def encode_published(name: str, value: Any) -> Any:
    """A published value as the ``registry`` table stores it: object lists as JSON text, None for empty."""
    if name in OBJECT_LISTS:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else None
    return value


def decode_published(row: dict[str, Any]) -> dict[str, Any]:
    """A ``registry`` table row as callers use it: object lists parsed, string lists as lists (an index version
    written before a column existed reads it as None / [])."""
    for name in OBJECT_LISTS:
        value = row.get(name)
        row[name] = json.loads(value) if isinstance(value, str) and value else list(value or [])
    for name in (*STRING_LISTS, "flagged_fields"):
        row[name] = list(row.get(name) or [])
    types = row["resource_types"]
    if row.get("resource_type") and row["resource_type"] not in types:
        row["resource_types"] = [row["resource_type"], *types]
    return row
