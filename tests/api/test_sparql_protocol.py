"""SPARQL and RDF clients against a real uvicorn server: SPARQLWrapper speaks the SPARQL 1.1 Protocol (GET, form
POST, ``application/sparql-query``) to ``/facts/sparql``, rdflib parses every result and graph served, and the
facts come back as Turtle, N-Triples, JSON-LD and RDF/XML that are the same graph as the version's N-Triples.
The dialect's details: TSV results, CORS for a query editor on another origin, the service description of a GET
without a query, HEAD, and entity IRIs that dereference (rdflib fetching them) under a configured base."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from fastapi.testclient import TestClient
from rdflib import RDF, RDFS, XSD, Graph, Literal, Namespace, URIRef
from rdflib.compare import isomorphic
from rdflib.query import Result
from SPARQLWrapper import (
    CSV,
    GET,
    JSON,
    JSONLD,
    N3,
    POST,
    POSTDIRECTLY,
    RDFXML,
    TSV,
    TURTLE,
    URLENCODED,
    XML,
    SPARQLWrapper,
)
from SPARQLWrapper.SPARQLExceptions import Unauthorized
from support.gbim_data import LIEAP, OAK_HILL, SPATIAL
from support.servers import free_port, uvicorn
from support.serving import INTERNAL_KEY, publish_with_gbim, serve

from livemem.errors import ConfigError
from livemem.gbim import GBIM_DIR, GBIM_IRI, RDF_MEDIA_TYPES
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

GEO = "http://www.w3.org/2003/01/geo/wgs84_pos#"
LABELS_IN_RALEIGH = (
    "SELECT ?e ?label ?lat WHERE { ?e gbim:located_in ?c . ?c rdfs:label ?county . ?e rdfs:label ?label . "
    '?e geo:lat ?lat . FILTER(CONTAINS(LCASE(STR(?county)), "raleigh")) } ORDER BY ?label'
)
EVERYTHING = "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }"


@pytest.fixture(scope="module")
def facts_home(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("sparql_protocol")
    return publish_with_gbim(root, embedder, SPATIAL)


@pytest.fixture(scope="module")
def server(facts_home):
    with uvicorn(facts_home) as url:
        yield url


@pytest.fixture(scope="module")
def on_disk(facts_home) -> Graph:
    """The version's facts as written by the export (sorted N-Triples)."""
    path = facts_home.version_dir(facts_home.current()) / GBIM_DIR / "gbim.nt"
    return Graph().parse(path, format="nt")


def endpoint(url: str, return_format: str, method: str = GET, request_method: str = URLENCODED) -> SPARQLWrapper:
    client = SPARQLWrapper(f"{url}/facts/sparql", returnFormat=return_format)
    client.setMethod(method)
    client.setRequestMethod(request_method)
    return client


def entity(entity_id: str) -> URIRef:
    return URIRef(f"{GBIM_IRI}entity/{entity_id}")


def test_on_disk_turtle_is_the_graph_of_the_ntriples(facts_home, on_disk) -> None:
    turtle = Graph().parse(facts_home.version_dir(facts_home.current()) / GBIM_DIR / "gbim.ttl", format="turtle")
    assert len(on_disk) > 50 and isomorphic(turtle, on_disk)
    # Reprojected coordinates carry more than the 6 digits rdflib's own Turtle keeps: the check above means something.
    lats = [o for o in on_disk.objects(None, URIRef(GEO + "lat"))]
    assert lats and all(o.datatype == XSD.double for o in lats)
    assert any(len(str(o).replace("-", "").replace(".", "").lstrip("0")) > 7 for o in lats)


@pytest.mark.parametrize(
    ("method", "request_method"), [(GET, URLENCODED), (POST, URLENCODED), (POST, POSTDIRECTLY)], ids=str
)
def test_sparqlwrapper_selects_by_get_form_and_direct_post(server, method, request_method) -> None:
    client = endpoint(server, JSON, method, request_method)
    client.setQuery(LABELS_IN_RALEIGH)
    data = client.queryAndConvert()
    assert data["head"]["vars"] == ["e", "label", "lat"]
    rows = data["results"]["bindings"]
    assert rows and any("Beckley" in r["label"]["value"] for r in rows)
    assert all(r["e"]["type"] == "uri" and r["label"]["type"] == "literal" for r in rows)
    # Typed literals keep their datatype and full precision: the same latitude /entities reports.
    lieap = next(r for r in rows if r["e"]["value"] == str(entity(LIEAP)))
    assert lieap["lat"]["datatype"] == str(XSD.double)
    assert float(lieap["lat"]["value"]) == httpx.get(f"{server}/entities/{LIEAP}").json()["lat"]


def test_result_formats_by_accept_parse_back_to_the_same_rows(server) -> None:
    query = {"query": LABELS_IN_RALEIGH}
    parsed = {}
    for media_type, rdflib_format in [
        ("application/sparql-results+json", "json"),
        ("application/sparql-results+xml", "xml"),
        ("text/csv", "csv"),
    ]:
        response = httpx.get(f"{server}/facts/sparql", params=query, headers={"Accept": media_type})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].split(";")[0] == media_type
        assert response.headers["vary"] == "Accept" and response.headers["x-index-version"]
        result = Result.parse(io.BytesIO(response.content), format=rdflib_format)
        parsed[media_type] = [tuple(str(term) for term in row) for row in result]
    assert parsed["application/sparql-results+json"] == parsed["application/sparql-results+xml"]
    assert parsed["text/csv"] == parsed["application/sparql-results+json"]  # CSV drops datatypes, not values
    xml = endpoint(server, XML)
    xml.setQuery(LABELS_IN_RALEIGH)
    assert xml.queryAndConvert().getElementsByTagName("result").length == len(parsed["text/csv"])
    csv = endpoint(server, CSV, POST)
    csv.setQuery(LABELS_IN_RALEIGH)
    assert csv.queryAndConvert().decode().splitlines()[0] == "e,label,lat"


def test_ask_answers_a_boolean(server) -> None:
    for return_format in (JSON, XML):
        client = endpoint(server, return_format, POST, POSTDIRECTLY)
        client.setQuery("ASK { ?e gbim:serves_zip ?z }")
        converted = client.queryAndConvert()
        boolean = converted["boolean"] if return_format == JSON else converted.getElementsByTagName("boolean")[0]
        assert boolean is True or boolean.firstChild.data == "true"
    csv = httpx.get(f"{server}/facts/sparql", params={"query": "ASK {}"}, headers={"Accept": "text/csv"})
    assert csv.status_code == 406 and "ASK results" in csv.json()["detail"]


@pytest.mark.parametrize(
    ("return_format", "rdflib_format", "media_type"),
    [
        (TURTLE, "turtle", "text/turtle"),
        (N3, "turtle", "text/turtle"),
        (JSONLD, "json-ld", "application/ld+json"),
        (RDFXML, "xml", "application/rdf+xml"),
    ],
)
def test_construct_answers_the_facts_graph_in_rdf(server, on_disk, return_format, rdflib_format, media_type) -> None:
    client = endpoint(server, return_format, POST)
    client.setQuery(EVERYTHING)
    response = client.query().response
    assert response.headers["content-type"].split(";")[0] == media_type
    served = Graph().parse(data=response.read().decode(), format=rdflib_format)
    assert isomorphic(served, on_disk)


def test_n_triples_and_describe(server, on_disk) -> None:
    nt = httpx.post(
        f"{server}/facts/sparql",
        content=EVERYTHING,
        headers={"Content-Type": "application/sparql-query", "Accept": "application/n-triples"},
    )
    assert nt.headers["content-type"].startswith("application/n-triples")
    assert isomorphic(Graph().parse(data=nt.text, format="nt"), on_disk)
    client = endpoint(server, TURTLE)
    client.setQuery(f"DESCRIBE <{entity(OAK_HILL)}>")
    described = Graph().parse(data=client.queryAndConvert(), format="turtle")
    assert set(described.triples((entity(OAK_HILL), None, None))) == set(
        on_disk.triples((entity(OAK_HILL), None, None))
    )


def test_the_json_body_api_is_unchanged_and_can_ask_for_standard_formats(server) -> None:
    own = httpx.post(f"{server}/facts/sparql", json={"query": LABELS_IN_RALEIGH, "limit": 1})
    assert own.headers["content-type"] == "application/json"
    assert own.json()["variables"] == ["e", "label", "lat"] and own.json()["truncated"] is True
    assert len(own.json()["rows"]) == 1 and own.json()["index_version"]
    standard = httpx.post(
        f"{server}/facts/sparql",
        json={"query": LABELS_IN_RALEIGH, "limit": 1},
        headers={"Accept": "application/sparql-results+json"},
    )
    assert len(standard.json()["results"]["bindings"]) == 1 and standard.headers["x-results-truncated"] == "true"
    graph = httpx.post(f"{server}/facts/sparql", json={"query": EVERYTHING, "limit": 5})
    assert graph.headers["content-type"].startswith("text/turtle")
    assert len(Graph().parse(data=graph.text, format="turtle")) == 5
    assert graph.headers["x-results-truncated"] == "true"


def test_protocol_errors_say_what_to_change(server) -> None:
    url = f"{server}/facts/sparql"
    update = "INSERT DATA { <urn:a> <urn:b> <urn:c> }"
    cases = [
        (httpx.post(url, data={"update": update}), 400, "read-only"),
        (httpx.post(url, content=update, headers={"Content-Type": "application/sparql-update"}), 400, "read-only"),
        (httpx.post(url, content=update, headers={"Content-Type": "application/sparql-query"}), 400, "read-only"),
        (httpx.get(url, params={"query": "ASK {}", "default-graph-uri": "urn:g"}), 400, "default-graph-uri"),
        (httpx.post(url, data={"query": "ASK {}", "named-graph-uri": "urn:g"}), 400, "named-graph-uri"),
        (httpx.post(url, data={"format": "json"}), 400, "query"),
        (httpx.post(url, content="ASK {}", headers={"Content-Type": "text/plain"}), 415, "application/sparql-query"),
        (httpx.post(url, content=b"\xff", headers={"Content-Type": "application/sparql-query"}), 400, "UTF-8"),
        (httpx.get(url, params={"query": "ASK {}"}, headers={"Accept": "image/png"}), 406, "text/turtle"),
        (httpx.get(url, params={"query": "SELECT WHERE {"}), 400, "not a valid SPARQL query"),
    ]
    for response, status, named in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert named in json.dumps(response.json()), response.json()
    assert httpx.get(url, params={"query": ""}).status_code == 422
    long_query = httpx.post(url, data={"query": "ASK {}" + " " * 5000})
    assert long_query.status_code == 422


def test_keys_apply_to_protocol_requests(server) -> None:
    client = endpoint(server, JSON)
    client.setQuery("ASK {}")
    client.addCustomHttpHeader("X-API-Key", "not-a-key")
    with pytest.raises(Unauthorized):
        client.queryAndConvert()


@pytest.mark.parametrize("media_type", list(RDF_MEDIA_TYPES))
def test_facts_by_content_negotiation_are_the_exported_graph(server, on_disk, media_type) -> None:
    everything = httpx.get(f"{server}/facts", params={"limit": 1000}, headers={"Accept": media_type})
    assert everything.status_code == 200 and everything.headers["content-type"].split(";")[0] == media_type
    assert isomorphic(Graph().parse(data=everything.text, format=RDF_MEDIA_TYPES[media_type]), on_disk)
    one = httpx.get(f"{server}/facts/{OAK_HILL}", headers={"Accept": media_type})
    assert one.headers["content-type"].split(";")[0] == media_type
    served = Graph().parse(data=one.text, format=RDF_MEDIA_TYPES[media_type])
    expected = Graph()
    for triple in on_disk.triples((entity(OAK_HILL), None, None)):
        expected.add(triple)
        if isinstance(triple[2], URIRef) and triple[2].startswith(GBIM_IRI) and "/class/" not in triple[2]:
            expected.add((triple[2], RDFS.label, on_disk.value(triple[2], RDFS.label)))
    assert isomorphic(served, expected) and served.value(entity(OAK_HILL), RDFS.label)


def test_facts_json_stays_the_default_and_unknown_entities_are_404(server) -> None:
    for accept in (None, "application/json", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"):
        response = httpx.get(
            f"{server}/facts", params={"subject": OAK_HILL}, headers={"Accept": accept} if accept else {}
        )
        assert response.headers["content-type"] == "application/json" and response.json()["facts"]
    turtle = httpx.get(f"{server}/facts/{OAK_HILL}")
    assert turtle.headers["content-type"].startswith("text/turtle")
    as_json = httpx.get(f"{server}/facts/{OAK_HILL}", headers={"Accept": "application/json"})
    assert as_json.headers["content-type"] == "application/ld+json"
    missing = httpx.get(f"{server}/facts/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    refused = httpx.get(f"{server}/facts", headers={"Accept": "image/png"})
    assert refused.status_code == 406


# --- SPARQL 1.1 dialect: TSV results, CORS, the service description, HEAD, dereferenceable IRIs ------------------
YASGUI = "https://yasgui.example.org"
OUTSIDER_KEY = "outsider-test-key"  # a role that reads internal collections only: not the public facilities
SD = Namespace("http://www.w3.org/ns/sparql-service-description#")
FORMATS = Namespace("http://www.w3.org/ns/formats/")


@pytest.fixture(scope="module")
def linked(facts_home, embedder):
    """The same version served with RAG_CORS_ORIGINS and RAG_RDF_BASE_IRI set to the server's own URL."""
    port = free_port()
    settings = Settings(
        index_dir=facts_home.root,
        warm_up=False,
        cors_origins=YASGUI,  # as the environment gives it: comma-separated
        rdf_base_iri=f"http://127.0.0.1:{port}",  # the trailing slash is added
        api_keys={INTERNAL_KEY: "internal", OUTSIDER_KEY: "outsider"},
        roles={"public": ["public"], "internal": ["public", "internal"], "outsider": ["internal"]},
    )
    assert settings.rdf_base_iri == f"http://127.0.0.1:{port}/"
    with serve(create_app(settings, embedder), port) as url:
        yield url


def test_tsv_results_keep_every_term_and_sparqlwrapper_reads_them(server) -> None:
    json_rows = httpx.get(f"{server}/facts/sparql", params={"query": LABELS_IN_RALEIGH}).content
    expected = [tuple(row) for row in Result.parse(io.BytesIO(json_rows), format="json")]
    response = httpx.get(
        f"{server}/facts/sparql", params={"query": LABELS_IN_RALEIGH}, headers={"Accept": "text/tab-separated-values"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].split(";")[0] == "text/tab-separated-values"
    header, first = response.text.splitlines()[:2]
    assert header == "?e\t?label\t?lat"
    iri, label, lat = first.split("\t")
    assert iri.startswith(f"<{GBIM_IRI}entity/") and label.startswith('"') and lat.endswith(f'"^^<{XSD.double}>')
    # rdflib's TSV parser gives back the very terms of the JSON results: IRIs, literals, datatypes and all
    assert [tuple(row) for row in Result.parse(io.BytesIO(response.content), format="tsv")] == expected
    client = endpoint(server, TSV)
    client.setQuery(LABELS_IN_RALEIGH)
    assert client.queryAndConvert().decode().splitlines() == response.text.splitlines()
    ask = httpx.get(
        f"{server}/facts/sparql", params={"query": "ASK {}"}, headers={"Accept": "text/tab-separated-values"}
    )
    assert ask.status_code == 406 and "ASK results" in ask.json()["detail"]


def test_tsv_escapes_tabs_newlines_and_quotes_and_keeps_languages(server) -> None:
    query = 'SELECT ?text ?name ?none WHERE { BIND("a\\tb\\nc \\"d\\" \\\\e" AS ?text) BIND("Oak Hill"@en AS ?name) }'
    response = httpx.post(
        f"{server}/facts/sparql",
        content=query,
        headers={"Content-Type": "application/sparql-query", "Accept": "text/tab-separated-values"},
    )
    assert response.status_code == 200, response.text
    assert response.text == '?text\t?name\t?none\n"a\\tb\\nc \\"d\\" \\\\e"\t"Oak Hill"@en\t\n'
    (row,) = Result.parse(io.BytesIO(response.content), format="tsv")
    assert row[0] == Literal('a\tb\nc "d" \\e') and row[1] == Literal("Oak Hill", lang="en") and row[2] is None


def test_cors_lets_a_query_editor_on_another_origin_query(linked) -> None:
    url = f"{linked}/facts/sparql"
    preflight = httpx.options(
        url,
        headers={
            "Origin": YASGUI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-api-key, content-type",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == YASGUI
    assert {"x-api-key", "content-type"} <= set(preflight.headers["access-control-allow-headers"].lower().split(", "))
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in preflight.headers  # keys travel in a header, never cookies
    answer = httpx.post(
        url,
        content=LABELS_IN_RALEIGH,
        headers={
            "Origin": YASGUI,
            "X-API-Key": INTERNAL_KEY,
            "Content-Type": "application/sparql-query",
            "Accept": "application/sparql-results+json",
        },
    )
    assert answer.status_code == 200 and answer.json()["results"]["bindings"]
    assert answer.headers["access-control-allow-origin"] == YASGUI
    assert "x-index-version" in answer.headers["access-control-expose-headers"].lower()
    assert {"Accept", "Origin"} <= {v.strip() for v in answer.headers["vary"].split(",")}
    # another origin, and the rest of the API, get no CORS headers
    other = httpx.options(url, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    chat = httpx.options(f"{linked}/chat", headers={"Origin": YASGUI, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in chat.headers
    entity_iri = httpx.get(f"{linked}/gbim/entity/{OAK_HILL}", headers={"Origin": YASGUI})
    assert entity_iri.headers["access-control-allow-origin"] == YASGUI


def test_cors_is_off_by_default_and_any_origin_is_star(server, facts_home, embedder) -> None:
    plain = httpx.get(f"{server}/facts/sparql", params={"query": "ASK {}"}, headers={"Origin": YASGUI})
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
    app = create_app(Settings(index_dir=facts_home.root, warm_up=False, cors_origins="*"), embedder)
    with TestClient(app) as client:
        preflight = client.options(
            "/facts/sparql",
            headers={
                "Origin": YASGUI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "X-API-Key,Content-Type",
            },
        )
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in preflight.headers


@pytest.mark.parametrize(
    ("value", "named"),
    [("https://yasgui.example.org/", "no trailing slash"), ("*, https://a.example", "stands alone"), ("yasgui", "")],
)
def test_cors_origins_that_could_never_match_are_refused(monkeypatch, value, named) -> None:
    monkeypatch.setenv("RAG_CORS_ORIGINS", value)
    with pytest.raises(ConfigError, match="RAG_CORS_ORIGINS") as raised:
        Settings.from_env()
    assert named in str(raised.value)
    monkeypatch.setenv("RAG_CORS_ORIGINS", f"{YASGUI}, http://localhost:8080")
    assert Settings.from_env().cors_origins == [YASGUI, "http://localhost:8080"]
    assert Settings().rdf_base_iri + "gbim/" == GBIM_IRI  # the default base is the export's namespace


def test_get_without_a_query_is_the_service_description(server) -> None:
    url = f"{server}/facts/sparql"
    turtle = httpx.get(url)
    assert turtle.status_code == 200, turtle.text
    assert turtle.headers["content-type"].startswith("text/turtle")
    described = Graph().parse(url)  # rdflib asks for RDF itself
    assert isomorphic(described, Graph().parse(data=turtle.text, format="turtle"))
    service = described.value(predicate=RDF.type, object=SD.Service)
    assert described.value(service, SD.endpoint) == URIRef(url)
    assert described.value(service, SD.supportedLanguage) == SD.SPARQL11Query
    formats = set(described.objects(service, SD.resultFormat))
    assert {
        FORMATS.SPARQL_Results_JSON,
        FORMATS.SPARQL_Results_TSV,
        FORMATS.SPARQL_Results_CSV,
        FORMATS.Turtle,
    } <= formats
    dataset = described.value(service, SD.defaultDataset)
    assert (dataset, RDF.type, SD.Dataset) in described and described.value(dataset, SD.defaultGraph) is not None
    json_ld = httpx.get(url, headers={"Accept": "application/ld+json"})
    assert isomorphic(Graph().parse(data=json_ld.text, format="json-ld"), described)
    results_only = httpx.get(url, headers={"Accept": "application/sparql-results+json"})
    assert results_only.status_code == 406 and "text/turtle" in results_only.json()["detail"]


def test_head_gives_the_headers_of_get_without_a_body(server) -> None:
    for path, params in [
        ("/facts/sparql", {"query": LABELS_IN_RALEIGH}),
        ("/facts/sparql", {}),
        ("/facts", {"limit": 5}),
        (f"/facts/{OAK_HILL}", {}),
    ]:
        get = httpx.get(f"{server}{path}", params=params)
        head = httpx.head(f"{server}{path}", params=params)
        assert head.status_code == get.status_code == 200, (path, head.status_code)
        assert head.content == b"" and get.content
        for name in ("content-type", "content-length", "x-index-version", "vary"):
            assert head.headers.get(name) == get.headers.get(name), (path, name)
    missing = httpx.head(f"{server}/facts/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.content == b""


def test_entity_iris_dereference_with_the_configured_base(linked) -> None:
    # every IRI a query answers is under the base, and fetching it gives the entity's triples
    rows = httpx.get(f"{linked}/facts/sparql", params={"query": LABELS_IN_RALEIGH}).json()["results"]["bindings"]
    iris = [row["e"]["value"] for row in rows]
    assert iris and all(iri.startswith(f"{linked}/gbim/entity/") for iri in iris)
    for iri in iris[:2]:
        fetched = Graph().parse(iri)  # rdflib follows the 303 to the entity's RDF
        assert fetched.value(URIRef(iri), RDFS.label) in {Literal(row["label"]["value"]) for row in rows}
    oak_hill = f"{linked}/gbim/entity/{OAK_HILL}"
    fetched = Graph().parse(oak_hill)
    assert (URIRef(oak_hill), RDF.type, URIRef(f"{linked}/gbim/class/facility")) in fetched
    redirect = httpx.get(oak_hill, headers={"Accept": "application/n-triples"})
    assert redirect.status_code == 303 and redirect.headers["location"] == f"{linked}/facts/{OAK_HILL}"
    # gbim: is the served namespace: DESCRIBE by prefixed name gives the same triples
    client = endpoint(linked, TURTLE)
    client.setQuery(f"DESCRIBE <{oak_hill}>")
    assert isomorphic(Graph().parse(data=client.queryAndConvert(), format="turtle"), _own_triples(fetched, oak_hill))


def _own_triples(graph: Graph, iri: str) -> Graph:
    own = Graph()
    for triple in graph.triples((URIRef(iri), None, None)):
        own.add(triple)
    return own


def test_an_entity_a_role_may_not_read_is_404_like_an_unknown_one(linked) -> None:
    unknown = "00000000-0000-0000-0000-000000000000"
    outsider = {"X-API-Key": OUTSIDER_KEY}
    for template in ("{}/gbim/entity/{}", "{}/facts/{}"):
        hidden = httpx.get(template.format(linked, OAK_HILL), headers=outsider)
        missing = httpx.get(template.format(linked, unknown), headers=outsider)
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["detail"].replace(OAK_HILL, unknown) == missing.json()["detail"]
    allowed = httpx.get(f"{linked}/gbim/entity/{OAK_HILL}", headers={"X-API-Key": INTERNAL_KEY}, follow_redirects=True)
    assert allowed.status_code == 200 and allowed.headers["content-type"].startswith("text/turtle")
