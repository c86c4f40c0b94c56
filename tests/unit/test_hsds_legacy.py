"""HSDS 1.0 / 1.1 / 2.0 tabular packages (what 211s publish) into the registry: version detection, every table read
or reported, ids kept, taxonomy to needs, phones, schedules, organizations (kept and exported back), the committed
211-shaped fixture (tests/fixtures/hsds_v1_211) and the generator (tests/support/hsds211.py)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from support.hsds211 import FIXTURE_PHONES, write_package
from support.registry import NOW
from typer.testing import CliRunner

from livemem.registry import RegistryConfig, hsds, load_csv, load_rows, verify
from livemem.registry.hsds import HsdsError
from livemem.registry.hsds_legacy import detect_version, import_hsds, report_lines
from livemem.registry.listing import hours_line, merge_schedules, parse_phones, registry_id
from livemem.registry.load import package_hash
from livemem.registry.taxonomy import code_types, name_types, types_of_terms
from orchestration.cli import app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hsds_v1_211"
V3_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hsds_export"


@pytest.fixture(scope="module")
def imported():
    return import_hsds(FIXTURE, now=NOW)


def _by_id(result) -> dict[str, dict]:
    return {r["local_resource_id"]: r for r in result.rows}


# --- version detection -----------------------------------------------------------------------------------------
def test_version_is_read_from_the_package_and_told_apart_by_its_tables(tmp_path: Path) -> None:
    version, how = detect_version(FIXTURE)  # HSDS 1.1's own datapackage.json still says "1.0"
    assert version == "1.1" and "declares '1.0'" in how and "services_taxonomy.csv" in how
    for declared in ("1.0", "2.0"):
        package = write_package(tmp_path / declared, services=5, version=declared, seed=1)
        assert detect_version(package)[0] == declared
    assert detect_version(V3_FIXTURE) == ("3.0", "no datapackage.json: detected by its tables")
    (tmp_path / "2.0" / "datapackage.json").unlink()
    assert detect_version(tmp_path / "2.0") == ("2.0", "no datapackage.json: detected by its tables")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HsdsError, match="no services table"):
        detect_version(tmp_path / "empty")


def test_every_table_is_read_or_reported_with_its_row_count(imported) -> None:
    report = imported.report
    assert report["version"] == "1.1"
    tables = report["tables"]
    for name in ("services.csv", "organizations.csv", "physical_addresses.csv", "services_at_location.csv",
                 "regular_schedules.csv", "services_taxonomy.csv", "taxonomy.csv", "phones.csv", "languages.csv",
                 "metadata.csv", "service_areas.csv", "accessibility_for_disabilities.csv", "eligibility.csv"):  # fmt: skip
        assert name in tables["read"], name
    assert tables["read"]["services.csv"] == 30
    assert tables["not_read"] == {"funding.csv": 9, "programs.csv": 1}  # defined by 1.1, not used: counted
    assert tables["unknown"] == {"notes.csv": 1}  # no HSDS version defines it
    lines = "\n".join(report_lines(report))
    assert "HSDS 1.1" in lines and "funding.csv (9 rows)" in lines and "notes.csv (1 rows)" in lines


def test_integer_ids_stay_the_stable_id_and_odd_ones_are_sanitised_deterministically(imported) -> None:
    rows = _by_id(imported)
    assert set(rows) == {str(i) for i in range(1, 31)}
    assert all(r["source_id"] == r["local_resource_id"] for r in rows.values())
    odd = registry_id("svc 12/a")
    assert odd == registry_id("svc 12/a") and odd.startswith("svc-12-a-") and odd != registry_id("svc 12-a")
    assert registry_id("_x").startswith("hsds-")


# --- taxonomy ------------------------------------------------------------------------------------------------------
def test_taxonomy_maps_by_code_prefix_names_and_open_eligibility() -> None:
    assert code_types("BD-1800.2000") == ("food_pantry",)  # by its prefix
    assert code_types("BV-8900.1800") == ("utility_assistance",)
    assert code_types("BH-1800.8500") == ("housing",) and code_types("LN-1500") == ("healthcare",)
    assert code_types("BDX-1") == () and code_types(None) == ()
    for name, expected in {
        "Ongoing Emergency Food Assistance": "food_pantry", "Homeless Shelter": "housing",
        "Community Clinics": "healthcare", "General Legal Aid": "legal_aid",
        "Electric Service Payment Assistance": "utility_assistance", "Rent Payment Assistance": "housing",
        "Food Stamps/SNAP": "snap", "WIC": "wic",
    }.items():  # fmt: skip
        assert name_types(name)[0] == expected, name
    assert "food_pantry" not in name_types("Food Stamps/SNAP")
    assert name_types("Food") == ("food_pantry",) and name_types("Work") == ("employment",)  # Open Eligibility
    # several types: a term gives its code's and its name's, a service the union of its terms'
    assert types_of_terms([{"code": "BD-5000.3500", "name": "Home Delivered Meals"}]) == [
        "food_pantry",
        "senior_services",
    ]
    assert types_of_terms([{"code": None, "name": "Volunteer Opportunities"}]) == []


def test_services_get_every_type_of_their_terms_and_keep_the_terms(imported) -> None:
    rows = _by_id(imported)
    hialeah = rows["21"]
    assert hialeah["resource_types"] == ["snap", "medicaid"] and hialeah["resource_type"] == "snap"
    assert {"code": "NL-6000.2000", "name": "Food Stamps/SNAP", "taxonomy": "AIRS"} in hialeah["taxonomy_terms"]
    assert imported.report["share"]["typed"] == 1.0
    assert imported.report["unmapped_terms"] == {"YJ-1000 Veterans": 1}  # reported with its count


# --- phones, schedules, organizations ------------------------------------------------------------------------------
def test_phone_cells_become_entries_with_their_notes_and_extensions() -> None:
    assert parse_phones("(415) 621-2929 (24 hrs)") == [
        {"number": "(415) 621-2929", "extension": None, "type": None, "note": "24 hrs"}
    ]
    assert parse_phones("800-447-8223 (toll-free, 24 hrs)")[0]["note"] == "toll-free, 24 hrs"
    assert parse_phones("415-469-4550, ext. 228")[0] | {} == {
        "number": "415-469-4550", "extension": "228", "type": None, "note": None,
    }  # fmt: skip
    assert parse_phones("305-891-8850 xOPT2")[0]["extension"] == "OPT2"
    assert [p["number"] for p in parse_phones("305-555-1234 / 786-555-9876")] == ["305-555-1234", "786-555-9876"]
    assert parse_phones("211")[0]["number"] == "211" and parse_phones("311")[0]["number"] == "311"
    assert parse_phones("305.555.1212 or 786-555-0000 (fax)")[1]["type"] == "fax"
    assert parse_phones("call the front desk") == [
        {"number": "call the front desk", "extension": None, "type": None, "note": None}
    ]  # kept as written: verification flags it
    assert parse_phones("") == []


def test_the_fixture_keeps_every_phone_of_a_program(imported) -> None:
    rows = _by_id(imported)
    for sid, cell in FIXTURE_PHONES.items():
        phones = rows[str(sid)]["phones"]
        assert phones and phones[0]["number"] in cell, (sid, phones)
        assert rows[str(sid)]["contact_phone"].startswith(phones[0]["number"])
    assert rows["1"]["phones"][0]["note"] == "24 hrs"
    assert rows["3"]["phones"][0]["extension"] == "228" and rows["3"]["contact_phone"] == "415-469-4550 x228"
    assert len(rows["5"]["phones"]) == 2


def test_one_schedule_row_per_weekday_becomes_one_line() -> None:
    days = [
        {"days": [d], "opens_at": "09:00", "closes_at": "17:00", "description": None}
        for d in ("MO", "TU", "WE", "TH", "FR")
    ]
    merged = merge_schedules([*days, {"days": ["SA"], "opens_at": "10:00", "closes_at": "14:00", "description": None}])
    assert merged[0]["days"] == ["MO", "TU", "WE", "TH", "FR"]
    assert hours_line(merged) == "Mon–Fri 9:00–17:00; Sat 10:00–14:00"
    same_text = [{"days": [d], "description": "Mon-Fri 8am-5pm"} for d in ("MO", "TU", "WE", "TH", "FR")]
    assert hours_line(merge_schedules(same_text)) == "Mon-Fri 8am-5pm"  # the text once, not five times


def test_fixture_schedules_and_organizations(imported) -> None:
    rows = _by_id(imported)
    scheduled = [r for r in rows.values() if r["schedules"]]
    assert scheduled and all(r["hours"].startswith("Mon–Fri 9:00–17:00") for r in scheduled)
    assert all(r["hours"].count("Mon") == 1 for r in scheduled)
    hialeah = rows["21"]
    assert (hialeah["name"], hialeah["organization"]) == ("HIALEAH", "Florida DCF ACCESS")
    assert (hialeah["zip"], hialeah["county"], hialeah["state"]) == ("33010", "Miami-Dade", "FL")
    assert imported.report["services"]["organizations"] == len(
        {r["organization"] for r in rows.values() if r["organization"]}
    )


def test_the_export_writes_the_real_organizations_back(imported) -> None:
    rows = [r for r in imported.rows if r["organization"]]
    services = hsds.export_services(rows, now=NOW)
    organizations = hsds.export_organizations(services)
    assert len(organizations) == len({r["organization"] for r in rows})  # one per real organization
    assert {o["name"] for o in organizations} == {r["organization"] for r in rows}
    dcf = [s for s in services if s["organization"]["name"] == "Florida DCF ACCESS"]
    assert len(dcf) == 3 and len({s["organization_id"] for s in dcf}) == 1
    assert hsds.validate_organizations(organizations) == []


def test_a_bad_field_keeps_the_program_only_the_unreachable_are_dropped(tmp_path: Path) -> None:
    package = write_package(tmp_path / "pkg", services=400, version="1.0", seed=3)
    expected = json.loads((package / "expected.json").read_text(encoding="utf-8"))
    result = import_hsds(package, now=NOW)
    report = result.report
    assert report["services"]["dropped"] == expected["unreachable"]
    assert list(report["dropped_reasons"]) == [
        "no address with a ZIP and no phone, URL or e-mail: nobody could reach or find it"
    ]
    assert report["share"]["kept"] >= 0.95 and report["share"]["typed"] >= 0.9
    assert report["flagged"]  # e.g. e-mail cells holding a URL: flagged, the program kept
    assert any(r["url"] and r["url"].startswith("www.") for r in result.rows)


def test_each_version_imports_the_same_services(tmp_path: Path) -> None:
    kept = {}
    for version in ("1.0", "1.1", "2.0"):
        result = import_hsds(write_package(tmp_path / version, services=120, version=version, seed=5), now=NOW)
        assert result.report["version"] == version
        kept[version] = [
            (r["local_resource_id"], r["resource_types"], r["organization"], r["zip"]) for r in result.rows
        ]
    assert kept["1.0"] == kept["1.1"] == kept["2.0"]


def test_v3_goes_through_the_hsds3_importer_with_a_report() -> None:
    result = import_hsds(V3_FIXTURE, now=NOW)
    assert result.report["version"] == "3.0" and len(result.rows) == 4
    assert "services.csv" in result.report["tables"]["read"]


# --- the loader, the CLI ----------------------------------------------------------------------------------------
def test_kind_hsds_loads_the_package_in_memory_and_verifies(tmp_path: Path) -> None:
    package = shutil.copytree(FIXTURE, tmp_path / "pkg")
    cfg = RegistryConfig(kind="hsds", path=package, state="FL")
    loaded = load_rows(cfg)
    assert len(loaded) == 30 and loaded.input_hash == package_hash(package)
    assert loaded.import_report["version"] == "1.1" and "HSDS 1.1" in loaded.source
    result = verify(loaded, cfg, NOW)
    assert result.counts()["rows_read"] == 30
    (package / "phones.csv").write_text((package / "phones.csv").read_text() + "99,,1,,,,,555,,,,\n")
    assert package_hash(package) != loaded.input_hash  # any file of the package changes the input version


def test_cli_import_prints_the_fidelity_report(tmp_path: Path) -> None:
    out = tmp_path / "registry.csv"
    result = CliRunner().invoke(app, ["registry", "import-hsds", str(FIXTURE), str(out)])
    assert result.exit_code == 0, result.output
    assert "30 registry rows" in result.output and "HSDS 1.1" in result.output and "tables not read" in result.output
    with open(out, encoding="utf-8", newline="") as fh:
        rows = {r["local_resource_id"]: r for r in csv.DictReader(fh)}
    assert json.loads(rows["5"]["phones"])[1]["number"] == "786-555-9876"  # list fields: JSON in their cell
    assert rows["21"]["organization"] == "Florida DCF ACCESS"
    as_json = CliRunner().invoke(app, ["registry", "import-hsds", str(FIXTURE), str(tmp_path / "r.json"), "--json"])
    assert json.loads(as_json.output)["report"]["version"] == "1.1"


def test_the_generator_writes_hsds_3_too_and_it_imports_typed(tmp_path: Path) -> None:
    package = write_package(tmp_path / "v3", services=40, version="3.0", seed=2)
    result = import_hsds(package, now=NOW)
    assert result.report["version"] == "3.0" and result.report["tables"]["read"]["services.csv"] == len(result.rows)
    assert result.report["share"]["typed"] >= 0.9
    row = result.rows[0]
    assert row["organization"] and row["taxonomy_terms"][0]["taxonomy"] == "AIRS"
    assert row["schedules"] is None or row["hours"].count("Mon") <= 1


def test_rows_are_listed_as_of_the_package_date_and_the_written_csv_verifies(tmp_path: Path) -> None:
    package = write_package(tmp_path / "dated", services=60, version="1.0", seed=9, dated=True)
    result = import_hsds(package, now=NOW)
    undated = [r for r in result.rows if not r["listed_at"]]
    assert not undated and result.report["services"]["undated"] == 0
    dates = {r["listed_at"] for r in result.rows}
    assert "2019-08-19" in dates  # the package's last_modified, where no metadata row dates the service
    path = hsds.write_registry_file(result.rows, tmp_path / "registry.csv")
    cfg = RegistryConfig(kind="csv", path=path, state="FL", states=("FL", "GA", "AL"))
    verified = verify(load_csv(path), cfg, NOW)
    assert verified.counts()["rows_read"] == len(result.rows)
    by_id = {r["local_resource_id"]: r for r in verified.rows.to_dict("records")}
    sample = next(r for r in result.rows if r["taxonomy_terms"])
    assert by_id[sample["local_resource_id"]]["taxonomy_terms"][0]["name"] == sample["taxonomy_terms"][0]["name"]


def test_a_211_package_survives_verification_export_and_reimport(tmp_path: Path) -> None:
    """HSDS 1.1 in, verified, HSDS 3.0 out, read back: organizations, types, terms, schedules, phones and the
    listing date come back."""
    cfg = RegistryConfig(kind="hsds", path=FIXTURE, state="FL", states=("FL", "GA", "AL"))
    first = verify(load_rows(cfg), cfg, NOW)
    rows = [r for r in hsds.verified_rows(first) if r["zip"] and r["county"]]
    services = hsds.export_services(rows, now=NOW)
    assert hsds.validate_export(services, hsds.export_organizations(services)) == []
    hsds.write_export(services, tmp_path / "out")
    again = _by_id(import_hsds(tmp_path / "out" / hsds.TABULAR_DIR, now=NOW))
    for row in rows:
        back = again[row["local_resource_id"]]
        assert back["organization"] == row["organization"]
        assert back["resource_types"] == list(dict.fromkeys([row["resource_type"], *row["resource_types"]]))
        assert [t["name"] for t in back["taxonomy_terms"] or []] == [t["name"] for t in row["taxonomy_terms"] or []]
        assert back["hours"] == row["hours"]
        assert len(back["phones"] or []) == len(row["phones"] or [])
        assert (back["listed_at"] or "")[:10] == (row["listed_at"] or "")[:10]


def test_a_windows_1252_table_with_capitalised_headers_is_read_and_said(tmp_path: Path) -> None:
    package = shutil.copytree(FIXTURE, tmp_path / "pkg")
    services = (package / "services.csv").read_text(encoding="utf-8")
    header, rest = services.split("\n", 1)
    rest = rest.replace("HIALEAH", "HIALEAH – Café", 1)
    (package / "services.csv").write_bytes((header.upper() + "\n" + rest).encode("cp1252"))
    result = import_hsds(package, now=NOW)
    assert len(result.rows) == 30 and _by_id(result)["21"]["name"] == "HIALEAH – Café"
    assert result.report["flagged"]["services.csv: not UTF-8, read as Windows-1252"] == 1


def test_a_field_longer_than_the_registry_allows_is_cut_and_flagged_not_dropped(tmp_path: Path) -> None:
    package = shutil.copytree(FIXTURE, tmp_path / "pkg")
    with open(package / "services.csv", encoding="utf-8", newline="") as fh:
        services = list(csv.DictReader(fh))
    services[0]["description"] = "Groceries. " * 500
    with open(package / "services.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(services[0]))
        writer.writeheader()
        writer.writerows(services)
    result = import_hsds(package, now=NOW)
    row = _by_id(result)["1"]
    assert len(row["description"]) == 4000 and row["description"].endswith("…")
    assert result.report["flagged"]["description: cut to its maximum length"] == 1
    cfg = RegistryConfig(kind="hsds", path=package, state="FL", states=("FL", "GA", "AL"))
    verified = verify(load_rows(cfg), cfg, NOW)
    assert bool(verified.rows.set_index("local_resource_id").loc["1", "valid"])
