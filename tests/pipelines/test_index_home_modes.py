"""Issue 33, weak: the index files were 0644, readable by every user of the machine, while versions, segments and
serving copies hold internal text. The home directory is 0750; a published version's files keep no permission for
others and no group write; segments and serving copies are 0440, the copies' directory 0700."""

from __future__ import annotations

import stat
from pathlib import Path

from support.serving import build_and_publish, make_workspace

from livemem.engine.snapshot import load_snapshot
from livemem.version import mapped
from livemem.version.store import IndexHome


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_index_home_and_what_builds_write_into_it_are_private(tmp_path, embedder):
    root = tmp_path / "rag_index"
    root.mkdir(mode=0o755)  # an existing, world-readable home is narrowed
    root.chmod(0o755)
    home = IndexHome(root)
    version = build_and_publish(make_workspace(tmp_path), home, embedder)
    load_snapshot(home, version)  # a serving worker writes the serving copies

    assert mode(home.root) == 0o750
    published = home.version_dir(version)
    files = [p for p in published.rglob("*") if p.is_file()]
    assert any(p.name == "tables.duckdb" for p in files) and any(p.name == "manifest.json" for p in files)
    for path in [published, *published.rglob("*")]:
        assert not mode(path) & 0o027, f"{path.relative_to(home.root)}: {oct(mode(path))}"
    segments = list((home.root / "parts").glob("seg-*"))
    assert segments
    for segment in segments:
        assert mode(segment) == 0o750
        assert all(mode(f) == 0o440 for f in segment.iterdir()), segment.name
    copies = mapped.cache_root(home.root / "parts")
    assert mode(copies) == 0o700
    assert all(mode(f) == 0o440 for f in copies.glob("seg-*/*"))
