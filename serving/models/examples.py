"""Examples for ``/openapi.json``, from the bundled example (``make run``): a /query result, and the answer to
"Where can I apply for SNAP near Oak Hill?" (county Fayette) cut to one item per evidence section, as /context, /chat
and /v1/chat/completions give it. Each example validates against its schema (tests/api/test_openapi_contract.py)."""

from __future__ import annotations

from typing import Any

VERSION = "20261122T003412518204Z"
TRACE_ID = "97ceb7df-2c81-46fa-983a-590fb5bdfd42.20261122T003412518204Z.YKOSxDGVcgKTp6mn_3XE5Ou4bz34Rv7TTP08Gw"
COMMIT = "31532096d92e8618a4b85fd500c1469d1add2fbb"
HUB = "457cdafc-1f65-57ee-950b-b5ac4575a6d0"
PASSAGE_ID = "00b0f878-5fa9-5fe5-96df-1963fd12bf7d"
QUESTION = "Where can I apply for SNAP near Oak Hill?"
ANSWER = (
    "From the West Virginia evidence in Living Memory:\n- Fayette County DHHR Office – SNAP (Fayette County): "
    "Applications, interviews and renewals for SNAP food benefits. 100 Main Street, Oak Hill, WV 25901; phone "
    "(304) 555-0101; hours Mon-Fri 8:30-4:30 [4]\n- Oak Hill Benefits Hub (120 Main Street, Oak Hill): SNAP and "
    "Medicaid applications and renewals, help with the PATH online portal. [3]\n- Apply online through the state "
    "benefits portal, by phone, or in person with help at the Oak Hill benefits hub. [1]"
)
FACILITIES = {"source": "wv-benefits-facilities", "table": "wv_benefits_facilities.geojson", "pk": "wvb-001"}

QUERY_RESULT: dict[str, Any] = {
    "chunk_id": "0c8f4e2a-7b1d-5e3f-9a6c-2d4b8e1f0a37",
    "source": "wv-benefits",
    "content": "## SNAP (Food Stamps)\n\nSNAP puts money for groceries on an EBT card each month. It can be used at "
    "most grocery stores in Oak Hill and Fayetteville, and at several farmers markets that double SNAP dollars in "
    "summer.",
    "seal_state": "OPEN",
    "last_breath_seen": "Δ3",
    "attention_score": 1.5,
    "provenance": {
        "path": "examples/corpus/benefits/fayette-county.md",
        "commit": COMMIT,
        "timestamp": "2026-11-22T00:34:06+00:00",
    },
    "metadata": {
        "type": "markdown",
        "size": 241,
        "created_at": "2026-09-14T10:02:11+00:00",
        "updated_at": "2026-11-22T00:34:06+00:00",
        "collection": "wv_benefits",
        "access": "public",
        "heading_path": ["Fayette County Benefits Guide", "SNAP (Food Stamps)"],
        "county": "Fayette",
        "dataset": "wv_benefits",
    },
    "score": 1.0412,
    "score_normalized": 0.6941,
    "collection": "wv_benefits",
    "scores": {"dense": 0.6873, "sparse": 7.182, "sentence": 0.7311},
    "parent_id": None,
    "matched_chunk_ids": None,
}
PASSAGE: dict[str, Any] = {
    "chunk_id": PASSAGE_ID,
    "collection": "wv_benefits",
    "source": "wv-benefits",
    "content": "### How to apply\n\nApply online through the state benefits portal, by phone, or in person with help at "
    "the Oak Hill benefits hub.\nYou will be scheduled for a phone interview.",
    "heading_path": ["Fayette County Benefits Guide", "SNAP (Food Stamps)", "How to apply"],
    "county": "Fayette",
    "seal_state": "OPEN",
    "score": 0.8756,
    "score_normalized": 0.6735,
    "scores": {"dense": 0.6287, "sparse": 4.5674, "sentence": 0.6472},
    "provenance": {
        "path": "examples/corpus/benefits/fayette-county.md",
        "commit": COMMIT,
        "timestamp": "2026-11-22T00:34:06+00:00",
    },
    "document_date": "2026-11-22",
    "date_source": "commit",
    "ref": 1,
}
FACT: dict[str, Any] = {
    "subject": HUB,
    "subject_label": "Oak Hill Benefits Hub",
    "predicate": "located_in",
    "object": "Fayette",
    "object_kind": "county",
    "provenance": {
        "source": "wv-benefits-facilities",
        "source_table": "wv_benefits_facilities.geojson",
        "source_pk": "wvb-001",
        "field": "county",
        "method": "attribute",
    },
    "resolved_from": f"passage {PASSAGE_ID}",
    "ref": 2,
}
PLACE: dict[str, Any] = {
    "entity_id": HUB,
    "label": "Oak Hill Benefits Hub",
    "description": "One-stop benefits hub for Fayette County: SNAP food assistance and Medicaid applications and "
    "renewals, WV WORKS, and help with the PATH online portal. Walk-ins weekday mornings.",
    "dataset": "wv_benefits",
    "gbim_entity": "facility",
    "county": "Fayette",
    "town": "Oak Hill",
    "address": "120 Main Street",
    "zip": "25901",
    "lon": -81.1487,
    "lat": 37.9723,
    "score": 0.5214,
    "matched_town": True,
    "provenance": FACILITIES,
    "type": "benefits_office",
    "programs": "SNAP; Medicaid; WV WORKS",
    "phone": "555-0101",
    "ref": 3,
}
PROGRAM: dict[str, Any] = {
    "local_resource_id": "fay-dhhr-snap",
    "name": "Fayette County DHHR Office – SNAP",
    "resource_type": "snap",
    "county": "Fayette",
    "zip": "25901",
    "address": "100 Main Street, Oak Hill, WV 25901",
    "contact_phone": "+13045550101",
    "url": "https://example.org/fayette/snap",
    "hours": "Mon-Fri 8:30-4:30",
    "eligibility": "Household gross income at or below 130% of the federal poverty level.",
    "description": "Applications, interviews and renewals for SNAP food benefits; help with the PATH online portal.",
    "verification_status": "verified",
    "last_verified_at": "2026-10-14T00:00:00Z",
    "match": "county",
    "zip_coverage": ["25840", "25136", "25880", "25812"],
    "ref": 4,
}
EVIDENCE: dict[str, Any] = {
    "unstructured": [PASSAGE],
    "structured_facts": [FACT],
    "spatial": [PLACE],
    "registry": [PROGRAM],
    "web": [],
    "personal": [],
}
CITATIONS: list[dict[str, Any]] = [
    {
        "n": 4,
        "section": "registry",
        "kind": "registry",
        "id": "fay-dhhr-snap",
        "name": "Fayette County DHHR Office – SNAP",
        "verification_status": "verified",
    },
    {
        "n": 3,
        "section": "spatial",
        "kind": "entity",
        "id": HUB,
        "label": "Oak Hill Benefits Hub",
        "provenance": FACILITIES,
    },
    {
        "n": 1,
        "section": "unstructured",
        "kind": "chunk",
        "id": PASSAGE_ID,
        "collection": "wv_benefits",
        "provenance": PASSAGE["provenance"],
    },
]
ROUTE: dict[str, Any] = {
    "intents": ["spatial", "resource"],
    "rules": [
        {"intent": "spatial", "rule": "place or proximity words", "matched": "Where"},
        {"intent": "resource", "rule": "resource type snap", "matched": "SNAP"},
    ],
    "response_class": "answer",
    "reason": "evidence found",
    "filters": {"county": ["Fayette"], "resource_type": ["snap"]},
    "self_query": [{"field": "county", "value": "Fayette", "from": "request county"}],
    "wv_scoped": True,
    "wv_reasons": ["WV county Fayette", "WV place in the text: Oak Hill"],
    "state": "WV",
    "places": [{"kind": "town", "text": "Oak Hill", "name": "Oak Hill", "state": "WV", "counties": ["Fayette"]}],
    "programs": [
        {
            "rank": 1,
            "kind": "registry",
            "id": "fay-dhhr-snap",
            "name": "Fayette County DHHR Office – SNAP",
            "need": "snap",
            "town": "Oak Hill",
            "in_town": True,
            "covers_zip": False,
            "distance_km": 0.0,
        },
        {
            "rank": 2,
            "kind": "place",
            "id": HUB,
            "name": "Oak Hill Benefits Hub",
            "need": "snap",
            "town": "Oak Hill",
            "in_town": True,
            "covers_zip": False,
            "distance_km": 0.0,
        },
    ],
    "links": [],
    "eligibility": {
        "role": "public",
        "collections": ["code", "governance", "wv_benefits"],
        "registries": ["local_resources"],
        "spatial_datasets": ["wv_benefits"],
        "web": True,
    },
    "sources_queried": ["code", "governance", "wv_benefits", "gbim", "local_resources"],
    "registry_lookups": [
        {"county": "Fayette", "resource_type": "snap", "total": 1, "returned": ["fay-dhhr-snap"]},
        {"town": "Oak Hill", "resource_type": "snap", "total": 1, "returned": ["fay-dhhr-snap"]},
    ],
    "web": {
        "admitted": False,
        "calls": [],
        "reason": "excluded: West-Virginia-scoped (WV county Fayette; WV place in the text: Oak Hill)",
    },
    "candidates": 26,
    "steps_ms": {
        "intent": 0.05,
        "self_query": 2.1,
        "encode": 9.4,
        "text": 6.2,
        "spatial": 0.24,
        "graph": 1.8,
        "registry": 0.51,
        "prompt": 1.37,
    },
    "budget": {"max_words": 200, "hedging": "none", "reasons": ["1 verified program(s)"]},
}
GUARDRAIL: dict[str, Any] = {"mode": "annotate", "action": "none", "cited": 3, "unmatched_citations": []}
EXTRACTIVE_NOTE = "Extractive answer (quoted from the evidence, no language model)"

CHAT: dict[str, Any] = {
    "answer": ANSWER,
    "citations": CITATIONS,
    "backend": "extractive",
    "model": "extractive",
    "note": EXTRACTIVE_NOTE,
    "guardrail": GUARDRAIL,
    "route": ROUTE,
    "evidence": EVIDENCE,
    "index_version": VERSION,
    "trace_id": TRACE_ID,
    "cached": False,
}
PROMPT_CONTEXT = (
    "Context:\n## Passages\n[1] Apply online through the state benefits portal, ...\n\nQuestion: " + QUESTION
)
CONTEXT: dict[str, Any] = {
    **EVIDENCE,
    "message": QUESTION,
    "route": ROUTE,
    "facts_summary": "Oak Hill Benefits Hub is in Fayette County.",
    "prompt": {
        "system": "Answer only from the numbered context; cite each fact as [n].",
        "context": PROMPT_CONTEXT,
        "text": "Answer only from the numbered context; cite each fact as [n].\n\n" + PROMPT_CONTEXT,
        "chars": 1432,
        "budget_chars": 6000,
        "items_included": 4,
        "items_left_out": 0,
    },
    "citations": CITATIONS,
    "index_version": VERSION,
    "trace_id": TRACE_ID,
    "cached": False,
}
GIS_RAG: dict[str, Any] = {
    **CHAT,
    "geojson": {
        "type": "FeatureCollection",
        "features": [
            {
                "type": "Feature",
                "id": HUB,
                "geometry": {"type": "Point", "coordinates": [-81.1487, 37.9723]},
                "properties": {
                    "label": "Oak Hill Benefits Hub",
                    "dataset": "wv_benefits",
                    "county": "Fayette",
                    "town": "Oak Hill",
                    "address": "120 Main Street",
                    "ref": 3,
                },
            }
        ],
    },
}
CHAT_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-09bed8cde0f9446fa7ba0a8f46fe1787",
    "object": "chat.completion",
    "created": 1795688445,
    "model": "living-memory",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 212, "completion_tokens": 64, "total_tokens": 276},
    "living_memory": {
        "citations": CITATIONS,
        "backend": "extractive",
        "guardrail": GUARDRAIL,
        "route": ROUTE,
        "evidence": EVIDENCE,
        "index_version": VERSION,
        "trace_id": TRACE_ID,
        "cached": False,
        "options": {
            "history": {
                "earlier_user_turns": 0,
                "earlier_turns": 0,
                "conversation_id_from": "messages",
                "turns_to_model": 0,
            }
        },
    },
}
