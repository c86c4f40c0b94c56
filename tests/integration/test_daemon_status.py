"""The Dagster daemon on the main path (issue 49: `make run` started none, so no schedule ran): `livemem status`
says whether it is alive from the instance's heartbeats, as Dagster's own liveness check does, and exits 1 when it
is not. A real `dagster-daemon run` (the command `livemem up` starts) on a temp DAGSTER_HOME."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from orchestration.cli import app
from orchestration.daemon import daemon_argv, daemon_health
from orchestration.instance import open_instance

PROJECT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("DAGSTER_DAEMON_HEARTBEAT_TOLERANCE", raising=False)
    return home


def status(base: list[str], *args: str) -> tuple[int, dict]:
    shown = runner.invoke(app, [*base, "status", "--json", *args])
    return shown.exit_code, json.loads(shown.stdout)


def test_status_says_whether_a_real_daemon_is_alive(tmp_path: Path, dagster_home: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"guide.md": "# Guide\n\nHeating bill help in Beckley opens in December.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    index = IndexHome(tmp_path / "index")
    built = build_version(load_sources(sources), index, embedder)
    index.publish(built.version_id, None, 5)
    base = ["--sources", str(sources), "--index-dir", str(index.root)]

    code, before = status(base)  # no daemon ever ran on this home
    assert code == 1 and before["daemon"]["alive"] is False and "no heartbeat ever" in before["daemon"]["reason"]
    assert before["version"] == built.version_id
    assert runner.invoke(app, [*base, "status", "--no-daemon"]).exit_code == 0  # a machine that only serves

    env = {**os.environ, "RAG_SOURCES": str(sources), "RAG_INDEX_DIR": str(index.root)}
    log = (tmp_path / "daemon.log").open("wb")
    # the daemon `livemem up` runs, without a code location: its heartbeats are the same, and it starts in seconds
    # (loading orchestration.definitions in its code server takes 10-40 s on a loaded machine)
    argv = daemon_argv(workspace=["--empty-workspace"])
    proc = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # its first heartbeats come once the code location has loaded
            code, alive = status(base)
            if alive["daemon"]["alive"]:
                break
            assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
            assert time.monotonic() < deadline, ((tmp_path / "daemon.log").read_text(), alive)
            time.sleep(0.5)
        assert code == 0 and alive["version"] == built.version_id
        assert {"SCHEDULER", "SENSOR"} <= set(alive["daemon"]["heartbeat_age_s"])
        shown = runner.invoke(app, [*base, "status"])
        assert shown.exit_code == 0 and "daemon: alive" in shown.stdout and built.version_id in shown.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()

    # stopped: its heartbeats go stale; past the 30 s interval plus the tolerance it is not alive (exit 1)
    deadline = time.monotonic() + 60
    while True:
        code, after = status(base, "--heartbeat-tolerance", "1")
        if not after["daemon"]["alive"]:
            break
        assert time.monotonic() < deadline, after
        time.sleep(1)
    assert code == 1 and "older than 31 s" in after["daemon"]["reason"]
    shown = runner.invoke(app, [*base, "status", "--heartbeat-tolerance", "1"])
    assert shown.exit_code == 1 and "daemon: NOT alive" in shown.stdout


def test_heartbeat_staleness_as_dagster_reads_it(dagster_home: Path) -> None:
    from dagster._daemon.types import DaemonHeartbeat

    instance = open_instance(dagster_home)
    try:
        required = instance.get_required_daemon_types()
        at = time.time()
        for kind in required:
            instance.add_daemon_heartbeat(DaemonHeartbeat(at, kind, "test-daemon", errors=[]))
        assert daemon_health(instance, tolerance_s=90, now=at + 100).alive  # within 30 s + 90 s
        late = daemon_health(instance, tolerance_s=90, now=at + 121)
        assert not late.alive and "older than 120 s" in late.reason
        assert set(late.ages_s) == set(required) and late.ages_s[required[0]] == 121.0
    finally:
        instance.dispose()
