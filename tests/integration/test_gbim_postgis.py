"""The GBIM export's PostGIS spatial source against a real PostgreSQL server with PostGIS.

``.ci/run`` installs Debian's PostgreSQL and PostGIS packages and enables the extension in the test database.
The DSN comes from ``LIVEMEM_TEST_PG_DSN`` (default: the role and database ``.ci/run`` creates); without a
reachable server, or without PostGIS, these tests are skipped, with the reason shown in the test summary.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path

import pyproj
import pytest

from livemem.errors import SourceError
from livemem.gbim import entity_id, export_gbim, load_spatial, read_features
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.store import IndexHome

DSN = os.environ.get("LIVEMEM_TEST_PG_DSN", "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test")
DSN_ENV = "LIVEMEM_TEST_GBIM_POSTGIS_DSN"  # the variable the configured sources name (dsn_env)
UTM17 = "EPSG:26917"

psycopg = pytest.importorskip("psycopg")
TO_UTM = pyproj.Transformer.from_crs("EPSG:4326", UTM17, always_xy=True)
TO_WGS84 = pyproj.Transformer.from_crs(UTM17, "EPSG:4326", always_xy=True)

# (facility_id, name, description, county, zip, lon, lat): points, placed by their WGS 84 position
POINTS = [
    ("pg-001", "Kanawha County DHHR", "SNAP and Medicaid applications in Charleston.", "Kanawha", "25301", -81.6326, 38.3498),
    ("pg-002", "Raleigh County DHHR", "WIC and SNAP help in Beckley.", "Raleigh County", "25801, 25802", -81.1882, 37.7782),
    ("pg-003", "Mobile food pantry", "A pantry truck with no fixed county.", None, None, -80.9, 38.2),
]  # fmt: skip
# the polygon: a 2 km square in EPSG:26917 around the centre of Fayetteville (its centroid is that centre)
SQUARE_CENTRE = TO_UTM.transform(-81.1040, 38.0529)
SQUARE = ("pg-004", "Fayette County Resource Center", "Energy assistance (LIEAP) in Fayetteville.", "Fayette", 25840)


def square_wkt(cx: float, cy: float, half: float = 1000.0) -> str:
    ring = [(cx - half, cy - half), (cx + half, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    return "POLYGON((" + ", ".join(f"{x!r} {y!r}" for x, y in [*ring, ring[0]]) + "))"


@pytest.fixture
def postgis_table():
    """A fresh schema holding a ``facilities`` table (geometry in EPSG:26917); dropped afterwards."""
    try:
        conn = psycopg.connect(DSN, connect_timeout=3, autocommit=True)
    except psycopg.Error as exc:
        pytest.skip(f"no PostgreSQL server reachable at LIVEMEM_TEST_PG_DSN ({exc.__class__.__name__}: {exc})")
    try:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'postgis'").fetchone() is None:
            pytest.skip("PostGIS is not installed on the PostgreSQL server (Debian: postgresql-15-postgis-3)")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")  # a no-op where .ci/run enabled it
        except psycopg.Error as exc:
            pytest.skip(
                "the postgis extension is not enabled in the test database and this role cannot create it "
                f"(as a superuser: CREATE EXTENSION postgis; {exc.__class__.__name__}: {exc})"
            )
    except BaseException:
        conn.close()
        raise
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn.execute(f"CREATE SCHEMA {schema}")
    table = f"{schema}.facilities"
    try:
        conn.execute(
            f"""CREATE TABLE {table} (
                id serial PRIMARY KEY, facility_id text, name text, description text, county text, zip text,
                geom geometry(Geometry, 26917))"""
        )
        rows = [(*p[:5], "POINT({!r} {!r})".format(*TO_UTM.transform(p[5], p[6]))) for p in POINTS]
        rows.append((*SQUARE[:4], str(SQUARE[4]), square_wkt(*SQUARE_CENTRE)))
        rows.append(("pg-005", "Closed office", "Closed in 2023.", "Fayette", "25840", "POLYGON EMPTY"))
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} (facility_id, name, description, county, zip, geom) "
                "VALUES (%s, %s, %s, %s, %s, ST_GeomFromText(%s, 26917))",
                rows,
            )
        yield table
    finally:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


def write_sources(tmp_path: Path, repo: Path, table: str) -> Path:
    """Two PostGIS sources over the same table: the table itself, and a query that reprojects to EPSG:4326."""
    query = (
        f"SELECT facility_id, name, description, county, zip, ST_Transform(geom, 4326) AS shape FROM {table} "
        "WHERE county IS NOT NULL AND NOT ST_IsEmpty(geom) ORDER BY facility_id"
    )
    path = tmp_path / "sources.yaml"
    path.write_text(
        f"sources:\n  - {{name: docs, repo: {repo}, collection: docs}}\n"
        "spatial:\n"
        "  worldview_id: wv-benefits\n"
        "  region: {name: West Virginia, bbox: [-82.65, 37.2, -77.7, 40.64], tolerance_km: 25}\n"
        "  sources:\n"
        f"    - {{name: facilities-db, postgis: {{dsn_env: {DSN_ENV}, table: {table}}}, crs: '{UTM17}',\n"
        "       dataset: wv_benefits, gbim_entity: facility, id_field: facility_id, label_field: name,\n"
        "       description_field: description, county_field: county, zip_field: zip, collection: gis_pg}\n"
        f"    - name: facilities-query\n"
        f"      postgis: {{dsn_env: {DSN_ENV}, geometry_column: shape, query: {json.dumps(query)}}}\n"
        "      crs: 'EPSG:4326'\n"
        "      dataset: wv_benefits_query\n"
        "      gbim_entity: facility\n"
        "      id_field: facility_id\n"
        "      label_template: '{name} ({county})'\n"
        "      description_field: description\n",
        encoding="utf-8",
    )
    return path


def test_postgis_table_and_query_sources_export(postgis_table, tmp_path, make_repo, embedder, monkeypatch) -> None:
    repo = make_repo(files={"guide.md": "# Guide\n"})
    config = load_sources(write_sources(tmp_path, repo.path, postgis_table))
    spatial = load_spatial(config)
    assert spatial.sources[0].source_table == postgis_table
    assert spatial.sources[1].source_table.startswith("query:")
    home = IndexHome(tmp_path / "index")

    # the database URL comes from the configured variable, and only from there
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("DATABASE_URL", DSN)
    with pytest.raises(SourceError, match=f"environment variable {DSN_ENV} .*is not set"):
        export_gbim(config, home, embedder)
    monkeypatch.setenv(DSN_ENV, "postgresql://livemem:livemem@127.0.0.1:1/nowhere")
    with pytest.raises(SourceError, match="'facilities-db': query failed"):
        export_gbim(config, home, embedder)
    assert home.current() is None

    monkeypatch.setenv(DSN_ENV, DSN)
    result = export_gbim(config, home, embedder)
    assert result.staged
    section = result.section
    assert section["entities"] == 4 + 3 and section["quarantined_count"] == 1
    assert section["quarantined"] == [
        {"source": "facilities-db", "source_pk": "pg-005", "reason": "empty geometry (Polygon EMPTY)"}
    ]
    assert section["per_dataset_county"] == {
        "wv_benefits": {"Kanawha": 1, "Raleigh": 1, "Fayette": 1, "(none)": 1},
        "wv_benefits_query": {"Kanawha": 1, "Raleigh": 1, "Fayette": 1},
    }
    db, query = section["sources"]["facilities-db"], section["sources"]["facilities-query"]
    assert db["location"] == query["location"] == f"postgis ${DSN_ENV}"  # the variable's name, never the URL
    assert DSN not in json.dumps(section)
    assert (db["features"], db["entities"], db["quarantined"]) == (5, 4, 1)
    assert (query["features"], query["entities"], query["quarantined"]) == (3, 3, 0)
    assert len(db["content_hash"]) == len(query["content_hash"]) == 64

    con = connect(home.locate(result.version_id))
    try:
        cols = "entity_id, source, source_pk, source_table, label, county, centroid_x, centroid_y, srid, lon, lat"
        rows = con.execute(f"SELECT {cols}, geometry_type FROM gbim_entities").fetchall()
        relations = con.execute("SELECT subject, predicate, object, object_kind FROM gbim_relations").fetchall()
    finally:
        con.close()
    entities = {(r[1], r[2]): dict(zip([*cols.split(", "), "geometry_type"], r, strict=True)) for r in rows}
    assert sorted(entities) == sorted(
        [("facilities-db", pk) for pk in ("pg-001", "pg-002", "pg-003", "pg-004")]
        + [("facilities-query", pk) for pk in ("pg-001", "pg-002", "pg-004")]
    )

    expected = {p[0]: (p[5], p[6], TO_UTM.transform(p[5], p[6])) for p in POINTS}
    expected[SQUARE[0]] = (*TO_WGS84.transform(*SQUARE_CENTRE), SQUARE_CENTRE)
    counties = {"pg-001": "Kanawha", "pg-002": "Raleigh", "pg-003": None, "pg-004": "Fayette"}
    for (source, pk), e in entities.items():
        lon, lat, (x, y) = expected[pk]
        # the query's EPSG:4326 coordinates are projected back to the working CRS: equal to well below a millimetre
        assert e["centroid_x"] == pytest.approx(x, abs=1e-3) and e["centroid_y"] == pytest.approx(y, abs=1e-3)
        assert e["lon"] == pytest.approx(lon, abs=1e-7) and e["lat"] == pytest.approx(lat, abs=1e-7)
        assert e["srid"] == 26917 and e["county"] == counties[pk]
        assert e["geometry_type"] == ("Polygon" if pk == "pg-004" else "Point")
        assert e["entity_id"] == entity_id(source, pk)
    assert entities[("facilities-db", "pg-001")]["source_table"] == postgis_table
    assert entities[("facilities-query", "pg-002")]["label"] == "Raleigh County DHHR (Raleigh County)"
    assert entities[("facilities-db", "pg-002")]["label"] == "Raleigh County DHHR"

    by_subject: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    near: set[tuple[str, str]] = set()
    for subject, predicate, obj, kind in relations:
        if predicate == "near":  # computed between entities (livemem.gbim: within 10 km, same access)
            near.add((subject, obj))
        else:
            by_subject.setdefault(subject, set()).add((predicate, obj, kind))
    # the two sources read the same places: each is near its other self (0 km), both ways
    for pk in ("pg-001", "pg-002", "pg-004"):
        db, query = entity_id("facilities-db", pk), entity_id("facilities-query", pk)
        assert (db, query) in near and (query, db) in near
    part_of = ("part_of", "wv-benefits", "worldview")
    assert by_subject[entity_id("facilities-db", "pg-001")] == {
        part_of,
        ("located_in", "Kanawha", "county"),
        ("serves_zip", "25301", "zip"),
    }
    assert by_subject[entity_id("facilities-db", "pg-002")] == {
        part_of,
        ("located_in", "Raleigh", "county"),
        ("serves_zip", "25801", "zip"),
        ("serves_zip", "25802", "zip"),
    }
    assert by_subject[entity_id("facilities-db", "pg-003")] == {part_of}  # no county, no zip: no such relations
    assert by_subject[entity_id("facilities-query", "pg-004")] == {
        part_of,
        ("located_in", "Fayette", "county"),
        ("serves_zip", "25840", "zip"),
    }
    assert len(relations) - len(near) == (3 + 4 + 1 + 3) + (3 + 4 + 3)
    assert len(relations) == section["relations"]

    # the same rows read again hash the same: nothing is staged
    home.publish(result.version_id, None, config.retention)
    again = export_gbim(config, home, embedder)
    assert not again.staged and again.reason.startswith("spatial inputs unchanged")


def test_postgis_source_reads_postgres_scheme_and_reports_a_missing_geometry_column(
    postgis_table, tmp_path, make_repo, monkeypatch
) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    spatial = load_spatial(load_sources(write_sources(tmp_path, repo.path, postgis_table)))
    table_source, query_source = spatial.sources
    monkeypatch.setenv(DSN_ENV, "postgres://" + DSN.split("://", 1)[1])  # libpq's short scheme works too
    frame, content_hash = read_features(table_source)
    assert list(frame["facility_id"]) == ["pg-001", "pg-002", "pg-003", "pg-004", "pg-005"]  # ordered by id_field
    assert frame.crs.to_epsg() == 26917 and frame.geometry.name == "geom"
    assert read_features(table_source)[1] == content_hash
    frame, _ = read_features(query_source)
    assert frame.crs.to_epsg() == 4326 and len(frame) == 3

    wrong = replace(query_source, postgis={**query_source.postgis, "geometry_column": "g"})
    with pytest.raises(SourceError, match="missing geometry column 'g'"):
        read_features(wrong)
    monkeypatch.setenv(DSN_ENV, "host=127.0.0.1 dbname=livemem_test")
    with pytest.raises(SourceError, match=f"{DSN_ENV} is not a database URL"):
        read_features(table_source)
