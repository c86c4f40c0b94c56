"""GET /versions and GET /versions/{a}/diff/{b} (issue 37), and `livemem versions` / `livemem diff`: the index's
history as a role may see it, with keys as everywhere."""

from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient
from support.history import build_history, git_head
from support.serving import API_KEYS, INTERNAL_KEY, build_and_publish
from typer.testing import CliRunner

from livemem.usage.traces import trace_key
from livemem.version.store import IndexHome
from orchestration.cli import app as cli
from serving.app import create_app
from serving.settings import Settings


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder):
    return build_history(tmp_path_factory.mktemp("history-api"), embedder)


@pytest.fixture(scope="module")
def client(history, embedder):
    settings = Settings(index_dir=history["home"].root, warm_up=False, api_keys=API_KEYS)
    with TestClient(create_app(settings, embedder)) as c:
        yield c


INTERNAL = {"X-API-Key": INTERNAL_KEY}


def test_versions_lists_publish_times_and_commits_and_hides_internal_sources(client, history) -> None:
    internal = client.get("/versions", headers=INTERNAL).json()
    public = client.get("/versions").json()
    ids = [history["v1"], history["v2"], history["v3"]]
    assert [v["version_id"] for v in internal["versions"]] == ids and internal["current"] == history["v3"]
    assert all(v["published_at"].endswith("Z") for v in public["versions"])
    assert "caseworker" in internal["versions"][0]["sources"] and "caseworker" not in public["versions"][0]["sources"]
    assert public["versions"][1]["sources"]["wv-benefits"]["commit"] == git_head(history["repo"])
    # counts and sizes never count what the role may not read
    assert public["versions"][1]["counts"]["chunks"] < internal["versions"][1]["counts"]["chunks"]
    assert public["versions"][1]["index_size_mb"] is None and public["disk"] is None
    assert internal["disk"]["versions"] == 3 and internal["disk"]["history_mb"] > 0
    assert client.get("/versions", headers={"X-API-Key": "wrong"}).status_code == 401


def test_diff_between_versions_as_a_role_sees_it(client, history) -> None:
    v1, v3 = history["v1"], history["v3"]
    public = client.get(f"/versions/{v1}/diff/{v3}")
    assert public.status_code == 200, public.text
    body = public.json()
    assert body["from"]["version_id"] == v1 and body["to"]["current"] is True and body["to"]["asked"] == v3
    assert body["sources"]["wv-benefits"]["files"] == {"added": 1, "removed": 0, "changed": 1}
    assert "caseworker" not in public.text and history["playbook"] not in public.text
    assert [m["chunk_id"] for m in body["attention"]["top_movers"]] == [history["raleigh"]]
    internal = client.get(f"/versions/{v1}/diff/current", headers=INTERNAL).json()
    assert internal["sources"]["caseworker"]["files"]["changed"] == 1
    assert history["playbook"] in {m["chunk_id"] for m in internal["attention"]["top_movers"]}
    by_commit = client.get(f"/versions/{git_head(history['repo'])[:10]}/diff/current").json()
    assert by_commit["from"]["version_id"] == v3  # the newest version holding that commit


def test_unknown_and_malformed_versions_are_clear_errors(client, history) -> None:
    missing = client.get(f"/versions/20990101T000000000000Z/diff/{history['v1']}")
    assert missing.status_code == 404 and "no kept version '20990101T000000000000Z'" in missing.json()["detail"]
    assert str(history["home"].root) not in missing.text  # no server paths
    early = client.get("/versions/2001-01-01/diff/current")
    assert early.status_code == 404 and "no version was published at 2001-01-01" in early.json()["detail"]
    bad = client.get("/versions/not%20a%20version/diff/current")
    assert bad.status_code == 422 and "neither an ISO 8601 date-time" in bad.json()["detail"]
    # an id with a line break after it is not an id (accepted before issue 49: ids were stripped, ``$`` matched)
    newline = client.get(f"/versions/{history['v1']}%0A/diff/current")
    assert newline.status_code == 422, newline.text
    asked = client.post("/query", json={"query": "SNAP", "version": history["v1"] + "\n"})
    assert asked.status_code == 422 and "is not a version id" in asked.json()["detail"]
    assert client.post("/query", json={"query": "SNAP", "version": history["v1"]}).status_code == 200
    unknown = client.get("/versions/abcdef0/diff/current")
    assert unknown.status_code == 404 and "no kept version holds commit abcdef0" in unknown.json()["detail"]


def test_cli_versions_and_diff(history) -> None:
    runner = CliRunner()
    base = ["--index-dir", str(history["home"].root)]
    listed = runner.invoke(cli, [*base, "versions", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["version"], r["current"]) for r in rows] == [
        (history["v1"], False),
        (history["v2"], False),
        (history["v3"], True),
    ]
    assert rows[1]["commits"]["wv-benefits"] == git_head(history["repo"]) and rows[1]["published_at"]
    table = runner.invoke(cli, [*base, "versions"])
    assert table.exit_code == 0 and "history adds" in table.output
    diffed = runner.invoke(cli, [*base, "diff", history["v1"], history["v2"], "--json"])
    assert diffed.exit_code == 0, diffed.output
    data = json.loads(diffed.output)
    assert data["sources"]["caseworker"]["files"]["changed"] == 1 and data["files_total"] == 4
    text = runner.invoke(cli, [*base, "diff", history["v2"]])  # to current
    assert text.exit_code == 0 and "attention moved on 2 chunks" in text.output
    missing = runner.invoke(cli, [*base, "diff", "20990101T000000000000Z"])
    assert missing.exit_code == 1 and "no kept version" in missing.output


# --- POST /query from an older version ----------------------------------------------------------------------
def ask(client, text: str, headers: dict | None = None, **extra):
    return client.post("/query", json={"query": text, "top_k": 5, **extra}, headers=headers or {})


def paths(body: dict) -> set[str]:
    return {r["provenance"]["path"].rsplit("/", 1)[-1] for r in body["results"]}


def test_query_a_named_version_answers_from_it_and_marks_it_not_current(client, history) -> None:
    now = ask(client, "fetch_memory client code")
    assert now.status_code == 200 and now.json()["answered_from"] is None
    assert "client.py" not in paths(now.json())  # deleted in v2
    old = ask(client, "fetch_memory client code", version=history["v1"])
    assert old.status_code == 200, old.text
    body = old.json()
    assert body["index_version"] == history["v1"] and "client.py" in paths(body)
    client.app.state.serving.traces.flush()  # the usage trace names the version that answered
    events = [json.loads(x) for f in sorted(history["home"].traces.glob("*.jsonl")) for x in f.read_text().splitlines()]
    mine = [e for e in events if e["trace_id"] == trace_key(body["trace_id"]) and "index_version" in e]
    assert [e["index_version"] for e in mine] == [history["v1"]]  # the request's record (hit lines carry no version)
    assert body["answered_from"] == {"version_id": history["v1"], "current": False, "how": "version",
                                     "asked": history["v1"]}  # fmt: skip
    home = history["home"]
    between = (
        home.published_at(history["v1"]) + (home.published_at(history["v2"]) - home.published_at(history["v1"])) / 2
    )
    by_time = ask(client, "fetch_memory client code", as_of=between.isoformat()).json()
    assert by_time["index_version"] == history["v1"] and by_time["answered_from"]["how"] == "as_of_time"
    by_commit = ask(client, "heating help Beckley", as_of=git_head(history["repo"])).json()
    assert by_commit["index_version"] == history["v3"] and by_commit["answered_from"]["current"] is True
    # the older version is opened once and kept (LRU), not loaded per request
    older = client.app.state.serving.older
    loads = older.loads
    ask(client, "Oak Hill SNAP", version=history["v1"])
    assert older.loads == loads and history["v1"] in older.loaded()


def test_query_an_unknown_or_malformed_version_is_a_clear_error(client, history) -> None:
    missing = ask(client, "SNAP", version="20990101T000000000000Z")
    assert missing.status_code == 404 and "no kept version" in missing.json()["detail"]
    assert ask(client, "SNAP", as_of="2001-01-01T00:00:00Z").status_code == 404
    bad = ask(client, "SNAP", as_of="yesterday-ish")
    assert bad.status_code == 422 and "neither an ISO 8601 date-time" in bad.json()["detail"]
    assert ask(client, "SNAP", version="x" * 65).status_code == 422  # bounded like every field


def test_an_older_version_never_shows_a_role_what_it_may_not_read(client, history) -> None:
    public = ask(client, "zebra protocol escalation", version=history["v1"]).json()
    assert "caseworker-playbook.md" not in paths(public)
    internal = ask(client, "zebra protocol escalation", INTERNAL, version=history["v1"]).json()
    assert "caseworker-playbook.md" in paths(internal)  # v1's text: "zebra", edited to "walrus" in v2


def test_an_older_version_follows_todays_access_rules(tmp_path, history, embedder) -> None:
    """A collection public then and internal now is not shown to the public role from the older version either."""
    root = tmp_path / "copy"
    shutil.copytree(history["root"], root, symlinks=True)
    sources = root / "sources.yaml"
    text = sources.read_text(encoding="utf-8")
    sources.write_text(
        text.replace("collection: wv_benefits\n    access: public", "collection: wv_benefits\n    access: internal"),
        encoding="utf-8",
    )
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)  # retention 3: v1 goes, v2 (wv_benefits public) stays
    settings = Settings(index_dir=home.root, warm_up=False, api_keys=API_KEYS)
    with TestClient(create_app(settings, embedder)) as c:
        then = ask(c, "Oak Hill SNAP office Fayette", version=history["v2"])
        assert then.status_code == 200 and not {"fayette-county.md", "statewide-faq.md"} & paths(then.json())
        assert "fayette-county.md" in paths(
            ask(c, "Oak Hill SNAP office Fayette", INTERNAL, version=history["v2"]).json()
        )


# --- /context and /chat from an older version ---------------------------------------------------------------
def passages(body: dict) -> set[str]:
    return {p["provenance"]["path"].rsplit("/", 1)[-1] for p in body["unstructured"]}


def test_context_and_chat_answer_from_a_named_version(client, history) -> None:
    message = {"message": "Where do SNAP applications in Mingo County go?"}
    now = client.post("/context", json=message).json()
    assert "mingo-county.md" in passages(now) and now["answered_from"] is None  # Mingo was added in v2
    then = client.post("/context", json={**message, "version": history["v1"]})
    assert then.status_code == 200, then.text
    assert then.json()["index_version"] == history["v1"] and "mingo-county.md" not in passages(then.json())
    assert then.json()["answered_from"] == {"version_id": history["v1"], "current": False, "how": "version",
                                            "asked": history["v1"]}  # fmt: skip
    chat = client.post("/chat", json={**message, "as_of": "2001-01-01"})
    assert chat.status_code == 404 and "no version was published" in chat.json()["detail"]
    answered = client.post("/chat", json={**message, "version": history["v1"]}).json()
    assert answered["index_version"] == history["v1"] and answered["answered_from"]["current"] is False
    assert "mingo-county.md" not in passages(answered["evidence"])
    public = client.post("/context", json={"message": "zebra protocol escalation", "version": history["v1"]}).json()
    assert "caseworker-playbook.md" not in passages(public)


def test_openai_chat_completions_take_version_as_an_extension_field(client, history) -> None:
    body = {
        "model": "extractive",
        "messages": [{"role": "user", "content": "Where do SNAP applications in Mingo County go?"}],
    }
    now = client.post("/v1/chat/completions", json=body).json()["living_memory"]
    assert now["index_version"] == history["v3"] and now["answered_from"] is None
    then = client.post("/v1/chat/completions", json={**body, "living_memory": {"version": history["v1"]}})
    assert then.status_code == 200, then.text
    extra = then.json()["living_memory"]
    assert extra["index_version"] == history["v1"] and extra["answered_from"]["current"] is False
    assert "mingo-county.md" not in passages(extra["evidence"])
    missing = client.post("/v1/chat/completions", json={**body, "living_memory": {"as_of": "2001-01-01"}})
    assert missing.status_code == 404 and "no version was published" in missing.json()["error"]["message"]


# --- the other front doors: MCP tools and `livemem query` -----------------------------------------------------
def mcp_call(server, tool: str, arguments: dict) -> tuple[bool, object]:
    import anyio
    from mcp import Client

    async def run():
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(run)
    return result.is_error, (result.content[0].text if result.is_error else result.structured_content)


def test_mcp_tools_and_the_cli_answer_from_a_named_version_too(history, embedder) -> None:
    """`query`, `context` and `chat` over MCP and `livemem query --version/--as-of` answer from the version named, say
    so (answered_from, not current), and refuse an unknown one as HTTP does."""
    from serving.mcp import build_server
    from serving.state import ServingState

    settings = Settings(index_dir=history["home"].root, warm_up=False, api_keys=API_KEYS)
    server = build_server(ServingState.from_settings(settings, embedder), role="public", operator_roles=())
    failed, old = mcp_call(server, "query", {"query": "fetch_memory client code", "version": history["v1"]})
    assert not failed, old
    assert old["index_version"] == history["v1"] and old["answered_from"]["current"] is False
    assert "client.py" in paths(old)  # deleted in v2
    failed, now = mcp_call(server, "query", {"query": "fetch_memory client code"})
    assert not failed and now["answered_from"] is None and "client.py" not in paths(now)
    message = {"message": "Where do SNAP applications in Mingo County go?"}
    failed, then = mcp_call(server, "context", {**message, "version": history["v1"]})
    assert not failed, then
    assert then["index_version"] == history["v1"] and then["answered_from"]["how"] == "version"
    assert "mingo-county.md" not in passages(then)  # Mingo was added in v2
    failed, chat = mcp_call(server, "chat", {**message, "as_of": git_head(history["repo"])})
    assert not failed and chat["index_version"] == history["v3"] and chat["answered_from"]["current"] is True
    failed, missing = mcp_call(server, "query", {"query": "SNAP", "version": "20990101T000000000000Z"})
    assert failed and "no kept version" in missing

    runner = CliRunner()
    base = ["--index-dir", str(history["home"].root), "query", "fetch_memory client code", "--role", "public"]
    answered = runner.invoke(cli, [*base, "--version", history["v1"], "--json"])
    assert answered.exit_code == 0, answered.output
    body = json.loads(answered.output)
    assert body["index_version"] == history["v1"] and "client.py" in paths(body)
    shown = runner.invoke(cli, [*base, "--version", history["v1"]])
    assert shown.exit_code == 0 and f"answered from version {history['v1']}, not the current one" in shown.output
    unknown = runner.invoke(cli, [*base, "--as-of", "2001-01-01"])
    assert unknown.exit_code == 1 and "no version was published" in unknown.output


def test_the_seed_routes_answer_from_a_named_version_too(client, history) -> None:
    """/chat/sync, /chat/light and /gis_rag take `version` / `as_of` as /chat does and say which version answered."""
    message = {"message": "Where do SNAP applications in Mingo County go?", "version": history["v1"]}
    for route in ("/chat/sync", "/chat/light", "/gis_rag"):
        answered = client.post(route, json=message)
        assert answered.status_code == 200, (route, answered.text)
        body = answered.json()
        assert body["index_version"] == history["v1"], route
        assert body["answered_from"] == {"version_id": history["v1"], "current": False, "how": "version",
                                         "asked": history["v1"]}, route  # fmt: skip
    full = client.post("/chat/sync", json=message).json()
    assert "mingo-county.md" not in passages(full["evidence"])  # Mingo was added in v2
    now = client.post("/chat/light", json={"message": message["message"]}).json()
    assert now["answered_from"] is None and now["index_version"] == history["v3"]
    missing = client.post("/gis_rag", json={**message, "version": "20990101T000000000000Z"})
    assert missing.status_code == 404 and "no kept version" in missing.json()["detail"]


def test_hostile_version_references_are_clear_errors_at_every_door(client, history, embedder) -> None:
    """A path, an over-long value, a lone surrogate or a non-string as `version` / `as_of`: a clear refusal through
    HTTP, MCP and the CLI, never a server path or a 5xx."""
    from serving.mcp import build_server
    from serving.state import ServingState

    for bad in ("../../etc/passwd", "x" * 65, "2026-13-45T99:00:00Z"):
        for field in ("version", "as_of"):
            answered = client.post("/query", json={"query": "SNAP", field: bad})
            assert answered.status_code in (404, 422), (field, bad, answered.text)
            assert str(history["home"].root) not in answered.text
    surrogate = b'{"query": "SNAP", "version": "\\ud800"}'
    assert client.post("/query", content=surrogate, headers={"content-type": "application/json"}).status_code == 422
    assert client.post("/chat", json={"message": "SNAP", "as_of": 12.5}).status_code == 422
    settings = Settings(index_dir=history["home"].root, warm_up=False, api_keys=API_KEYS)
    server = build_server(ServingState.from_settings(settings, embedder), role="public", operator_roles=())
    failed, message = mcp_call(server, "context", {"message": "SNAP", "version": "../../etc/passwd"})
    assert failed and "version" in message and str(history["home"].root) not in message
    refused = CliRunner().invoke(
        cli, ["--index-dir", str(history["home"].root), "query", "SNAP", "--version", "x" * 65]
    )
    assert refused.exit_code != 0 and "version" in refused.output and "Traceback" not in refused.output
