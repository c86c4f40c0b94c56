"""Hostile git sources, built for real: file names that are not UTF-8, crafted tree entries (``..``, ``.git``, a
``/`` inside a name), a 60 MB file, Git LFS pointers, and an indexed commit that was garbage-collected. A bad file
is reported and skipped while the rest of its source and every other source build; ``verify`` and ``verify
--rebuild`` say what is wrong instead of crashing or listing every chunk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.git import GitRepo
from typer.testing import CliRunner

from livemem.ingest.build import build_version
from livemem.ingest.checks import check_index_complete
from livemem.ingest.verify import rebuild_and_compare
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.store import IndexHome
from orchestration import cli
from orchestration.assets.chunks import _build_metadata

PROJECT = Path(__file__).resolve().parents[2]
runner = CliRunner()
GUIDE = "# Guide\n\n## SNAP\n\nFood help in Oak Hill opens on Mondays.\n"
LFS = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 12345\n"
)


def rows(home: IndexHome, sql: str) -> list[tuple]:
    con = connect(home.version_dir(home.current()))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def publish(config, home: IndexHome, embedder):
    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, config.retention)
    return result


def add_crafted_entries(repo: GitRepo, entries: dict[bytes, bytes], drop: tuple[bytes, ...] = ()) -> str:
    """Commit HEAD's tree plus blob entries with names ``git add`` refuses (``..``, ``.git``, ``a/b.md``), written
    as a raw tree object (``git hash-object -t tree --literally``) and committed with ``git commit-tree``."""

    def git(*args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["git", *args], cwd=repo.path, input=data, capture_output=True, check=True).stdout

    raw = git("cat-file", "tree", "HEAD^{tree}")
    kept: list[tuple[bytes, bytes, bytes]] = []  # (mode, name, binary sha)
    while raw:
        head, raw = raw.split(b"\0", 1)
        mode, name = head.split(b" ", 1)
        kept.append((mode, name, raw[:20]))
        raw = raw[20:]
    kept = [k for k in kept if k[1] not in drop and k[1] not in entries]
    for name, content in entries.items():
        sha = git("hash-object", "-w", "--stdin", data=content).strip().decode()
        kept.append((b"100644", name, bytes.fromhex(sha)))
    kept.sort(key=lambda k: k[1] + (b"/" if k[0] == b"40000" else b""))
    tree = git("hash-object", "-t", "tree", "--literally", "-w", "--stdin",
               data=b"".join(m + b" " + n + b"\0" + s for m, n, s in kept)).strip().decode()  # fmt: skip
    repo.clock += 3600
    commit = repo.git("commit-tree", "-p", "HEAD", "-m", "crafted entries", tree)
    repo.git("update-ref", "refs/heads/main", commit)
    return commit


@pytest.fixture
def hostile(make_repo) -> tuple[GitRepo, GitRepo]:
    """A plain source, and one holding every kind of name that cannot be indexed beside a good file."""
    plain = make_repo("plain", {"guide.md": GUIDE})
    bad = make_repo("bad", {"ok.md": "# Stewards\n\nStewards tend the valley index.\n"})
    (bad.path / os.fsdecode(b"caf\xe9-latin1.md")).write_text("# Cafe\n\nA latin-1 name.\n", encoding="utf-8")
    (bad.path / "bell\x07.md").write_text("# Bell\n\nA control character in the name.\n", encoding="utf-8")
    bad.commit(message="names git accepts from a working tree")
    add_crafted_entries(bad, {b"..": b"# Up\n\nparent\n", b".git": b"[core]\n", b"a/b.md": b"# Slash\n\ntext\n"})
    return plain, bad


def test_hostile_file_names_are_skipped_and_reported_while_every_source_builds(
    tmp_path: Path, hostile, embedder, monkeypatch
) -> None:
    plain, bad = hostile
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n  - {{name: plain, repo: {plain.path}, collection: plain}}\n"
        f"  - {{name: bad, repo: {bad.path}, collection: bad}}\n",
        encoding="utf-8",
    )
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    first = publish(config, home, embedder)  # was: UnicodeEncodeError ... surrogates not allowed, nothing built

    indexed = {(s, p) for s, p in rows(home, "SELECT DISTINCT source, path FROM chunks")}
    assert indexed == {("plain", "guide.md"), ("bad", "ok.md")}
    skipped = set(rows(home, "SELECT path, reason FROM skipped_files"))
    assert skipped == {
        ("caf\\xe9-latin1.md", "non_utf8_name"), ("bell\\x07.md", "unsafe_name"), ("..", "unsafe_name"),
        (".git", "unsafe_name"), ("a\\x2fb.md", "unsafe_name"),
    }  # fmt: skip
    manifest = home.current_manifest()
    assert manifest["sources"]["bad"]["skipped_files"] == {"non_utf8_name": 1, "unsafe_name": 4}
    # the Dagster materialization's table and `livemem status` show them
    table = _build_metadata(first)
    assert "| bad |" in str(table) and "unsafe_name: 4" in str(table) and "non_utf8_name: 1" in str(table)
    base = ["--sources", str(sources), "--index-dir", str(home.root)]
    status = json.loads(runner.invoke(cli.app, [*base, "status", "--json", "--no-daemon"]).output)
    assert {r["source"]: r["skipped"] for r in status["sources"]}["bad"] == {"non_utf8_name": 1, "unsafe_name": 4}
    shown = runner.invoke(cli.app, [*base, "status", "--no-daemon"])
    assert shown.exit_code == 0 and "unsafe_name: 4" in shown.output

    # verify (the tree against the rows) and verify --rebuild (a from-scratch build) agree, without crashing
    outcome = check_index_complete(home.version_dir(home.current()), manifest, config, None)
    assert outcome.passed, outcome.failures
    assert rebuild_and_compare(config, home, embedder).equal

    # an incremental build over them: the bad file changed, the crafted slash entry gone, a good file added
    add_crafted_entries(
        bad, {b"caf\xe9-latin1.md": b"# Cafe\n\nchanged\n", b"more.md": b"# More\n\nA second good file.\n"},
        drop=(b"a/b.md",),
    )  # fmt: skip
    second = publish(config, home, embedder)
    assert second.sources["bad"].skipped == {"non_utf8_name": 1}  # rebuilt; the other skips carried over
    assert home.current_manifest()["sources"]["bad"]["skipped_files"] == {"non_utf8_name": 1, "unsafe_name": 3}
    assert ("bad", "more.md") in {(s, p) for s, p in rows(home, "SELECT DISTINCT source, path FROM chunks")}
    assert "a\\x2fb.md" not in {p for (p,) in rows(home, "SELECT path FROM skipped_files")}
    report = rebuild_and_compare(config, home, embedder)
    assert report.equal, report.comparison.lines()
    monkeypatch.setattr(cli, "load_embedder", lambda: embedder)
    verified = runner.invoke(cli.app, [*base, "verify", "--rebuild"])
    assert verified.exit_code == 0, verified.output


def test_a_huge_file_is_read_up_to_the_cap_and_lfs_pointers_are_skipped(tmp_path: Path, make_repo, embedder) -> None:
    """A 60 MB file under ``index.max_file_bytes: 20000``: its first 20 kB are indexed and it is reported
    truncated; a Git LFS pointer is reported ``lfs_pointer``, not indexed; prose quoting the pointer format is."""
    line = b"Heating assistance in Fayette County opens in December for every household in need.\n"
    big = line * (60_000_000 // len(line))
    repo = make_repo(
        files={
            "big.md": big,
            "model.bin": LFS.encode(),
            "data/counties.csv": LFS.replace("12345", "987654321").encode(),
            "docs/lfs.md": "# LFS\n\nA pointer starts with `version https://git-lfs.github.com/spec/v1`.\n",
        }
    )
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"index: {{max_file_bytes: 20000}}\nsources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n",
        encoding="utf-8",
    )
    home = IndexHome(tmp_path / "index")
    result = publish(load_sources(sources), home, embedder)
    assert result.sources["docs"].truncated_files == 1
    assert result.sources["docs"].skipped == {"lfs_pointer": 2}
    [(size, truncated, content)] = rows(home, "SELECT size, truncated, content FROM parents WHERE path = 'big.md'")
    assert size == len(big) and truncated and content == big[:20000].decode()[: len(content)]
    assert 19_000 < len(content) <= 20_000
    assert set(rows(home, "SELECT path, reason FROM skipped_files")) == {
        ("model.bin", "lfs_pointer"), ("data/counties.csv", "lfs_pointer"),
    }  # fmt: skip
    assert not rows(home, "SELECT chunk_id FROM chunks WHERE content LIKE '%oid sha256:%'")
    assert rows(home, "SELECT chunk_id FROM chunks WHERE path = 'docs/lfs.md'")


def test_reading_a_huge_blob_holds_only_the_cap_in_memory(tmp_path: Path, make_repo) -> None:
    """The reading worker's peak memory (every allocation, tracemalloc, in a fresh process) while it reads and
    chunks a 60 MB file with ``max_file_bytes`` 100 kB stays under 5 MB (it was over 60 MB: the blob read whole)."""
    repo = make_repo(files={"big.md": b"valley memory " * (60_000_000 // 14), "small.md": "# Small\n\nwarm up\n"})
    child = textwrap.dedent(
        f"""\
        import json, tracemalloc
        from pathlib import Path
        from livemem.ingest.read import FileTask, ReadJob, _batch_rows
        from livemem.sources.config import SourceConfig
        from livemem.sources.gitsource import FileHistory, GitSource

        git = GitSource(Path({str(repo.path)!r}), "docs")
        entries = {{e.path: e for e in git.list_files(git.resolve())}}
        job = ReadJob(SourceConfig("docs", git.path, "docs"), str(git.path), "m", 100_000, 2000, None)
        history = FileHistory("c" * 40, "2024-01-01T00:00:00+00:00", "c" * 40, "2024-01-01T00:00:00+00:00")
        task = lambda path: FileTask(path, entries[path], history, None)
        _batch_rows(job, [task("small.md")], git)  # imports, the tokenizer and git cat-file started
        tracemalloc.start()
        out = _batch_rows(job, [task("big.md")], git)
        peak = tracemalloc.get_traced_memory()[1]
        print(json.dumps({{"peak": peak, "truncated": out.truncated, "chunks": len(out.rows)}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=PROJECT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["truncated"] == [["big.md", 14 * (60_000_000 // 14)]] and got["chunks"] > 10
    assert got["peak"] < 5_000_000, got  # 100 kB kept, its text and chunks; not 60 MB


def test_verify_says_the_indexed_commit_is_gone_after_history_was_rewritten(
    tmp_path: Path, make_repo, embedder, monkeypatch
) -> None:
    repo = make_repo(files={"guide.md": GUIDE})
    indexed = repo.commit({"faq.md": "# FAQ\n\nWIC helps infants.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    publish(load_sources(sources), home, embedder)

    repo.git("commit", "-q", "--amend", "-m", "rewritten")  # the indexed commit is left unreferenced ...
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")  # ... and garbage-collected
    assert subprocess.run(["git", "cat-file", "-e", indexed], cwd=repo.path, check=False).returncode != 0

    monkeypatch.setattr(cli, "load_embedder", lambda: embedder)
    base = ["--sources", str(sources), "--index-dir", str(home.root)]
    rebuilt = runner.invoke(cli.app, [*base, "verify", "--rebuild", "--json"])
    assert rebuilt.exit_code == 1, rebuilt.output
    data = json.loads(rebuilt.output)
    assert data["summary"] == "cannot be rebuilt from its sources: 1 source(s) lost the indexed commit"
    [line] = data["differences"]  # was: one "chunk ... should not exist" per chunk
    assert f"source docs: commit {indexed[:12]}" in line and f"is no longer in repository {repo.path}" in line
    cheap = runner.invoke(cli.app, [*base, "verify", "--json"])  # was: a GitCommandError traceback
    assert cheap.exit_code == 1 and isinstance(cheap.exception, SystemExit), cheap.output
    assert f"commit {indexed} is not in repository {repo.path}" in json.loads(cheap.output)["differences"][0]
