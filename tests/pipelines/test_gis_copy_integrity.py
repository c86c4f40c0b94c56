"""The GIS serving copy (``<home>/cache/serving/gis-<hash>/arrays.bin``, issue 38) under real uvicorn workers:
every worker maps one copy (none holds the entities in its own memory), and a copy truncated under them is never
read (SIGBUS): the next request writes it again and answers the same, from the same worker processes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from support.gbim_data import SPATIAL
from support.servers import uvicorn
from support.serving import publish_with_gbim

from livemem.version import mapped

BODY = {"query": "help paying the heating bill", "n_results": 3}
QUERIES = (BODY, {**BODY, "county": "Fayette"}, {**BODY, "bbox": [-81.25, 37.7, -81.1, 37.85]})


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return publish_with_gbim(tmp_path_factory.mktemp("giscopy"), embedder, SPATIAL)


def gis_copies(home) -> list[Path]:
    return sorted(mapped.cache_root(home.root / "parts").glob(f"gis-*/{mapped.ARRAYS}"))


def worker_pids(url: str) -> set[int]:
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
    return top | {pid for pid, (parent, cmd) in procs.items() if parent in top and "spawn_main" in cmd}


def test_two_workers_map_one_gis_copy_and_survive_it_being_truncated(home) -> None:
    with uvicorn(home, workers=2) as url, httpx.Client(base_url=url, timeout=60) as client:
        before = [client.post("/gis/query", json=q) for q in QUERIES]
        assert all(r.status_code == 200 for r in before) and before[0].json()["results"]
        pids = worker_pids(url)
        workers = {p for p in pids if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()}
        assert len(workers) == 2

        def mapping() -> set[int]:
            found = gis_copies(home)
            return {p for p in workers if found and str(found[0]) in Path(f"/proc/{p}/maps").read_text()}

        for _ in range(400):  # until each worker has answered one (the kernel picks the worker of a connection)
            if mapping() == workers:
                break
            with httpx.Client(base_url=url, timeout=60) as fresh:  # a new connection: maybe the other worker
                assert fresh.post("/gis/query", json=BODY).status_code == 200
        # the same file mapped by each worker: pages shared, no per-process copy of the entities
        assert mapping() == workers and len(gis_copies(home)) == 1
        (copy,) = gis_copies(home)
        copy.chmod(0o640)
        with open(copy, "r+b") as fh:  # what an operator's `truncate -s 0` does
            fh.truncate(0)
        for _ in range(3):
            after = [client.post("/gis/query", json=q) for q in QUERIES]
            assert [r.status_code for r in after] == [200, 200, 200], after[0].text
            assert [r.json()["results"] for r in after] == [r.json()["results"] for r in before]
        assert worker_pids(url) == pids  # no worker died, none was replaced
        assert [p.stat().st_size > 0 for p in gis_copies(home)] == [True]  # written again
