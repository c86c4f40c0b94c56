"""Cursor paging of ``GET /resources`` and ``GET /facts`` (issue 49: "no way to page past `limit`") and of the MCP
``resources`` tool: pages in turn give every row exactly once, in the order of one page as large as all of them; a
cursor that is not ours or was issued for other filters is a 422 saying so; one of another index version a 409."""

from __future__ import annotations

import json

import anyio
import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app

from serving.services import paging

KEY = {"X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return example_index(tmp_path_factory)  # the session's bundled example: no index built here


@pytest.fixture(scope="module")
def client(home, embedder):
    with TestClient(make_app(home, embedder)) as client:
        yield client


def pages(client: TestClient, path: str, params: dict, key: str, headers=None) -> tuple[list, list[dict]]:
    """Every row of ``path`` for ``params``, page by page (each page's body kept), following ``next_cursor``."""
    rows, bodies, cursor = [], [], None
    for _ in range(1000):
        answer = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})}, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        bodies.append(body)
        rows += body[key]
        cursor = body["next_cursor"]
        if cursor is None:
            assert "link" not in answer.headers
            return rows, bodies
        assert answer.headers["link"].endswith('>; rel="next"') and f"cursor={cursor}" in answer.headers["link"]
    raise AssertionError("paging never ended")


@pytest.mark.parametrize(
    "params",
    [{}, {"county": "Fayette"}, {"zip": "25901", "include_stale": "true"}],
    ids=["everything", "county", "zip-with-stale"],
)
def test_resources_pages_give_every_row_once_in_order(client, params):
    whole = client.get("/resources", params={**params, "limit": 500}).json()
    assert whole["next_cursor"] is None and whole["total"] == len(whole["results"]) >= 3  # one page holds them all
    for limit in (1, 2, 5):
        rows, bodies = pages(client, "/resources", {**params, "limit": limit}, "results")
        assert rows == whole["results"], limit  # each exactly once, in the one big page's order
        assert len(bodies) == -(-whole["total"] // limit)  # no empty page at the end
        assert all(b["total"] == whole["total"] and b["county"] == whole["county"] for b in bodies)
        assert all(len(b["results"]) == limit for b in bodies[:-1])
    ids = [r["local_resource_id"] for r in whole["results"]]
    assert len(ids) == len(set(ids))


def test_facts_pages_give_every_triple_once_in_order(client):
    whole = client.get("/facts", params={"limit": 1000}, headers=KEY).json()
    assert whole["next_cursor"] is None and whole["total"] == len(whole["facts"]) >= 5
    for limit in (1, 3):
        facts, bodies = pages(client, "/facts", {"limit": limit}, "facts", KEY)
        assert facts == whole["facts"], limit
        assert len(bodies) == -(-whole["total"] // limit)
    county = client.get("/facts", params={"predicate": "located_in", "limit": 1000}, headers=KEY).json()
    facts, _ = pages(client, "/facts", {"predicate": "located_in", "limit": 2}, "facts", KEY)
    assert facts == county["facts"] and all(f["predicate"] == "located_in" for f in facts)


def test_limit_may_change_between_pages_and_rdf_pages_by_link(client):
    first = client.get("/resources", params={"limit": 2}).json()
    rest = client.get("/resources", params={"limit": 500, "cursor": first["next_cursor"]}).json()
    whole = client.get("/resources", params={"limit": 500}).json()
    assert first["results"] + rest["results"] == whole["results"] and rest["next_cursor"] is None
    # RDF has no body field for it: the Link header carries the next page, in the same format
    turtle = client.get("/facts", params={"limit": 2}, headers={**KEY, "Accept": "text/turtle"})
    assert turtle.status_code == 200 and turtle.headers["content-type"].startswith("text/turtle")
    assert turtle.headers["x-results-truncated"] == "true" and 'rel="next"' in turtle.headers["link"]
    following = client.get(turtle.headers["link"][1:].split(">;")[0], headers={**KEY, "Accept": "text/turtle"})
    assert following.status_code == 200 and following.text != turtle.text


def test_current_clients_see_the_same_fields(client):
    body = client.get("/resources", params={"county": "Fayette", "limit": 1}).json()
    assert set(body) == {"index_version", "county", "total", "results", "next_cursor"}
    body = client.get("/facts", params={"limit": 1}, headers=KEY).json()
    assert set(body) == {"facts", "total", "matched", "index_version", "next_cursor"}


def test_a_bad_cursor_is_a_422_saying_why(client):
    first = client.get("/resources", params={"county": "Fayette", "limit": 1}).json()
    facts_cursor = client.get("/facts", params={"limit": 1}, headers=KEY).json()["next_cursor"]
    cases = {
        "not-a-cursor!!": "not a cursor this API issued",
        "eyJ4IjogMX0": "not a cursor this API issued",  # base64url JSON, but not ours: {"x": 1}
        "x" * 600: "at most 512 characters",  # FastAPI's own bound on the parameter
        facts_cursor: "issued by /facts, not /resources",
    }
    for cursor, why in cases.items():
        answer = client.get("/resources", params={"county": "Fayette", "limit": 1, "cursor": cursor})
        assert answer.status_code == 422, (cursor, answer.text)
        body = answer.json()
        assert body["detail"][0]["loc"] == ["query", "cursor"] and why in body["message"], (cursor, body)
    other_filters = client.get("/resources", params={"county": "Raleigh", "cursor": first["next_cursor"]})
    assert other_filters.status_code == 422 and "issued for other filters" in other_filters.json()["message"]
    assert "omit cursor to start from the first page" in other_filters.json()["message"]


def test_a_cursor_of_another_index_version_is_a_409(client, home):
    current = home.current()
    filters = paging.resources_filters(None, "Fayette", None, None, None, False)
    stale = paging.encode("/resources", "20200101T000000000000Z", 1, filters)
    answer = client.get("/resources", params={"county": "Fayette", "cursor": stale})
    assert answer.status_code == 409, answer.text
    assert "20200101T000000000000Z" in answer.json()["detail"] and current in answer.json()["detail"]
    assert "start again without cursor" in answer.json()["detail"]
    facts = paging.encode("/facts", "20200101T000000000000Z", 1, {"subject": None, "name": None, "predicate": None,
                                                                  "object": None})  # fmt: skip
    assert client.get("/facts", params={"cursor": facts}, headers=KEY).status_code == 409
    # the same position in the served version continues
    fresh = paging.encode("/resources", current, 1, filters)
    page = client.get("/resources", params={"county": "Fayette", "cursor": fresh, "limit": 500}).json()
    assert page["results"] == client.get("/resources", params={"county": "Fayette", "limit": 500}).json()["results"][1:]


def test_the_mcp_resources_tool_pages_with_the_same_cursors(home, embedder, client):
    from mcp import Client

    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    server = build_server(ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder), None,
                          operator_roles=())  # fmt: skip

    async def run():
        rows, cursor, errors = [], None, []
        async with Client(server) as mcp:
            for _ in range(100):
                args = {"county": "Fayette", "limit": 2, **({"cursor": cursor} if cursor else {})}
                result = await mcp.call_tool("resources", args)
                assert not result.is_error, result.content
                rows += result.structured_content["results"]
                cursor = result.structured_content["next_cursor"]
                if cursor is None:
                    break
            for bad in ("not-a-cursor!!", http_cursor):
                result = await mcp.call_tool("resources", {"county": "Raleigh", "cursor": bad})
                errors.append((result.is_error, result.content[0].text))
        return rows, errors

    http_cursor = client.get("/resources", params={"county": "Fayette", "limit": 1}).json()["next_cursor"]
    rows, errors = anyio.run(run)
    whole = client.get("/resources", params={"county": "Fayette", "limit": 500}).json()["results"]
    assert [r["local_resource_id"] for r in rows] == [r["local_resource_id"] for r in whole]
    assert errors[0][0] and "not a cursor this API issued" in errors[0][1]
    assert errors[1][0] and "issued for other filters" in errors[1][1]
    assert json.dumps(rows)  # structured content, as the HTTP body
