"""Issue 33, defect 2: the serving copy (``<home>/cache/serving/<segment>/arrays.bin``, memory-mapped by every worker)
truncated under running workers ended them with SIGBUS (uvicorn exited 135 and stayed down). A worker checks the
size of every copy it maps before each request (``fstat`` of the mapping's own descriptor): a copy that changed is
dropped, written again from the index's verified files and mapped anew, and the request is answered; the worker
process is the same one afterwards. Copies are written read-only (0440) under a cache directory only the service
user can enter (0700), and a copy is only mapped when this user owns it and it ends with the marker its
``copy.json`` records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from support.servers import uvicorn
from support.serving import build_and_publish, make_workspace

from livemem.version import mapped
from livemem.version.store import IndexHome

BODY = {"query": "SNAP food assistance", "mode": "hybrid", "top_k": 3, "return": "documents"}


@pytest.fixture
def served(tmp_path, embedder) -> tuple[IndexHome, str]:
    home = IndexHome(tmp_path / "rag_index")
    return home, build_and_publish(make_workspace(tmp_path), home, embedder)


def copies(home: IndexHome) -> list[Path]:
    root = mapped.cache_root(home.root / "parts")
    return sorted(root.glob(f"seg-*/{mapped.ARRAYS}"))


def server_pids(url: str) -> set[int]:
    """The uvicorn process serving ``url`` and its worker processes (by the port on its command line)."""
    port = url.rsplit(":", 1)[1]
    procs: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(entry.name)] = (parent, cmdline)
    top = {pid for pid, (_, cmd) in procs.items() if "serving.app:app" in cmd and f"--port {port} " in cmd}
    assert len(top) == 1, top
    workers = {pid for pid, (parent, cmd) in procs.items() if parent in top and "spawn_main" in cmd}
    return top | workers


def settled(pids: set[int], found: list[Path], timeout: float = 120.0) -> None:
    """Wait until every serving process maps every copy and is idle (its CPU time still for half a second): a worker
    still warming up, or deriving the heading field in the background, reads copies outside any request (the race
    the module docstring of ``livemem.version.mapped`` documents)."""
    import time

    def ticks(pid: int) -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    workers = {p for p in pids if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()} or pids
    deadline = time.monotonic() + timeout
    while True:
        mapped_all = all({str(c) for c in found} <= set(Path(f"/proc/{p}/maps").read_text().split()) for p in workers)
        before = {p: ticks(p) for p in workers}
        time.sleep(0.5)
        if mapped_all and before == {p: ticks(p) for p in workers}:
            return
        assert time.monotonic() < deadline, "the workers did not settle"


def truncate(path: Path, size: int = 0) -> None:
    """What an operator's ``truncate -s 0`` does (as root, or after a ``chmod``: the copy is written read-only)."""
    path.chmod(0o640)
    with open(path, "r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize("workers", [1, 2])
def test_truncating_the_serving_copy_under_running_workers_never_kills_them(served, workers):
    home, version = served
    with uvicorn(home, workers=workers) as url, httpx.Client(base_url=url, timeout=60) as client:
        before = client.post("/query", json=BODY)
        assert before.status_code == 200 and before.json()["results"]
        for _ in range(4 * workers):  # every worker has mapped the copies
            assert client.post("/query", json={**BODY, "query": "heating bill help Beckley"}).status_code == 200
        pids = server_pids(url)
        assert len(pids) == (1 if workers == 1 else 1 + workers)
        found = copies(home)
        assert found
        settled(pids, found)
        for path in found:
            truncate(path)
        for n, query in enumerate(("SNAP food assistance", "heating bill help Beckley", "zebra protocol") * workers):
            response = client.post("/query", json={**BODY, "query": f"{query} {n}"})  # never a cached answer
            assert response.status_code == 200, response.text
            assert response.json()["index_version"] == version
        again = client.post("/query", json=BODY)
        assert again.status_code == 200 and again.json()["results"] == before.json()["results"]
        assert client.get("/healthz").status_code == 200
        assert server_pids(url) == pids  # the same processes: none died, none was replaced
        assert all(p.stat().st_size > 0 for p in copies(home))  # the copies were written again


def test_copies_are_read_only_private_and_checked_before_they_are_mapped(served):
    home, version = served
    from livemem.engine.segments import load_segment
    from livemem.engine.snapshot import load_snapshot

    load_snapshot(home, version)
    root = mapped.cache_root(home.root / "parts")
    assert root.stat().st_mode & 0o777 == 0o700
    segment = copies(home)[0].parent
    for name in (mapped.ARRAYS, mapped.META):
        assert (segment / name).stat().st_mode & 0o777 == 0o440
    meta = json.loads((segment / mapped.META).read_text())
    assert meta["marker"] and (segment / mapped.ARRAYS).read_bytes().endswith(meta["marker"].encode())

    # regrown to its recorded size with other bytes (the marker is gone): never mapped, written again
    size = (segment / mapped.ARRAYS).stat().st_size
    truncate(segment / mapped.ARRAYS)
    truncate(segment / mapped.ARRAYS, size)
    assert mapped.open_copy(root, segment.name) is None
    assert not segment.exists()
    loaded = load_segment(home.root / "parts", segment.name)
    assert loaded.mapped and loaded.intact()
    truncate(segment / mapped.ARRAYS, 100)
    assert not loaded.intact()  # what a worker checks before each request

    # a copy this user does not own (planted in a shared cache directory) is never mapped
    load_segment(home.root / "parts", segment.name)
    os.chown(segment / mapped.ARRAYS, 12345, -1)
    assert mapped.open_copy(root, segment.name) is None
