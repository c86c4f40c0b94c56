"""The serving edge against a real uvicorn process over the bundled example (its registry and GBIM export): no public
answer names a server path, a request with two ``Content-Type`` headers is a clear 400 (the body guard and FastAPI
would have read different ones), and a body that stalls is a 408 within ``RAG_BODY_TIMEOUT_S`` while the server
keeps answering (slowloris)."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from support.examples import copy_bundled_example
from support.servers import uvicorn
from support.serving import API_KEYS, INTERNAL_KEY

from livemem.gbim import export_gbim
from livemem.registry import RegistryConfig, run_verification
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

BODY_TIMEOUT_S = 2.0  # RAG_BODY_TIMEOUT_S of the server under test (default 10)
INTERNAL = {"X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def example(tmp_path_factory, embedder):
    """The bundled example's registry, then its GBIM export, published as ``make run`` does (without the chunk build:
    the registry section is what named a server path, and sources' ``repo`` is covered in test_security_visibility)."""
    root = tmp_path_factory.mktemp("edge")
    repo, sources = copy_bundled_example(root)
    config = load_sources(sources)
    home = IndexHome(root / "rag_index")
    registry = run_verification(RegistryConfig.from_sources(config), home)
    home.publish(registry.version_id, None, config.retention)
    gbim = export_gbim(config, home, embedder)
    home.publish(gbim.version_id, gbim.base_version, config.retention)
    return root, repo.path, home


@pytest.fixture(scope="module")
def server(example):
    _, _, home = example
    with pytest.MonkeyPatch.context() as env:  # the uvicorn process inherits this environment
        env.setenv("RAG_BODY_TIMEOUT_S", str(BODY_TIMEOUT_S))
        env.setenv("RAG_API_KEYS", json.dumps(API_KEYS))
        env.setenv("LIVEMEM_WARM_UP", "false")  # the answer warm-up questions: not what these tests are about
        with uvicorn(home) as url:
            yield url


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def read_response(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """What the server sends within ``timeout``, and whether it closed the connection by then."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        pass
    return data, True


def test_no_public_answer_names_a_server_path(example, server):
    root, repo, home = example
    machine = (f"/{root.parts[1]}/", str(root), str(repo), str(home.root))  # e.g. "/tmp/": not even the top folder
    for headers in ({}, INTERNAL):
        manifest = httpx.get(server + "/manifest", headers=headers, timeout=30)
        assert manifest.status_code == 200, manifest.text
        assert not [p for p in machine if p in manifest.text], manifest.text
        assert manifest.json()["registry"]["source"] == "csv file local_resources.csv"  # was "csv file /…/…csv"
        for path in ("/healthz", "/metrics", "/chunks/none", "/v1/models"):
            answer = httpx.get(server + path, headers=headers, timeout=30)
            assert answer.status_code < 500 and not [p for p in machine if p in answer.text], (path, answer.text)


def test_a_server_error_never_names_a_server_path(example, embedder):
    """A 5xx detail (a store or file that failed) is reduced to the file's name; a 4xx naming a route stays."""
    _, _, home = example
    app = create_app(Settings(index_dir=home.root, warm_up=False), embedder)
    where = home.root / "cache" / "answers.sqlite"

    @app.get("/fail/{status}")
    def fail(status: int):
        raise HTTPException(status, f"cannot open {where} (see file://{where}); GET /v1/models lists the models")

    with TestClient(app) as client:
        broken = client.get("/fail/503")
        assert broken.status_code == 503
        assert broken.json()["detail"] == "cannot open answers.sqlite (see answers.sqlite); GET models lists the models"
        assert "GET /v1/models" in client.get("/fail/404").json()["detail"]


def chat_body(model: str) -> bytes:
    """An OpenAI chat request whose message part holds a lone surrogate: valid to Python's json, not to UTF-8 (with
    FastAPI parsing it as JSON and the guard not checking it, this was a 500)."""
    part = b'{"type": "text", "text": "heat help \\ud800"}'
    return b'{"model": "%s", "messages": [{"role": "user", "content": [%s]}]}' % (model.encode(), part)


@pytest.mark.parametrize("order", [("application/json", "text/plain"), ("text/plain", "application/json")])
def test_two_content_type_headers_are_a_clear_400(server, order):
    model = httpx.get(server + "/v1/models", timeout=30).json()["data"][0]["id"]
    body = chat_body(model)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: {order[0]}\r\nContent-Type: {order[1]}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with connect(server) as sock:
        sock.sendall(head.encode() + body)
        response, closed = read_response(sock, timeout=10)
    assert response.startswith(b"HTTP/1.1 400"), response[:300]  # [order0] was a 500: FastAPI parsed the first
    assert b"2 Content-Type headers; send exactly one" in response and closed
    one = httpx.post(
        server + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert one.status_code == 422 and "surrogate" in one.text  # the same body with one header: the guard's 422


def test_a_stalled_body_is_408_within_the_bound_while_the_server_answers(server):
    """50 clients send their headers and half a body, then stall; one more trickles a chunked body a byte at a time.
    Each is answered 408 (connection closed) about ``BODY_TIMEOUT_S`` after its headers; /healthz answers meanwhile."""
    half = b'{"query": "SNAP food'
    head = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    stalled = [connect(server) for _ in range(50)]
    trickle = connect(server)
    try:
        started = time.monotonic()
        for sock in stalled:
            sock.sendall(head + half)
        trickle.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        health = httpx.get(server + "/healthz", timeout=BODY_TIMEOUT_S)
        assert health.status_code == 200, health.text  # answered while every body is still pending
        sent = 0
        trickle.settimeout(0.2)
        while time.monotonic() - started < 4 * BODY_TIMEOUT_S:
            try:
                trickle.sendall(b"1\r\n \r\n")  # one byte, well inside each chunk's own wait
                sent += 1
                if trickle.recv(65536).startswith(b"HTTP/1.1 408"):
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        trickled_for = time.monotonic() - started
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda s: read_response(s, timeout=5 * BODY_TIMEOUT_S), stalled))
        waited = time.monotonic() - started
    finally:
        for sock in [*stalled, trickle]:
            sock.close()
    assert all(
        r.startswith(b"HTTP/1.1 408") and b"did not arrive within %g s" % BODY_TIMEOUT_S in r for r, _ in answers
    ), answers[0]
    assert all(closed for _, closed in answers)
    assert waited < 4 * BODY_TIMEOUT_S, waited  # the bound, not the clients, decides (not held open)
    assert sent > 1 and trickled_for < 3 * BODY_TIMEOUT_S, (sent, trickled_for)  # one deadline for the whole body
    ok = httpx.post(server + "/gis/query", json={"query": "food pantry"}, timeout=30)
    assert ok.status_code == 200 and ok.json()["results"]
