"""POST /chat and POST /v1/chat/completions (the OpenAI chat format): answers grounded in /context's evidence.

The evidence behind a completion is in its extra field ``living_memory`` (citations, route, evidence, trace id).
Living Memory's own request fields go in ``living_memory`` too (OpenAI clients: ``extra_body``). Streaming
(``stream: true``) sends the whole answer as one chunk, then ``[DONE]``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from livemem.context import SECTIONS
from livemem.context import ContextRequest as Message
from serving.context_models import ChatCompletion, ChatCompletionRequest, ChatResponse, ContextRequest
from serving.context_service import context_service
from serving.deps import CallerRole, CurrentSnapshot, State
from serving.models import ErrorBody
from serving.routers.context import message_of

router = APIRouter(tags=["chat"])
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}


def chat_body(result: dict[str, Any]) -> dict[str, Any]:
    answer = result["answer"]
    return {
        **answer,
        "route": result["route"],
        "evidence": {s: result[s] for s in SECTIONS},
        "index_version": result["index_version"],
        "trace_id": result["trace_id"],
        "thread_id": result.get("thread_id"),
        "cached": result["cached"],
    }


@router.post("/chat", response_model=ChatResponse, responses=ERRORS)
def chat(body: ContextRequest, state: State, role: CallerRole, snap: CurrentSnapshot) -> ChatResponse:
    """/context, then an answer: from the configured LLM (LLM_BASE_URL, LLM_MODEL) or extractive, with numbered
    citations resolving to chunk, entity and registry ids, after the guardrail."""
    service = context_service(state)
    result = service.chat(snap, service.caller(role), message_of(body, role))
    return ChatResponse.model_validate(chat_body(result))


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=ERRORS)
def chat_completions(body: ChatCompletionRequest, state: State, role: CallerRole, snap: CurrentSnapshot):
    """OpenAI-compatible chat completion: the last user message is the question; the answer's evidence is in
    the extra field `living_memory`."""
    users = [m.text() for m in body.messages if m.role == "user" and m.text().strip()]
    if not users:
        raise HTTPException(422, "messages must hold at least one user message with text")
    options = body.living_memory
    profile = options.profile.model_dump(exclude_none=True) if options and options.profile else {}
    message = Message(
        users[-1][:4000],
        options.county if options else None,
        options.zip if options else None,
        profile,
        options.top_k if options else None,
        (options.thread_id if options else None) or body.user,
    )
    service = context_service(state)
    result = service.chat(snap, service.caller(role), message)
    answer = chat_body(result)
    created = int(time.time())
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    model = body.model or answer["model"]
    prompt_tokens = len(result["prompt"]["text"].split())
    completion_tokens = len(answer["answer"].split())
    completion = ChatCompletion.model_validate(
        {
            "id": completion_id,
            "created": created,
            "model": model,
            "choices": [{"message": {"content": answer["answer"]}}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "living_memory": answer,
        }
    )
    if not body.stream:
        return completion

    def events():
        base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": answer["answer"]},
                                      "finish_reason": None}]}  # fmt: skip
        yield f"data: {json.dumps(first)}\n\n"
        last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "living_memory": completion.living_memory.model_dump(mode="json", by_alias=True)}  # fmt: skip
        yield f"data: {json.dumps(last)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
