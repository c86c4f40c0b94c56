"""The heavy stacks are optional extras (pyproject.toml: ``geo``, ``documents``, ``postgres``; docs/install.md).

In a fresh interpreter where importing any of them fails (as on a machine that installed ``living-memory`` with no
extra), a text-only source still builds and is served: a PDF in it is reported skipped (``extractor_missing``,
with the install command) while the markdown beside it is indexed; ``/query`` answers; a spatial section and a
Postgres table are refused with a ``ConfigError`` naming the extra; and none of those libraries was imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys
    from pathlib import Path
    BLOCKED = {"geopandas", "shapely", "pyproj", "pypdfium2", "docx", "bs4", "lxml", "psycopg", "dagster_postgres"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from fastapi.testclient import TestClient
    from support.serving import build_and_publish, commit_files, make_workspace
    from livemem.errors import ConfigError
    from livemem.extras import require
    from livemem.ingest.build import build_version
    from livemem.model.embedding import Embedder
    from livemem.sources.config import load_sources
    from livemem.version.store import IndexHome
    from serving.app import create_app
    from serving.settings import Settings

    SPATIAL = (
        "spatial:\\n  working_crs: EPSG:26917\\n  collection: gbim_spatial\\n  worldview_id: wv\\n  sources:\\n"
        "    - {name: sites, path: sites.geojson, crs: EPSG:26917, dataset: sites, gbim_entity: facility,"
        " id_field: id, label_field: name}\\n"
    )
    root = Path(sys.argv[1])
    sources = make_workspace(root)
    commit_files(root / "repo", {"benefits/flyer.pdf": "%PDF-1.4 a flyer"}, "a pdf")
    home = IndexHome(root / "rag_index")
    embedder = Embedder(threads=1)
    config = load_sources(sources)
    result = build_version(config, home, embedder)
    home.publish(result.version_id, result.base_version, config.retention)
    out = {"skipped": dict(result.sources["wv-benefits"].skipped)}
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        answer = client.post("/query", json={"query": "SNAP food assistance in Fayette County", "top_k": 3})
        out["query"] = [answer.status_code, json.dumps(answer.json())]
    refused = []
    sources.write_text(sources.read_text() + SPATIAL, encoding="utf-8")
    try:
        from livemem.gbim.config import load_spatial
        load_spatial(load_sources(sources))
    except ConfigError as exc:
        refused.append(str(exc))
    try:
        require("postgres", "psycopg", "the registry table local_resources")
    except ConfigError as exc:
        refused.append(str(exc))
    out["refused"] = refused
    out["imported"] = sorted(m for m in BLOCKED if m in sys.modules)
    print(json.dumps(out))
    """
)


def test_a_text_only_index_builds_and_serves_without_the_extras(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    env.pop("RAG_INDEX_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["skipped"].get("extractor_missing") == 1, out
    status, paths = out["query"]
    assert status == 200 and "fayette-county.md" in paths, out
    assert len(out["refused"]) == 2, out
    geo, postgres = out["refused"]
    assert "'geo' extra" in geo and "pip install 'living-memory[geo]'" in geo
    assert "'postgres' extra" in postgres and "pip install 'living-memory[postgres]'" in postgres
    assert out["imported"] == []
