"""An imported registry served: GET /resources by taxonomy term and by a program's second type, and a chat answer
naming the organization and marking an undated row ("listed 2019-08-19, not verified since") under the registry's
``undated: unverified_shown`` policy. Built on a copy of the bundled example's index (built once per session)."""

from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app
from support.registry import good_row, write_csv

from livemem import registry
from livemem.registry import RegistryConfig
from livemem.version.store import IndexHome

TERMS = [{"code": "BD-1800.2000", "name": "Food Pantries", "taxonomy": "AIRS"}]


@pytest.fixture(scope="module")
def imported(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("registry-imported")
    shutil.copytree(example_index(tmp_path_factory).root, root / "rag_index", symlinks=True)
    home = IndexHome(root / "rag_index")
    rows = [
        good_row(0, local_resource_id="fca-oakhill", name="OAK HILL office", organization="Fayette Community Action",
                 resource_type="utility_assistance", resource_types="utility_assistance food_pantry",
                 taxonomy_terms=json.dumps(TERMS), zip="25901", county="Fayette", verification_status="",
                 last_verified_at="", listed_at="2019-08-19", contact_phone="(304) 555-0199 (24 hrs)"),
        good_row(1, local_resource_id="fay-pantry-verified", name="Fayetteville Pantry", zip="25840",
                 county="Fayette"),
    ]  # fmt: skip
    cfg = RegistryConfig(kind="csv", path=write_csv(root / "rows.csv", rows), undated="unverified_shown")
    run = registry.run_verification(cfg, home)
    assert run.staged, run.reason
    home.publish(run.version_id, run.base_version, retention=5)
    return home


def test_resources_by_taxonomy_and_second_type(imported, embedder) -> None:
    with TestClient(make_app(imported, embedder)) as client:
        by_code = client.get("/resources", params={"taxonomy": "BD-1800"}).json()
        by_name = client.get("/resources", params={"taxonomy": "food pantries", "county": "Fayette"}).json()
        by_type = client.get("/resources", params={"resource_type": "food_pantry", "zip": "25901"}).json()
        schema = client.get("/openapi.json").json()
    assert [r["local_resource_id"] for r in by_code["results"]] == ["fca-oakhill"]
    assert [r["local_resource_id"] for r in by_name["results"]] == ["fca-oakhill"]
    row = by_code["results"][0]
    assert row["organization"] == "Fayette Community Action" and row["taxonomy_terms"] == TERMS
    assert row["resource_types"] == ["utility_assistance", "food_pantry"]
    assert row["verification_status"] == "unverified"
    assert row["verification_note"] == "listed 2019-08-19, not verified since"
    assert row["phones"] == [{"number": "+13045550199", "extension": None, "type": None, "note": "24 hours"}]
    assert {r["local_resource_id"] for r in by_type["results"]} == {"fca-oakhill", "fay-pantry-verified"}
    params = {p["name"]: p for p in schema["paths"]["/resources"]["get"]["parameters"]}
    assert "BD-1800" in params["taxonomy"]["description"]


def test_chat_names_the_organization_and_marks_the_undated_row(imported, embedder) -> None:
    with TestClient(make_app(imported, embedder)) as client:
        body = client.post("/chat", json={"message": "utility assistance in Fayette County"}).json()
    answer = body["answer"]
    assert "Fayette Community Action — OAK HILL office" in answer, answer
    assert "listed 2019-08-19, not verified since" in answer
    assert ("registry", "fca-oakhill") in {(c["kind"], c["id"]) for c in body["citations"]}
