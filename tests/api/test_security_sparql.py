"""SPARQL abuse against a real uvicorn process: runaway queries are stopped while the server keeps answering,
nothing reaches the network, unsupported forms get a 400 that names them, and concurrency is bounded."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.gbim_data import SPATIAL
from support.servers import uvicorn
from support.serving import publish_with_gbim

from livemem.version.store import IndexHome

REGEX_BOMB = (
    'SELECT ?x WHERE { BIND(CONCAT("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","!") AS ?x) FILTER(regex(?x, "^(a+)+$")) }'
)
CARTESIAN_COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
LABELS = "SELECT ?label WHERE { ?e gbim:located_in ?c . ?e rdfs:label ?label } ORDER BY ?label"


@pytest.fixture(scope="module")
def facts_home(tmp_path_factory, embedder) -> IndexHome:
    """An index home whose current version has GBIM facts."""
    root = tmp_path_factory.mktemp("sparql")
    return publish_with_gbim(root, embedder, SPATIAL)


@pytest.fixture(scope="module")
def server(facts_home):
    with uvicorn(facts_home) as url:
        yield url


def sparql(url: str, query: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{url}/facts/sparql", json={"query": query}, timeout=timeout)


def descendants(root: int | None = None) -> list[int]:
    """The descendants of ``root`` (default: this test process: uvicorn and its SPARQL workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root or os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def sparql_workers(server: int) -> list[int]:
    """The server's worker processes (multiprocessing's spawned children, not its resource tracker)."""
    return [pid for pid in descendants(server) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return used


def busy_processes(window_s: float) -> list[int]:
    """Descendant processes that used over a tenth of a CPU during the window (the machine may be loaded)."""
    before = cpu_seconds(descendants())
    time.sleep(window_s)
    after = cpu_seconds(list(before))
    return [pid for pid in after if after[pid] - before[pid] > window_s / 10]


def server_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1]
    (pid,) = [p for p in descendants() if f"--port\0{port}\0".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    return pid


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a child not yet reaped is a zombie: state Z)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def poll_health(url: str, until: list[Future], times: list[float]) -> None:
    while not all(f.done() for f in until):
        started = time.monotonic()
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        times.append(time.monotonic() - started)
        time.sleep(0.1)


def wait_until_busy(server: int, workers: int, limit: float = 15.0) -> None:
    """Until ``workers`` of the server's SPARQL worker processes are computing (their CPU time grows)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = cpu_seconds(sparql_workers(server))
        time.sleep(0.2)
        after = cpu_seconds(sparql_workers(server))
        if sum(1 for pid, t in after.items() if t > before.get(pid, t)) >= workers:
            return
    raise AssertionError(f"{workers} SPARQL workers were not busy within {limit} s")


def test_runaway_queries_are_stopped_while_healthz_answers(server) -> None:
    assert sparql(server, LABELS).status_code == 200  # workers started and the graph loaded
    uvicorn_pid = server_pid(server)
    health_times: list[float] = []
    with ThreadPoolExecutor(4) as pool:
        bombs = [pool.submit(sparql, server, q) for q in (REGEX_BOMB, CARTESIAN_COUNT)]
        health = pool.submit(poll_health, server, bombs, health_times)
        wait_until_busy(uvicorn_pid, workers=2)  # both bombs hold the two workers (not a fixed sleep: CI is loaded)
        started = time.monotonic()
        refused = sparql(server, REGEX_BOMB)
        assert refused.status_code == 429, refused.text
        assert time.monotonic() - started < 1.0 and refused.headers["retry-after"] == "1"
        computing = sparql_workers(uvicorn_pid)  # both slots are taken: the pool's processes run the two queries
        answers = [b.result() for b in bombs]
        health.result()
    assert [a.status_code for a in answers] == [408, 408], [a.text for a in answers]
    assert "stopped" in answers[0].json()["detail"]
    assert len(health_times) >= 5 and max(health_times) < 1.0, health_times
    # The work ended: the processes that computed are gone, and fresh workers answer the next queries.
    assert computing, "the runaway queries ran in worker processes"
    assert not any(running(pid) for pid in computing)
    for _ in range(3):
        started = time.monotonic()
        labels = sparql(server, LABELS)
        assert labels.status_code == 200 and labels.json()["rows"]
        assert time.monotonic() - started < 10


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.accept, daemon=True)

    def accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


def test_service_and_remote_loading_never_reach_the_network(server) -> None:
    with Listener() as listener:
        endpoint = f"<http://127.0.0.1:{listener.port}/sparql>"
        refused = {
            f"SELECT * WHERE {{ SERVICE {endpoint} {{ ?s ?p ?o }} }}": "SERVICE",
            f"SELECT ?s WHERE {{ ?s ?p ?o OPTIONAL {{ SELECT ?s WHERE {{ SERVICE SILENT {endpoint} {{ ?s ?p ?o }} }} }} }}": (
                "SERVICE"
            ),
            f"ASK {{ FILTER EXISTS {{ SERVICE {endpoint} {{ ?s ?p ?o }} }} }}": "SERVICE",
            f"SELECT * FROM {endpoint} WHERE {{ ?s ?p ?o }}": "FROM",
            f"SELECT * FROM NAMED {endpoint} WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}": "FROM NAMED",
            "SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }": "GRAPH",
            f"SELECT * WHERE {{ GRAPH {endpoint} {{ ?s ?p ?o }} }}": "GRAPH",
            f"LOAD {endpoint}": "read-only",
            "INSERT DATA { <urn:a> <urn:b> <urn:c> }": "read-only",
            "SELECT WHERE {": "not a valid SPARQL query",
        }
        for query, named in refused.items():
            response = sparql(server, query)
            assert response.status_code == 400, (query, response.text)
            assert named in response.json()["detail"], (query, response.json())
        # DESCRIBE of a remote IRI describes it from the local facts only: an empty graph, nothing fetched.
        described = sparql(server, f"DESCRIBE {endpoint}")
        assert described.status_code == 200 and described.headers["content-type"].startswith("text/turtle")
        time.sleep(0.5)
    assert listener.connections == 0


def test_memory_and_rows_are_bounded(server) -> None:
    # Each BIND doubles the string: 2^30 characters if nothing stopped it.
    binds = " ".join(f"BIND(CONCAT(?a{i}, ?a{i}) AS ?a{i + 1})" for i in range(30))
    doubling = f'SELECT ?a30 WHERE {{ BIND("ab" AS ?a0) {binds} }}'
    response = sparql(server, doubling)
    assert response.status_code in (400, 408), response.text
    assert "MB" in response.json()["detail"] or "stopped" in response.json()["detail"]
    # The worker the doubling query ran in was stopped and is replaced in the background; until the new one has
    # loaded the graph a query is a 408 saying to retry (on a loaded machine that takes seconds): retry as told, on
    # that answer only, with a generous bound rather than a race against the respawn.
    deadline = time.monotonic() + 120
    while True:
        answered = httpx.post(f"{server}/facts/sparql", json={"query": "SELECT * WHERE { ?s ?p ?o }", "limit": 3})
        busy = answered.status_code in (408, 503) and ("retry" in answered.text or "loading" in answered.text)
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    rows = answered.json()
    assert answered.status_code == 200, answered.text
    assert len(rows["rows"]) == 3 and rows["truncated"] is True


def test_sigterm_ends_the_server_and_its_workers_while_a_query_runs(facts_home) -> None:
    with uvicorn(facts_home) as url:
        uvicorn_pid = server_pid(url)
        with ThreadPoolExecutor(1) as pool:
            bomb = pool.submit(sparql, url, REGEX_BOMB)
            deadline = time.monotonic() + 30
            while not busy_processes(0.5) and time.monotonic() < deadline:  # the regex is running in a worker
                pass
            workers = descendants(uvicorn_pid)  # the SPARQL workers and multiprocessing's resource tracker
            assert workers
            os.kill(uvicorn_pid, signal.SIGTERM)
            started = time.monotonic()
            while running(uvicorn_pid) and time.monotonic() - started < 15:
                time.sleep(0.1)
            assert not running(uvicorn_pid), "uvicorn ignored SIGTERM"
            assert time.monotonic() - started < 10
            while any(running(pid) for pid in workers) and time.monotonic() - started < 15:
                time.sleep(0.1)  # a worker still importing when the server ended reads EOF and ends after that
            assert not any(running(pid) for pid in workers)
            assert bomb.result().status_code == 408


def test_a_runaway_query_is_answered_at_the_limit_while_workers_respawn(server) -> None:
    """Issue 33: while the killed workers were replaced, each 408 came 5.5-6.6 s after its query (the fresh worker
    imported rdflib and built the graph first, then the 2 s began). Now a worker is killed without waiting for it
    and replaced in the background, and the limit counts from the query's arrival: every 408 comes at the limit."""
    limit = 2.0  # RAG_SPARQL_TIMEOUT_S's default
    assert sparql(server, LABELS).status_code == 200
    took = []
    for _ in range(4):  # back to back: each one lands on a worker replaced after the one before
        started = time.monotonic()
        answer = sparql(server, REGEX_BOMB)
        took.append(time.monotonic() - started)
        assert answer.status_code == 408, answer.text
    # Issue 33's defect answered 5.5-6.6 s after the query; a bound of limit + 2.5 s still tells it apart and holds on
    # a loaded CI machine (at load 3-4 the old limit + 0.8 s was missed by scheduling alone)
    assert max(took) < limit + 2.5, took
    # the replacements were started in the background: ordinary queries are answered again within seconds
    deadline = time.monotonic() + 20
    while (labels := sparql(server, LABELS)).status_code != 200:
        assert labels.status_code == 408 and labels.headers.get("retry-after") == "1", labels.text
        assert time.monotonic() < deadline, "no worker was ready again"
        time.sleep(0.2)
    assert labels.json()["rows"]


def test_a_query_on_a_replacement_still_loading_gets_its_408_at_the_limit(facts_home) -> None:
    """The pool itself, one worker, a 0.3 s limit: after a runaway query the replacement is registered at once
    and loads in the background; a query that comes meanwhile waits no longer than its limit (408, retry),
    and the replacement, which went on loading, answers soon after."""
    from livemem.gbim.sparql_worker import SparqlLimits, SparqlPool, SparqlTimeout, SparqlWarming

    version = str(facts_home.version_dir(facts_home.current()))
    pool = SparqlPool(SparqlLimits(workers=1, timeout_s=0.3))
    try:
        assert pool.run(version, ["public"], LABELS, 10)["rows"]  # a graph nobody asked for yet: built, then run
        with pytest.raises(SparqlTimeout):
            pool.run(version, ["public"], REGEX_BOMB, 10)
        started = time.monotonic()
        try:
            pool.run(version, ["public"], LABELS, 10)
        except SparqlWarming as warming:  # a fresh process cannot import rdflib and build the graph in 0.3 s
            assert "still loading" in str(warming)
            waited = time.monotonic() - started
            # "still loading" says it did not wait for the replacement (which takes seconds: rdflib's import, the
            # graph); the bound is generous for a loaded machine, and well under that load
            assert waited < 0.3 + 3.0, waited
        except SparqlTimeout:
            # on a loaded machine the query can also land on a replacement that did get ready and run past its own
            # 0.3 s: a 408 at the limit as well, never a wait for the load
            assert time.monotonic() - started < 0.3 + 3.0
        deadline = time.monotonic() + 120  # a loaded machine: rdflib's import and the graph take long
        while True:
            try:
                assert pool.run(version, ["public"], LABELS, 10)["rows"]
                break
            except (SparqlWarming, SparqlTimeout):
                # still loading; or, on a loaded machine, the first query of a fresh replacement ran past the
                # 0.3 s limit (stopped, replaced again): either way it is answered later, never a hang
                assert time.monotonic() < deadline, "the replacement never answered"
                time.sleep(0.1)
        assert len(pool._idle) == 1  # never more workers than the pool's size
    finally:
        pool.close()
