"""The Dagster definitions, snapshotted: assets (group, deps, code version, kinds, partitions, checks and whether
each blocks), jobs (the assets and checks they select), schedules (cron, timezone, default status) and sensors, as
one human-readable file, ``tests/snapshots/dagster_definitions.json``.

A change to the asset graph then shows in review as a diff of that file. When the change is meant, rewrite it::

    LIVEMEM_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/unit/test_definitions_snapshot.py

The definitions are built for the bundled example sources file with every schedule at its default (so neither
``$RAG_SOURCES`` nor ``$LIVEMEM_SCHEDULES_OFF`` changes the snapshot); nothing is materialized.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, Definitions

from livemem.gbim import EXPORT_VERSION
from livemem.registry import LOGIC_VERSION
from livemem.settings import DEFAULT_SOURCES_FILE
from livemem.sources.config import CHUNKER_VERSION
from orchestration.definitions import build_definitions

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "dagster_definitions.json"
UPDATE_ENV = "LIVEMEM_UPDATE_SNAPSHOTS"
UPDATE_HINT = f"{UPDATE_ENV}=1 .venv/bin/python -m pytest tests/unit/test_definitions_snapshot.py"


@pytest.fixture(scope="module")
def defs(tmp_path_factory: pytest.TempPathFactory) -> Definitions:
    return build_definitions(DEFAULT_SOURCES_FILE, tmp_path_factory.mktemp("index"), schedules_off=[])


def _key(key: AssetKey) -> str:
    return key.to_user_string()


def _enum(value: Any) -> str | None:
    return None if value is None else getattr(value, "value", str(value))


def describe(defs: Definitions) -> dict[str, Any]:
    """The definitions as plain, sorted data: what the snapshot file holds."""
    graph = defs.resolve_asset_graph()
    assets: dict[str, Any] = {}
    for key in sorted(graph.get_all_asset_keys(), key=_key):
        node = graph.get(key)
        checks = {}
        for check in sorted(node.check_keys, key=lambda c: c.name):
            checks[check.name] = "blocking" if graph.get_check_spec(check).blocking else "not blocking"
        assets[_key(key)] = {
            "group": node.group_name,
            "type": "observable source" if node.is_observable else "materializable",
            "deps": sorted(_key(k) for k in node.parent_keys),
            "code_version": node.code_version,
            "kinds": sorted(node.kinds),
            "partitions": str(node.partitions_def) if node.partitions_def else None,
            "checks": checks,
        }
    jobs: dict[str, Any] = {}
    for job in sorted(defs.jobs or [], key=lambda j: j.name):
        selection = job.selection  # every job here is an asset job (define_asset_job)
        jobs[job.name] = {
            "assets": sorted(_key(k) for k in selection.resolve(graph)),
            "checks": sorted(f"{_key(c.asset_key)}:{c.name}" for c in selection.resolve_checks(graph)),
        }
    schedules = {
        s.name: {
            "job": s.job_name,
            "cron": s.cron_schedule,
            "timezone": s.execution_timezone,
            "default_status": _enum(s.default_status),
        }
        for s in sorted(defs.schedules or [], key=lambda s: s.name)
    }
    sensors = {
        s.name: {"default_status": _enum(s.default_status)} for s in sorted(defs.sensors or [], key=lambda s: s.name)
    }
    return {
        "assets": assets,
        "jobs": jobs,
        "schedules": schedules,
        "sensors": sensors,
        "resources": sorted(defs.resources or {}),
    }


def render(description: dict[str, Any]) -> str:
    return json.dumps(description, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_definitions_match_the_snapshot(defs: Definitions) -> None:
    actual = render(describe(defs))
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(actual, encoding="utf-8")
        return
    if not SNAPSHOT.is_file():
        pytest.fail(f"no snapshot {SNAPSHOT.relative_to(SNAPSHOT.parents[2])}: write it with\n    {UPDATE_HINT}")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile="tests/snapshots/dagster_definitions.json (committed)",
                tofile="the definitions now",
            )
        )
        pytest.fail(
            f"the Dagster definitions differ from the snapshot:\n{diff}\n"
            f"If the change is meant, rewrite the snapshot and commit it:\n    {UPDATE_HINT}",
            pytrace=False,
        )


def test_the_code_location_has_one_definitions_object() -> None:
    """``dagster dev -m orchestration.definitions`` loads the module's one ``Definitions`` (``defs``)."""
    import orchestration.definitions as module

    found = [name for name, value in vars(module).items() if isinstance(value, Definitions)]
    assert found == ["defs"]


def test_staging_assets_carry_their_logic_version(defs: Definitions) -> None:
    """A bump of the chunker's, the GBIM export's or the registry's version is a new code version in Dagster."""
    graph = defs.resolve_asset_graph()
    versions = {
        key: graph.get(AssetKey(key)).code_version for key in ("chunks", "gbim_export", "registry_verification")
    }
    assert versions == {
        "chunks": f"chunker-v{CHUNKER_VERSION}",
        "gbim_export": EXPORT_VERSION,
        "registry_verification": LOGIC_VERSION,
    }
