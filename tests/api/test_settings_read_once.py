"""The serving app reads its settings once, when it starts, and passes them down: the personas it answers as, where
personal memory lives and how many users a key may keep there, and where serving copies are mapped are those it
started with. The environment changing under a running process changes nothing until it restarts (before, the core
read ``LIVEMEM_PERSONAS``, ``LIVEMEM_PERSONAL_*`` and ``LIVEMEM_SERVING_CACHE`` again at each use, so one worker
could answer two requests under two configurations)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app

from livemem.engine import segments
from livemem.engine import snapshot as reader
from livemem.version import mapped
from serving.state import ServingState

HEADING = "For your field visit, from Living Memory:"
FIELD_WORKER = {"Field Worker": {"access": ["public"], "framing": "Be brief.", "heading": HEADING}}
KEY = {"X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


def test_a_running_app_keeps_the_personas_and_personal_limits_it_started_with(home, embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEMEM_PERSONAS", json.dumps(FIELD_WORKER))
    monkeypatch.setenv("LIVEMEM_PERSONAL_DIR", str(tmp_path / "personal"))
    monkeypatch.setenv("LIVEMEM_PERSONAL_MAX_USERS_PER_KEY", "1")
    monkeypatch.delenv("RAG_TRACE_DSN", raising=False)
    app = make_app(home, embedder)
    # the environment changes under the running app: it keeps the configuration it was started with
    monkeypatch.setenv("LIVEMEM_PERSONAS", "{}")
    monkeypatch.setenv("LIVEMEM_PERSONAL_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("LIVEMEM_PERSONAL_MAX_USERS_PER_KEY", "100")
    with TestClient(app) as client:
        chat = client.post(
            "/chat", json={"message": "food pantry near Beckley WV", "role": "Field Worker"}, headers=KEY
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["route"]["persona"] == "field_worker"
        assert chat.json()["answer"].startswith(HEADING)  # the extractive answer under the persona's heading
        assert client.post("/memory", json={"text": "my caseworker is Dana"}, headers=KEY).status_code == 201
        second = client.post("/memory", json={"text": "a note", "user_id": "second"}, headers=KEY)
        assert second.status_code == 403 and "LIVEMEM_PERSONAL_MAX_USERS_PER_KEY" in second.json()["detail"]
        listed = client.get("/memory", headers=KEY).json()
        assert [i["content"] for i in listed["items"]] == ["my caseworker is Dana"]
    assert (tmp_path / "personal").is_dir() and not (tmp_path / "elsewhere").exists()


def test_an_entry_point_holding_the_settings_tree_passes_its_sections(home, embedder, tmp_path, monkeypatch):
    """The MCP server reads the whole tree once and hands the serving state its sections: they win over whatever
    the environment says later; the serving copies' directory is the engine config's, built from them."""
    from livemem.settings import LivingMemorySettings

    monkeypatch.setenv("LIVEMEM_PERSONAS", json.dumps(FIELD_WORKER))
    monkeypatch.setenv("LIVEMEM_PERSONAL_DIR", str(tmp_path / "personal"))
    monkeypatch.setenv("LIVEMEM_SERVING_CACHE", str(tmp_path / "copies"))
    tree = LivingMemorySettings.from_env()
    monkeypatch.delenv("LIVEMEM_PERSONAS")
    monkeypatch.delenv("LIVEMEM_PERSONAL_DIR")
    monkeypatch.delenv("LIVEMEM_SERVING_CACHE")
    state = ServingState.from_settings(
        tree.serving.model_copy(update={"index_dir": home.root, "warm_up": False}), embedder,
        personal=tree.personal, persona_settings=tree.personas, engine=tree.engine,
    )  # fmt: skip
    assert state.personas["field_worker"].heading == HEADING
    assert state.personal.directory == tmp_path / "personal"
    assert state.reader.engine.serving_cache == tmp_path / "copies"
    assert mapped.cache_root(home.root / "parts", state.reader.engine.serving_cache).parent == tmp_path / "copies"
    monkeypatch.setattr(reader, "SEGMENTS", segments.SegmentCache())  # as in a new worker: nothing loaded yet
    state.reader.snapshot()  # a version loaded now maps its copies there
    assert any((tmp_path / "copies").rglob("arrays.bin"))


@pytest.mark.parametrize(
    ("variable", "value"), [("LIVEMEM_PERSONAL_MAX_USERS_PER_KEY", "0"), ("LIVEMEM_PERSONAS", '{"field worker": ')]
)
def test_a_bad_setting_stops_the_app_at_start_naming_it(embedder, tmp_path, monkeypatch, variable, value):
    """Read once at start, a bad value is refused then, naming the variable (before, the app started and each
    request that used it failed)."""
    from livemem.errors import ConfigError
    from serving.app import create_app
    from serving.settings import Settings

    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        create_app(Settings(index_dir=tmp_path / "rag_index", warm_up=False), embedder)
