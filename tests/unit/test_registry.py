"""The local_resources registry: every rule, bad rows beside good ones, history, staging, the resolver."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from support.registry import NOW, RECENT, good_row, write_csv, write_json, write_registry_sources

from livemem import registry
from livemem.errors import ConfigError
from livemem.registry import RegistryConfig, RegistryIndex, RegistryQueryError, resolve, verify
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.segments import append_rows
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]


def run_rows(tmp_path: Path, rows: list[dict], **cfg) -> registry.Verification:
    path = write_csv(tmp_path / "rows.csv", rows)
    config = RegistryConfig(kind="csv", path=path, **cfg)
    return verify(registry.load_rows(config), config, NOW)


def issues_of(result: registry.Verification, rule: str) -> list[dict]:
    return result.issues[result.issues["rule"] == rule].to_dict("records")


# rule, (failing overrides, severity, message fragment), passing overrides, {field: normalised value when passing}
RULE_CASES = [
    ("schema", {"resource_type": "bowling"}, "error", "is not one of", {"resource_type": " SNAP "}, {"resource_type": "snap"}),
    ("schema", {"name": ""}, "error", "'name' is a required property", {"name": "Pantry"}, {}),
    ("schema", {"last_verified_at": "2026-02-30"}, "error", "is not a valid date", {"last_verified_at": "2026-11-01T08:00:00-05:00"}, {"last_verified_at": "2026-11-01T13:00:00Z"}),
    ("phone", {"contact_phone": "555-01"}, "error", "is not a 10-digit", {"contact_phone": "1 (304) 555-0101 x12"}, {"contact_phone": "+13045550101;ext=12"}),
    ("phone", {"contact_phone": "304-055-0101"}, "error", "is not a 10-digit", {"contact_phone": "304.555.0101"}, {"contact_phone": "+13045550101"}),
    ("email", {"contact_email": "help@example"}, "error", "is not an address", {"contact_email": "Help@Example.ORG"}, {"contact_email": "Help@example.org"}),
    ("url", {"url": "ftp://example.org/x"}, "error", "is not an http(s) address", {"url": "Example.ORG/Path?q=1"}, {"url": "https://example.org/Path?q=1"}),
    ("zip_in_state", {"zip": "90210", "county": "Los Angeles"}, "error", "is in CA, not WV", {"zip": "25801-1234", "county": "Raleigh"}, {"zip": "25801"}),
    ("zip_in_state", {"zip": "25999"}, "error", "does not exist", {"zip": "25901", "county": "Fayette"}, {}),
    ("zip_county", {"zip": "25801", "county": "Fayette"}, "error", "is in Raleigh County, not Fayette County", {"zip": "25801", "county": "raleigh county"}, {"county": "Raleigh"}),
    ("zip_coverage", {"zip_coverage": "25801 99999"}, "error", "99999 does not exist", {"zip_coverage": "25801;25840, 25801"}, {"zip_coverage": ["25801", "25840"]}),
    ("zip_coverage", {"zip_coverage": "25801 22201"}, "error", "22201 is in VA", {"zip_coverage": ""}, {"zip_coverage": []}),
    ("freshness", {"last_verified_at": (NOW + timedelta(days=30)).date().isoformat()}, "error", "is in the future", {"last_verified_at": RECENT}, {}),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "bad", "severity", "fragment", "good", "normalised"), RULE_CASES)
def test_each_rule_rejects_a_failing_row_and_passes_a_good_one(
    tmp_path, rule, bad, severity, fragment, good, normalised
) -> None:
    # invalid_fields: reject (the bundled example's setting): a bad field drops its row. The default (flag) keeps the
    # row without the field: tests/unit/test_registry_fields.py
    result = run_rows(tmp_path, [good_row(0, **bad), good_row(1, **good)], invalid_fields="reject")
    found = issues_of(result, rule)
    assert [i["source_row"] for i in found] == [1], result.issues.to_dict("records")
    assert found[0]["severity"] == severity
    assert fragment in found[0]["message"]
    assert found[0]["local_resource_id"] == "res-00000"
    published = result.published
    assert list(published["local_resource_id"]) == ["res-00001"]
    for column, value in normalised.items():
        assert published.iloc[0][column] == value


def test_stale_rows_are_published_with_a_warning(tmp_path) -> None:
    old = (NOW - timedelta(days=200)).date().isoformat()
    result = run_rows(tmp_path, [good_row(0, last_verified_at=old), good_row(1)], freshness_days=180)
    (issue,) = issues_of(result, "freshness")
    assert issue["severity"] == "warning" and "200 days ago (window 180 days): stale" in issue["message"]
    assert dict(zip(result.published["local_resource_id"], result.published["status"], strict=True)) == {
        "res-00000": "stale",
        "res-00001": "verified",
    }
    wider = run_rows(tmp_path, [good_row(0, last_verified_at=old)], freshness_days=365)
    assert issues_of(wider, "freshness") == [] and list(wider.published["status"]) == ["verified"]


def test_unverified_rows_are_published_as_unverified(tmp_path) -> None:
    result = run_rows(tmp_path, [good_row(0, verification_status="pending"), good_row(1, last_verified_at="")])
    assert list(result.published["status"]) == ["unverified", "unverified"]
    assert result.issues.empty


def test_duplicate_ids_keep_the_first_row(tmp_path) -> None:
    result = run_rows(tmp_path, [good_row(0), good_row(1), good_row(2, local_resource_id="res-00000")])
    (issue,) = issues_of(result, "duplicate_id")
    assert issue["source_row"] == 3 and "already used by row 1" in issue["message"]
    assert list(result.published["local_resource_id"]) == ["res-00000", "res-00001"]
    assert issues_of(run_rows(tmp_path, [good_row(0), good_row(1)]), "duplicate_id") == []


def test_duplicate_programs_are_reported_but_published(tmp_path) -> None:
    twin = good_row(8, name="community  PROGRAM 0")  # same ZIP (25901) and type as row 0
    result = run_rows(tmp_path, [good_row(0), twin, good_row(1)])
    (issue,) = issues_of(result, "duplicate_program")
    assert issue["severity"] == "warning" and issue["local_resource_id"] == "res-00008"
    assert "'res-00000'" in issue["message"]
    assert len(result.published) == 3


def test_deprecated_rows_leave_the_published_slice(tmp_path) -> None:
    past = (NOW - timedelta(days=1)).date().isoformat()
    future = (NOW + timedelta(days=30)).date().isoformat()
    rows = [good_row(0, deprecated_at=past, contact_phone="bad"), good_row(1, deprecated_at=future), good_row(2)]
    result = run_rows(tmp_path, rows)
    assert list(result.published["local_resource_id"]) == ["res-00001", "res-00002"]
    notes = issues_of(result, "deprecated")
    assert [(i["source_row"], i["severity"]) for i in notes] == [(1, "info"), (2, "info")]
    assert "left out of the published slice" in notes[0]["message"] and "still published" in notes[1]["message"]
    assert issues_of(result, "phone") == []  # a withdrawn row's other problems do not matter any more
    counts = result.counts()
    assert (counts["published"], counts["deprecated"], counts["invalid"]) == (2, 1, 0)


def test_a_thousand_good_rows_and_ten_malformed_ones(tmp_path) -> None:
    good = [good_row(i) for i in range(1000)]
    bad = [
        good_row(2000, zip="123"),
        good_row(2001, zip="90210"),
        good_row(2002, zip="25801", county="Fayette"),
        good_row(2003, contact_phone="call us"),
        good_row(2004, contact_email="nobody"),
        good_row(2005, url="javascript:alert(1)"),
        good_row(2006, resource_type="bowling"),
        good_row(2007, local_resource_id="res-00001"),
        good_row(2008, zip_coverage="00001"),
        good_row(2009, last_verified_at="yesterday"),
    ]
    rows = good[:500] + bad + good[500:]
    flagged = run_rows(tmp_path, rows).counts()  # the default (flag): the bad phone, e-mail, URL and date are left out
    assert (flagged["published"], flagged["invalid"], flagged["flagged_rows"]) == (1004, 6, 4)
    result = run_rows(tmp_path, rows, invalid_fields="reject")
    counts = result.counts()
    assert (counts["rows_read"], counts["published"], counts["invalid"]) == (1010, 1000, 10)
    errors = result.issues[result.issues["severity"] == "error"]
    assert sorted(set(errors["source_row"])) == list(range(501, 511))
    assert set(errors["rule"]) == {"schema", "zip_in_state", "zip_county", "phone", "email", "url", "duplicate_id",
                                   "zip_coverage"}  # fmt: skip
    assert all(errors["message"].str.len() > 10)


def test_json_source_and_rows_that_are_not_objects(tmp_path) -> None:
    rows = [
        {**good_row(0), "zip_coverage": ["25840"], "deprecated_at": None},
        "not a row",
        {**good_row(1), "zip": 25801},
    ]
    path = write_json(tmp_path / "rows.json", rows)
    config = RegistryConfig(kind="json", path=path)
    result = verify(registry.load_rows(config), config, NOW)
    assert list(result.published["local_resource_id"]) == ["res-00000"]
    assert list(result.published["zip_coverage"].iloc[0]) == ["25840"]
    schema = issues_of(result, "schema")
    assert [i["source_row"] for i in schema] == [2, 3]
    assert "expected an object" in schema[0]["message"] and "is not of type 'string'" in schema[1]["message"]


def test_unreadable_source_is_an_error(tmp_path) -> None:
    with pytest.raises(registry.RegistryError, match="cannot be read"):
        registry.load_rows(RegistryConfig(kind="csv", path=tmp_path / "missing.csv"))
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(registry.RegistryError, match="not valid JSON"):
        registry.load_rows(RegistryConfig(kind="json", path=tmp_path / "bad.json"))


def test_registry_section_is_validated_with_locations(tmp_path) -> None:
    sources = write_registry_sources(tmp_path, "  kind: csv\n  freshness_days: 0")
    with pytest.raises(ConfigError) as err:
        RegistryConfig.from_sources(load_sources(sources))
    message = str(err.value)
    assert "sources.yaml:3:3: registry: 'path' is a required property" in message
    assert "sources.yaml:4:19: registry.freshness_days: 0 is less than the minimum of 1" in message
    ok = write_registry_sources(tmp_path, "  kind: csv\n  path: data/rows.csv")
    cfg = RegistryConfig.from_sources(load_sources(ok))
    assert cfg.path == (tmp_path / "data" / "rows.csv").resolve()
    assert (cfg.state, cfg.freshness_days, cfg.max_invalid_share) == ("WV", 180, 0.1)


def test_bundled_example_shows_its_flawed_rows() -> None:
    cfg = RegistryConfig.from_sources(load_sources(PROJECT / "examples" / "sources.yaml"))
    result = verify(registry.load_rows(cfg), cfg, NOW)
    counts = result.counts()
    assert counts["rows_read"] >= 20 and counts["invalid"] == 3 and counts["deprecated"] == 1
    errors = result.issues[result.issues["severity"] == "error"]
    assert set(errors["rule"]) >= {"zip_county", "phone", "email"}


# --- staging and history -------------------------------------------------------------------------------------
def stage_and_publish(home: IndexHome, cfg: RegistryConfig, now) -> registry.RegistryRun:
    run = registry.run_verification(cfg, home, now=now)
    if run.staged:
        home.publish(run.version_id, run.base_version, retention=5)
    return run


def history(home: IndexHome) -> list[tuple]:
    con = connect(home.version_dir(home.current()))
    try:
        return con.execute(
            "SELECT local_resource_id, change, valid_from, valid_to, status FROM registry_history "
            "ORDER BY local_resource_id, valid_from, change"
        ).fetchall()
    finally:
        con.close()


def test_history_across_runs_records_creation_update_verification_deprecation(tmp_path) -> None:
    home = IndexHome(tmp_path / "index")
    path = tmp_path / "rows.csv"
    cfg = RegistryConfig(kind="csv", path=path)
    write_csv(path, [good_row(0), good_row(1), good_row(2), good_row(3)])
    first = stage_and_publish(home, cfg, NOW)
    assert first.staged and first.base_version is None
    assert first.history == {"created": 4, "updated": 0, "verified": 0, "deprecated": 0, "restored": 0, "removed": 0}
    t1 = registry.iso(NOW)

    later = NOW + timedelta(days=7)
    write_csv(
        path,
        [
            good_row(0, hours="Mon-Sat 9-5"),  # updated
            good_row(1, deprecated_at=(later - timedelta(days=1)).date().isoformat()),  # deprecated
            good_row(2, last_verified_at=later.date().isoformat()),  # re-verified
            good_row(4),  # created; row 3 removed
        ],
    )
    second = stage_and_publish(home, cfg, later)
    assert second.base_version == first.version_id
    assert second.history == {"created": 1, "updated": 1, "verified": 1, "deprecated": 1, "restored": 0, "removed": 1}
    t2 = registry.iso(later)
    assert history(home) == [
        ("res-00000", "created", t1, t2, "verified"),
        ("res-00000", "updated", t2, None, "verified"),
        ("res-00001", "created", t1, t2, "verified"),
        ("res-00001", "deprecated", t2, None, "deprecated"),
        ("res-00002", "created", t1, t2, "verified"),
        ("res-00002", "verified", t2, None, "verified"),
        ("res-00003", "created", t1, t2, "verified"),
        ("res-00003", "removed", t2, None, "removed"),
        ("res-00004", "created", t2, None, "verified"),
    ]
    con = connect(home.version_dir(home.current()))
    try:
        published = [r[0] for r in con.execute("SELECT local_resource_id FROM registry ORDER BY 1").fetchall()]
        data = con.execute(
            "SELECT data FROM registry_history WHERE local_resource_id = 'res-00000' AND change = 'updated'"
        ).fetchone()[0]
    finally:
        con.close()
    assert published == ["res-00000", "res-00002", "res-00004"]
    assert json.loads(data)["hours"] == "Mon-Sat 9-5"
    # the first version is untouched: versions are immutable
    con = connect(home.version_dir(first.version_id))
    try:
        assert con.execute("SELECT count(*) FROM registry_history").fetchone()[0] == 4
    finally:
        con.close()


def test_unchanged_input_publishes_nothing(tmp_path) -> None:
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig(kind="csv", path=write_csv(tmp_path / "rows.csv", [good_row(0), good_row(1)]))
    first = stage_and_publish(home, cfg, NOW)
    again = registry.run_verification(cfg, home, now=NOW)
    assert not again.staged and again.reason.startswith("registry unchanged")
    assert home.published_versions() == [first.version_id]
    # time alone can change the result: a row turning stale is a new verified result
    aged = registry.run_verification(cfg, home, now=NOW + timedelta(days=200))
    assert aged.staged and aged.counts["stale"] == 2


def test_registry_only_version_has_empty_chunk_tables_and_manifest_section(tmp_path) -> None:
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig(kind="csv", path=write_csv(tmp_path / "rows.csv", [good_row(0), good_row(1, zip="bad")]))
    run = stage_and_publish(home, cfg, NOW)
    manifest = home.manifest(run.version_id)
    section = manifest["registry"]
    assert (section["rows_read"], section["published"], section["invalid"]) == (2, 1, 1)
    assert section["input_hash"].startswith("sha256:") and section["issues_by_rule"] == {"schema": {"error": 1}}
    con = connect(home.version_dir(run.version_id))
    try:
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
        issue = con.execute("SELECT source_row, local_resource_id, rule, severity FROM registry_issues").fetchall()
    finally:
        con.close()
    assert issue == [(2, "res-00001", "schema", "error")]


def test_checks_on_a_staged_version(tmp_path) -> None:
    home = IndexHome(tmp_path / "index")
    rows = [good_row(i) for i in range(8)] + [good_row(8, zip="x"), good_row(9, zip="y")]
    cfg = RegistryConfig(kind="csv", path=write_csv(tmp_path / "rows.csv", rows), max_invalid_share=0.1)
    run = registry.run_verification(cfg, home, now=NOW)
    outcome = registry.check_invalid_share(run.manifest_section)
    assert not outcome.passed and "2 of 10 rows invalid (20.0%; threshold 10.0%)" in outcome.summary
    assert registry.check_invalid_share({**run.manifest_section, "max_invalid_share": 0.2}).passed
    assert not registry.check_invalid_share({**run.manifest_section, "rows_read": 0, "invalid": 0}).passed

    staged = home.staged_dir(run.version_id)
    assert registry.check_stale(staged, run.manifest_section).passed
    con = connect(staged, read_only=False)
    resources = json.dumps({"local_resource_id": ["res-00001", "res-00077"]})
    rows = [
        {"chunk_id": f"c{i}", "source": "docs", "collection": "docs", "access": "public", "content": "x",
         "content_hash": "h", "embed_hash": "h", "seal_state": "OPEN", "path": "guide.md", "commit_sha": "c",
         "timestamp": "t", "type": "markdown", "size": 1, "created_at": "t", "updated_at": "t", "heading_path": "[]",
         "chunk_index": i, "parent_id": "p", "domain": resources}
        for i in range(2)
    ]  # fmt: skip
    append_rows(con, staged, pd.DataFrame(rows))
    con.close()
    refs = registry.check_references(staged)
    assert not refs.passed and refs.failures == ["res-00077: referenced by chunk docs:guide.md"]
    con = connect(staged, read_only=False)
    con.execute("CREATE TABLE gbim_entities (entity_id VARCHAR, local_resource_id VARCHAR)")
    con.execute("INSERT INTO gbim_entities VALUES ('e1', 'res-00002'), ('e2', 'res-00099')")
    con.close()
    assert registry.check_references(staged).summary.startswith("2 of 4 referenced")


# --- resolver ------------------------------------------------------------------------------------------------
@pytest.fixture
def index(tmp_path) -> RegistryIndex:
    rows = [
        good_row(0, local_resource_id="oak-pantry", name="Oak Hill Pantry", zip="25901", county="Fayette"),
        good_row(
            1,
            local_resource_id="fay-snap",
            name="Fayetteville SNAP",
            resource_type="snap",
            zip="25840",
            county="Fayette",
            zip_coverage="25901 25136",
        ),
        good_row(
            2,
            local_resource_id="mont-coats",
            name="Montgomery Coats",
            resource_type="seasonal_assistance",
            zip="25136",
            county="Fayette",
        ),
        good_row(
            3,
            local_resource_id="beck-snap",
            name="Beckley SNAP",
            resource_type="snap",
            zip="25801",
            county="Raleigh",
            zip_coverage="25901",
        ),
        good_row(
            4,
            local_resource_id="fay-old",
            name="Ansted Clinic",
            resource_type="healthcare",
            zip="25812",
            county="Fayette",
            last_verified_at=(NOW - timedelta(days=400)).date().isoformat(),
        ),
    ]
    home = IndexHome(tmp_path / "index")
    cfg = RegistryConfig(kind="csv", path=write_csv(tmp_path / "rows.csv", rows))
    run = stage_and_publish(home, cfg, NOW)
    return registry.load_registry_index(home.version_dir(run.version_id))


def ids(found) -> list[tuple[str, str]]:
    return [(r["local_resource_id"], r["match"]) for r in found.rows]


def test_resolver_orders_zip_coverage_then_county(index) -> None:
    found = resolve(index, zip="25901", now=NOW)
    # own ZIP first, then programs covering it (any county), then the rest of Fayette County; stale left out
    assert ids(found) == [("oak-pantry", "zip"), ("fay-snap", "zip"), ("beck-snap", "zip"), ("mont-coats", "county")]
    assert found.county == "Fayette" and found.total == 4
    row = found.rows[0]
    assert row["verification_status"] == "verified" and row["age_days"] == 10
    assert row["contact_phone"] == "+13045550100" and row["zip_coverage"] == []


def test_resolver_filters_and_hints(index) -> None:
    assert ids(resolve(index, zip="25901", resource_type="snap", now=NOW)) == [
        ("fay-snap", "zip"),
        ("beck-snap", "zip"),
    ]
    stale = resolve(index, county="fayette county", include_stale=True, now=NOW)
    assert ("fay-old", "county") in ids(stale)
    assert next(r for r in stale.rows if r["local_resource_id"] == "fay-old")["verification_status"] == "stale"
    assert ids(resolve(index, local_resource_id="beck-snap", now=NOW)) == [("beck-snap", "id")]
    assert resolve(index, local_resource_id="fay-old", now=NOW).rows == []
    assert ids(resolve(index, zip="25801", ids=["mont-coats", "unknown"], now=NOW)) == [
        ("mont-coats", "id"),
        ("beck-snap", "zip"),
    ]
    assert resolve(index, resource_type="snap", limit=1, now=NOW).total == 2
    with pytest.raises(RegistryQueryError, match="ZIP 90210 is in CA; the registry covers WV"):
        resolve(index, zip="90210")
    with pytest.raises(RegistryQueryError, match="did you mean Fayette"):
        resolve(index, county="Fayete")
