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
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from livemem.answer.chat import (
    SAMPLING,
    Dialogue,
    OpenAICompatibleBackend,
    count_tokens,
    generate,
    stream_answer,
)
from livemem.answer.results import chat_body
from livemem.answer.routing import ContextRequest as Message
from livemem.engine.snapshot import IndexUnavailable, without_paths
from livemem.errors import LivingMemoryError
from serving.deps import CallerRole, CurrentSnapshot, State, ThreadScope, with_persona
from serving.models.compat import OpenAIErrorBody
from serving.models.context import (
    ChatCompletion,
    ChatCompletionRequest,
    ChatResponse,
    ContextRequest,
    LivingMemoryExtra,
    LivingMemoryOptions,
)
from serving.services.answers import ERRORS, answer_chat
from serving.services.context import ContextService, context_service
from serving.services.memory import personal_view, remember_exchange
from serving.services.versions import narrowed_today, snapshot_for

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat"])
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
    topic (docs/context.md); `version` / `as_of` answer from an older version (docs/versions.md)."""
    return ChatResponse.model_validate(answer_chat(body, state, role, snap, scope))


# --- the OpenAI API ---------------------------------------------------------------------------------------------------
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found"}
OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": OpenAIErrorBody,
        "description": "an invalid or unsupported field (`param` names it), malformed JSON",
    },
    401: {"model": OpenAIErrorBody, "description": "an unknown API key"},
    403: {"model": OpenAIErrorBody, "description": "a persona beyond the key's access"},
    404: {"model": OpenAIErrorBody, "description": "an unknown model"},
    503: {"model": OpenAIErrorBody, "description": "no published index version, or a damaged one"},
    "default": {"model": OpenAIErrorBody, "description": "any other error, in OpenAI's shape"},
}
STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "`stream: false`: the completion (application/json). `stream: true`: Server-Sent Events "
        "(text/event-stream): `data: <chat.completion.chunk>` lines (the first carries the role only, the last "
        "choice the finish_reason and `living_memory`), then `data: [DONE]`; a backend failing mid-stream ends it "
        'with `data: {"error": {...}}` instead (the `openai` client raises APIError)',
        "content": {
            "text/event-stream": {
                "schema": {"type": "string"},
                "example": 'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": '
                '"extractive", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, '
                '"finish_reason": null}]}\n\n...\n\ndata: [DONE]\n\n',
            }
        },
    }
}
# Where an OpenAI client names its conversation, first found wins (docs/openai.md, "Conversations"): Living
# Memory's own field, OpenAI's metadata, then the headers Open WebUI (ENABLE_FORWARD_USER_INFO_HEADERS) and
# LibreChat (`headers: {X-Conversation-Id: "{{LIBRECHAT_BODY_CONVERSATIONID}}"}`) send.
CONVERSATION_HEADERS = ("X-Conversation-Id", "X-OpenWebUI-Chat-Id")
MAX_CONVERSATION_ID = 128


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
                if errors and errors[0].get("type") == "json_invalid":  # loc: ("body", <character position>)
                    at = errors[0]["loc"][-1]
                    reason = (errors[0].get("ctx") or {}).get("error") or errors[0]["msg"]
                    return openai_error(400, f"the request body is not valid JSON: {reason} (at character {at})")
                message = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors[:10]
                )
                param = ".".join(str(p) for p in errors[0]["loc"][1:]) if errors else None
                return openai_error(400, message, param or None)
            except HTTPException as exc:
                detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
                response = openai_error(exc.status_code, detail, getattr(exc, "param", None))
                response.headers.update(exc.headers or {})  # a 401's WWW-Authenticate, a 503's Retry-After
                return response
            except (IndexUnavailable, LivingMemoryError) as exc:
                log.error("%s", exc)  # with server paths, for operators; the caller gets the message without them
                return openai_error(503, without_paths(str(exc)))

        return route


class OpenAIBadRequest(HTTPException):
    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(status, message)
        self.param = param


openai_router = APIRouter(tags=["openai"], route_class=OpenAIRoute)


def openai_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse | None:
    """An unknown ``/v1/*`` path (404) or a wrong method (405, with ``Allow``) in OpenAI's error shape, as the
    app's HTTP error handler answers it (the router raises these before any route runs); None off ``/v1``."""
    path = request.url.path
    if path != "/v1" and not path.startswith("/v1/"):
        return None
    if exc.status_code == 404:
        response = openai_error(404, f"unknown URL {request.method} {path}; the OpenAI routes are GET /v1/models, "
                                "GET /v1/models/{model} and POST /v1/chat/completions", code="unknown_url")  # fmt: skip
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        response = openai_error(405, f"{request.method} is not allowed on {path} (allowed: {allowed})",
                                code="method_not_allowed")  # fmt: skip
    else:
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        response = openai_error(exc.status_code, without_paths(detail) if exc.status_code >= 500 else detail)
    response.headers.update(exc.headers or {})
    return response


def served_models(service: ContextService) -> list[str]:
    """The configured LLM (when there is one) and the extractive answerer, which the LLM falls back to."""
    default = service.settings.model_name
    return [default] if default == EXTRACTIVE else [default, EXTRACTIVE]


def model_entry(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": STARTED, "owned_by": "living-memory"}


def listed_models(service: ContextService) -> list[str]:
    """What ``GET /v1/models`` lists: ``living-memory`` (the name every example uses: the default, whatever answers)
    first, then each served model."""
    return [MODEL_ALIAS, *(m for m in served_models(service) if m != MODEL_ALIAS)]


MODEL_EXAMPLE = {"id": MODEL_ALIAS, "object": "model", "created": 1795688445, "owned_by": "living-memory"}
MODELS_EXAMPLE = {"object": "list", "data": [MODEL_EXAMPLE, {**MODEL_EXAMPLE, "id": "extractive"}]}


@openai_router.get(
    "/v1/models",
    responses={200: {"content": {"application/json": {"example": MODELS_EXAMPLE}}}, **OPENAI_ERRORS},
)
def list_models(state: State, role: CallerRole) -> dict[str, Any]:
    """The models that answer (OpenAI's list shape): `living-memory` (the default), the configured LLM, then
    `extractive`."""
    return {"object": "list", "data": [model_entry(m) for m in listed_models(context_service(state))]}


@openai_router.get(
    "/v1/models/{model}",
    responses={200: {"content": {"application/json": {"example": MODEL_EXAMPLE}}}, **OPENAI_ERRORS},
)
def get_model(
    model: Annotated[str, Path(description="a model id of GET /v1/models", examples=[MODEL_ALIAS])],
    state: State,
    role: CallerRole,
) -> dict[str, Any]:
    """One model of ``GET /v1/models`` (`living-memory` among them); 404 for any other."""
    if model not in listed_models(context_service(state)):
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


def conversation(body: ChatCompletionRequest) -> tuple[str, list[str], Dialogue]:
    """The question (the last user message), the earlier user turns (oldest first: they carry place, topic and
    persona into the question's retrieval) and the ``Dialogue`` an LLM backend is given: the ``system`` /
    ``developer`` messages as instructions, the ``user`` and ``assistant`` messages before the question as turns
    (``tool`` messages are not used: tools are refused)."""
    said = [(i, m) for i, m in enumerate(body.messages) if m.role == "user" and m.text().strip()]
    if not said:
        raise OpenAIBadRequest("messages must hold at least one user message with text", "messages", 422)
    last = said[-1][0]
    instructions = [m.text() for m in body.messages if m.role in ("system", "developer")]
    turns: list[tuple[str, str]] = [(m.role, m.text()) for m in body.messages[:last] if m.role in ("user", "assistant")]
    return said[-1][1].text()[:MAX_MESSAGE], [m.text() for _, m in said[:-1]], Dialogue.of(instructions, turns)


def conversation_key(body: ChatCompletionRequest, request: Request) -> tuple[str | None, str | None]:
    """The conversation this request continues and where it was named: ``living_memory.thread_id``,
    ``metadata.conversation_id``, the ``X-Conversation-Id`` or ``X-OpenWebUI-Chat-Id`` header. ``user`` is never
    one (in OpenAI's API it identifies the end user for abuse monitoring, and Open WebUI / LibreChat send the same
    one for every chat); without a name, the conversation is the ``messages`` array itself."""
    options = body.living_memory
    if options is not None and options.thread_id:
        return options.thread_id, "living_memory.thread_id"
    if body.metadata and body.metadata.get("conversation_id", "").strip():
        return body.metadata["conversation_id"].strip()[:MAX_CONVERSATION_ID], "metadata.conversation_id"
    for header in CONVERSATION_HEADERS:
        value = (request.headers.get(header) or "").strip()
        if value:
            return value[:MAX_CONVERSATION_ID], header
    return None, None


def history_report(
    earlier: list[str], notes: dict[str, Any] | None, named_by: str | None, dialogue: Dialogue
) -> dict[str, Any]:
    """How the conversation was used (``living_memory.options.history``); ``turns_to_model`` is added once the
    answer says who answered."""
    report: dict[str, Any] = {
        "earlier_user_turns": len(earlier),
        "earlier_turns": len(dialogue.turns),
        "conversation_id_from": named_by or "messages",
    }
    carried = (notes or {}).get("carried", {})
    if "place" in carried:
        report["place_from_earlier_turn"] = carried["place"]["from"]
    if "topic" in carried:
        report["topic_from_earlier_turn"] = carried["topic"]
    if notes:
        report["source"] = notes["source"]
    return report


def option_report(
    body: ChatCompletionRequest, answer: dict[str, Any], sampling: dict[str, Any], dialogue: Dialogue
) -> dict[str, Any]:
    """What became of each option the request sent (nothing is dropped silently)."""
    report: dict[str, Any] = {}
    by_llm = answer["backend"] == "llm"
    systems = sum(1 for m in body.messages if m.role in ("system", "developer"))
    if systems:
        report["system"] = (
            {"messages": systems, "applied": True, "how": "given to the model after Living Memory's own rules"}
            if by_llm
            else {"messages": systems, "applied": False,
                  "why": "not applicable: the extractive answer quotes the evidence and cannot follow instructions"
                  if answer["backend"] != "fixed" else "not applicable: a fixed reply"}
        )  # fmt: skip
    if body.user is not None:
        report["user"] = {"applied": False, "why": "OpenAI's end-user id for abuse monitoring; not a conversation key"}
    for name, value in sampling.items():
        if name == "max_tokens" or by_llm:
            report[name] = {"value": value, "applied": True}
        else:
            why = "a fixed reply" if answer["backend"] == "fixed" else "the extractive answer quotes the evidence"
            report[name] = {"value": value, "applied": False, "why": f"not applicable: {why}, nothing is sampled"}
    if body.n is not None:
        report["n"] = {"value": body.n, "applied": True}
    known = {"stream_options", "metadata"}
    for name in sorted(set(body.model_extra or {}) - known):
        report[name] = {"applied": False, "why": "ignored: not a field Living Memory uses"}
    return report


@openai_router.post(
    "/v1/chat/completions", response_model=ChatCompletion, responses={**STREAM_RESPONSE, **OPENAI_ERRORS}
)
def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    state: State,
    role: CallerRole,
    snap: CurrentSnapshot,
    scope: ThreadScope,
):
    """OpenAI-compatible chat completion (streaming too). The last user message is the question; earlier user
    turns (or, without them, the stored state of a named conversation: `living_memory.thread_id`,
    `metadata.conversation_id`, `X-Conversation-Id`, `X-OpenWebUI-Chat-Id`; never `user`) fill in its place, topic
    and persona; an LLM backend is also given the system messages and the earlier turns. The answer's evidence is in
    the extra field `living_memory`."""
    turn = completion_turn(body, request, state, role, snap, scope)
    if body.stream:
        return streamed_completion(turn, state)
    return whole_completion(turn, state)


@dataclass
class CompletionTurn:
    """A completion request made ready to answer: the service and backend answering it, the snapshot, the message
    retrieval runs on (place, persona and topic carried in) and what its answer reports (history, sampling)."""

    body: ChatCompletionRequest
    service: ContextService
    backend: OpenAICompatibleBackend | None
    dialogue: Dialogue
    snap: Any
    answered_from: dict | None
    history: dict[str, Any]
    message: Message
    caller: Any
    sampling: dict[str, Any]
    created: int
    completion_id: str

    def extra(self, result: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        """The completion's ``living_memory`` field: the evidence, persona, version and each option's fate."""
        to_model = len(self.dialogue.turns) if answer["backend"] == "llm" else 0
        living = {
            **chat_body({**result, "answer": answer}),
            "persona": self.message.persona,
            "answered_from": self.answered_from,
            "options": {
                **option_report(self.body, answer, self.sampling, self.dialogue),
                "history": {**self.history, "turns_to_model": to_model},
            },
        }
        return LivingMemoryExtra.model_validate(living).model_dump(mode="json", by_alias=True)


def completion_turn(
    body: ChatCompletionRequest, request: Request, state: Any, role: Any, snap: Any, scope: Any
) -> CompletionTurn:
    """Check the request, pick the backend and the version, carry the conversation into the question's message
    (remembered for the thread) and narrow it to the persona answered as."""
    refuse_unsupported(body)
    service = context_service(state)
    backend = backend_for(body.model, service)
    text, earlier, dialogue = conversation(body)
    options = body.living_memory or LivingMemoryOptions()
    snap, answered_from = snapshot_for(state, role, options.version, options.as_of, snap)  # docs/versions.md
    profile = options.profile.model_dump(exclude_none=True) if options.profile else {}
    thread, named_by = conversation_key(body, request)
    carried = service.conversation(
        scope, thread, earlier, text, county=options.county, zip_code=options.zip, profile=profile,
        persona=options.persona, home=snap.home,
    )  # fmt: skip
    history = history_report(earlier, carried.notes, named_by, dialogue)
    message = Message(
        carried.message, carried.county, carried.zip, profile, options.top_k, thread, place_from=carried.place_from,
        min_score=options.min_score, recency_bias=options.recency_bias,
        recency_half_life_days=options.recency_half_life_days, max_words=options.max_words,
        conversation=carried.notes, personal=personal_view(state, scope, options),
    )  # fmt: skip
    message, answered_as = with_persona(message, carried.persona, role, state, snap)
    message = narrowed_today(message, snap, state, answered_as, answered_from)
    service.remember(scope, thread, carried)
    caller = service.caller(answered_as)
    return CompletionTurn(
        body, service, backend, dialogue, snap, answered_from, history, message, caller, request_sampling(body),
        int(time.time()), f"chatcmpl-{uuid.uuid4().hex}",
    )  # fmt: skip


def request_sampling(body: ChatCompletionRequest) -> dict[str, Any]:
    """The sampling options the request set (``max_tokens`` from either of its names)."""
    sampling = {k: getattr(body, k) for k in SAMPLING if k != "max_tokens" and getattr(body, k) is not None}
    max_tokens = body.max_completion_tokens or body.max_tokens
    if max_tokens is not None:
        sampling["max_tokens"] = max_tokens
    return sampling


def token_usage(result: dict[str, Any], answer: dict[str, Any]) -> dict[str, int]:
    """OpenAI's ``usage``: the prompt's tokens and the answer's."""
    prompt, done = count_tokens(result["prompt"]["text"]), count_tokens(answer["answer"])
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def streamed_completion(turn: CompletionTurn, state: Any) -> StreamingResponse:
    """``stream: true``: the evidence now, the answer as Server-Sent Events while the backend writes it."""
    service, message = turn.service, turn.message
    result = service.context(turn.snap, turn.caller, message)
    remember_exchange(state, message, result, "chat.completions")  # before the answer exists: the question
    include_usage = bool(turn.body.stream_options and turn.body.stream_options.include_usage)
    items = stream_answer(
        result, turn.snap, service.settings, turn.backend, turn.sampling, turn.dialogue, state.personas
    )
    return StreamingResponse(
        events(items, result, turn.completion_id, turn.created, include_usage, turn.extra, token_usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def whole_completion(turn: CompletionTurn, state: Any) -> ChatCompletion:
    """``stream: false``: the whole answer (from the answer cache when nothing but the question shapes it)."""
    service, backend, message = turn.service, turn.backend, turn.message
    if backend is service.backend and not turn.sampling and (backend is None or not turn.dialogue):
        result = service.chat(turn.snap, turn.caller, message)  # the answer cache serves repeated questions
        answer = result["answer"]
    else:  # the model sees the dialogue too: its answer depends on more than the cache key
        result = service.context(turn.snap, turn.caller, message)
        answer = generate(
            result, turn.snap, service.settings, backend, turn.sampling, dialogue=turn.dialogue,
            persona_table=state.personas,
        )  # fmt: skip
    remember_exchange(state, message, {**result, "answer": answer}, "chat.completions")
    return ChatCompletion.model_validate(
        {
            "id": turn.completion_id,
            "created": turn.created,
            "model": answered_by(answer),
            "choices": [
                {"message": {"content": answer["answer"]}, "finish_reason": answer.get("finish_reason", "stop")}
            ],
            "usage": token_usage(result, answer),
            "living_memory": turn.extra(result, answer),
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
    """Server-Sent Events in OpenAI's chunk format: a first chunk with the role only (``content: ""``, as
    OpenAI's), one chunk per piece as it comes, the finish reason with ``living_memory``, the usage chunk when asked
    for (``stream_options.include_usage``), then ``[DONE]``. A backend failing midway ends the stream with OpenAI's
    error event instead (``data: {"error": {...}}``: the ``openai`` client raises ``APIError``), never with
    ``finish_reason: stop`` on a partial answer."""
    model: str | None = None

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **more}  # fmt: skip
        if include_usage:
            data.setdefault("usage", None)
        return f"data: {json.dumps(data)}\n\n"

    for item in items:
        if model is None:
            model = item["model"] if "delta" in item else answered_by(item["answer"])
            yield chunk({"role": "assistant", "content": ""})
        if "answer" in item:
            answer = item["answer"]
            if answer.get("finish_reason") == "error":
                yield stream_error(answer, extra(result, answer))
                return
            yield chunk({}, answer.get("finish_reason") or "stop", living_memory=extra(result, answer))
            if include_usage:
                yield chunk_usage(completion_id, created, model, usage(result, answer))
            break
        yield chunk({"content": item["delta"]})
    yield "data: [DONE]\n\n"


def stream_error(answer: dict[str, Any], living: dict[str, Any]) -> str:
    """OpenAI's mid-stream error event: the text sent so far is incomplete; ``living_memory`` (citations, route)
    rides beside it for clients reading the raw stream."""
    error = {"message": f"the language model failed mid-answer ({answer.get('fallback')}); the text streamed so far "
             "is incomplete", "type": "api_error", "param": None, "code": "backend_error"}  # fmt: skip
    return f"data: {json.dumps({'error': error, 'living_memory': living})}\n\n"


router.include_router(openai_router)
