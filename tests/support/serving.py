"""Helpers for the serving tests: a real git repository with a small corpus, indexed and published."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from livemem.ingest.build import build_version
from livemem.model.embedding import Embedder
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from support.locks import locks_held, trace_file_locked

OLD_DATE = "2020-01-15T12:00:00+00:00"
INTERNAL_KEY = "internal-test-key"
API_KEYS = {INTERNAL_KEY: "internal"}

FILES = {
    "governance/CONSTITUTION.md": "# Constitution\n\nThe council keeps the living memory. Sealed decisions are authoritative "
    "and never decay.\n",
    "governance/BREATH.md": "# BREATH\n\nphase: Δ3\ntone: normal\n",
    "benefits/fayette-county.md": "# Fayette County\n\n## SNAP\n\nFood assistance (SNAP) applications in Fayette "
    "County are taken at the Oak Hill office on Main Street.\n\n## Medicaid\n\nMedicaid renewals in Fayette County "
    "need proof of income and residence.\n",
    "benefits/raleigh-county.md": "# Raleigh County\n\n## LIHEAP\n\nHeating bill help (LIHEAP) in Raleigh County "
    "opens in November at the Beckley office.\n",
    "benefits/statewide-faq.md": "# Statewide FAQ\n\nWest Virginia residents can apply for SNAP food assistance "
    "online through the PATH portal.\n",
    "internal/caseworker-playbook.md": "# Caseworker playbook\n\nEscalation: use the zebra protocol and call the "
    "supervisor hotline for SNAP food assistance emergencies.\n",
    "code/client.py": 'def fetch_memory(query: str) -> list:\n    """Ask the living memory API for chunks."""\n'
    "    return []\n",
}
RECENT_FILES = {"benefits/raleigh-county.md"}

SOURCES_YAML = """\
version: 1
index:
  retention: 3
breath:
  source: governance
  path: BREATH.md
sources:
  - name: governance
    repo: repo
    subdir: governance
    collection: governance
    access: public
    sealed: ["CONSTITUTION.md"]
  - name: wv-benefits
    repo: repo
    subdir: benefits
    collection: wv_benefits
    access: public
    metadata:
      - set: {dataset: wv_benefits}
      - paths: ["fayette-county.md"]
        set: {county: Fayette}
      - paths: ["raleigh-county.md"]
        set: {county: Raleigh}
  - name: caseworker
    repo: repo
    subdir: internal
    collection: internal_playbooks
    access: internal
  - name: client-code
    repo: repo
    subdir: code
    collection: code
    access: public
"""


def git(repo: Path, *args: str, date: str | None = None) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.org",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.org",
    }
    if date:
        env |= {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


def commit_files(repo: Path, files: dict[str, str | None], message: str, date: str | None = None) -> None:
    """Write (or delete, for None) files and commit them."""
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=date)


def make_workspace(root: Path) -> Path:
    """A git repository with the corpus (most files committed in 2020, some recently) and its sources file."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit_files(repo, {k: v for k, v in FILES.items() if k not in RECENT_FILES}, "corpus", date=OLD_DATE)
    commit_files(repo, {k: FILES[k] for k in RECENT_FILES}, "recent update")
    (root / "sources.yaml").write_text(SOURCES_YAML, encoding="utf-8")
    return root / "sources.yaml"


def build_and_publish(sources: Path, home: IndexHome, embedder: Embedder) -> str:
    config = load_sources(sources)
    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, config.retention)
    return result.version_id


def publish_with_gbim(root: Path, embedder: Embedder, spatial: str) -> IndexHome:
    """A workspace under ``root`` whose sources file gains ``spatial`` (a spatial section), built and published,
    then its GBIM export published: the current version has chunks and GBIM facts."""
    from livemem.gbim import export_gbim

    sources = make_workspace(root)
    sources.write_text(sources.read_text() + spatial, encoding="utf-8")
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)
    config = load_sources(sources)
    result = export_gbim(config, home, embedder)
    home.publish(result.version_id, result.base_version, config.retention)
    return home


@contextmanager
def serve(app, port: int = 0) -> Iterator[str]:
    """``app`` behind a real uvicorn server on loopback, on ``port`` (0: a free one); yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def answered_while_trace_file_locked(writers, request) -> tuple[object, dict[Path, str]]:
    """``request()``'s result, called while today's file of each of ``writers`` (``TraceWriter``s: usage traces,
    audit records) is locked (``support.locks.trace_file_locked``), and what each file held when the answer came;
    fails, rather than hangs, when the request waits for a file."""
    with locks_held(*(trace_file_locked(writer) for writer in writers)) as (answer, paths):
        result = answer(request)
        held = {path: path.read_text(encoding="utf-8") for path in paths}
    return result, held
