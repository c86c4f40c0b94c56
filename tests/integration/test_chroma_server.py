"""Vectors on a real Chroma server (``CHROMA_HOST``): versions map onto server collections, copy on write, GC."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from livemem.ingest.build import build_version
from livemem.settings import ChromaSettings
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome, derive_version, write_manifest
from livemem.version.vectors import SERVER_FILE, _http_client

CHROMA_CLI = Path(sys.executable).parent / "chroma"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    if not CHROMA_CLI.exists():
        pytest.skip(f"the chroma command is not installed at {CHROMA_CLI}")
    port = free_port()
    path = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen(
        [str(CHROMA_CLI), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            _http_client(("127.0.0.1", port)).heartbeat()
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"chroma run did not start: {proc.stderr.read().decode()[-1000:]}")
            time.sleep(0.3)
    yield ("127.0.0.1", port)
    proc.terminate()
    proc.wait(timeout=20)


def mapping(home: IndexHome, version: str) -> dict[str, str]:
    return json.loads((home.version_dir(version) / "chroma" / SERVER_FILE).read_text())["collections"]


def test_versions_live_on_the_server_and_share_unchanged_collections(
    tmp_path: Path, make_repo, embedder, chroma_server
) -> None:
    client = _http_client(chroma_server)
    repo = make_repo(files={"a.md": "# A\n\n## One\n\nFirst.\n\n## Two\n\nSecond.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"index: {{retention: 1}}\nsources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n",
        encoding="utf-8",
    )
    # The server an entry point's ChromaSettings names (CHROMA_HOST / CHROMA_PORT), passed down, never read below.
    config = load_sources(sources, ChromaSettings.defaults(host=chroma_server[0], port=chroma_server[1]))
    home = IndexHome(tmp_path / "index")
    home.chroma_server = config.chroma_server

    first = build_version(config, home, embedder)
    home.publish(first.version_id, None, 5)
    v1 = mapping(home, first.version_id)["docs"]
    assert first.version_id in v1
    assert not (home.version_dir(first.version_id) / "chroma" / "chroma.sqlite3").exists()  # nothing local
    assert client.get_collection(v1).count() == first.manifest["total_chunks"] == 2
    v1_ids = set(client.get_collection(v1).get(include=[])["ids"])

    repo.commit({"a.md": "# A\n\n## One\n\nFirst, edited.\n\n## Two\n\nSecond.\n"})
    second = build_version(config, home, embedder)
    home.publish(second.version_id, second.base_version, 5)
    v2 = mapping(home, second.version_id)["docs"]
    assert v2 != v1 and second.version_id in v2  # copied on write
    assert set(client.get_collection(v1).get(include=[])["ids"]) == v1_ids  # the published one is untouched
    assert client.get_collection(v2).count() == 2 and set(client.get_collection(v2).get(include=[])["ids"]) != v1_ids

    with home.write_lock():  # a step that does not touch vectors (attention) shares the collections
        version, staged, base = derive_version(home, link=("chroma",))
        write_manifest(staged, {**home.manifest(base), "version_id": version})
    home.publish(version, base, 1)  # retention 1: the two older versions go, and v1's collection with them
    assert mapping(home, version) == {"docs": v2}
    names = {c.name for c in client.list_collections()}
    assert v2 in names and v1 not in names
