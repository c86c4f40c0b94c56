"""The serving edge, one piece at a time: server paths anywhere inside a string are reduced to their last part,
the body guard judges a Content-Type exactly as FastAPI parses it, and the body timeout is a typed setting."""

from __future__ import annotations

import email.message

import pytest
from pydantic import ValidationError

from livemem.settings import ServingSettings
from serving.deps import without_server_paths
from serving.limits import _is_json


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ("csv file /srv/data/examples/registry/local_resources.csv", "csv file local_resources.csv"),
        ("/srv/git/handbook", "handbook"),
        ("/srv/git/handbook/", "handbook"),
        ("file:///srv/data/rows.csv", "rows.csv"),
        ("read file://localhost/srv/data/rows.json, then stopped", "read rows.json, then stopped"),
        ('Cannot open file "/srv/idx/versions/v1/tables.duckdb": No such file', 'Cannot open file "tables.duckdb": No such file'),
        ("git@host:/srv/git/repo (gone)", "git@host:repo (gone)"),
        ("error:/srv/x/y.duckdb", "error:y.duckdb"),
        ("[Errno 2] No such file or directory: '/srv/idx/CURRENT'", "[Errno 2] No such file or directory: 'CURRENT'"),
    ],
)  # fmt: skip
def test_absolute_paths_anywhere_in_a_string_are_cut_to_their_last_part(shown: str, expected: str) -> None:
    assert without_server_paths(shown) == expected
    assert without_server_paths({"a": [shown, 3, None]}) == {"a": [expected, 3, None]}


@pytest.mark.parametrize(
    "kept",
    [
        "examples/corpus/governance/BREATH.md", "../registry/rows.csv", "sentence-transformers/all-MiniLM-L6-v2:int8",
        "text/plain; charset=utf-8", "https://example.org/programs/1", "2024/01/02", "/", "~/notes.md", "",
    ],
)  # fmt: skip
def test_relative_paths_urls_and_media_types_are_kept(kept: str) -> None:
    assert without_server_paths(kept) == kept


def fastapi_parses_as_json(content_type: str) -> bool:
    """What ``fastapi.routing`` does with a request's (first) Content-Type before it parses a body."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json", "Application/JSON", "application/json; charset=utf-8", "application/json;charset=latin-1",
        "application/merge-patch+json", "application/vnd.api+json ; q=1", 'application/json; x="a;b"',
        "application/json, text/plain", "text/plain", "text/json", "application/jsonx", "application/ json",
        "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/sparql-query", "json",
        "application/json\tx",
    ],
)  # fmt: skip
def test_the_body_guard_judges_a_content_type_as_fastapi_does(content_type: str) -> None:
    assert _is_json(content_type.encode("latin-1")) == fastapi_parses_as_json(content_type)


def test_the_body_timeout_is_a_typed_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAG_BODY_TIMEOUT_S", raising=False)
    assert ServingSettings().body_timeout_s == 10.0
    monkeypatch.setenv("RAG_BODY_TIMEOUT_S", "2.5")
    assert ServingSettings().body_timeout_s == 2.5
    monkeypatch.setenv("RAG_BODY_TIMEOUT_S", "0")
    with pytest.raises(ValidationError, match="RAG_BODY_TIMEOUT_S"):
        ServingSettings()
