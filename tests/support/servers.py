"""Real server processes for tests: uvicorn serving ``serving.app:app`` over an index home, on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
# as `make serve` and `livemem serve` start uvicorn: a worker's startup prepares everything (serving.app), part of it
# one C call holding the GIL for seconds on a busy machine, past uvicorn's default 5 s health ping (docs/deploy.md)
SERVE_ARGS = ("--timeout-worker-healthcheck", "60")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def uvicorn(home: IndexHome, workers: int = 1, timeout: float = 120.0):
    """A real uvicorn serving ``serving.app:app`` on loopback; yields its base URL."""
    with uvicorn_process(home, workers, timeout) as (url, _):
        yield url


@contextmanager
def uvicorn_process(
    home: IndexHome,
    workers: int = 1,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    log_level: str = "warning",
    args: tuple[str, ...] = (),
):
    """``uvicorn``, yielding (base URL, the uvicorn process: its children are the workers); ``env``: more variables,
    ``args``: more arguments. What the server writes to stderr (the supervisor's and workers' log at ``log_level``)
    is collected line by line in ``proc.lines`` as it comes (a thread reads it: a full pipe would stall the server)."""
    port = free_port()
    env = {**os.environ, "RAG_INDEX_DIR": str(home.root), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PROJECT),
           **(env or {})}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "serving.app:app", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers), "--log-level", log_level, *SERVE_ARGS, *args],
        cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    proc.lines = []  # type: ignore[attr-defined]

    def read() -> None:
        for line in proc.stderr:
            proc.lines.append(line)  # type: ignore[attr-defined]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
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
                proc.kill()  # a server that answers 503 must not hang the test
                reader.join(timeout=10)
                raise RuntimeError(f"uvicorn did not start: {''.join(proc.lines)[-2000:]}")  # type: ignore[attr-defined]
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
