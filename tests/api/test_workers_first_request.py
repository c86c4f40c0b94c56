"""A fresh worker's first /context (issue 49): with ``--workers 2`` the first /context of each worker ran a one-off
setup (6.5 s with one worker, longer under load) while uvicorn's supervisor, getting no answer to its health ping,
SIGKILLed the live worker mid-request (11 kills seen). Every one-off setup now runs in the app's startup
(``ContextService.prepare``): a real uvicorn with two workers, under a bounded load loop of distinct messages, kills
no worker, and each worker's first request costs at most about twice a warm one."""

from __future__ import annotations

import re
import statistics
import sys
import threading
import time

import httpx
import pytest
from fastapi import routing
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index
from support.servers import uvicorn_process

LOAD_ROUNDS = 12  # each of the 2 clients, distinct messages (the answer cache never answers them)
TOWNS = ["Oak Hill", "Beckley", "Fayetteville", "Mount Hope", "Ansted", "Sophia"]
NEEDS = ["food pantry", "help paying the heating bill", "SNAP application", "Medicaid renewal", "WIC appointment"]


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


def ask(url: str, message: str) -> float:
    """Seconds one /context takes on a connection of its own (so the two workers share the requests)."""
    started = time.perf_counter()
    answer = httpx.post(f"{url}/context", json={"message": message}, timeout=120)
    assert answer.status_code == 200, answer.text
    return time.perf_counter() - started


def in_pairs(url: str, messages: list[str]) -> list[float]:
    """The messages two at a time, concurrently; the seconds of each."""
    out: list[float] = [0.0] * len(messages)

    def one(i: int) -> None:
        out[i] = ask(url, messages[i])

    for start in range(0, len(messages), 2):
        threads = [threading.Thread(target=one, args=(i,)) for i in range(start, min(start + 2, len(messages)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return out


def test_two_workers_take_their_first_context_without_a_kill_and_within_twice_a_warm_one(index) -> None:
    env = {"LIVEMEM_ANSWER_CACHE_SIZE": "0"}  # every request answered, none from the cache
    # started as `make serve` starts it (support.servers.SERVE_ARGS: --timeout-worker-healthcheck 60)
    with uvicorn_process(index, workers=2, timeout=300, env=env, log_level="info", args=("--no-access-log",)) as (
        url,
        proc,
    ):
        deadline = time.monotonic() + 300
        while sum("Application startup complete" in line for line in proc.lines) < 2:  # both workers prepared
            assert time.monotonic() < deadline, "".join(proc.lines)[-3000:]
            time.sleep(0.2)
        # one at a time, so none waits behind another: the first two are each worker's first, or one's first two
        first = [ask(url, m) for m in ("heating help for a family in Oak Hill", "food pantry open Saturday in Beckley")]
        messages = [f"{need} near {town} ({i})" for i in range(LOAD_ROUNDS) for need, town in [
            (NEEDS[i % len(NEEDS)], TOWNS[i % len(TOWNS)]), (NEEDS[(i + 2) % len(NEEDS)], TOWNS[(i + 3) % len(TOWNS)])
        ]]  # fmt: skip
        in_pairs(url, messages)  # the load loop: two clients at a time
        warm = [ask(url, f"{NEEDS[i % len(NEEDS)]} in {TOWNS[i % len(TOWNS)]}, warm {i}") for i in range(10)]
        lines = list(proc.lines)
    kills = [line for line in lines if re.search(r"Child process \[\d+\] died|was not ready in time", line)]
    assert kills == [], "".join(lines)[-3000:]
    assert sum("Application startup complete" in line for line in lines) == 2  # no worker was started again
    typical = statistics.median(warm)
    # the spec is 2x (bench/first_request.py measures it); the absolute slack keeps a loaded CI machine from failing
    # on scheduling noise alone, far below the 6.5 s (12 s here under load) a first /context cost before issue 49
    assert max(first) <= 2 * typical + 0.5, (first, typical)


def test_a_fresh_apps_first_context_and_chat_build_no_route_and_import_nothing(index, embedder, monkeypatch) -> None:
    """What a first request did after the startup's prepare (3.7x a warm one in bench.first_request): FastAPI built
    the routes of every router on its way (dependants, validators: 0.1-0.2 s) and the thread pool imported anyio's
    backend. The startup does both now: a first /context and /chat build no route and import no module."""
    from livemem.settings import ContextSettings
    from serving.app import create_app
    from serving.services.context import ContextService
    from serving.settings import Settings

    app = create_app(Settings(index_dir=index.root, api_keys={INTERNAL_KEY: "internal"}), embedder)  # warm_up
    state = app.state.serving
    state.context_service = ContextService(state, ContextSettings(warm_up=True, warm_up_questions=[]))
    built: list[str] = []
    populate = routing._populate_api_route_state

    def counted(route, path, *args, **kwargs):
        built.append(path)
        return populate(route, path, *args, **kwargs)

    with TestClient(app) as client:  # the startup: prepare, routes, thread pool
        monkeypatch.setattr(routing, "_populate_api_route_state", counted)
        modules = set(sys.modules)
        for path in ("/context", "/chat"):
            r = client.post(path, json={"message": "food pantry open Saturday near Beckley"})
            assert r.status_code == 200, r.text[:300]
        imported = set(sys.modules) - modules
    assert not built, built  # every route was built at startup
    assert not imported, sorted(imported)
