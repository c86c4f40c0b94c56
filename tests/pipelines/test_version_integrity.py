"""Version integrity: the manifest records the size and SHA-256 of every file; serving verifies them when it loads
a version and holds what it reads in memory, so damage on disk is a clear 503 and never a dead worker."""

from __future__ import annotations

import hashlib
import json
import shutil

import httpx
import numpy as np
import pytest
from support.servers import uvicorn
from support.serving import build_and_publish, make_workspace

from livemem.index import records
from livemem.version import connect
from livemem.version.segments import create_views, hold_segment, release_segments, write_segment
from livemem.version.store import MANIFEST, IndexHome, write_manifest

BROKEN = "20990101T000000000000Z"


@pytest.fixture
def served(tmp_path, embedder) -> tuple[IndexHome, str]:
    home = IndexHome(tmp_path / "rag_index")
    return home, build_and_publish(make_workspace(tmp_path), home, embedder)


def test_manifest_records_size_and_checksum_of_every_file(served):
    home, version = served
    directory = home.version_dir(version)
    manifest = json.loads((directory / MANIFEST).read_text())
    files = manifest["files"]
    on_disk = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(files) == on_disk
    assert "tables.duckdb" in on_disk
    for name, recorded in files.items():
        data = (directory / name).read_bytes()
        assert recorded == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    # the shared segments: each records its files, and its name is the hash of those records
    assert manifest["segments"]
    for entry in manifest["segments"]:
        segment = home.root / "parts" / entry["id"]
        meta = json.loads((segment / "segment.json").read_text())
        assert (
            entry["id"] == "seg-" + hashlib.sha256(json.dumps(meta["files"], sort_keys=True).encode()).hexdigest()[:32]
        )
        for name, recorded in meta["files"].items():
            data = (segment / name).read_bytes()
            assert recorded == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
            assert not (segment / name).stat().st_mode & 0o222  # written read-only


def damaged_copy(home: IndexHome, version: str, damage: str, copy: str = BROKEN) -> str:
    """A copy of ``version`` published under a later id over a segment of its own (the same rows written again in
    reverse order), whose BM25 postings are then damaged on disk. Returns how the error names the file."""
    shutil.copytree(home.version_dir(version), home.version_dir(copy))
    directory = home.version_dir(copy)
    manifest = json.loads((directory / MANIFEST).read_text())
    (old,) = [e["id"] for e in manifest["segments"]]
    con = connect(directory, read_only=False)
    try:
        chunks = con.execute("SELECT * EXCLUDE (_seg, _row) FROM chunk_parts ORDER BY _row DESC").df()
        parents = con.execute("SELECT * EXCLUDE (_seg, _row) FROM parent_parts ORDER BY _row DESC").df()
        vectors = np.load(home.root / "parts" / old / "dense.npy")[::-1]
        texts = [
            records.embed_text(c, json.loads(h)) for c, h in zip(chunks["content"], chunks["heading_path"], strict=True)
        ]
        new = write_segment(con, home.root / "parts", chunks, parents, vectors, texts)
        release_segments(con, [old])
        hold_segment(con, new, len(chunks), len(parents))
        create_views(con, [new])
    finally:
        con.close()
    manifest["segments"] = [{"id": new, "chunks": len(chunks), "parents": len(parents)}]
    manifest["version_id"] = copy
    write_manifest(directory, manifest)
    target = home.root / "parts" / new / "postings.npz"
    target.chmod(0o644)
    data = bytearray(target.read_bytes())
    if damage == "truncated":
        del data[len(data) // 2 :]
    else:  # same size, one bit flipped: only the checksum tells
        data[-1] ^= 0x01
    target.write_bytes(bytes(data))
    return f"segment {new}: postings.npz"


def test_a_damaged_version_is_a_clear_503_and_rolling_back_serves_again(served):
    """On a real uvicorn: CURRENT naming a damaged copy (truncated, or one bit flipped) makes /healthz a 503 naming
    the version and the file; queries are answered from the last good version, never from the damaged one; the
    process stays up, and pointing CURRENT back at the good version is healthy again."""
    home, version = served
    with uvicorn(home) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.post("/query", json={"query": "SNAP food assistance"}).status_code == 200
        for n, damage in enumerate(["truncated", "bit_flip"]):
            broken = f"2099010{n + 1}T000000000000Z"
            name = damaged_copy(home, version, damage, broken)
            (home.root / "CURRENT").write_text(broken + "\n")
            response = client.get("/healthz")
            assert response.status_code == 503, damage
            detail = response.json()["detail"]
            assert broken in detail and name in detail and "make materialize" in detail
            assert str(home.root) not in detail
            answered = client.post("/query", json={"query": "SNAP"})
            assert answered.status_code == 200 and answered.json()["index_version"] == version
            (home.root / "CURRENT").write_text(version + "\n")
            again = client.post("/query", json={"query": "SNAP food assistance"})
            assert again.status_code == 200 and again.json()["index_version"] == version


def test_truncating_the_served_version_on_disk_never_kills_the_worker(served):
    """Issue 12: truncating a BM25 file of the version being served ended the worker with SIGBUS (bm25s
    memory-mapped it). What retrieval reads of a version (rows, vectors, postings) is held in memory: the worker
    keeps answering from it."""
    home, version = served
    with uvicorn(home) as url, httpx.Client(base_url=url, timeout=30) as client:
        body = {"query": "SNAP food assistance", "mode": "hybrid", "top_k": 3}
        before = client.post("/query", json=body)
        assert before.status_code == 200 and before.json()["results"]
        for entry in home.manifest(version)["segments"]:
            for name in ("dense.npy", "postings.npz", "chunks.parquet"):
                path = home.root / "parts" / entry["id"] / name
                path.chmod(0o644)
                with open(path, "r+b") as fh:
                    fh.truncate(0)
        for query in ("SNAP food assistance", "heating bill help Beckley", "zebra protocol"):
            response = client.post("/query", json={**body, "query": query})
            assert response.status_code == 200, response.text
            assert response.json()["index_version"] == version
        assert client.post("/query", json=body).json()["results"] == before.json()["results"]
        assert client.get("/healthz").status_code == 200


def test_a_fresh_worker_refuses_a_version_damaged_before_it_loaded(served, embedder):
    """A worker with nothing loaded yet, started on a damaged version, answers 503 naming the file, never wrong
    data; once CURRENT names a good version again it serves."""
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    home, version = served
    name = damaged_copy(home, version, "bit_flip")
    (home.root / "CURRENT").write_text(BROKEN + "\n")
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        response = client.post("/query", json={"query": "SNAP"})
        assert response.status_code == 503 and name in response.json()["detail"]
        (home.root / "CURRENT").write_text(version + "\n")
        assert client.post("/query", json={"query": "SNAP"}).status_code == 200
