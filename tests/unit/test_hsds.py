"""Open Referral HSDS 3.0 import / export of the registry, on a small hand-written export (tests/fixtures/hsds_export,
tabular CSV as directories exchange it) and the registry's real verification."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

from support.registry import NOW, good_row, write_csv, write_registry_sources
from typer.testing import CliRunner

from livemem.registry import FIELDS, RegistryConfig, hsds, load_csv, run_verification, verify
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from orchestration.cli import app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hsds_export"
PANTRY, LIEAP, MEALS, WIC, BAD_STATUS, NO_PLACE = (f"5e000000-0000-4000-8000-00000000000{i}" for i in range(1, 7))


def _cfg(path: Path) -> RegistryConfig:
    return RegistryConfig(kind=path.suffix.lstrip("."), path=path, state="WV", freshness_days=180)


def _verified(rows: list[dict[str, Any]], path: Path):
    """The registry's normal verification of rows written as its input file."""
    hsds.write_registry_file(rows, path)
    return verify(load_csv(path), _cfg(path), NOW)


def _fixture_services() -> dict[str, dict[str, str]]:
    with open(FIXTURE / "services.csv", encoding="utf-8", newline="") as fh:
        return {row["id"]: row for row in csv.DictReader(fh)}


def test_import_keeps_good_records_and_reports_bad_ones_with_file_and_row() -> None:
    result = hsds.import_export(FIXTURE, now=NOW)

    assert [r["local_resource_id"] for r in result.rows] == [PANTRY, LIEAP, MEALS, WIC]
    assert result.services_read == 6
    where = {(p.where, p.severity, p.record_id): p.message for p in result.problems}
    # a service whose status is outside the vocabulary: left out, with the schema's words
    assert "'closed' is not one of" in where[("services.csv:6", "error", BAD_STATUS)]
    # a phone without a number is left out, its service is kept (without a phone)
    assert "'number' is a required property" in where[("phones.csv:4", "error", "9b000000-0000-4000-8000-000000000003")]
    assert next(r for r in result.rows if r["local_resource_id"] == MEALS)["contact_phone"] is None
    # a service linked to a location that does not exist: the link is reported, the service has no ZIP: left out
    assert any(w == "service_at_location.csv:6" and s == "warning" for w, s, _ in where)
    assert "no location with a physical or postal address" in where[("services.csv:7", "error", NO_PLACE)]
    assert len(result.errors) == 3 and "4 registry rows, 2 services left out" in result.summary()


def test_import_maps_status_assured_date_places_and_types() -> None:
    rows = {r["local_resource_id"]: r for r in hsds.import_export(FIXTURE, now=NOW).rows}
    pantry, lieap, meals, wic = rows[PANTRY], rows[LIEAP], rows[MEALS], rows[WIC]

    # assured_date -> last verified; who assured it from assurer_email, or from the metadata of that change
    assert (pantry["last_verified_at"], pantry["verification_status"]) == ("2026-11-02", "verified")
    assert pantry["verified_by"] == "verifier@oakhillaction.example.org" and lieap["verified_by"] == "Dana Smith"
    assert (wic["last_verified_at"], wic["verification_status"]) == (None, "unverified")
    # active stays published; temporarily closed is published with its hours saying so; defunct / inactive end
    assert pantry["deprecated_at"] is None and pantry["hours"] == "Mon, Wed, Fri 9:00–12:00"
    assert lieap["deprecated_at"] is None and lieap["hours"] == "Temporarily closed. Mon-Thu 8:30-4:30"
    assert meals["deprecated_at"] == "2025-06-30"  # its last_modified
    assert wic["deprecated_at"] == NOW.date().isoformat()  # no date given: ends on import
    # places: region or else the ZIP's county; other ZIPs of the service areas become coverage
    assert (pantry["zip"], pantry["county"], pantry["zip_coverage"]) == ("25901", "Fayette", ["25840", "25136"])
    assert (lieap["zip"], lieap["county"]) == ("25801", "Raleigh")
    assert pantry["address"] == "100 Main Street, Suite 2, Oak Hill, WV 25901"
    # taxonomy terms by code or name; contact details fall back from service to location to organization
    assert [r["resource_type"] for r in (pantry, lieap, meals, wic)] == [
        "food_pantry", "utility_assistance", "senior_services", "wic",
    ]  # fmt: skip
    assert pantry["contact_phone"] == "304-555-0101 x12" and lieap["contact_phone"] == "(304) 555-0102"
    assert lieap["url"] == "https://oakhillaction.example.org" and lieap["contact_email"].startswith("info@")


def test_round_trip_import_verify_export_validate_import(tmp_path: Path) -> None:
    imported = hsds.import_export(FIXTURE, now=NOW)
    first = _verified(imported.rows, tmp_path / "registry.csv")
    counts = first.counts()
    assert counts["error_issues"] == 0, first.issues.to_dict("records")
    assert (counts["published"], counts["deprecated"], counts["verified"]) == (2, 2, 2)

    services = hsds.export_services(hsds.verified_rows(first), now=NOW)
    assert hsds.validate_services(services) == []
    by_id = {s["id"]: s for s in services}
    source = _fixture_services()
    for sid in (PANTRY, LIEAP, MEALS, WIC):  # the fields that must survive, against the hand-written export
        assert by_id[sid]["name"] == source[sid]["name"]
        assert by_id[sid].get("assured_date", "") == source[sid]["assured_date"]
        assert by_id[sid].get("eligibility_description", "") == source[sid]["eligibility_description"]
    assert [by_id[s]["status"] for s in (PANTRY, LIEAP, MEALS, WIC)] == [
        "active", "temporarily closed", "defunct", "defunct",  # the registry has one way to end: inactive -> defunct
    ]  # fmt: skip
    pantry = by_id[PANTRY]
    assert pantry["assurer_email"] == "verifier@oakhillaction.example.org"
    assert pantry["phones"][0]["number"] == "+13045550101" and pantry["phones"][0]["extension"] == 12
    address = pantry["service_at_locations"][0]["location"]["addresses"][0]
    assert (address["address_1"], address["city"], address["postal_code"], address["region"]) == (
        "100 Main Street, Suite 2", "Oak Hill", "25901", "Fayette",
    )  # fmt: skip
    assert pantry["service_areas"][0]["extent"] == "25840 25136"
    assert pantry["attributes"][0]["taxonomy_term"]["code"] == "food_pantry"
    assert by_id[LIEAP]["metadata"][0]["updated_by"] == "Dana Smith"

    # the export is itself an HSDS directory export (nested JSON): importing it gives the same verified registry
    hsds.write_export(services, tmp_path / "exported")
    again = hsds.import_export(tmp_path / "exported", now=NOW)
    assert again.errors == []
    second = _verified(again.rows, tmp_path / "registry-again.csv")
    columns = [*FIELDS, "valid", "deprecated", "status"]
    assert second.rows[columns].to_dict("records") == first.rows[columns].to_dict("records")


def test_validation_reports_what_is_wrong_and_where(tmp_path: Path) -> None:
    services = hsds.export_services(hsds.import_export(FIXTURE, now=NOW).rows[:1], now=NOW)
    broken = copy.deepcopy(services)
    broken[0]["status"] = "closed"
    broken[0]["phones"][0]["id"] = "phone-1"
    del broken[0]["service_at_locations"][0]["location"]["addresses"][0]["postal_code"]
    errors = hsds.validate_services(broken)
    assert any(e.startswith("[0].status:") and "'closed' is not one of" in e for e in errors)
    assert any(e.startswith("[0].phones[0].id:") and "uuid" in e for e in errors)
    assert any(
        e.startswith("[0].service_at_locations[0].location.addresses[0]:") and "postal_code" in e for e in errors
    )


def test_nested_json_import_reports_the_path_of_a_bad_nested_record(tmp_path: Path) -> None:
    services = hsds.export_services(hsds.import_export(FIXTURE, now=NOW).rows[:2], now=NOW)
    del services[0]["phones"][0]["number"]
    services[1]["service_at_locations"][0]["location"]["addresses"][0]["address_type"] = "home"
    (tmp_path / "services.json").write_text(json.dumps({"contents": services}), encoding="utf-8")  # an API page

    result = hsds.import_export(tmp_path, now=NOW)
    where = {p.where: p for p in result.problems}
    assert "'number' is a required property" in where["services.json[0].phones[0]"].message
    assert "'home' is not one of" in where["services.json[1].service_at_locations[0].location.addresses[0]"].message
    # the first service is kept without its phone; the second has no usable address left, so it is left out
    assert [r["local_resource_id"] for r in result.rows] == [PANTRY] and result.rows[0]["contact_phone"] is None
    assert "no location with a physical or postal address" in where["services.json[1]"].message


def test_registry_ids_that_are_not_uuids_survive_the_round_trip(tmp_path: Path) -> None:
    rows = [good_row(0), good_row(1, zip_coverage="25840 25136"), good_row(2, deprecated_at="2026-01-05")]
    path = write_csv(tmp_path / "registry.csv", rows)
    first = verify(load_csv(path), _cfg(path), NOW)
    services = hsds.export_services(hsds.verified_rows(first), now=NOW)
    assert hsds.validate_services(services) == []
    assert [s["status"] for s in services] == ["active", "active", "defunct"]
    assert services[0]["metadata"][0]["updated_by"] == "Test Verifier"  # verified_by is a name, not an e-mail

    hsds.write_export(services, tmp_path / "out")
    again = hsds.import_export(tmp_path / "out", now=NOW)
    second = _verified(again.rows, tmp_path / "again.csv")
    assert [r["local_resource_id"] for r in again.rows] == ["res-00000", "res-00001", "res-00002"]
    columns = [f for f in (*FIELDS, "valid", "deprecated", "status") if f != "address"]
    assert second.rows[columns].to_dict("records") == first.rows[columns].to_dict("records")
    # a street-only address comes back with the city and state HSDS requires (the ZIP's)
    assert list(second.rows["address"]) == [f"{i} Main Street, {city}, WV {z}" for i, city, z in (
        (0, "Oak Hill", "25901"), (1, "Fayetteville", "25840"), (2, "Montgomery", "25136"),
    )]  # fmt: skip


def test_cli_imports_and_exports_the_published_registry(tmp_path: Path) -> None:
    runner = CliRunner()
    registry_file = tmp_path / "registry" / "local_resources.csv"
    imported = runner.invoke(app, ["registry", "import-hsds", str(FIXTURE), str(registry_file)])
    assert imported.exit_code == 0, imported.output
    assert "4 registry rows" in imported.output and "services.csv:6" in imported.output

    sources = write_registry_sources(tmp_path, f"  kind: csv\n  path: {registry_file}\n  state: WV")
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig.from_sources(load_sources(sources))
    assert cfg is not None
    run = run_verification(cfg, home)
    home.publish(run.version_id, run.base_version, 5)
    base = ["--sources", str(sources), "--index-dir", str(home.root)]

    published = runner.invoke(app, [*base, "registry", "export-hsds", str(tmp_path / "published")])
    assert published.exit_code == 0, published.output
    services = json.loads((tmp_path / "published" / "services.json").read_text(encoding="utf-8"))
    assert sorted(s["id"] for s in services) == [PANTRY, LIEAP]  # the published slice: ended services are not in it
    assert hsds.validate_services(services) == []

    everything = runner.invoke(app, [*base, "registry", "export-hsds", str(tmp_path / "all"), "--from-source"])
    assert everything.exit_code == 0, everything.output
    assert "4 services" in everything.output

    missing = runner.invoke(app, ["registry", "import-hsds", str(tmp_path / "nope"), str(tmp_path / "x.csv")])
    assert missing.exit_code == 1 and "not a directory" in " ".join(missing.output.split())


def test_import_keeps_languages_accessibility_and_fees_from_the_3_0_tables(tmp_path: Path) -> None:
    """HSDS 3.0's ``language`` (by service and by location), ``accessibility`` (by location) and the service's
    ``fees_description`` and ``cost_option`` records become the row's languages, accessibility and fees, as the
    1.x/2.0 importer fills them (issue 46, goal 2)."""
    import shutil

    export = shutil.copytree(FIXTURE, tmp_path / "export")
    location = "10000000-0000-4000-8000-000000000001"  # the pantry's
    tables = {
        "languages.csv": [
            "id,service_id,location_id,phone_id,name,code,note",
            f"1a000000-0000-4000-8000-000000000001,{PANTRY},,,English,en,",
            f"1a000000-0000-4000-8000-000000000002,{PANTRY},,,Spanish,es,",
            f"1a000000-0000-4000-8000-000000000003,,{location},,,ht,",  # a location's, by its code only
            f"1a000000-0000-4000-8000-000000000004,{LIEAP},,,Spanish,es,",
        ],
        "accessibility.csv": [
            "id,location_id,description,details,url",
            f"1b000000-0000-4000-8000-000000000001,{location},Wheelchair accessible,ramp at the side door,",
        ],
        "cost_options.csv": [
            "id,service_id,valid_from,valid_to,option,currency,amount,amount_description",
            f"1c000000-0000-4000-8000-000000000001,{LIEAP},,,Application fee,USD,5,per household",
        ],
    }
    for name, lines in tables.items():
        (export / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(export / "services.csv", encoding="utf-8", newline="") as fh:
        services = list(csv.DictReader(fh))
    for service in services:
        if service["id"] == PANTRY:
            service["fees_description"] = "None."
    with open(export / "services.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(services[0]))
        writer.writeheader()
        writer.writerows(services)

    result = hsds.import_export(export, now=NOW)
    rows = {r["local_resource_id"]: r for r in result.rows}
    pantry, lieap = rows[PANTRY], rows[LIEAP]
    assert pantry["languages"] == ["English", "Spanish", "ht"]
    assert pantry["accessibility"] == "Wheelchair accessible (ramp at the side door)"
    assert pantry["fees"] == "None."
    assert (lieap["languages"], lieap["accessibility"]) == (["Spanish"], None)
    assert lieap["fees"] == "Application fee: 5 USD (per household)"
    assert rows[MEALS]["fees"] is None and rows[MEALS]["languages"] == []
    assert not [p for p in result.problems if p.where.split(":")[0] in tables]  # every record valid
