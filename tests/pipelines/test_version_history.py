"""The index's history (issue 37): kept versions with their publish times and commits, ``as_of`` resolved to the
version that was current then (rollbacks included) or that held a commit, diffs between versions as a role sees
them, and retention by age as well as count, with disk use reported."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from support.history import build_history, chunk_ids, git_head

from livemem.errors import LivingMemoryError
from livemem.sources.config import Retention
from livemem.version import connect
from livemem.version.diff import diff_versions
from livemem.version.history import (
    BadVersionReference,
    VersionNotFound,
    disk_usage,
    list_versions,
    previous_published,
    resolve,
)
from livemem.version.store import IndexHome


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder):
    return build_history(tmp_path_factory.mktemp("history"), embedder)


@pytest.fixture
def own_home(history, tmp_path):
    """A copy of the history's index home, for tests that publish or roll back."""
    shutil.copytree(history["home"].root, tmp_path / "rag_index", symlinks=True)
    return IndexHome(tmp_path / "rag_index")


# --- 1. history ---------------------------------------------------------------------------------------------
def test_versions_list_publish_times_commits_and_counts(history) -> None:
    home, v1, v2, v3 = history["home"], history["v1"], history["v2"], history["v3"]
    listed = list_versions(home)
    assert [v["version_id"] for v in listed] == [v1, v2, v3]
    assert [v["current"] for v in listed] == [False, False, True]
    times = [datetime.fromisoformat(v["published_at"].replace("Z", "+00:00")) for v in listed]
    assert times == sorted(times) and len(set(times)) == 3
    head = git_head(history["repo"])
    assert {s["commit"] for s in listed[1]["sources"].values()} == {head}  # one repo, four sources
    assert listed[1]["sources"]["wv-benefits"]["files"] == 4 and listed[0]["sources"]["wv-benefits"]["files"] == 3
    assert "client-code" in listed[0]["sources"] and listed[1]["sources"]["client-code"]["files"] == 0
    assert listed[2]["counts"]["chunks"] == listed[1]["counts"]["chunks"] == home.manifest(v2)["total_chunks"]
    assert (
        listed[2]["base_version"] == v2 and previous_published(home, v3) == v2 and previous_published(home, v1) is None
    )


def test_as_of_a_time_is_the_version_current_then_and_a_rollback_counts(own_home, history) -> None:
    home, v1, v2, v3 = own_home, history["v1"], history["v2"], history["v3"]
    published = {v: home.published_at(v) for v in (v1, v2, v3)}
    between = published[v1] + (published[v2] - published[v1]) / 2
    assert resolve(home, as_of=between.isoformat()).version_id == v1
    assert resolve(home, as_of=between.isoformat()).current is False
    assert resolve(home, as_of=published[v2].isoformat()).version_id == v2  # published at that instant
    naive = between.astimezone(UTC).replace(tzinfo=None).isoformat()  # no offset: UTC
    assert resolve(home, as_of=naive).version_id == v1
    now = resolve(home, as_of=(datetime.now(UTC) + timedelta(seconds=1)).isoformat().replace("+00:00", "Z"))
    assert (now.version_id, now.current, now.how) == (v3, True, "as_of_time")

    home.rollback(v1)  # from now on v1 is current again; before, v3 was
    after_rollback = datetime.now(UTC) + timedelta(seconds=1)
    assert resolve(home, as_of=after_rollback.isoformat()).version_id == v1
    assert resolve(home, as_of=(published[v3] + timedelta(microseconds=1)).isoformat()).version_id == v3

    with pytest.raises(VersionNotFound, match="no version was published at 2001-01-01"):
        resolve(home, as_of="2001-01-01T00:00:00Z")
    with pytest.raises(BadVersionReference, match="neither an ISO 8601 date-time"):
        resolve(home, as_of="last tuesday")


def test_as_of_a_date_is_the_end_of_that_day(own_home, history) -> None:
    home = own_home
    today = datetime.now(UTC).date()
    assert resolve(home, as_of=today.isoformat()).version_id == history["v3"]  # published today, before its end
    with pytest.raises(VersionNotFound, match="the first publish was at"):
        resolve(home, as_of=(today - timedelta(days=1)).isoformat())


def test_as_of_a_commit_is_the_newest_version_holding_it(own_home, history) -> None:
    home, repo = own_home, history["repo"]
    head = git_head(repo)
    first = home.manifest(history["v1"])["sources"]["governance"]["head_commit"]
    assert resolve(home, as_of=head).version_id == history["v3"]  # v2 and v3 hold it: the newest
    assert resolve(home, as_of=head[:8]).how == "as_of_commit"
    assert resolve(home, as_of=first[:10]).version_id == history["v1"]
    from livemem.version.history import holding_commit

    assert holding_commit(home, head, newest=False) == history["v2"]
    with pytest.raises(VersionNotFound, match="no kept version holds commit deadbeef"):
        resolve(home, as_of="deadbeef")
    # only the sources a role may read are searched: a commit no readable source holds is not found for it
    with pytest.raises(VersionNotFound, match=f"no kept version holds commit {head[:8]}"):
        resolve(home, as_of=head[:8], access=frozenset({"no-such-level"}))


def test_a_version_id_resolves_and_an_unknown_one_is_a_clear_error(own_home, history) -> None:
    home = own_home
    got = resolve(home, version=history["v2"])
    assert (got.version_id, got.current, got.how) == (history["v2"], False, "version")
    assert resolve(home, version="current").version_id == history["v3"]
    assert resolve(home).current is True
    with pytest.raises(VersionNotFound, match=r"no kept version '20990101T000000000000Z'; kept: 3 versions"):
        resolve(home, version="20990101T000000000000Z")
    with pytest.raises(BadVersionReference, match="is not a version id"):
        resolve(home, version="../../etc")
    for padded in (history["v2"] + "\n", " " + history["v2"], history["v2"] + "\r\n", "current\n"):
        with pytest.raises(BadVersionReference, match="is not a version id"):  # an id is exactly an id
            resolve(home, version=padded)
    with pytest.raises(BadVersionReference, match="name different versions"):
        resolve(home, version=history["v1"], as_of=git_head(history["repo"]))


def test_as_of_a_version_pruned_by_retention_says_so(own_home, history) -> None:
    home = own_home
    between = (
        home.published_at(history["v1"]) + (home.published_at(history["v2"]) - home.published_at(history["v1"])) / 2
    )
    home._prune(Retention(keep_last=2))  # v1 goes
    assert home.published_versions() == [history["v2"], history["v3"]]
    with pytest.raises(VersionNotFound, match=f"version {history['v1']} was current at .* no longer kept"):
        resolve(home, as_of=between.isoformat())


# --- 2. diff --------------------------------------------------------------------------------------------------
def test_diff_counts_files_and_chunks_per_source_and_pairs_edited_chunks(history) -> None:
    home, v1, v2 = history["home"], history["v1"], history["v2"]
    diff = diff_versions(home, v1, v2)  # the operator's view: everything
    benefits = diff["sources"]["wv-benefits"]
    assert benefits["files"] == {"added": 1, "removed": 0, "changed": 1}
    assert (
        benefits["chunks"]["changed"] >= 1 and benefits["chunks"]["added"] >= 1 and benefits["chunks"]["removed"] == 0
    )
    assert diff["sources"]["client-code"]["files"] == {"added": 0, "removed": 1, "changed": 0}
    assert diff["sources"]["caseworker"]["files"]["changed"] == 1
    assert diff["sources"]["governance"]["files"] == {"added": 0, "removed": 0, "changed": 0}
    assert diff["sources"]["governance"]["chunks"]["unchanged"] > 0
    head = git_head(history["repo"])
    assert diff["sources"]["wv-benefits"]["commit"]["to"] == head != diff["sources"]["wv-benefits"]["commit"]["from"]
    changes = {(f["path"].rsplit("/", 1)[-1], f["change"]) for f in diff["files"]}
    assert changes == {("raleigh-county.md", "changed"), ("mingo-county.md", "added"), ("client.py", "removed"),
                       ("caseworker-playbook.md", "changed")}  # fmt: skip
    edited = chunk_ids(home, v2, "raleigh-county.md")
    assert {c["to"] for c in diff["chunks"]["changed"]} & set(edited)  # the edited chunk is a pair, old -> new
    assert diff["files_total"] == 4 and diff["registry"] is None and diff["attention"]["moved"] == 0
    assert diff["summary"].startswith(f"{v1} → {v2}: 4 files changed")
    back = diff_versions(home, v2, v1)  # reversed: added <-> removed
    assert back["sources"]["wv-benefits"]["files"] == {"added": 0, "removed": 1, "changed": 1}


def test_diff_of_an_attention_publish_shows_the_top_movers(history) -> None:
    home = history["home"]
    diff = diff_versions(home, history["v2"], history["v3"])
    assert diff["files_total"] == 0 and diff["chunks"]["totals"] == {"added": 0, "removed": 0, "changed": 0}
    unchanged = sum(s["chunks"]["unchanged"] for s in diff["sources"].values())
    assert unchanged == home.manifest(history["v3"])["total_chunks"]  # same rows held: only attention is read
    public = diff_versions(home, history["v2"], history["v3"], access=frozenset({"public"}))
    assert "caseworker" not in public["sources"] and history["playbook"] not in json.dumps(public)
    movers = {m["chunk_id"]: m for m in diff["attention"]["top_movers"]}
    assert history["raleigh"] in movers and movers[history["raleigh"]]["delta"] > 0
    assert movers[history["raleigh"]]["path"].endswith("raleigh-county.md")
    assert "attention moved on 2 chunks" in diff["summary"]


def test_a_diff_for_the_public_role_never_names_what_it_may_not_read(history) -> None:
    home = history["home"]
    public = diff_versions(home, history["v1"], history["v3"], access=frozenset({"public"}))
    operator = diff_versions(home, history["v1"], history["v3"])
    text = json.dumps(public)
    assert "caseworker" not in text and "playbook" not in text and history["playbook"] not in text
    assert history["playbook"] in json.dumps(operator)  # it is there, for those who may read it
    assert [m["chunk_id"] for m in public["attention"]["top_movers"]] == [history["raleigh"]]
    assert public["files_total"] == 3 and operator["files_total"] == 4


# --- 3. retention by age, disk use --------------------------------------------------------------------------
def fake_published_at(home: IndexHome, version: str, when: datetime) -> None:
    path = home.version_dir(version) / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["published_at"] = when.isoformat().replace("+00:00", "Z")
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_retention_by_age_keeps_daily_and_weekly_versions_and_gc_only_unused_parts(own_home, history) -> None:
    home, v1, v2, v3 = own_home, history["v1"], history["v2"], history["v3"]
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    fake_published_at(home, v1, now - timedelta(days=40))
    fake_published_at(home, v2, now - timedelta(days=10))
    fake_published_at(home, v3, now - timedelta(hours=1))
    assert home._prune(Retention(keep_last=1, daily_days=30, weekly_weeks=52), now) == []  # v1: its own week
    assert home._prune(Retention(keep_last=1, daily_days=30), now) == [v1]  # 40 days: past 30 daily versions
    assert home.published_versions() == [v2, v3]
    parts = {p.name for p in (home.root / "parts").iterdir()}
    assert parts == home.referenced_segments()  # nothing a kept version uses was collected
    assert history["raleigh"] in {c for c, *_ in _chunks(home, v2)}  # v2 still answers
    assert home._prune(1, now) == [v2]  # the plain integer form: the newest one (and the current one)
    assert home.published_versions() == [v3]


def test_publish_applies_retention_by_publish_time(tmp_path, history) -> None:
    """A version published with ``now`` faked: the publish time is what retention and as_of read."""
    home = IndexHome(tmp_path / "rag_index")
    shutil.copytree(history["home"].root, home.root, symlinks=True)
    old = datetime(2020, 1, 6, tzinfo=UTC)
    for version in (history["v1"], history["v2"], history["v3"]):
        fake_published_at(home, version, old)
    staged = _restage(home, history["v3"])
    pruned = home.publish(staged, history["v3"], {"keep_last": 1, "daily_days": 7}, now=old + timedelta(days=3))
    assert sorted(pruned) == sorted([history["v1"], history["v2"]])  # same day: only the newest of it stays
    assert home.published_versions() == [history["v3"], staged]
    assert home.manifest(staged)["published_at"] == "2020-01-09T00:00:00Z"
    assert resolve(home, as_of="2020-01-09").version_id == staged


def test_disk_use_reports_versions_segments_and_what_history_costs(own_home, history) -> None:
    home = own_home
    disk = disk_usage(home)
    assert disk["versions"] == 3 and disk["segments"] == len(home.referenced_segments())
    assert disk["current_mb"] > 0 and disk["history_mb"] > 0 and 0 < disk["history_pct"] < 100
    assert set(disk["per_version_mb"]) == {history["v1"], history["v2"], history["v3"]}
    home._prune(1)
    after = disk_usage(home)
    assert after["versions"] == 1 and after["history_mb"] < disk["history_mb"]


def _chunks(home: IndexHome, version: str) -> list[tuple]:
    con = connect(home.version_dir(version))
    try:
        return con.execute("SELECT chunk_id FROM chunks").fetchall()
    finally:
        con.close()


def _restage(home: IndexHome, base: str) -> str:
    """A new staged version on ``base`` (a copy, as an attention publish makes)."""
    from livemem.version.store import derive_version, write_manifest

    with home.write_lock():
        version, staged, got_base = derive_version(home)
        assert got_base == base
        write_manifest(staged, {**home.manifest(base), "version_id": version, "base_version": base})
    return version


def test_diff_counts_registry_rows_and_gbim_entities(tmp_path, embedder) -> None:
    """Registry and GBIM steps publish versions of their own; a diff counts their rows and entities changed."""
    from support.gbim_data import SPATIAL
    from support.registry import good_row, write_csv
    from support.serving import build_and_publish, make_workspace

    from livemem.gbim import export_gbim
    from livemem.registry import RegistryConfig, run_verification
    from livemem.sources.config import load_sources

    sources = make_workspace(tmp_path)
    rows = [good_row(i, local_resource_id=f"res-{i}") for i in range(3)]
    csv_path = write_csv(tmp_path / "registry.csv", rows)
    sources.write_text(sources.read_text() + SPATIAL + "registry:\n  kind: csv\n  path: registry.csv\n")
    home = IndexHome(tmp_path / "rag_index")
    chunks = build_and_publish(sources, home, embedder)
    config = load_sources(sources)
    gbim = export_gbim(config, home, embedder)
    home.publish(gbim.version_id, gbim.base_version, 10)
    cfg = RegistryConfig.from_sources(config)
    first = run_verification(cfg, home)
    home.publish(first.version_id, first.base_version, 10)
    write_csv(
        csv_path,
        [rows[0], good_row(1, local_resource_id="res-1", name="Renamed"), good_row(9, local_resource_id="res-9")],
    )
    second = run_verification(cfg, home)
    home.publish(second.version_id, second.base_version, 10)

    added = diff_versions(home, chunks, gbim.version_id)
    assert added["gbim"]["entities"]["added"] == gbim.section["entities"] > 0 and added["files_total"] == 0
    assert added["gbim"]["relations"]["added"] > 0 and added["registry"] is None
    assert f"GBIM entities +{gbim.section['entities']}" in added["summary"]
    registry = diff_versions(home, first.version_id, second.version_id)["registry"]
    assert (registry["added"], registry["removed"], registry["changed"]) == (1, 1, 1)
    assert (
        registry["added_ids"] == ["res-9"]
        and registry["removed_ids"] == ["res-2"]
        and registry["changed_ids"] == ["res-1"]
    )
    assert diff_versions(home, first.version_id, second.version_id)["gbim"]["entities"]["changed"] == 0


def test_a_damaged_version_is_a_clear_error_in_a_diff_and_never_fails_a_publish(own_home, history) -> None:
    home = own_home
    (home.version_dir(history["v1"]) / "tables.duckdb").write_bytes(b"not a database")
    with pytest.raises(LivingMemoryError, match=f"versions {history['v1']} and {history['v2']} cannot be compared"):
        diff_versions(home, history["v1"], history["v2"])
    from livemem.version.diff import what_changed

    said = what_changed(home, history["v1"], history["v2"])
    assert (
        said["what_changed"].startswith(f"{history['v2']}: no diff against {history['v1']}") and "changes" not in said
    )
