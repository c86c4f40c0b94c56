"""Request bounds against a real uvicorn process: oversize bodies are refused before they are read, non-JSON
numbers and invalid Unicode are a 422 that says why, and no 422 echoes megabytes back."""

from __future__ import annotations

import json
import select
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from support.servers import uvicorn
from support.serving import build_and_publish, make_workspace

from livemem.version.store import IndexHome

MAX_BODY = 2**20  # the default of RAG_MAX_BODY_BYTES
BIG = 50 * 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("limits")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    with uvicorn(home) as url:
        yield url


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def read_response(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """What the server sends until it closes the connection (or the timeout passes)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def post_raw(url: str, path: str, body: str) -> httpx.Response:
    """POST a body as written: Python's json module would refuse to write NaN or lone surrogates for us."""
    return httpx.post(url + path, content=body.encode("utf-8"), headers={"content-type": "application/json"})


def test_a_declared_oversize_body_is_refused_unread(server) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        head = f"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {BIG}\r\n\r\n"
        sock.sendall(head.encode() + b'{"query": "' + b"a" * 1000)
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b"larger than 1048576 bytes" in response
    assert time.monotonic() - started < 5  # answered (and closed) without waiting for the other 50 MB


def test_a_streamed_oversize_body_is_refused_after_the_limit(server) -> None:
    chunk = b"a" * 65536
    sent = 0
    with connect(server) as sock:
        sock.sendall(
            b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < BIG and not select.select([sock], [], [], 0)[0]:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert sent < 8 * MAX_BODY, sent  # the server stopped reading soon after the limit, not at 50 MB


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/query", '{"query": "SNAP", "filters": {"min_attention": NaN}}', "NaN"),
        ("/query", '{"query": "SNAP", "recency_half_life_days": Infinity}', "Infinity"),
        ("/query", '{"query": "SNAP", "min_score": NaN}', "NaN"),
        ("/query", '{"query": "SNAP", "min_score": -Infinity}', "-Infinity"),
        ("/query", '{"query": "SNAP", "min_score": 1e999}', "out of range"),
        ("/query", '{"query": "\\ud800 heat"}', "surrogate"),
        ("/query", '{"query": "SNAP", "filters": {"source": ["ok", "\\udfff"]}}', "surrogate"),
        ("/gis/query", '{"query": "clinic", "bbox": [NaN, 37, -80, 38]}', "NaN"),
        ("/gis/query", '{"query": "clinic", "near": {"lat": Infinity, "lon": -81, "radius_km": 5}}', "Infinity"),
        ("/context", '{"message": "heat \\ud800"}', "surrogate"),
        ("/context", '{"message": "heat", "profile": {"income": NaN}}', "NaN"),
        ("/query", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_non_json_numbers_and_invalid_unicode_are_422(server, path: str, body: str, named: str) -> None:
    response = post_raw(server, path, body)
    assert response.status_code == 422, response.text
    assert named in response.json()["message"]


def test_a_422_never_echoes_megabytes(server) -> None:
    cases = {
        "a 900 kB query": {"query": "a" * 900_000},
        "50 000 sources": {"query": "SNAP", "filters": {"source": ["x"] * 50_000}},
        "50 000 bad types": {"query": "SNAP", "filters": {"type": ["nope"] * 50_000}},
        "a long path prefix": {"query": "SNAP", "filters": {"path_prefix": "p" * 100_000}},
        "many collections": {"query": "SNAP", "collections": [f"c{i}" for i in range(1000)]},
        "a big profile": {"message": "heat", "profile": {f"k{i}": "v" for i in range(1000)}},
    }
    for name, body in cases.items():
        path = "/context" if "message" in body else "/query"
        response = httpx.post(server + path, content=json.dumps(body), headers={"content-type": "application/json"})
        assert response.status_code == 422, (name, response.text[:300])
        assert len(response.content) < 8000, (name, len(response.content))
        assert response.json()["message"], name
    ok = httpx.post(server + "/query", json={"query": "SNAP food assistance", "filters": {"source": ["wv-benefits"]}})
    assert ok.status_code == 200 and ok.json()["results"]


def test_valid_unicode_and_numbers_still_pass(server) -> None:
    body = '{"query": "SNAP food \\ud83d\\ude00 assistance Δ", "min_score": -1e3, "recency_half_life_days": 1.5e2}'
    response = post_raw(server, "/query", body)
    assert response.status_code == 200, response.text
    assert response.json()["results"]
