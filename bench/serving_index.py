"""The SciFact index the serving benchmarks query, built and published by the platform itself.

SciFact's 5,183 abstracts become one markdown file per document (``docs/<_id>.md`` holding ``# title`` and the
abstract) in a git repository under ``bench/.work/serving/``; ``livemem.ingest.build.build_version`` indexes it and
``IndexHome.publish`` makes it current. Re-running reuses the published version when the repository is unchanged.

    .venv/bin/python -m bench.serving_index
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from livemem.ingest.build import build_version
from livemem.model.embedding import Embedder
from livemem.settings import CacheSettings, EncoderSettings
from livemem.sources.config import PROJECT_ROOT, load_sources
from livemem.version.store import IndexHome

SCIFACT = Path(os.environ.get("SCIFACT_DIR") or PROJECT_ROOT.parent / "shared" / "data" / "ir" / "scifact")
WORK = PROJECT_ROOT / "bench" / ".work" / "serving"
SOURCES_YAML = """\
version: 1
index:
  retention: 2
sources:
  - name: scifact
    repo: repo
    include: ["docs/*.md"]
    collection: scifact
    access: public
"""


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org"}
    env |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.org"}
    subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)


def write_repo(repo: Path) -> None:
    """One markdown file per SciFact document, committed once."""
    if (repo / ".git").is_dir():
        return
    docs = repo / "docs"
    docs.mkdir(parents=True)
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            title = " ".join(doc["title"].split())
            (docs / f"{doc['_id']}.md").write_text(f"# {title}\n\n{doc['text'].strip()}\n", encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "SciFact corpus")


def ensure_index(work: Path = WORK) -> IndexHome:
    """The published SciFact index home, building it when needed."""
    work.mkdir(parents=True, exist_ok=True)
    write_repo(work / "repo")
    sources = work / "sources.yaml"
    sources.write_text(SOURCES_YAML, encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(work / "rag_index")
    started = time.perf_counter()
    embedder = Embedder.configured(EncoderSettings.from_env(), CacheSettings.from_env().onnx_cache)  # an entry point
    result = build_version(config, home, embedder)
    if result.staged:
        home.publish(result.version_id, result.base_version, config.retention)
        print(f"published {result.version_id} in {time.perf_counter() - started:.1f}s")
    else:
        print(result.reason)
    return home


if __name__ == "__main__":
    ensure_index()
