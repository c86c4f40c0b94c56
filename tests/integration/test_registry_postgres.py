"""The registry's Postgres source against a real PostgreSQL server (``.ci/run`` installs and starts one).

The DSN comes from ``LIVEMEM_TEST_PG_DSN`` (default: the role and database ``.ci/run`` creates); without a
reachable server these tests are skipped, with the reason shown in the test summary.
"""

from __future__ import annotations

import os
import uuid
from datetime import date, timedelta

import pytest
from support.registry import NOW, good_row

from livemem import registry
from livemem.registry import RegistryConfig
from livemem.version.store import IndexHome

DSN = os.environ.get("LIVEMEM_TEST_PG_DSN", "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test")

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def pg_table():
    """A fresh schema with an empty ``local_resources`` table; dropped afterwards."""
    try:
        conn = psycopg.connect(DSN, connect_timeout=3, autocommit=True)
    except psycopg.Error as exc:
        pytest.skip(f"no PostgreSQL server reachable at LIVEMEM_TEST_PG_DSN ({exc.__class__.__name__}: {exc})")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(
        f"""CREATE TABLE {schema}.local_resources (
            id serial PRIMARY KEY, local_resource_id text, name text, description text, resource_type text,
            county text, zip text, zip_coverage text[], address text, contact_phone text, contact_email text,
            url text, eligibility text, hours text, verification_status text, last_verified_at date,
            verified_by text, deprecated_at timestamptz, updated_by text)"""
    )
    try:
        yield conn, f"{schema}.local_resources"
    finally:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


def insert(conn, table: str, rows: list[dict]) -> None:
    """Insert the rows' values for the registry fields the table has: a table made before the optional fields
    (organization, phones, ...) existed is still a registry."""
    schema, name = table.split(".")
    have = {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
            (schema, name),
        ).fetchall()
    }
    columns = [c for c in registry.FIELDS if c in have]
    placeholders = ", ".join(["%s"] * len(columns))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})",
            [[r.get(c) for c in columns] for r in rows],
        )


def pg_row(i: int, **overrides) -> dict:
    row = good_row(i, **overrides)
    row["zip_coverage"] = overrides.get("zip_coverage", ["25840"])
    row["last_verified_at"] = overrides.get("last_verified_at", date.fromisoformat(row["last_verified_at"]))
    row["deprecated_at"] = overrides.get("deprecated_at")
    return row


def test_postgres_source_verifies_and_stages(pg_table, tmp_path, monkeypatch) -> None:
    conn, table = pg_table
    insert(conn, table, [pg_row(0), pg_row(1, contact_phone="nope"), pg_row(2, deprecated_at=NOW - timedelta(days=3))])
    monkeypatch.setenv("TEST_REGISTRY_DSN", DSN)
    cfg = RegistryConfig(kind="postgres", table=table, dsn_env="TEST_REGISTRY_DSN", invalid_fields="reject")

    loaded = registry.load_rows(cfg)
    assert loaded.ignored_fields == ["id", "updated_by"]
    assert loaded.input_hash == registry.input_version(cfg)  # what the observable source asset reports
    result = registry.verify(loaded, cfg, NOW)
    assert result.counts()["published"] == 1 and result.counts()["invalid"] == 1 and result.counts()["deprecated"] == 1
    row = result.published.iloc[0]
    assert list(row["zip_coverage"]) == ["25840"] and row["last_verified_at"].endswith("T00:00:00Z")
    assert list(result.issues["rule"]) == ["phone", "deprecated"]

    flagged = registry.verify(loaded, RegistryConfig(kind="postgres", table=table, dsn_env="TEST_REGISTRY_DSN"), NOW)
    assert flagged.counts()["published"] == 2  # the default keeps the program and names the bad phone
    kept = flagged.published.set_index("local_resource_id").loc["res-00001"]
    assert kept["contact_phone"] is None and "contact_phone" in list(kept["flagged_fields"])

    home = IndexHome(tmp_path / "index")
    run = registry.run_verification(cfg, home, now=NOW)
    assert run.staged and run.manifest_section["input_hash"].startswith("pg-md5:")
    home.publish(run.version_id, None, retention=3)
    assert not registry.run_verification(cfg, home, now=NOW).staged  # same table content: nothing new

    conn.execute(f"UPDATE {table} SET hours = 'Sat 9-12' WHERE local_resource_id = 'res-00000'")
    assert registry.input_version(cfg) != loaded.input_hash
    changed = registry.run_verification(cfg, home, now=NOW)
    assert changed.staged and changed.history["updated"] == 1


def test_unreachable_postgres_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("NOWHERE_DSN", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    cfg = RegistryConfig(kind="postgres", dsn_env="NOWHERE_DSN")
    with pytest.raises(registry.RegistryError, match="cannot be read from Postgres"):
        registry.load_rows(cfg)
