"""`livemem versions` in an 80-column terminal shows every version id whole (issue 49: they were cut to `2026…`)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from livemem.version import history
from orchestration.cli import app

IDS = ["20261122T003412123456Z", "20261123T101501654321Z", "20261124T235959000001Z"]


def fake_versions(_home) -> list[dict]:
    return [
        {"version_id": v, "current": i == len(IDS) - 1, "published_at": f"2026-11-2{2 + i}T00:34:12.123456+00:00",
         "created_at": f"2026-11-2{2 + i}T00:30:00+00:00", "counts": {"chunks": 123456}, "index_size_mb": 1234.56,
         "version_size_mb": 98.76, "base_version": IDS[i - 1] if i else None,
         "sources": {"handbook": {"commit": "0123456789abcdef" * 2}, "wv-benefits": {"commit": "fedcba9876543210" * 2},
                     "florida-211": {"commit": "a1b2c3d4e5f6a7b8" * 2}}}
        for i, v in enumerate(IDS)
    ]  # fmt: skip


def fake_disk(_home) -> dict:
    return {"versions": 3, "versions_mb": 300.0, "segments": 40, "segments_mb": 1200.0, "serving_copies_mb": 10.0,
            "current_mb": 1234.56, "history_mb": 200.0, "history_pct": 16.2}  # fmt: skip


def test_versions_never_cuts_a_version_id_at_80_columns(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(history, "list_versions", fake_versions)
    monkeypatch.setattr(history, "disk_usage", fake_disk)
    for columns in ("80", "60"):
        shown = CliRunner().invoke(app, ["--index-dir", str(tmp_path), "versions"], env={"COLUMNS": columns})
        assert shown.exit_code == 0, shown.output
        lines = shown.output.splitlines()
        assert max(len(line) for line in lines) <= int(columns), shown.output
        for version in IDS:  # whole, on one line
            assert any(version in line for line in lines), (version, shown.output)
        if columns == "80":  # nothing cut at 80 columns; below, only the other columns give way
            assert "…" not in shown.output and "0123456789" in shown.output, shown.output
