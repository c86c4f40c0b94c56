"""Each publish says in Dagster what changed in its build (issue 37): the diff against the version it was built on
and the disk the kept versions take, as metadata of the publish step; retention by age from the sources file."""

from __future__ import annotations

from pathlib import Path

from dagster import AssetKey, DagsterInstance

from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions


def materialization(result, key: str):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == AssetKey(key)]
    return events[0].materialization if events else None


def test_publish_metadata_says_what_changed_and_the_disk_use(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"guide.md": "# Guide\n\n## SNAP\n\nFood help.\n", "faq.md": "# FAQ\n\nWIC helps.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        "index:\n  retention: {keep_last: 1, daily_days: 30}\n"
        f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n",
        encoding="utf-8",
    )
    defs = build_definitions(sources, tmp_path / "index")
    instance = DagsterInstance.ephemeral()
    first = defs.resolve_job_def("build_index").execute_in_process(instance=instance)
    meta = materialization(first, "published_index").metadata
    assert meta["what_changed"].value.endswith("the first version (nothing to compare with)")
    assert meta["disk"].value["versions"] == 1

    repo.commit({"guide.md": "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n", "new.md": "# New\n\nLIHEAP.\n"})
    second = defs.resolve_job_def("build_index").execute_in_process(instance=instance)
    meta = materialization(second, "published_index").metadata
    home = IndexHome(tmp_path / "index")
    v1, v2 = meta["previous_version"].value, meta["current_version"].value
    assert meta["what_changed"].value == f"{v1} → {v2}: 2 files changed, chunks +1 -0 ~1"
    changes = meta["changes"].value
    assert changes["sources"]["docs"]["files"] == {"added": 1, "removed": 0, "changed": 1}
    # the retention of the sources file: the newest one, and the newest of each day; v1 was today's until v2
    assert home.published_versions() == [v2] and meta["pruned_versions"].value == [v1]
    disk = meta["disk"].value
    assert disk["versions"] == 1 and disk["history_mb"] == 0 and set(disk["per_version_mb"]) == {v2}
