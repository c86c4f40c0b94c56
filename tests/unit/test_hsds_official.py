"""HSDS 3.0 as Open Referral publishes it: the export's organizations and tabular data package checked with the
official schemas (jsonschema) and the official profile (frictionless, as the spec's own CI validates its examples);
the importer on the spec's own examples (tests/fixtures/hsds_official, vendored with their licence)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from frictionless import validate
from support.registry import NOW, good_row, write_csv, write_registry_sources
from typer.testing import CliRunner

from livemem.registry import RegistryConfig, hsds, load_csv, run_verification, verify
from livemem.registry.hsds import HSDS_DIR
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from orchestration.cli import app

OFFICIAL = Path(__file__).resolve().parents[1] / "fixtures" / "hsds_official"
HSDS_EXPORT = Path(__file__).resolve().parents[1] / "fixtures" / "hsds_export"
SERVICE = "ac148810-d857-441c-9679-408f346de14b"  # the id of the spec's service_full.json
PHONE = "1554f2e2-a373-45db-a3fa-9fc48a61c15e"  # its phone, nested under ten parents


def _rows(tmp_path: Path, *rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows as the registry's verification accepts and publishes them."""
    path = write_csv(tmp_path / "registry.csv", list(rows))
    verification = verify(load_csv(path), RegistryConfig(kind="csv", path=path, state="WV", freshness_days=180), NOW)
    return hsds.verified_rows(verification)


def _export(tmp_path: Path, *rows: dict[str, Any]) -> tuple[list[dict[str, Any]], Path]:
    services = hsds.export_services(_rows(tmp_path, *rows), now=NOW)
    out = tmp_path / "export"
    hsds.write_export(services, out)
    return services, out


def _records(directory: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """table -> id -> record, as import reads a directory; no problems on the way."""
    tables, problems, _, _ = hsds.read_export(directory)
    assert problems == []
    return {table: {rid: kept.data for rid, kept in records.items()} for table, records in tables.items()}


PROGRAMS = (
    good_row(0, name="Fayette County DHHR Office – SNAP", resource_type="snap"),
    good_row(1, name="Fayette County DHHR Office – Medicaid", resource_type="medicaid", description=""),
    good_row(2, name="Fayetteville Community Food Pantry"),
)


# --- 1. organizations ---------------------------------------------------------------------------------------------
def test_export_writes_each_provider_as_an_organization_valid_per_the_official_schema(tmp_path: Path) -> None:
    services, out = _export(tmp_path, *PROGRAMS)

    organizations = json.loads((out / "organizations.json").read_text(encoding="utf-8"))
    assert [o["name"] for o in organizations] == ["Fayette County DHHR Office", "Fayetteville Community Food Pantry"]
    validator = hsds.hsds_validator("organization")  # schemas/hsds/organization.json, formats checked
    assert [e.message for o in organizations for e in validator.iter_errors(o)] == []
    # the services link their provider; the two DHHR programs share one organization
    ids = {o["name"]: o["id"] for o in organizations}
    assert [s["organization_id"] for s in services] == [ids["Fayette County DHHR Office"]] * 2 + [
        ids["Fayetteville Community Food Pantry"]
    ]
    # stable ids: the same rows exported again give the same organizations
    again = hsds.export_organizations(hsds.export_services(_rows(tmp_path, *PROGRAMS), now=NOW))
    assert again == organizations
    # importing the export: every service finds its organization, and a program without a description does not
    # take the organization's (which describes the export, not the program)
    imported = hsds.import_export(out, now=NOW)
    assert imported.problems == []
    assert [r["description"] for r in imported.rows] == ["Help with groceries.", None, "Help with groceries."]


# --- 2. the tabular data package ----------------------------------------------------------------------------------
def test_tabular_export_is_a_valid_hsds_data_package_that_reads_back_as_the_json_export(tmp_path: Path) -> None:
    _, out = _export(tmp_path, *PROGRAMS, good_row(3, deprecated_at="2026-01-05", zip_coverage="25840 25136"))
    package = out / "tabular" / "datapackage.json"

    report = validate(package)  # Frictionless: every CSV against its table schema, formats, required, foreign keys
    assert report.valid, report.flatten(["resourceName", "rowNumber", "fieldName", "type", "note"])
    written = json.loads(package.read_text(encoding="utf-8"))
    official = {
        r["name"]: r for r in json.loads((HSDS_DIR / "datapackage.json").read_text(encoding="utf-8"))["resources"]
    }
    assert written["profile"] == "tabular-data-package" and written["version"] == "3.0.0"
    for resource in written["resources"]:  # the official tables, paths and fields, in the official order
        assert resource["path"] == official[resource["name"]]["path"]
        assert resource["schema"]["fields"] == official[resource["name"]]["schema"]["fields"]
        with open(out / "tabular" / resource["path"], encoding="utf-8", newline="") as fh:
            assert next(csv.reader(fh)) == [f["name"] for f in resource["schema"]["fields"]]
    assert {"organization", "service", "service_at_location", "location", "address", "phone"} <= set(
        r["name"] for r in written["resources"]
    )

    # the importer reads the package back: the same records as the JSON export, the same registry rows
    from_json, from_csv = _records(out), _records(out / "tabular")
    assert from_csv == from_json
    assert len(from_csv["service"]) == 4 and len(from_csv["organization"]) == 3
    assert hsds.import_export(out / "tabular", now=NOW).rows == hsds.import_export(out, now=NOW).rows


def test_cli_export_writes_json_organizations_and_the_tabular_package(tmp_path: Path) -> None:
    registry_file = write_csv(tmp_path / "registry" / "local_resources.csv", list(PROGRAMS))
    sources = write_registry_sources(tmp_path, f"  kind: csv\n  path: {registry_file}\n  state: WV")
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig.from_sources(load_sources(sources))
    assert cfg is not None
    run = run_verification(cfg, home)
    home.publish(run.version_id, run.base_version, 5)

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["--sources", str(sources), "--index-dir", str(home.root), "registry", "export-hsds", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "3 services of 2 organizations" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["organizations.json", "services.json", "tabular"]
    assert validate(out / "tabular" / "datapackage.json").valid
    assert not list(out.glob(".hsds-export-*"))  # no scratch left behind


# --- 3. the importer on the spec's own examples --------------------------------------------------------------------
def test_the_official_service_full_example_imports_its_repeated_records_once(tmp_path: Path) -> None:
    """service_full.json nests one phone under the service, its location, organization and contacts (ten places)
    and one schedule under three: the same record, not ten with one id."""
    example = json.loads((OFFICIAL / "service_full.json").read_text(encoding="utf-8"))
    (tmp_path / "services.json").write_text(json.dumps([example]), encoding="utf-8")

    result = hsds.import_export(tmp_path, now=NOW)
    assert result.services_read == 1
    # the only problem left is the example's UK postcode, which the registry (US ZIP codes) cannot take
    assert [(p.where, p.record_id) for p in result.problems] == [("services.json[0]", SERVICE)]
    assert "'ABC 1234'" in result.problems[0].message and "not a US ZIP code" in result.problems[0].message

    # the merged phone is the row the spec's own tabular example has for it: linked to all of its parents
    from_json, from_csv = _records(tmp_path), _records(OFFICIAL / "csv")
    assert from_json["phone"][PHONE] == from_csv["phone"][PHONE]
    for table in ("phone", "schedule", "service_at_location", "address", "service_area"):
        assert from_json[table] == from_csv[table], table

    # with a US address the example becomes a registry row, its phone found through the merged record
    for location in (example["service_at_locations"][0]["location"], example["organization"]["locations"][0]):
        location["addresses"][0].update(postal_code="25901", region="Fayette", state_province="WV")
    (tmp_path / "services.json").write_text(json.dumps([example]), encoding="utf-8")
    result = hsds.import_export(tmp_path, now=NOW)
    assert result.errors == [] and len(result.rows) == 1
    row = result.rows[0]
    assert (row["local_resource_id"], row["zip"], row["county"]) == (SERVICE, "25901", "Fayette")
    assert row["contact_phone"] == '"+44 1234 234567" x100'


def test_the_same_id_with_other_fields_is_still_an_error_naming_both_places(tmp_path: Path) -> None:
    services = hsds.export_services(_rows(tmp_path, good_row(0), good_row(1)), now=NOW)
    # the second service nests the first one's location (same id) under another name
    shared = json.loads(json.dumps(services[0]["service_at_locations"][0]["location"]))
    services[1]["service_at_locations"][0]["location"] = {**shared, "name": "Somewhere else"}
    services[1]["service_at_locations"][0]["location_id"] = shared["id"]
    (tmp_path / "services.json").write_text(json.dumps(services), encoding="utf-8")

    problems = [p for p in hsds.import_export(tmp_path, now=NOW).problems if p.table == "location"]
    assert [(p.where, p.record_id, p.severity) for p in problems] == [
        ("services.json[1].service_at_locations[0].location", shared["id"], "error")
    ]
    assert "services.json[0].service_at_locations[0].location" in problems[0].message  # the first place


def test_a_single_service_object_is_one_service(tmp_path: Path) -> None:
    shutil.copy(OFFICIAL / "service_full.json", tmp_path / "services.json")  # as the API serves /services/{id}
    result = hsds.import_export(tmp_path, now=NOW)
    assert result.services_read == 1 and [(p.where, p.record_id) for p in result.problems] == [
        ("services.json", SERVICE)  # its UK postcode, as in the list form above
    ]

    service = hsds.export_services(_rows(tmp_path, good_row(0)), now=NOW)[0]
    (tmp_path / "services.json").write_text(json.dumps(service), encoding="utf-8")
    result = hsds.import_export(tmp_path, now=NOW)
    assert result.problems == [] and [r["local_resource_id"] for r in result.rows] == ["res-00000"]

    (tmp_path / "services.json").write_text('"a service"', encoding="utf-8")
    with pytest.raises(hsds.HsdsError, match=r"services\.json: expected a service record.*not str"):
        hsds.import_export(tmp_path, now=NOW)


# --- 4. the CSV formula neutraliser -------------------------------------------------------------------------------
FORMULAS = good_row(
    0,
    name="=Free lunch",
    description="-5 °F and colder: the shelter opens",
    eligibility="@home visits for seniors",
    hours="+ Saturdays 9-12",
)


def test_csv_import_takes_off_the_mark_exactly_where_export_added_it(tmp_path: Path) -> None:
    _, out = _export(tmp_path, FORMULAS)
    cells = (out / "tabular" / "services.csv").read_text(encoding="utf-8")
    assert "'=Free lunch" in cells and "'-5 °F" in cells and "'@home" in cells  # no cell a spreadsheet runs
    assert "'+1304555010" in (out / "tabular" / "phones.csv").read_text(encoding="utf-8")

    (row,) = hsds.import_export(out / "tabular", now=NOW).rows
    (original,) = _rows(tmp_path, FORMULAS)
    for field in ("name", "description", "eligibility", "hours", "contact_phone"):
        assert row[field] == hsds.import_export(out, now=NOW).rows[0][field], field
    assert (row["name"], row["description"], row["eligibility"]) == (
        "=Free lunch", "-5 °F and colder: the shelter opens", "@home visits for seniors",
    )  # fmt: skip
    assert row["hours"] == "+ Saturdays 9-12" and row["contact_phone"] == original["contact_phone"]


def test_csv_import_reads_a_neutralised_cell_as_its_value(tmp_path: Path) -> None:
    """A directory's CSV as a spreadsheet-safe writer leaves it: ``'+1 304-555-0101`` is the number +1 304-555-0101."""
    shutil.copytree(HSDS_EXPORT, tmp_path / "export")
    phones = tmp_path / "export" / "phones.csv"
    phones.write_text(phones.read_text(encoding="utf-8").replace(",304-555-0101,", ",'+1 304-555-0101,"), "utf-8")

    rows = {r["local_resource_id"]: r for r in hsds.import_export(tmp_path / "export", now=NOW).rows}
    assert rows["5e000000-0000-4000-8000-000000000001"]["contact_phone"] == "+1 304-555-0101 x12"


def test_csv_import_keeps_an_apostrophe_the_exporter_did_not_add(tmp_path: Path) -> None:
    _, out = _export(tmp_path, good_row(0))
    path = out / "tabular" / "services.csv"
    with open(path, encoding="utf-8", newline="") as fh:
        records = list(csv.DictReader(fh))
    records[0]["name"] = "'Tis the Season Pantry"  # an apostrophe that belongs to the name
    records[0]["description"] = "''=not a formula"  # a value that itself starts with ' before a formula character
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)

    (row,) = hsds.import_export(out / "tabular", now=NOW).rows
    assert row["name"] == "'Tis the Season Pantry"
    assert row["description"] == "'=not a formula"


def test_an_export_the_tabular_format_cannot_hold_writes_nothing(tmp_path: Path) -> None:
    _, out = _export(tmp_path, good_row(0))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    broken = hsds.export_services(_rows(tmp_path, good_row(0), good_row(1)), now=NOW)
    broken[1]["x_note"] = "an extension field"  # HSDS JSON allows it; services.csv has no column for it

    with pytest.raises(hsds.HsdsError, match=r"services\.json\[1\]: error: service .*: x_note: no such column"):
        hsds.write_export(broken, out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
