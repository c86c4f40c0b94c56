"""POST /chat, and the OpenAI API: POST /v1/chat/completions and GET /v1/models (docs/openai.md).

The evidence behind a completion is in its extra field ``living_memory`` (citations, route, evidence, trace id,
and what became of each request option). Living Memory's own request fields go in ``living_memory`` too (OpenAI
clients: ``extra_body``). The key comes as ``Authorization: Bearer`` or ``X-API-Key`` (serving.deps.caller_role);
errors of the /v1 routes have OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from livemem.answer.chat import (
    SAMPLING,
    OpenAICompatibleBackend,
    count_tokens,
    generate,
    stream_answer,
)
from livemem.answer.results import chat_body
from livemem.answer.routing import ContextRequest as Message
from livemem.errors import LivingMemoryError
from livemem.version.reader import IndexUnavailable, without_paths
from serving.context_service import ContextService, context_service
from serving.deps import CallerRole, CurrentSnapshot, State, with_persona
from serving.models import ErrorBody
from serving.models.context import (
    ChatCompletion,
    ChatCompletionRequest,
    ChatResponse,
    ContextRequest,
    LivingMemoryExtra,
    LivingMemoryOptions,
)
from serving.routers.context import ThreadScope, message_of
from serving.routers.memory import personal_view, remember_exchange

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat"])
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}
MODEL_ALIAS = "living-memory"  # the default model, whatever answers (documented for clients that need a name)
EXTRACTIVE = "extractive"
STARTED = int(time.time())
MAX_MESSAGE = 4000
# Fields that change what a completion is (several choices, tool calls, JSON output, log probabilities):
# refused with 400 rather than answered as if they had been honoured.
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "tools": bool,
    "tool_choice": lambda v: v not in (None, "none"),
    "functions": bool,
    "function_call": lambda v: v not in (None, "none"),
    "response_format": lambda v: isinstance(v, dict) and v.get("type", "text") != "text",
    "logprobs": bool,
    "top_logprobs": lambda v: v is not None,
    "audio": lambda v: v is not None,
    "modalities": lambda v: v is not None and list(v) != ["text"],
    "prediction": lambda v: v is not None,
}


@router.post("/chat", response_model=ChatResponse, responses=ERRORS)
def chat(
    body: ContextRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> ChatResponse:
    """/context, then an answer: from the configured LLM (LLM_BASE_URL, LLM_MODEL) or extractive, with numbered
    citations resolving to chunk, entity and registry ids, after the guardrail. `role` names a persona within the
    caller's access (docs/seed-compat.md); `thread_id` or `history` carry the conversation's place, persona and
    topic (docs/context.md)."""
    service = context_service(state)
    message, answered_as = message_of(body, role, state, snap, scope)
    result = service.chat(snap, service.caller(answered_as), message)
    remember_exchange(state, message, result, "chat")
    return ChatResponse.model_validate(chat_body(result))


# --- the OpenAI API ---------------------------------------------------------------------------------------------------
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found"}


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code or ERROR_CODES.get(status)}}
    return JSONResponse(body, status_code=status)


class OpenAIRoute(APIRoute):
    """Errors in OpenAI's shape (what its clients parse); an invalid request is a 400, as OpenAI answers it."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                errors = exc.errors()
                message = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors[:10]
                )
                param = ".".join(str(p) for p in errors[0]["loc"][1:]) if errors else None
                return openai_error(400, message, param or None)
            except HTTPException as exc:
                detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
                return openai_error(exc.status_code, detail, getattr(exc, "param", None))
            except (IndexUnavailable, LivingMemoryError) as exc:
                log.error("%s", exc)  # with server paths, for operators; the caller gets the message without them
                return openai_error(503, without_paths(str(exc)))

        return route


class OpenAIBadRequest(HTTPException):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(400, message)
        self.param = param


openai_router = APIRouter(tags=["openai"], route_class=OpenAIRoute)


def served_models(service: ContextService) -> list[str]:
    """The configured LLM (when there is one) and the extractive answerer, which the LLM falls back to."""
    default = service.settings.model_name
    return [default] if default == EXTRACTIVE else [default, EXTRACTIVE]


def model_entry(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": STARTED, "owned_by": "living-memory"}


@openai_router.get("/v1/models")
def list_models(state: State, role: CallerRole) -> dict[str, Any]:
    """The models that answer (OpenAI's list shape): the configured LLM first, then `extractive`."""
    return {"object": "list", "data": [model_entry(m) for m in served_models(context_service(state))]}


@openai_router.get("/v1/models/{model}")
def get_model(model: str, state: State, role: CallerRole) -> dict[str, Any]:
    if model not in served_models(context_service(state)):
        raise HTTPException(404, f"the model {model!r} does not exist; GET /v1/models lists the served ones")
    return model_entry(model)


def backend_for(requested: str | None, service: ContextService) -> OpenAICompatibleBackend | None:
    """The backend answering ``requested``: the configured one for it, the alias or no name; none for extractive."""
    models = served_models(service)
    if requested in (None, "", MODEL_ALIAS, models[0]):
        return service.backend
    if requested == EXTRACTIVE:
        return None
    raise HTTPException(
        404, f"the model {requested!r} does not exist; served: {', '.join(models)} (or {MODEL_ALIAS!r})"
    )


def refuse_unsupported(body: ChatCompletionRequest) -> None:
    extra = body.model_extra or {}
    refused = [name for name, active in UNSUPPORTED.items() if name in extra and active(extra[name])]
    if body.n is not None and body.n > 1:
        refused.insert(0, f"n={body.n} (one answer per request)")
    if refused:
        raise OpenAIBadRequest(
            f"unsupported by Living Memory: {', '.join(refused)}; it answers with one grounded text message",
            refused[0].split("=")[0],
        )


def conversation(body: ChatCompletionRequest) -> tuple[str, list[str]]:
    """The question (the last user message) and the earlier user turns, oldest first. Assistant and system turns
    are not used: answers are grounded in the evidence, not in earlier answers."""
    users = [m.text() for m in body.messages if m.role == "user" and m.text().strip()]
    if not users:
        raise HTTPException(422, "messages must hold at least one user message with text")
    return users[-1][:MAX_MESSAGE], users[:-1]


def history_report(earlier: list[str], notes: dict[str, Any] | None) -> dict[str, Any]:
    """How the conversation was used (``living_memory.options.history``)."""
    report: dict[str, Any] = {"earlier_user_turns": len(earlier)}
    carried = (notes or {}).get("carried", {})
    if "place" in carried:
        report["place_from_earlier_turn"] = carried["place"]["from"]
    if "topic" in carried:
        report["topic_from_earlier_turn"] = carried["topic"]
    if notes:
        report["source"] = notes["source"]
    return report


def option_report(body: ChatCompletionRequest, answer: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """What became of each option the request sent (nothing is dropped silently)."""
    report: dict[str, Any] = {}
    by_llm = answer["backend"] == "llm"
    for name, value in sampling.items():
        if name == "max_tokens" or by_llm:
            report[name] = {"value": value, "applied": True}
        else:
            why = "a fixed reply" if answer["backend"] == "fixed" else "the extractive answer quotes the evidence"
            report[name] = {"value": value, "applied": False, "why": f"not applicable: {why}, nothing is sampled"}
    if body.n is not None:
        report["n"] = {"value": body.n, "applied": True}
    known = {"stream_options"}
    for name in sorted(set(body.model_extra or {}) - known):
        report[name] = {"applied": False, "why": "ignored: not a field Living Memory uses"}
    return report


@openai_router.post("/v1/chat/completions", response_model=ChatCompletion, responses=ERRORS)
def chat_completions(
    body: ChatCompletionRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
):
    """OpenAI-compatible chat completion (streaming too). The last user message is the question, earlier user
    turns (or, without them, the stored thread) fill in its place, topic and persona; the answer's evidence is in
    the extra field `living_memory`."""
    refuse_unsupported(body)
    service = context_service(state)
    backend = backend_for(body.model, service)
    text, earlier = conversation(body)
    options = body.living_memory or LivingMemoryOptions()
    profile = options.profile.model_dump(exclude_none=True) if options.profile else {}
    thread = options.thread_id or body.user
    carried = service.conversation(
        scope, thread, earlier, text, county=options.county, zip_code=options.zip, profile=profile,
        persona=options.persona,
    )  # fmt: skip
    history = history_report(earlier, carried.notes)
    message = Message(
        carried.message, carried.county, carried.zip, profile, options.top_k, thread, place_from=carried.place_from,
        min_score=options.min_score, recency_bias=options.recency_bias,
        recency_half_life_days=options.recency_half_life_days, max_words=options.max_words,
        conversation=carried.notes, personal=personal_view(state, scope, options),
    )  # fmt: skip
    message, answered_as = with_persona(message, carried.persona, role, state, snap)
    service.remember(scope, thread, carried)
    caller = service.caller(answered_as)
    sampling = {k: getattr(body, k) for k in SAMPLING if k != "max_tokens" and getattr(body, k) is not None}
    max_tokens = body.max_completion_tokens or body.max_tokens
    if max_tokens is not None:
        sampling["max_tokens"] = max_tokens
    created = int(time.time())
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"

    def extra(result: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        living = {
            **chat_body({**result, "answer": answer}),
            "persona": message.persona,
            "options": {**option_report(body, answer, sampling), "history": history},
        }
        return LivingMemoryExtra.model_validate(living).model_dump(mode="json", by_alias=True)

    def usage(result: dict[str, Any], answer: dict[str, Any]) -> dict[str, int]:
        prompt, done = count_tokens(result["prompt"]["text"]), count_tokens(answer["answer"])
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    if body.stream:
        result = service.context(snap, caller, message)
        remember_exchange(state, message, result, "chat.completions")  # before the answer exists: the question
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        items = stream_answer(result, snap, service.settings, backend, sampling)
        return StreamingResponse(
            events(items, result, completion_id, created, include_usage, extra, usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    if backend is service.backend and not sampling:
        result = service.chat(snap, caller, message)  # the answer cache serves repeated questions
        answer = result["answer"]
    else:
        result = service.context(snap, caller, message)
        answer = generate(result, snap, service.settings, backend, sampling)
    remember_exchange(state, message, {**result, "answer": answer}, "chat.completions")
    return ChatCompletion.model_validate(
        {
            "id": completion_id,
            "created": created,
            "model": answered_by(answer),
            "choices": [
                {"message": {"content": answer["answer"]}, "finish_reason": answer.get("finish_reason", "stop")}
            ],
            "usage": usage(result, answer),
            "living_memory": extra(result, answer),
        }
    )


def answered_by(answer: dict[str, Any]) -> str:
    """The model that answered: the LLM's name, ``extractive`` (also when the LLM failed), or ``fixed``."""
    return "fixed" if answer["backend"] == "fixed" else answer["model"]


def chunk_usage(completion_id: str, created: int, model: str, usage: dict[str, int]) -> str:
    """The last chunk of a stream asked for usage: no choices, the usage."""
    data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [], "usage": usage}  # fmt: skip
    return f"data: {json.dumps(data)}\n\n"


def events(
    items: Iterator[dict[str, Any]],
    result: dict[str, Any],
    completion_id: str,
    created: int,
    include_usage: bool,
    extra: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    usage: Callable[[dict[str, Any], dict[str, Any]], dict[str, int]],
) -> Iterator[str]:
    """Server-Sent Events in OpenAI's chunk format: the role, one chunk per piece as it comes, the finish reason
    with ``living_memory``, the usage chunk when asked for (``stream_options.include_usage``), then ``[DONE]``."""
    model: str | None = None

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **more}  # fmt: skip
        if include_usage:
            data.setdefault("usage", None)
        return f"data: {json.dumps(data)}\n\n"

    for item in items:
        if "answer" in item:
            answer = item["answer"]
            model = model or answered_by(answer)
            yield chunk({}, answer.get("finish_reason") or "stop", living_memory=extra(result, answer))
            if include_usage:
                yield chunk_usage(completion_id, created, model, usage(result, answer))
            break
        delta = {"content": item["delta"]} if model else {"role": "assistant", "content": item["delta"]}
        model = model or item["model"]
        yield chunk(delta)
    yield "data: [DONE]\n\n"


router.include_router(openai_router)
