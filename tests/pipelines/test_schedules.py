"""Which schedules run by themselves on `make ui` / the daemon, and how an operator keeps them stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DefaultScheduleStatus

from livemem.errors import ConfigError
from orchestration.definitions import build_definitions

PROJECT = Path(__file__).resolve().parents[2]


def statuses(**kwargs) -> dict[str, DefaultScheduleStatus]:
    return {s.name: s.default_status for s in build_definitions(**kwargs).schedules}


def test_the_rollup_and_the_personal_memory_consolidation_run_by_default(monkeypatch) -> None:
    monkeypatch.delenv("LIVEMEM_SCHEDULES_OFF", raising=False)
    assert statuses() == {
        "nightly_attention_rollup": DefaultScheduleStatus.RUNNING,
        "daily_personal_memory": DefaultScheduleStatus.RUNNING,
        "weekly_verify_index": DefaultScheduleStatus.STOPPED,  # an hour of embedding on a big index: opt in
    }


def test_an_operator_keeps_schedules_stopped(monkeypatch) -> None:
    monkeypatch.setenv("LIVEMEM_SCHEDULES_OFF", "daily_personal_memory")
    assert statuses()["daily_personal_memory"] == DefaultScheduleStatus.STOPPED
    assert statuses()["nightly_attention_rollup"] == DefaultScheduleStatus.RUNNING
    monkeypatch.setenv("LIVEMEM_SCHEDULES_OFF", "all")
    assert set(statuses().values()) == {DefaultScheduleStatus.STOPPED}
    monkeypatch.setenv("LIVEMEM_SCHEDULES_OFF", "nightly_rollup")
    with pytest.raises(ConfigError, match=r"LIVEMEM_SCHEDULES_OFF: no schedule named nightly_rollup .*known: "):
        build_definitions()


def test_dagster_schedule_list_shows_them_running(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    env.pop("LIVEMEM_SCHEDULES_OFF", None)
    dagster = Path(sys.executable).with_name("dagster")
    listed = subprocess.run(
        [str(dagster), "schedule", "list", "-m", "orchestration.definitions"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "Schedule: nightly_attention_rollup [RUNNING]" in listed.stdout
    assert "Schedule: daily_personal_memory [RUNNING]" in listed.stdout
    assert "Schedule: weekly_verify_index [STOPPED]" in listed.stdout
