"""The bundled example materialized whole once per test session (chunks, GBIM entities, registry), and an app
over it with its context service configured by the test."""

from __future__ import annotations

from pathlib import Path

from livemem.settings import ContextSettings
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
INTERNAL_KEY = "internal-context-key"
_BUILT: dict[str, IndexHome] = {}


def example_index(tmp_path_factory) -> IndexHome:
    """Like ``complete_index`` in test_faults.py: build_index, export_gbim, verify_registry, once per session."""
    if "home" not in _BUILT:
        from dagster import DagsterInstance

        from orchestration.definitions import build_definitions

        root = tmp_path_factory.mktemp("context-example")
        defs = build_definitions(PROJECT / "examples" / "sources.yaml", root / "rag_index")
        instance = DagsterInstance.ephemeral()
        for job in ("build_index", "export_gbim", "verify_registry"):
            assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job
        _BUILT["home"] = IndexHome(root / "rag_index")
    return _BUILT["home"]


def florida_index(tmp_path_factory) -> IndexHome:
    """The second bundled deployment (``examples/florida``: a South Florida 211, home FL) built once per session:
    build_index, export_gbim, verify_registry, from a git repository of its own (``repo: ../..`` resolves to it)."""
    if "florida" not in _BUILT:
        import shutil

        from dagster import DagsterInstance

        from orchestration.definitions import build_definitions
        from support.git import GitRepo

        root = tmp_path_factory.mktemp("florida-example")
        repo = GitRepo(root / "project")
        shutil.copytree(PROJECT / "examples" / "florida", repo.path / "examples" / "florida")
        repo.commit(message="florida example")
        defs = build_definitions(repo.path / "examples" / "florida" / "sources.yaml", root / "rag_index")
        instance = DagsterInstance.ephemeral()
        for job in ("build_index", "export_gbim", "verify_registry"):
            assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job
        _BUILT["florida"] = IndexHome(root / "rag_index")
    return _BUILT["florida"]


def make_app(home: IndexHome, embedder, web=None, **settings):
    """The serving app with a context service using ``settings`` (no warm-up unless asked)."""
    from serving.app import create_app
    from serving.services.context import ContextService
    from serving.settings import Settings

    app = create_app(Settings(index_dir=home.root, warm_up=False, api_keys={INTERNAL_KEY: "internal"}), embedder)
    state = app.state.serving
    state.context_service = ContextService(state, ContextSettings(**{"warm_up": False, **settings}), web)
    return app


def serve_handler(handler) -> tuple:
    """Start a real HTTP server on a free loopback port with ``handler`` (a BaseHTTPRequestHandler class) in a
    daemon thread; returns (server, its OpenAI-style base URL ending in /v1)."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
