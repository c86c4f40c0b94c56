"""Dagster on PostgreSQL, chosen by configuration only: ``deploy/dagster-postgres.yaml`` as the instance, the
example index built by the ``dagster`` command line with the multiprocess executor, the run and its asset
materializations read back from Postgres, and the writers of the index held to one at a time by their pool.

The server comes from ``LIVEMEM_TEST_PG_DSN`` (``.ci/run`` installs and starts one); each test gets its own
database, dropped afterwards. Without a reachable server the tests are skipped, with the reason in the summary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus

from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
DSN = os.environ.get("LIVEMEM_TEST_PG_DSN", "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test")
WRITER_POOL = "index_writer"
MULTIPROCESS = {"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}}

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def dagster_pg_env() -> Iterator[dict[str, str]]:
    """A fresh database ``livemem_dagster_<random>`` on the test server, as the DAGSTER_PG_* variables."""
    try:
        admin = psycopg.connect(DSN, connect_timeout=3, autocommit=True)
    except psycopg.Error as exc:
        pytest.skip(f"no PostgreSQL server reachable at LIVEMEM_TEST_PG_DSN ({exc.__class__.__name__}: {exc})")
    db_name = f"livemem_dagster_{uuid.uuid4().hex[:10]}"
    try:
        admin.execute(f"CREATE DATABASE {db_name}")
    except psycopg.errors.InsufficientPrivilege as exc:
        admin.close()
        pytest.skip(f"the role in LIVEMEM_TEST_PG_DSN may not create databases (grant CREATEDB): {exc}")
    info = admin.info
    env = {
        "DAGSTER_PG_HOST": info.host,
        "DAGSTER_PG_PORT": str(info.port),
        "DAGSTER_PG_USER": info.user,
        "DAGSTER_PG_PASSWORD": info.password,
        "DAGSTER_PG_DB": db_name,
    }
    try:
        yield env
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)")
        admin.close()


def dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
    return home


def test_example_builds_with_postgres_storage_and_multiprocess_executor(
    tmp_path: Path, dagster_pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = dagster_home(tmp_path)
    index_dir = tmp_path / "index"
    run_config = tmp_path / "multiprocess.yaml"
    run_config.write_text(yaml.safe_dump(MULTIPROCESS), encoding="utf-8")
    env = {
        **os.environ,
        **dagster_pg_env,
        "DAGSTER_HOME": str(home),
        "RAG_SOURCES": str(PROJECT / "examples" / "sources.yaml"),
        "RAG_INDEX_DIR": str(index_dir),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(PROJECT),
    }
    dagster = Path(sys.executable).parent / "dagster"
    proc = subprocess.run(
        [str(dagster), "job", "execute", "-m", "orchestration.definitions", "-j", "build_index", "-c", str(run_config)],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]

    for name, value in dagster_pg_env.items():
        monkeypatch.setenv(name, value)
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        runs = instance.get_runs()
        assert [(r.job_name, r.status) for r in runs] == [("build_index", DagsterRunStatus.SUCCESS)]
        run = runs[0]
        assert run.run_config["execution"] == MULTIPROCESS["execution"]
        messages = [e.message or "" for e in instance.all_logs(run.run_id)]
        assert any("multiprocess executor" in m for m in messages), "the steps did not run in subprocesses"

        materialized = {
            key: [r.asset_materialization for r in instance.fetch_materializations(AssetKey(key), limit=5).records]
            for key in ("chunks", "published_index")
        }
        assert [len(events) for events in materialized.values()] == [1, 1]
        materialized = {key: events[0] for key, events in materialized.items()}
        published = materialized["published_index"].metadata
        assert published["status"].value == "published"
        assert materialized["chunks"].metadata["dagster/row_count"].value > 0

        checks = {e.check_name: e.passed for e in _check_evaluations(instance, run.run_id)}
        assert checks["chunks_schema_valid"] and checks["governance_caps"] and checks["sealed_provenance_resolves"]

        # The writers' pool exists with the instance's default limit of one slot, and the run left no slot taken.
        pool = instance.event_log_storage.get_concurrency_info(WRITER_POOL)
        assert pool.slot_count == 1
        assert pool.active_slot_count == 0 and pool.pending_step_count == 0

    index = IndexHome(index_dir)
    assert index.current() == published["current_version"].value
    assert index.current_manifest()["total_chunks"] == materialized["chunks"].metadata["dagster/row_count"].value


def _check_evaluations(instance: DagsterInstance, run_id: str):
    return [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]


def test_writer_assets_share_one_pool() -> None:
    """Every asset that writes an index version is in the pool both dagster.yaml variants limit to one slot."""
    from orchestration.definitions import build_definitions

    defs = build_definitions(PROJECT / "examples" / "sources.yaml")
    graph = defs.resolve_asset_graph()
    pools = {
        key.to_user_string(): graph.get(key).pools
        for key in graph.get_all_asset_keys()
        if graph.get(key).is_materializable
    }
    writers = {
        "chunks",
        "published_index",
        "gbim_export",
        "gbim_published",
        "registry_verification",
        "registry_published",
        "attention_rollup",
        "attention_published",
    }
    assert {k for k, p in pools.items() if WRITER_POOL in (p or set())} == writers
    for variant in ("dagster.yaml", "dagster-postgres.yaml"):
        config = yaml.safe_load((PROJECT / "deploy" / variant).read_text(encoding="utf-8"))
        assert config["concurrency"]["pools"]["default_limit"] == 1, variant
        assert config["telemetry"]["enabled"] is False, variant
