"""Real server processes for tests: uvicorn serving ``serving.app:app`` over an index home, on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def uvicorn(home: IndexHome, workers: int = 1, timeout: float = 120.0):
    """A real uvicorn serving ``serving.app:app`` on loopback; yields its base URL."""
    port = free_port()
    env = {**os.environ, "RAG_INDEX_DIR": str(home.root), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "serving.app:app", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers), "--log-level", "warning"],
        cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # reading stderr waits for its end: a server that answers 503 must not hang the test
                raise RuntimeError(f"uvicorn did not start: {proc.communicate()[1].decode()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
