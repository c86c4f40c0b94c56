"""Concurrent and killed runs: a run publishes only the version it staged and checked itself; staged versions of
live runs are never reclaimed; a run killed with kill -9 does not hold the index_writer pool for good."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Definitions,
    define_asset_job,
)

from livemem.errors import LivingMemoryError
from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.version.owners import Owner
from livemem.version.store import MANIFEST, IndexHome
from orchestration.definitions import build_definitions
from orchestration.runs import run_tags

PROJECT = Path(__file__).resolve().parents[2]
POOL = "index_writer"


def write_sources(path: Path, repo: Path, max_chunks: int = 100_000, max_chunk_chars: int = 2000) -> Path:
    path.write_text(
        f"index:\n  max_chunk_chars: {max_chunk_chars}\n  governance: {{max_chunks: {max_chunks}}}\n"
        f"sources:\n  - {{name: docs, repo: {repo}, collection: docs}}\n",
        encoding="utf-8",
    )
    return path


def failure_messages(result) -> str:
    return "\n".join(e.event_specific_data.error.message for e in result.all_events if e.is_step_failure)


def dagster_home(tmp_path: Path) -> Path:
    """A real instance directory with the project's embedded instance file (pool index_writer limited to 1)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    return home


def livemem(sources: Path, index: Path, dagster: Path, *args: str, **popen) -> subprocess.Popen:
    """``livemem materialize`` in its own process, as an operator runs it."""
    env = {**os.environ, "DAGSTER_HOME": str(dagster), "PYTHONPATH": str(PROJECT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "orchestration.cli", "--sources", str(sources), "--index-dir", str(index)]
    return subprocess.Popen(
        [*command, "materialize", *args], cwd=PROJECT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen,
    )  # fmt: skip


# --- in one process --------------------------------------------------------------------------------------------------
def test_publish_step_alone_never_publishes_another_runs_version(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={f"page{i}.md": f"# Page {i}\n\nText number {i}.\n" for i in range(4)})
    defs = build_definitions(write_sources(tmp_path / "sources.yaml", repo.path, max_chunks=2), tmp_path / "index")
    instance = DagsterInstance.ephemeral()
    failed = defs.resolve_job_def("build_index").execute_in_process(instance=instance, raise_on_error=False)
    assert not failed.success  # governance: 4 chunks over a cap of 2
    home = IndexHome(tmp_path / "index")
    assert len([p for p in home.staging.iterdir() if p.is_dir()]) == 1  # kept for inspection

    alone = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[AssetKey("published_index")], raise_on_error=False
    )
    assert not alone.success
    assert "chunks was not materialized in this run" in failure_messages(alone)
    assert home.current() is None


def test_a_version_whose_blocking_checks_did_not_run_is_never_published(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"a.md": "# A\n\nOne small page.\n"})
    defs = build_definitions(write_sources(tmp_path / "sources.yaml", repo.path), tmp_path / "index")
    unchecked = define_asset_job(
        "unchecked", selection=AssetSelection.assets("chunks", "published_index").without_checks()
    )
    defs = Definitions.merge(defs, Definitions(jobs=[unchecked]))
    result = defs.resolve_job_def("unchecked").execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False
    )
    assert not result.success
    message = failure_messages(result)
    assert (
        "not evaluated in this run: answers_not_worse, chunks_schema_valid, governance_caps, index_complete, "
        "sealed_provenance_resolves" in message
    )
    assert IndexHome(tmp_path / "index").current() is None


def test_a_run_publishes_only_the_version_it_staged(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"a.md": "# A\n\nOne small page.\n"})
    config = load_sources(write_sources(tmp_path / "sources.yaml", repo.path))
    home = IndexHome(tmp_path / "index")
    home.owner = Owner.this_process("run-a")
    staged = build_version(config, home, embedder)
    home.record_staged_by(staged.version_id, "run-a")
    assert home.manifest(staged.version_id)["staged_by"]["run_id"] == "run-a"
    with pytest.raises(LivingMemoryError, match="staged by run-a, not by run run-b"):
        home.publish(staged.version_id, staged.base_version, 3, run_id="run-b")
    assert home.current() is None
    home.publish(staged.version_id, staged.base_version, 3, run_id="run-a")
    assert home.current() == staged.version_id
    assert not home.owner_file(staged.version_id).exists()


def test_clear_staging_never_takes_a_version_whose_owner_is_alive(tmp_path: Path) -> None:
    home = IndexHome(tmp_path / "index").ensure()
    finished_runs = {"run-live": False, "run-done": True}
    home.run_finished = finished_runs.get
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)

    def stage(owner: Owner, complete: bool = True) -> str:
        home.owner = owner
        version = home.new_version_id()
        home.staged_dir(version).mkdir()
        if complete:
            (home.staged_dir(version) / MANIFEST).write_text("{}", encoding="utf-8")
        return version

    me = Owner.this_process()
    live_run = stage(Owner(me.host, me.pid, me.started, "run-live"))
    other_host = stage(Owner("elsewhere.example.org", 1, None))
    done_run = stage(Owner(me.host, me.pid, me.started, "run-done"))
    dead_process = stage(Owner(me.host, dead_pid, None))
    crashed = stage(me, complete=False)  # no manifest: a crashed writer's remains, whoever it was
    old = stage(Owner("elsewhere.example.org", 1, None))
    day_ago = time.time() - 25 * 3600
    os.utime(home.owner_file(old), (day_ago, day_ago))

    removed = home.clear_staging(keep_latest=0)
    assert sorted(removed) == sorted([done_run, dead_process, crashed, old])
    left = sorted(p.name for p in home.staging.iterdir())
    assert left == sorted([live_run, f"{live_run}.owner.json", other_host, f"{other_host}.owner.json"])


def test_staging_no_live_writer_owns_is_gone_by_the_next_build_and_at_retention(tmp_path: Path, make_repo) -> None:
    """Issue 49: a version a killed (or disk-full) writer left in staging — complete, killed during its checks, or
    half-written, with a half-written segment — was kept "for inspection" for good, with the segments it held. The
    next writer removes it, and so does every publish (retention) and derived step (the attention rollup)."""
    from support.fuzz_documents import HashEmbedder

    from livemem.version.store import derive_version

    repo = make_repo(files={"a.md": "# A\n\nOne small page.\n"})
    config = load_sources(write_sources(tmp_path / "sources.yaml", repo.path))
    home, embedder = IndexHome(tmp_path / "index"), HashEmbedder()
    first = build_version(config, home, embedder)
    home.publish(first.version_id, first.base_version, 3)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    me = Owner.this_process()
    parts = home.root / "parts"

    def killed_writer(n: int) -> tuple[str, set[str]]:
        """A complete version staged by a writer that is gone (killed during its checks), and its new segments."""
        repo.commit({f"b{n}.md": f"# B{n}\n\nAnother page {n}.\n"})
        home.owner = Owner(me.host, int(dead.stdout), None)
        staged = build_version(config, home, embedder)
        home.owner = None
        return staged.version_id, {s["id"] for s in staged.manifest["segments"]} - held_segments()

    def held_segments() -> set[str]:
        return {s["id"] for s in home.current_manifest()["segments"]}

    def disk_full_writer() -> None:
        """A half-written version (no manifest, a manifest cut short beside it) and a half-written segment."""
        home.owner = Owner(me.host, int(dead.stdout), None)
        version = home.new_version_id()
        home.owner = None
        home.staged_dir(version).mkdir()
        (home.staged_dir(version) / "manifest.json.tmp").write_text('{"version_id": ', encoding="utf-8")
        (parts / ".tmp-0123456789abcdef").mkdir()

    _, its_segments = killed_writer(1)
    assert its_segments and all((parts / s).is_dir() for s in its_segments)
    disk_full_writer()
    repo.commit({"b1.md": "# B1\n\nChanged since.\n"})  # segments are content-addressed: not the same one again
    again = build_version(config, home, embedder)  # the next build: staged, published by its own writer
    assert sorted(p.name for p in home.staging.iterdir()) == [again.version_id, f"{again.version_id}.owner.json"]
    assert not any((parts / s).exists() for s in its_segments) and not (parts / ".tmp-0123456789abcdef").exists()
    home.publish(again.version_id, again.base_version, 3)

    _, its_segments = killed_writer(2)  # a derived step's staging (the rollup's, the registry's, GBIM's)
    disk_full_writer()
    with home.write_lock():
        version, staged, _ = derive_version(home)
        assert sorted(p.name for p in home.staging.iterdir()) == [version, f"{version}.owner.json"]
        shutil.rmtree(staged)
        home.owner_file(version).unlink()
    _, its_segments = killed_writer(3)
    repo.commit({"b3.md": "# B3\n\nChanged since.\n"})
    live = build_version(config, home, embedder)  # a writer that is alive: its own version stays
    assert live.version_id in {p.name for p in home.staging.iterdir()}
    disk_full_writer()  # while that one is checked, another writer dies: retention at its publish takes the remains
    home.publish(live.version_id, live.base_version, 3)
    assert list(home.staging.iterdir()) == [] and not (parts / ".tmp-0123456789abcdef").exists()
    assert not any((parts / s).exists() for s in its_segments)


# --- real processes --------------------------------------------------------------------------------------------------
def test_two_concurrent_builds_each_publish_only_their_own_checked_version(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={f"guide{i}.md": f"# Guide {i}\n\n## Part\n\nHelp number {i}.\n" for i in range(6)})
    index, dagster = tmp_path / "index", dagster_home(tmp_path)
    good = write_sources(tmp_path / "good.yaml", repo.path)
    # smaller chunks, so this run never finds the other's version up to date, and a cap it always exceeds
    over = write_sources(tmp_path / "over.yaml", repo.path, max_chunks=1, max_chunk_chars=500)
    runs = {"good": livemem(good, index, dagster), "over": livemem(over, index, dagster)}
    outputs = {name: proc.communicate(timeout=400) for name, proc in runs.items()}
    codes = {name: proc.returncode for name, proc in runs.items()}

    assert codes["over"] == 1, outputs["over"]
    assert "governance_caps: failed" in outputs["over"][0], outputs["over"]
    assert codes["good"] == 0, outputs["good"]
    assert "published_index: published" in outputs["good"][0]
    home = IndexHome(index)
    manifest = home.current_manifest()
    with DagsterInstance.from_config(str(dagster)) as instance:
        finished = {r.status: r.run_id for r in instance.get_runs()}
        assert manifest["staged_by"]["run_id"] == finished[DagsterRunStatus.SUCCESS]
        assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
    assert manifest["governance"]["status"] == "ok"
    assert home.published_versions() == [manifest["version_id"]]  # the over-cap version was never published
    log = (index / "publish_log.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(log) == 1


def test_next_materialize_recovers_from_a_run_killed_mid_build(tmp_path: Path, make_repo, embedder) -> None:
    pages = {f"page{i}.md": f"# Page {i}\n\n" + f"Winter heating help, notice {i}. " * 100 for i in range(6)}
    repo = make_repo(files=pages)
    index, dagster = tmp_path / "index", dagster_home(tmp_path)
    sources = write_sources(tmp_path / "sources.yaml", repo.path)
    home = IndexHome(index)

    first = livemem(sources, index, dagster)
    deadline = time.monotonic() + 120
    while not list(home.staging.glob("*.owner.json")):  # the chunks step (holding the pool) is staging
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the build never started staging"
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    with DagsterInstance.from_config(str(dagster)) as instance:
        (killed,) = instance.get_runs()
        assert killed.status == DagsterRunStatus.STARTED
        assert [s.run_id for s in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots] == [
            killed.run_id
        ]

    started = time.monotonic()
    second = livemem(sources, index, dagster)
    out, errors = second.communicate(timeout=300)
    assert second.returncode == 0, (out, errors)
    assert time.monotonic() - started < 300
    assert f"the process of run {killed.run_id}" in errors and "is gone (killed?)" in errors  # said what it did
    assert "published_index: published" in out
    assert home.current_manifest()["total_chunks"] > 0
    with DagsterInstance.from_config(str(dagster)) as instance:
        assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
    assert [p.name for p in home.staging.iterdir()] == []  # the killed run's half-written version is gone


def test_waiting_for_a_live_holder_names_it_and_stops_on_sigterm_or_timeout(tmp_path: Path, make_repo) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    index, dagster = tmp_path / "index", dagster_home(tmp_path)
    sources = write_sources(tmp_path / "sources.yaml", repo.path)
    holder = str(uuid.uuid4())
    with DagsterInstance.from_config(str(dagster)) as instance:  # a live run (this test's process) holds the slot
        instance.add_run(
            DagsterRun(job_name="build_index", run_id=holder, status=DagsterRunStatus.STARTED,
                       tags=run_tags(Owner.this_process()))
        )  # fmt: skip
        instance.event_log_storage.initialize_concurrency_limit_to_default(POOL)
        assert instance.event_log_storage.claim_concurrency_slot(POOL, holder, "chunks").is_claimed

    waiting = livemem(sources, index, dagster, "--wait-timeout", "0")
    deadline = time.monotonic() + 120
    line = waiting.stderr.readline()
    while "waiting for a slot" not in line:
        assert waiting.poll() is None and time.monotonic() < deadline, line
        line = waiting.stderr.readline()
    assert f"run {holder} (job build_index, step chunks, pid {os.getpid()}" in line
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=15) == 130

    timed = livemem(sources, index, dagster, "--wait-timeout", "2")
    _, errors = timed.communicate(timeout=120)
    assert timed.returncode == 1
    assert "gave up after 2 s waiting for a slot of index_writer" in " ".join(errors.split())
    assert IndexHome(index).current() is None
