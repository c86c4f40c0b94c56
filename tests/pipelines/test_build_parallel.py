"""Large builds read and chunk files in worker processes: the version is byte for byte the one a single process
builds, and a worker that fails or dies stops the build with an error naming the files, leaving nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.build_workers import task

from livemem.errors import LivingMemoryError
from livemem.ingest import read as read_module
from livemem.ingest.build import build_version
from livemem.settings import BuildSettings
from livemem.sources.config import load_sources
from livemem.sources.gitsource import GitSource
from livemem.version import connect
from livemem.version.store import IndexHome


def corpus() -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {
        f"docs/2026-0{1 + i % 9}-minutes-{i}.md": f"# Minutes {i}\n\n## Attendance\n\n"
        + " ".join(f"member{j} spoke about item{i * j}." for j in range(20 + 3 * i))
        + "\n\n## Decisions\n\nSeal: ∞Δ∞\n" * (i % 7 == 0)
        for i in range(25)
    }
    files |= {f"src/tool_{i}.py": f"def tool_{i}():\n    return {i}\n\n\nclass Thing{i}:\n    pass\n" for i in range(6)}
    files |= {"logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary", "latin1.txt": "caf\xe9".encode("latin-1"), "e.md": " \n"}
    files["big.txt"] = "a long line of plain text. " * 400  # over max_file_bytes: indexed up to it
    return files


def config_for(tmp_path: Path, repo: Path):
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"index:\n  max_file_bytes: 5000\nsources:\n  - name: docs\n    repo: {repo}\n    collection: docs\n",
        encoding="utf-8",
    )
    return load_sources(sources)


def table(home: IndexHome, version: str, sql: str) -> list[tuple]:
    con = connect(home.staged_dir(version))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_build_in_worker_processes_is_the_build_of_one_process(tmp_path, make_repo, embedder, monkeypatch) -> None:
    repo = make_repo(files=corpus())
    config = config_for(tmp_path, repo.path)
    monkeypatch.setattr(read_module, "CHUNK_BATCH_FILES", 7)  # 8 batches
    pooled: list[int] = []
    in_workers = read_module._in_workers

    def spy(function, job, batches, workers, *rest):
        pooled.append(workers)
        yield from in_workers(function, job, batches, workers, *rest)

    monkeypatch.setattr(read_module, "_in_workers", spy)
    results = {}
    for workers in ("1", "2"):
        monkeypatch.setattr(read_module, "POOL_MIN_FILES", 10)
        home = IndexHome(tmp_path / f"index-{workers}")
        settings = BuildSettings.defaults(workers=int(workers))
        results[workers] = (home, build_version(config, home, embedder, settings=settings))
    assert pooled == [2]  # only the second build used worker processes

    (home_1, one), (home_2, two) = results["1"], results["2"]
    # segment ids are hashes of the segment's files: the same id is the same bytes (rows, vectors, postings)
    assert one.manifest["segments"] == two.manifest["segments"]
    assert one.manifest["total_chunks"] == two.manifest["total_chunks"] > 40
    stats_1, stats_2 = one.sources["docs"], two.sources["docs"]
    assert dict(stats_2.skipped) == dict(stats_1.skipped) == {"binary": 1, "non_utf8": 1, "empty": 1}
    assert stats_2.truncated_files == stats_1.truncated_files == 1
    skipped = "SELECT path, reason FROM skipped_files ORDER BY 1"
    assert table(home_1, one.version_id, skipped) == table(home_2, two.version_id, skipped)
    sealed = "SELECT DISTINCT path FROM chunks WHERE seal_state = 'SEALED' ORDER BY 1"
    assert len(table(home_2, two.version_id, sealed)) == 4


def _die_in_second_batch(job, batch):
    if batch[0].path == "b":
        os.kill(os.getpid(), signal.SIGKILL)
    return read_module.BatchRows([], [], [], [])


def job_for(repo: Path) -> read_module.ReadJob:
    source = load_sources_inline(repo)
    return read_module.ReadJob(source, str(repo), "model", 1_000_000, 2000, 254)


def load_sources_inline(repo: Path):
    sources = repo.parent / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo}\n    collection: docs\n", encoding="utf-8")
    return load_sources(sources).sources[0]


def test_a_killed_worker_stops_the_build_naming_its_files(tmp_path, make_repo) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    batches = [[task("a")], [task("b"), task("b2")], [task("c")]]
    with pytest.raises(
        LivingMemoryError, match=r"worker process died while reading and chunking files \((a, )?b, b2, c\)"
    ):
        list(read_module._in_workers(_die_in_second_batch, job_for(repo.path), batches, 2))


def test_a_file_a_worker_cannot_read_is_named(tmp_path, make_repo) -> None:
    repo = make_repo(files={"a.md": "# A\n\ntext\n"})
    blob = GitSource(repo.path).list_files(repo.head())[0].blob_sha
    batches = [[task("a.md", blob)], [task("gone.md", "f" * 40)]]
    with pytest.raises(LivingMemoryError, match=r"gone\.md \(blob f{40}\) cannot be read"):
        list(read_module._in_workers(read_module._worker_batch, job_for(repo.path), batches, 2))


def test_a_failed_large_build_leaves_the_published_version_and_no_segment(
    tmp_path, make_repo, embedder, monkeypatch
) -> None:
    repo = make_repo(files=corpus())
    config = config_for(tmp_path, repo.path)
    home = IndexHome(tmp_path / "index")
    first = build_version(config, home, embedder)
    home.publish(first.version_id, first.base_version, config.retention)
    repo.commit({f"docs/new-{i}.md": f"# New {i}\n\nfresh text {i}\n" for i in range(20)})
    monkeypatch.setattr(read_module, "POOL_MIN_FILES", 10)
    monkeypatch.setattr(read_module, "CHUNK_BATCH_FILES", 5)
    monkeypatch.setattr(read_module, "_worker_batch", _die_in_second_batch_of_real_files)
    with pytest.raises(LivingMemoryError, match="worker process died"):
        build_version(config, home, embedder, settings=BuildSettings.defaults(workers=2))
    assert home.current() == first.version_id
    assert sorted(p.name for p in (home.root / "parts").iterdir()) == [s["id"] for s in first.manifest["segments"]]


def _die_in_second_batch_of_real_files(job, batch):
    if any(t.path.startswith("docs/new-1") for t in batch):
        os.kill(os.getpid(), signal.SIGKILL)
    return read_module.BatchRows([], [], [], [])


def test_postings_of_batches_tokenized_apart_merge_into_those_of_all_texts() -> None:
    import numpy as np

    from livemem.index.postings import Postings

    texts = [f"Seal {i}: the stewards' records of item{i % 5} and item{i % 3}, kept." for i in range(30)]
    texts += ["", "the and of", "Σίσυφος café naïve ĳssel"]
    whole = Postings.build(texts)
    merged = Postings.merge([Postings.tokenize(texts[i : i + 4]) for i in range(0, len(texts), 4)])
    for name in ("terms", "starts", "rows", "tf", "lengths"):
        assert np.array_equal(getattr(merged, name), getattr(whole, name)), name
    rows, tf = whole.lookup("item0")
    assert rows.tolist() == [i for i in range(30) if i % 5 == 0 or i % 3 == 0]
    assert tf.tolist() == [2.0 if i % 15 == 0 else 1.0 for i in rows.tolist()]


KILLED_BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from support.build_workers import report_and_wait, task
from livemem.ingest import read
from livemem.sources.config import SourceConfig
job = read.ReadJob(SourceConfig("docs", Path("."), "docs"), ".", "model", 1000, 2000, 254)
list(read._in_workers(report_and_wait, job, [[task({a!r})], [task({b!r})]], 2))
"""


def test_workers_of_a_killed_build_exit(tmp_path) -> None:
    """A build killed before it can stop its worker processes (SIGKILL) leaves none behind."""
    a, b = tmp_path / "a.pid", tmp_path / "b.pid"
    code = KILLED_BUILD.format(tests=str(Path(__file__).resolve().parents[1]), a=str(a), b=str(b))
    build = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 60
        while not (a.exists() and b.exists()) and time.monotonic() < deadline:
            assert build.poll() is None, "the build process ended early"
            time.sleep(0.2)
        workers = [int(a.read_text()), int(b.read_text())]
    finally:
        build.kill()
        build.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # exited, not yet reaped by the forkserver
