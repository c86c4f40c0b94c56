"""/openapi.json as a client generator and Swagger UI read it (issue 34, "OpenAPI"): the API key is a security scheme
(not a header parameter on each route), each operation says whether a request without a key is answered, every
property says what it means, and every example is valid for its schema and is answered by the real app."""

from __future__ import annotations

import re
from collections import Counter
from importlib import import_module
from pkgutil import iter_modules
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from pydantic import BaseModel
from support.context import INTERNAL_KEY, example_index, make_app

import serving.models
from serving.app import create_app
from serving.settings import Settings

# the modules whose models this test requires described whole; the others' counts are in its failure message
OWN_MODULES = ("serving.models", "serving.models.context", "serving.models.compat", "serving.models.memory",
               "serving.models.resources", "serving.openapi")  # fmt: skip
KEY = "contract-test-key"
SCHEMES = [{"ApiKey": []}, {"Bearer": []}]
# request bodies whose models have no example of their own here: a valid body, so the call reaches the key check
BODIES = {("post", "/gis/query"): {"query": "food pantry", "county": "Fayette"}, ("post", "/facts/sparql"): {
    "query": "ASK { ?s ?p ?o }"}}  # fmt: skip
UUID = "0c8f4e2a-7b1d-5e3f-9a6c-2d4b8e1f0a37"


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """The app over an index home with nothing published: its spec, and its answers before any index is read."""
    settings = Settings(index_dir=tmp_path_factory.mktemp("no-index"), warm_up=False, api_keys={KEY: "internal"})
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def spec(bare) -> dict[str, Any]:
    return bare.get("/openapi.json").json()


def operations(spec: dict[str, Any]):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def body_example(spec: dict[str, Any], method: str, path: str, operation: dict[str, Any]) -> Any:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema = content["schema"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return (schema.get("examples") or [BODIES.get((method, path))])[0]


def call(client: TestClient, spec: dict[str, Any], method: str, path: str, operation: dict[str, Any], headers=None):
    url = re.sub(r"\{[^}]+\}", UUID, path)
    return client.request(method.upper(), url, json=body_example(spec, method, path, operation), headers=headers)


def validator(spec: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A JSON Schema 2020-12 validator of ``schema`` whose ``#/components/...`` references resolve in ``spec``
    (OpenAPI 3.1's schemas are JSON Schema 2020-12)."""
    return Draft202012Validator({**spec, **schema})


def test_the_document_is_valid_openapi(spec):
    validate(spec)  # openapi-spec-validator: raises naming the first problem
    assert spec["openapi"].startswith("3.1")


def test_the_api_key_is_a_security_scheme_not_a_header_parameter(spec):
    schemes = spec["components"]["securitySchemes"]
    assert schemes["ApiKey"] == {**schemes["ApiKey"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert schemes["Bearer"] == {**schemes["Bearer"], "type": "http", "scheme": "bearer"}
    assert all(s["description"] for s in schemes.values())
    for method, path, operation in operations(spec):
        headers = {p["name"].lower() for p in operation.get("parameters", []) if p["in"] == "header"}
        assert not headers & {"x-api-key", "authorization"}, (method, path)
        assert "security" in operation, (method, path)  # every operation says, one way or the other
    keyed = {(m, p) for m, p, o in operations(spec) if o["security"]}
    assert ("post", "/query") in keyed and ("post", "/v1/chat/completions") in keyed and ("get", "/memory") in keyed
    assert spec["paths"]["/healthz"]["get"]["security"] == []  # reads no key: open to everyone
    for method, path, operation in operations(spec):
        if operation["security"]:
            assert operation["security"][:2] == SCHEMES, (method, path)  # either way of sending the key
            assert "401" in operation["responses"], (method, path)


def test_security_says_what_a_request_without_a_key_gets(bare, spec):
    """What each operation's ``security`` promises is what the app does: ``{}`` among the requirements (the key is
    optional) means a request without a key is answered as the public role; without ``{}`` (personal memory) it is
    a 401; ``security: []`` means a key is never read, so not even an unknown one is refused. Every keyed operation
    refuses an unknown key, sent either way."""
    optional = required = 0
    for method, path, operation in operations(spec):
        security = operation["security"]
        anonymous = call(bare, spec, method, path, operation)
        unknown = call(bare, spec, method, path, operation, {"X-API-Key": "not-a-key"})
        bearer = call(bare, spec, method, path, operation, {"Authorization": "Bearer not-a-key"})
        where = (method, path, anonymous.status_code, unknown.status_code)
        if not security:
            assert 401 not in (anonymous.status_code, unknown.status_code, bearer.status_code), where
            continue
        assert unknown.status_code == 401 and bearer.status_code == 401, where
        if {} in security:
            optional += 1
            assert anonymous.status_code != 401, where
        else:
            required += 1
            assert anonymous.status_code == 401, where
            assert "needs an API key" in anonymous.json()["detail"]
    assert optional >= 15 and required == 4  # the four /memory operations need a key


def test_empty_or_malformed_credentials_are_refused_as_before(bare):
    """The security schemes hand the app the header as sent: an empty X-API-Key, or an Authorization header that is
    not Bearer, is a 401 (FastAPI's own schemes read both as no key, which would make the caller the public role,
    and on /memory the user every such caller shares)."""
    for headers in ({"X-API-Key": ""}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "}):
        for method, path in (("get", "/manifest"), ("get", "/memory")):
            answer = bare.request(method.upper(), path, headers=headers)
            assert answer.status_code == 401, (headers, path, answer.text)
    assert "Bearer <API key>" in bare.get("/manifest", headers={"Authorization": "Basic x"}).json()["detail"]
    assert bare.get("/manifest", headers={"X-API-Key": KEY}).status_code == 503  # a good key: on to the index


def test_every_401_says_how_to_authenticate_and_schema_names_are_unique(bare, spec):
    """Issue 49: a 401 carries ``WWW-Authenticate`` (RFC 9110 §11.6.1), on every door; no two schemas share a name
    (two ``Fact`` models made FastAPI name both by module path, and openapi-python-client dropped ``FactsResponse``);
    ``/resources`` refuses a query parameter it does not have, naming it."""
    for method, path, headers in (
        ("get", "/manifest", {"X-API-Key": "wrong"}),
        ("get", "/manifest", {"Authorization": "Basic x"}),
        ("get", "/memory", {}),
        ("get", "/v1/models", {"Authorization": "Bearer wrong"}),
        ("post", "/v1/chat/completions", {"Authorization": "Bearer wrong"}),
    ):
        answer = bare.request(method.upper(), path, headers=headers, json={"model": "x", "messages": []})
        assert answer.status_code == 401, (path, answer.text)
        assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="living-memory"'), (path, answer.headers)
    assert 'error="invalid_token"' in bare.get("/manifest", headers={"X-API-Key": "wrong"}).headers["WWW-Authenticate"]
    assert all("WWW-Authenticate" in op["responses"]["401"].get("headers", {}) for _, _, op in operations(spec)
               if "401" in op.get("responses", {}) and "$ref" not in op["responses"]["401"]
               and op["responses"]["401"].get("description", "").startswith("an unknown API key, or"))  # fmt: skip
    schemas = spec["components"]["schemas"]
    assert not [name for name in schemas if "__" in name]  # every schema has a name of its own
    assert schemas["FactsResponse"]["properties"]["facts"]["items"] == {"$ref": "#/components/schemas/Fact"}
    assert "EvidenceFact" in schemas
    unknown = bare.get("/resources", params={"zipcode": "25901", "limit": 5})
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["detail"][0]["loc"] == ["query", "zipcode"] and "zipcode" in unknown.json()["message"]
    assert "is not a parameter of /resources" in unknown.json()["message"]
    assert bare.get("/resources", params={"zip": "25901"}).status_code == 503  # known ones: on to the index


def owner(name: str) -> str:
    """The module of a component schema (FastAPI names a model whose name two modules share by its module path);
    the 422 bodies are serving.openapi's."""
    if "__" in name:
        return name.rsplit("__", 1)[0].replace("__", ".")
    if name in ("HTTPValidationError", "ValidationError"):
        return "serving.openapi"
    return MODEL_MODULES.get(name, "other")


MODELS_PATH = serving.models.__path__
MODEL_MODULES = {
    name: module.__name__
    for module in [serving.models] + [import_module(f"serving.models.{m.name}") for m in iter_modules(MODELS_PATH)]
    for name, value in vars(module).items()
    if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
}


def test_every_property_says_what_it_means(spec):
    """Every property of every model in the document has a description (was 145 of 536); the counts per module
    are in the failure message."""
    total: Counter[str] = Counter()
    bare_props: Counter[str] = Counter()
    missing = []
    for name, schema in spec["components"]["schemas"].items():
        module = owner(name)
        for prop, value in schema.get("properties", {}).items():
            total[module] += 1
            if not value.get("description", "").strip():
                bare_props[module] += 1
                missing.append(f"{name}.{prop}")
    counts = {m: f"{total[m] - bare_props[m]}/{total[m]} described" for m in sorted(total)}
    assert not missing, f"undescribed: {missing}; per module: {counts}"
    assert sum(total.values()) > 600  # the count covers the models, not an empty spec


def test_every_example_is_valid_for_its_schema(spec):
    """What a generated client would send or receive: every example in the document validates against its own
    schema with jsonschema, and the validator does catch a wrong one."""
    schemas = spec["components"]["schemas"]
    checked = 0
    for name, schema in schemas.items():
        for example in schema.get("examples", []):
            errors = [e.message for e in validator(spec, {"$ref": f"#/components/schemas/{name}"}).iter_errors(example)]
            assert not errors, (name, errors)
            checked += 1
    for method, path, operation in operations(spec):
        for media in operation.get("requestBody", {}).get("content", {}).values():
            for example in media.get("examples", {}).values():
                assert not list(validator(spec, media["schema"]).iter_errors(example["value"])), (method, path)
    assert checked >= 20
    wrong = {**schemas["QueryRequest"]["examples"][0], "top_k": 0}
    assert not validator(spec, {"$ref": "#/components/schemas/QueryRequest"}).is_valid(wrong)


def test_request_bodies_and_key_responses_have_examples(spec):
    schemas = spec["components"]["schemas"]
    for method, path, operation in operations(spec):
        schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        name = schema.get("$ref", "").rsplit("/", 1)[-1]
        if name and owner(name) in OWN_MODULES:
            assert schemas[name].get("examples"), (method, path, name)
    for name in ("QueryResponse", "FeedbackResponse", "Health", "ResourcesResponse", "LightResponse", "Card",
                 "Memory", "Deleted", "ErrorBody", "HTTPValidationError", "OpenAIErrorBody", "ContextResponse",
                 "ChatResponse", "GisRagResponse", "ChatCompletion"):  # fmt: skip
        assert schemas[name].get("examples"), name


def _has_example(spec: dict[str, Any], media: dict[str, Any]) -> bool:
    schema = media.get("schema", {})
    named = spec["components"]["schemas"].get(schema.get("$ref", "").rsplit("/", 1)[-1], {})
    return bool(media.get("examples") or "example" in media or schema.get("examples") or named.get("examples"))


def test_every_operation_has_an_example(spec):
    """Issue 49: "27 of 28 operations have no example". Every parameter has an example valid for its schema, every
    request body (each media type) has one, and an operation that takes neither shows an example of its answer."""
    missing, operations_seen = [], 0
    for method, path, operation in operations(spec):
        operations_seen += 1
        parameters = operation.get("parameters", [])
        for parameter in parameters:
            examples = parameter.get("examples") or parameter["schema"].get("examples") or []
            if isinstance(examples, dict):
                examples = [e["value"] for e in examples.values()]
            if not examples:
                missing.append(f"{method} {path} parameter {parameter['name']}")
            for example in examples:
                assert validator(spec, parameter["schema"]).is_valid(example), (method, path, parameter["name"])
        bodies = operation.get("requestBody", {}).get("content", {})
        missing += [f"{method} {path} body {m}" for m, media in bodies.items() if not _has_example(spec, media)]
        if not parameters and not bodies:
            answers = [r for code, r in operation["responses"].items() if code.startswith("2")]
            if not any(_has_example(spec, media) for r in answers for media in r.get("content", {}).values()):
                missing.append(f"{method} {path} response")
    assert not missing, missing
    assert operations_seen >= 28


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    """The bundled example, built once per session, answered by the app (personal memory in a folder of its own:
    the cards the examples write stay out of the shared index home)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LIVEMEM_PERSONAL_DIR", str(tmp_path_factory.mktemp("personal")))
        with TestClient(make_app(example_index(tmp_path_factory), embedder)) as client:
            yield client


def test_the_real_app_answers_every_request_example(served):
    """A client built from the document sends the examples: the app answers each one (no 422), and what it answers
    validates against the response schema the document gives for that status."""
    spec = served.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    sent = 0
    for method, path, operation in operations(spec):
        content = operation.get("requestBody", {}).get("content", {}).get("application/json")
        name = content and content["schema"].get("$ref", "").rsplit("/", 1)[-1]
        if not name or owner(name) not in OWN_MODULES:
            continue
        for example in schemas[name]["examples"]:
            answer = served.request(method.upper(), path, json=example, headers={"X-API-Key": INTERNAL_KEY})
            # answered; only /feedback's example names a trace this server never issued (its documented 404)
            assert answer.status_code < 300 or (path, answer.status_code) == ("/feedback", 404), (path, answer.text)
            sent += 1
            documented = operation["responses"].get(str(answer.status_code), {}).get("content", {})
            media = documented.get(answer.headers["content-type"].split(";")[0])
            assert media is not None, (path, answer.status_code, answer.headers["content-type"])
            if answer.headers["content-type"].startswith("application/json"):
                errors = [e.message for e in validator(spec, media["schema"]).iter_errors(answer.json())]
                assert not errors, (path, answer.status_code, errors[:3])
    assert sent >= 12
