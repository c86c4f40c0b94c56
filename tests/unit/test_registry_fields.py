"""Registry rows as 211s publish them (registry-v2): phones with notes, N11 lines and several numbers, a bad field
flagged with the program kept, undated rows under each ``undated`` policy, several types and taxonomy terms per
program, registries covering several states, statewide lines."""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

import pytest
from support.registry import NOW, RECENT, good_row, write_csv, write_json, write_registry_sources

from livemem import registry
from livemem.errors import ConfigError
from livemem.registry import RegistryConfig, resolve, verify
from livemem.registry.phones import parse_phone
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]


def run_rows(tmp_path: Path, rows: list[dict], **cfg) -> registry.Verification:
    path = write_csv(tmp_path / "rows.csv", rows)
    config = RegistryConfig(kind="csv", path=path, **cfg)
    return verify(registry.load_rows(config), config, NOW)


def issues_of(result: registry.Verification, rule: str) -> list[dict]:
    return result.issues[result.issues["rule"] == rule].to_dict("records")


def published(result: registry.Verification, rid: str = "res-00000") -> dict:
    rows = result.published.set_index("local_resource_id")
    assert rid in rows.index, result.issues.to_dict("records")
    return rows.loc[rid].to_dict()


# --- phones ----------------------------------------------------------------------------------------------------
# the cell, contact_phone as published, every number as published
PHONES = [
    ("(415) 621-2929 (24 hrs)", "+14156212929", [("+14156212929", None, "24 hours")]),
    ("800-447-8223 (toll-free, 24 hrs)", "+18004478223", [("+18004478223", None, "toll-free, 24 hours")]),
    ("415-469-4550, ext. 228", "+14154694550;ext=228", [("+14154694550", "228", None)]),
    ("305-891-8850 xOPT2", "+13058918850", [("+13058918850", None, "option 2")]),
    ("304-555-0100 / 304-555-0101", "+13045550100", [("+13045550100", None, None), ("+13045550101", None, None)]),
    ("211", "211", [("211", None, None)]),
    ("311", "311", [("311", None, None)]),
    ("988", "988", [("988", None, None)]),
    ("1-800-273-TALK", "+18002738255", [("+18002738255", None, None)]),
    ("(304) 555-0104 ext. 2", "+13045550104;ext=2", [("+13045550104", "2", None)]),
]  # fmt: skip


@pytest.mark.parametrize(("cell", "contact", "numbers"), PHONES)
def test_each_phone_form_is_read_and_the_program_kept(tmp_path, cell, contact, numbers) -> None:
    result = run_rows(tmp_path, [good_row(0, contact_phone=cell)])
    assert issues_of(result, "phone") == []
    row = published(result)
    assert row["contact_phone"] == contact
    assert [(p["number"], p["extension"], p["note"]) for p in row["phones"]] == numbers
    assert row["flagged_fields"] == []


def test_parse_phone_says_what_it_could_not_read() -> None:
    assert parse_phone("call us") == ([], "'call us': no 10-digit North American number (nor an N11 line)")
    numbers, problem = parse_phone("304-555-0100 / 55-01")
    assert [p["number"] for p in numbers] == ["+13045550100"] and "55-01" in problem
    assert parse_phone("Fax: 304-555-0100")[0][0]["type"] == "fax"


def test_a_bad_phone_is_flagged_on_its_field_and_the_program_kept(tmp_path) -> None:
    result = run_rows(tmp_path, [good_row(0, contact_phone="555-01"), good_row(1)])
    (issue,) = issues_of(result, "phone")
    assert issue["severity"] == "warning" and issue["local_resource_id"] == "res-00000"
    assert "contact_phone '555-01' is not a 10-digit North American number" in issue["message"]
    assert "left out of the published row" in issue["message"]
    row = published(result)
    assert row["contact_phone"] is None and row["phones"] == [] and row["flagged_fields"] == ["contact_phone"]
    assert result.counts()["flagged_rows"] == 1 and result.flagged_by_field() == {"contact_phone": 1}
    # a second number that cannot be read: the first is kept, the field is not flagged as a whole
    partial = run_rows(tmp_path, [good_row(0, contact_phone="304-555-0100 / 55-01")])
    assert (
        published(partial)["contact_phone"] == "+13045550100"
        and "the rest is kept" in issues_of(partial, "phone")[0]["message"]
    )


def test_phones_list_from_an_import_fills_contact_phone(tmp_path) -> None:
    phones = [
        {"number": "(305) 555-0100", "extension": "OPT2", "type": "voice", "note": "24 hrs"},
        {"number": "305-555-0199", "type": "fax"},
        {"number": "no number here"},
    ]
    result = run_rows(tmp_path, [good_row(0, contact_phone="", phones=json.dumps(phones), zip="25901")])
    row = published(result)
    assert row["contact_phone"] == "+13055550100"
    assert [(p["number"], p["type"], p["note"]) for p in row["phones"]] == [
        ("+13055550100", "voice", "option 2, 24 hours"),
        ("+13055550199", "fax", None),
    ]
    (issue,) = issues_of(result, "phone")
    assert issue["severity"] == "warning" and "phones[2] 'no number here'" in issue["message"]


def test_a_note_survives_when_contact_phone_repeats_the_first_listed_phone(tmp_path) -> None:
    """The importer writes the first phone's number as contact_phone and every phone with its note in phones: the
    published number keeps the note ("24 hours"), once (a 211 shelter's note was lost this way)."""
    phones = [{"number": "(415) 621-2929 (24 hrs)", "type": "voice"}, {"number": "211", "note": "N11"}]
    result = run_rows(tmp_path, [good_row(0, contact_phone="(415) 621-2929", phones=json.dumps(phones))])
    row = published(result)
    assert [(p["number"], p["note"]) for p in row["phones"]] == [("+14156212929", "24 hours"), ("211", "N11")]


# --- e-mail, URL, reachability, schema ---------------------------------------------------------------------------
def test_an_email_cell_holding_a_web_address_moves_to_url(tmp_path) -> None:
    rows = [
        good_row(0, contact_email="www.SafeHouse.org/help", url=""),
        good_row(1, contact_email="https://example.org/x"),  # url already given: the e-mail is flagged, left out
        good_row(2, contact_email="help@example"),
    ]
    result = run_rows(tmp_path, rows)
    moved = published(result)
    assert moved["url"] == "https://www.safehouse.org/help" and moved["contact_email"] is None
    notes = {i["local_resource_id"]: i for i in issues_of(result, "email")}
    assert "is a web address: moved to url" in notes["res-00000"]["message"]
    assert published(result, "res-00001")["contact_email"] is None
    assert published(result, "res-00002")["flagged_fields"] == ["contact_email"]
    assert {i["severity"] for i in notes.values()} == {"warning"}


def test_only_a_program_nobody_could_reach_or_find_is_dropped(tmp_path) -> None:
    nowhere = good_row(0, address="", contact_phone="call us", contact_email="", url="not a url at all")
    result = run_rows(tmp_path, [nowhere, good_row(1, address="", contact_email="", url="")])
    (issue,) = issues_of(result, "reachable")
    assert issue["severity"] == "error" and issue["source_row"] == 1
    assert list(result.published["local_resource_id"]) == ["res-00001"]  # reachable by phone


def test_an_optional_field_of_the_wrong_type_is_dropped_a_required_one_still_fails(tmp_path) -> None:
    rows = [
        {**good_row(0), "zip_coverage": [], "languages": 5, "hours": "x" * 600, "deprecated_at": None},
        {**good_row(1), "zip": 25801},
    ]
    config = RegistryConfig(kind="json", path=write_json(tmp_path / "rows.json", rows))
    result = verify(registry.load_rows(config), config, NOW)
    schema = {i["source_row"]: i for i in issues_of(result, "schema")}
    assert (
        schema[1]["severity"] == "warning" and "languages" in schema[1]["message"] and "hours" in schema[1]["message"]
    )
    assert schema[2]["severity"] == "error"
    row = published(result)
    assert row["hours"] is None and row["languages"] == [] and row["flagged_fields"] == ["hours", "languages"]
    reject = RegistryConfig(kind="json", path=config.path, invalid_fields="reject")
    assert verify(registry.load_rows(reject), reject, NOW).published.empty


def test_csv_cells_hold_json_lists_and_separated_names(tmp_path) -> None:
    terms = [{"code": "BD-1800.2000", "name": "Food Pantries", "taxonomy": "AIRS"}]
    schedules = [{"days": ["MO", "TU"], "opens_at": "09:00", "closes_at": "17:00"}]
    row = good_row(
        0, organization="Fayette Community Action", resource_types="utility_assistance; Food Pantry",
        taxonomy_terms=json.dumps(terms), languages="English, Spanish", schedules=json.dumps(schedules),
        listed_at="2019-08-19", source_id="136", state="wv", service_area="Fayette County",
    )  # fmt: skip
    got = published(run_rows(tmp_path, [row]))
    assert got["resource_types"] == ["food_pantry", "utility_assistance"]  # the primary first
    assert got["taxonomy_terms"] == terms and got["schedules"] == schedules
    assert got["languages"] == ["English", "Spanish"] and got["state"] == "WV"
    assert got["listed_at"] == "2019-08-19T00:00:00Z" and got["organization"] == "Fayette Community Action"


def test_rows_without_the_new_fields_keep_their_hashes(tmp_path) -> None:
    plain = run_rows(tmp_path, [good_row(0)]).rows.iloc[0]
    same = run_rows(tmp_path, [good_row(0, resource_types="food_pantry", state="WV")]).rows.iloc[0]
    assert (plain["content_hash"], plain["verification_hash"]) == (same["content_hash"], same["verification_hash"])
    more = run_rows(tmp_path, [good_row(0, organization="Someone")]).rows.iloc[0]
    assert more["content_hash"] != plain["content_hash"]


# --- undated rows ------------------------------------------------------------------------------------------------
def bundled_rows(n: int = 3) -> list[dict]:
    with open(PROJECT / "examples" / "registry" / "local_resources.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))[:n]


@pytest.mark.parametrize("policy", ["hidden", "unverified_shown", "listed"])
def test_undated_rows_verify_under_each_policy(tmp_path, policy) -> None:
    rows = [{**r, "last_verified_at": "", "deprecated_at": ""} for r in bundled_rows()]
    result = run_rows(tmp_path, rows, undated=policy)  # was a UFuncTypeError in _check_dates
    counts = result.counts()
    assert (counts["published"], counts["unverified"], counts["undated"]) == (3, 3, 3)
    assert issues_of(result, "freshness") == [] and issues_of(result, "schema") == []
    listed = run_rows(tmp_path, [{**r, "listed_at": "2026-10-01"} for r in rows], undated=policy)
    expected = "verified" if policy == "listed" else "unverified"
    assert set(listed.published["status"]) == {expected}
    assert listed.counts()["as_listed"] == (3 if policy == "listed" else 0)


def test_dates_all_empty_mixed_and_with_offsets(tmp_path) -> None:
    rows = [
        good_row(0, last_verified_at="2026-11-01T08:00:00-05:00", deprecated_at=""),
        good_row(1, last_verified_at="", deprecated_at=""),
        good_row(2, last_verified_at="2026-11-10T23:30:00+02:00", deprecated_at=""),
        good_row(3, last_verified_at=RECENT, deprecated_at=""),
    ]
    result = run_rows(tmp_path, rows)
    got = dict(zip(result.published["local_resource_id"], result.published["last_verified_at"], strict=True))
    assert got["res-00000"] == "2026-11-01T13:00:00Z" and got["res-00002"] == "2026-11-10T21:30:00Z"
    assert got["res-00001"] is None
    old = (NOW - timedelta(days=3000)).date().isoformat()
    stale = run_rows(tmp_path, [good_row(0, last_verified_at="", listed_at=old)], undated="listed")
    (issue,) = issues_of(stale, "freshness")
    assert issue["severity"] == "warning" and f"listed {old}" in issue["message"]
    assert list(stale.published["status"]) == ["stale"]


def test_export_hsds_from_source_reads_undated_rows(tmp_path) -> None:
    from livemem.registry import hsds

    rows = [{**r, "last_verified_at": "", "deprecated_at": ""} for r in bundled_rows()]
    result = run_rows(tmp_path, rows)
    services = hsds.export_services(hsds.verified_rows(result))
    assert len(services) == 3 and hsds.validate_services(services) == []


# --- several states, statewide lines -------------------------------------------------------------------------------
def test_several_states_and_which_are_configured(tmp_path) -> None:
    rows = [
        good_row(0, zip="33125", county="Miami-Dade", state="FL"),
        good_row(1, zip="30303", county="Fulton"),
        good_row(2, zip="36104", county="Montgomery"),  # Alabama: not configured
        good_row(3, zip="32399", county="Leon", service_area="Statewide", state="GA"),  # says GA: its ZIP is FL
    ]
    result = run_rows(tmp_path, rows, states=("FL", "GA"))
    assert list(result.published["local_resource_id"]) == ["res-00000", "res-00001", "res-00003"]
    (issue,) = issues_of(result, "zip_in_state")
    assert "ZIP 36104 is in AL, not one of the configured states FL, GA (registry.states)" in issue["message"]
    assert list(result.published["state"]) == ["FL", "GA", "FL"]
    assert issues_of(result, "state")[0]["severity"] == "warning"
    one = run_rows(tmp_path, [good_row(0, zip="33125", county="Miami-Dade")])
    assert "is in FL, not WV (registry.state" in issues_of(one, "zip_in_state")[0]["message"]


def test_registry_config_states(tmp_path) -> None:
    cfg = RegistryConfig.from_sources(
        load_sources(write_registry_sources(tmp_path, "  kind: csv\n  path: r.csv\n  states: [FL, GA]"))
    )
    assert (cfg.state, cfg.covered_states) == ("FL", ("FL", "GA"))
    assert cfg.fingerprint() != RegistryConfig(kind="csv", path=cfg.path, state="FL").fingerprint()
    assert RegistryConfig(kind="csv", path=cfg.path, state="WV").covered_states == ("WV",)
    with pytest.raises(ValueError, match=r"not one of registry\.states"):
        RegistryConfig(kind="csv", path=cfg.path, state="AL", states=("FL", "GA"))
    with pytest.raises(ConfigError, match="undated"):
        RegistryConfig.from_sources(
            load_sources(write_registry_sources(tmp_path, "  kind: csv\n  path: r\n  undated: x"))
        )


# --- the resolver ------------------------------------------------------------------------------------------------
@pytest.fixture
def multi_index(tmp_path):
    terms = json.dumps([{"code": "BD-1800.2000", "name": "Food Pantries", "taxonomy": "AIRS"}])
    rows = [
        good_row(0, local_resource_id="mia-access", name="HIALEAH", organization="Florida DCF ACCESS",
                 resource_type="snap", resource_types="snap food_pantry", taxonomy_terms=terms, zip="33125",
                 county="Miami-Dade", last_verified_at="", listed_at="2019-08-19"),
        good_row(1, local_resource_id="fl-hotline", name="Florida Abuse Hotline", resource_type="other",
                 zip="32399", county="Leon", service_area="Statewide", contact_phone="800-962-2873 (24 hrs)"),
        good_row(2, local_resource_id="atl-pantry", name="Atlanta Pantry", zip="30303", county="Fulton",
                 taxonomy_terms=json.dumps([{"code": "BD-1800.1000", "name": "Emergency Food"}])),
    ]  # fmt: skip
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig(kind="csv", path=write_csv(tmp_path / "rows.csv", rows), states=("FL", "GA"),
                         undated="unverified_shown")  # fmt: skip
    run = registry.run_verification(cfg, home, now=NOW)
    home.publish(run.version_id, run.base_version, retention=5)
    return registry.load_registry_index(home.version_dir(run.version_id))


def ids(found) -> list[tuple[str, str]]:
    return [(r["local_resource_id"], r["match"]) for r in found.rows]


def test_resolver_finds_every_type_and_taxonomy_term(multi_index) -> None:
    assert ids(resolve(multi_index, resource_type="food_pantry", now=NOW)) == [
        ("atl-pantry", "filter"),
        ("mia-access", "filter"),
    ]
    for query in ("BD-1800.2000", "bd-1800.2", "food pantries", "PANTRIES"):
        assert ids(resolve(multi_index, taxonomy=query, now=NOW)) == [("mia-access", "filter")], query
    both = {r["local_resource_id"] for r in resolve(multi_index, taxonomy="BD-1800", now=NOW).rows}
    assert both == {"mia-access", "atl-pantry"}
    assert resolve(multi_index, taxonomy="bowling", now=NOW).rows == []


def test_resolver_shows_undated_rows_marked_and_statewide_lines(multi_index) -> None:
    found = resolve(multi_index, zip="33125", now=NOW)
    assert ids(found) == [("mia-access", "zip"), ("fl-hotline", "state")]
    row = found.rows[0]
    assert row["verification_status"] == "unverified" and row["organization"] == "Florida DCF ACCESS"
    assert row["verification_note"] == "listed 2019-08-19, not verified since"
    assert found.rows[1]["phones"][0]["note"] == "24 hours" and found.rows[1]["verification_note"] is None
    assert ids(resolve(multi_index, county="Fulton", now=NOW)) == [("atl-pantry", "county")]  # a GA county
    with pytest.raises(registry.RegistryQueryError, match="ZIP 25901 is in WV; the registry covers FL, GA"):
        resolve(multi_index, zip="25901")
