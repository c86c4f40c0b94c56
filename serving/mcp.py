"""An MCP server (the ``mcp`` package's ``MCPServer``, formerly FastMCP) exposing the living memory as tools.

Every tool has a complete input schema (descriptions, enums, bounds, patterns) and an output schema: results come
back as ``structuredContent`` (and the same JSON as text, for older clients). A call that cannot be answered is an
MCP error (``isError: true``, the message saying why), never a success carrying an ``error`` field.

Tools, as the role ``LIVEMEM_MCP_ROLE`` (default: the public role), against the version ``CURRENT`` names:

- reading: ``query``, ``gis_query``, ``resources``, ``context``, ``chat``, ``facts``, ``sparql``, ``verify_chunk``,
  ``index_stats``, ``answer_cache_stats``, ``reindex_status``;
- writing usage: ``feedback`` on the ``trace_id`` of a ``query``, ``gis_query``, ``context`` or ``chat`` answer
  (each of them writes usage traces exactly like its HTTP route, so MCP use feeds the nightly attention rollup;
  every other tool writes one usage event with no chunk and ``context.kind`` naming the tool);
- operating (only roles named in ``LIVEMEM_MCP_OPERATOR_ROLES``, comma-separated; default none):
  ``answer_cache_warm_up``, ``answer_cache_invalidate`` and ``reindex`` (``livemem materialize`` in a process of
  its own, recorded on the Dagster instance in ``$DAGSTER_HOME``).

Resources (one JSON text each, as the role may see it): ``livemem://index/manifest`` (the served version in brief:
id, publish time, sources with commits, counts), ``livemem://chunks/{chunk_id}`` (a chunk as ``GET /chunks/{id}``
gives it; one the role may not read is not found, like an unknown id), ``livemem://index/stats`` and
``livemem://answer-cache/stats`` (what the tools of those names answer). Prompts: ``answer_about_my_place`` (the
``context`` evidence for a question and a county, ZIP or town) and ``cite_sources`` (numbered chunks with provenance
and how to cite them). Arguments of tools and prompts that fail their schema are answered with one clause per
argument (``LivingMemoryServer``), without pydantic's links and type names. ``serverInfo.version`` is the installed
version of the ``living-memory`` distribution.

Enums of the collections (and of the personas) are those of the version served when the server starts: restart it
to advertise collections published later (calls are checked against the version served at the time).

    python -m serving.mcp                       # stdio (for desktop assistants); also python -m livemem.mcp_server
    python -m serving.mcp --http --port 8765    # streamable HTTP on 127.0.0.1:8765/mcp
"""

# No ``from __future__ import annotations``: the tools' argument types (enums of this deployment's collections,
# counties and personas) are built in ``argument_types``, and the SDK reads them from the evaluated signatures.
import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, get_args

from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, Completion, PromptReference, ToolAnnotations
from pydantic import Field, ValidationError

from livemem.answer.evidence import gis_for
from livemem.answer.results import chat_body
from livemem.answer.routing import ContextRequest
from livemem.engine.snapshot import Snapshot
from livemem.errors import LivingMemoryError
from livemem.gbim.sparql_worker import SparqlError, SparqlLimits, SparqlPool
from livemem.geo.home import WEST_VIRGINIA
from livemem.registry import RESOURCE_TYPES, RegistryQueryError, load_registry_index, resolve, state_counties
from livemem.settings import LivingMemorySettings
from livemem.usage.traces import (
    QUERY_CHARS,
    TRACE_ID_PATTERN,
    utc_timestamp,
)
from livemem.version.history import summary as version_summary
from serving.deps import visible_manifest, with_persona, without_server_paths
from serving.models import UUID_PATTERN, AsOf, ChunkResponse, FeedbackResponse, QueryFilters, QueryRequest, VersionId
from serving.models.context import ChatResponse, ContextResponse
from serving.models.gis import GisQueryRequest, GisQueryResponse
from serving.models.mcp import (
    AnswerCacheStats,
    EntityFacts,
    IndexManifest,
    IndexStats,
    InvalidateResult,
    QueryOutput,
    ReindexStarted,
    ReindexStatus,
    SparqlOutput,
    WarmUpResult,
)
from serving.models.resources import ResourcesResponse
from serving.services import paging
from serving.services.context import context_service
from serving.services.errors import ServiceError
from serving.services.versions import narrowed_today, snapshot_for

ZIP_PATTERN = r"^\d{5}$"
ReindexJob = Literal["build_index", "export_gbim", "verify_registry"]
REINDEX_JOBS: tuple[str, ...] = get_args(ReindexJob)
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
DISTRIBUTION = "living-memory"  # the name in pyproject.toml: serverInfo.version is its installed version
JSON = "application/json"
MAX_ERRORS_SHOWN = 10
INPUT_SHOWN_CHARS = 60

if TYPE_CHECKING:  # the checker's view of the argument types built at run time (``argument_types``, the registry's)
    Collection: TypeAlias = str
    Collections: TypeAlias = list[str] | None
    County: TypeAlias = str | None
    Zip: TypeAlias = str | None
    Persona: TypeAlias = str | None
    Message: TypeAlias = str
    TopK: TypeAlias = int | None
    Question: TypeAlias = str
    Place: TypeAlias = str | None
    ResourceType: TypeAlias = str
else:
    ResourceType = Literal[RESOURCE_TYPES]  # the registry schema's vocabulary


def server_version() -> str:
    """The installed version of this project's distribution (``serverInfo.version`` of the initialize answer)."""
    try:
        return distribution_version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


# --- argument errors a person can read ----------------------------------------------------------------------------
# Pydantic's own text names the arguments model (``queryArguments``), the input's Python type, and a link to
# errors.pydantic.dev per error; a caller needs the argument, what is wrong with it, and what was sent.
_TYPE_TAG = re.compile(r"[\[\](),'\"]|^(?:str|int|float|bool|none|list|dict|literal|function-\w+)$")


_SHOULD = re.compile(r"^(?:Input|String|List|Dictionary|Tuple|Set|Object|Decimal|Date|Datetime|URL|UUID)\s+should\s")


def _argument(loc: tuple[Any, ...]) -> str:
    """``('collections', 0)`` -> ``collections[0]``; the union branch tags pydantic adds to a location
    (``literal['a','b']``, ``list[str]``, ``function-after[...]``) are left out."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif not _TYPE_TAG.search(str(part)):
            name += f".{part}" if name else str(part)
    return name or "arguments"


def _shown(value: Any) -> str:
    if isinstance(value, dict | list | tuple):
        return f"a {'list' if isinstance(value, list | tuple) else 'mapping'} of {len(value)} items"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= INPUT_SHOWN_CHARS else f"{text[:INPUT_SHOWN_CHARS]}… ({len(text)} characters)"


def readable_errors(exc: ValidationError) -> str:
    """One line per argument: its name, what is wrong (pydantic's sentence, lower-cased, without its link or type
    names) and what was sent; at most ``MAX_ERRORS_SHOWN``."""
    lines: dict[str, None] = {}
    for error in exc.errors(include_url=False):
        what = error["msg"]
        if error["type"] == "missing":
            what = "is required"
        elif error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            what = "is not an argument of this call"
        else:
            what = _SHOULD.sub("must ", what.removeprefix("Value error, "))  # a validator's own sentence as it is
            if "input" in error and error["type"] != "missing":
                what += f" (got {_shown(error['input'])})"
        lines[f"{_argument(tuple(error['loc']))}: {what}"] = None
    shown = list(lines)[:MAX_ERRORS_SHOWN]
    more = len(lines) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__


class LivingMemoryServer(MCPServer):
    """``MCPServer`` whose argument errors name the argument and what is wrong, for tools and prompts alike, and whose
    tool and prompt descriptions are their docstrings without the source's indentation."""

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, title: str | None = None,
                 description: str | None = None, *args: Any, **options: Any) -> None:  # fmt: skip
        super().add_tool(fn, name, title, description or inspect.getdoc(fn), *args, **options)

    def add_prompt(self, prompt: Any) -> None:
        super().add_prompt(prompt.model_copy(update={"description": inspect.cleandoc(prompt.description or "")}))

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        declared = list(((tool.parameters or {}).get("properties") or {}) if tool is not None else ())
        unknown = [a for a in arguments or {} if tool is not None and a not in declared]
        if unknown:  # as prompts refuse them: ``topk`` for ``top_k`` is a mistake to name, not to ignore
            problems = [f"{a}: is not an argument of this tool ({', '.join(declared)})" for a in unknown]
            raise ToolError(f"invalid arguments for tool {name}: {'; '.join(problems)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            # ``from cause``: the SDK logs the rejected arguments' names (never their values) from it
            raise ToolError(f"invalid arguments for tool {name}: {readable_errors(cause)}") from cause

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        prompts = {p.name: p for p in await self.list_prompts()}
        if name not in prompts:
            raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r}; prompts: {', '.join(sorted(prompts))}")
        declared = {a.name: a for a in prompts[name].arguments or ()}
        given = dict(arguments or {})
        problems = [f"{a}: is required" for a, arg in declared.items() if arg.required and a not in given]
        problems += [
            f"{a}: is not an argument of this prompt ({', '.join(declared)})" for a in given if a not in declared
        ]
        if problems:
            raise MCPError(INVALID_PARAMS, f"invalid arguments for prompt {name}: {'; '.join(problems)}")
        try:
            return await super().get_prompt(name, given, context)
        except ValueError as exc:
            for cause in _causes(exc):
                if isinstance(cause, ValidationError) and cause.title.split(".")[-1] == name:  # its arguments
                    raise MCPError(
                        INVALID_PARAMS, f"invalid arguments for prompt {name}: {readable_errors(cause)}"
                    ) from None
                if isinstance(cause, ToolError | ResourceError):  # anticipated: nothing published, no such collection
                    raise MCPError(INTERNAL_ERROR, str(cause)) from None
            raise


# --- what the tools share -----------------------------------------------------------------------------------------
@dataclass
class McpContext:
    """One server's view of the living memory: the serving state, the role every call is answered as, who may
    operate, and what operating holds (the SPARQL worker pool, the reindex runs this server started)."""

    state: Any  # serving.state.ServingState
    role: Any  # serving.state.Role: the caller's, for every call
    operator_roles: tuple[str, ...]
    dagster_home: Path | None
    sparql_pool: list[SparqlPool] = field(default_factory=list)  # started on the first SPARQL query
    launched: dict[str, tuple[subprocess.Popen, str]] = field(default_factory=dict)  # run id -> (launcher, job)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_operator(self) -> bool:
        return self.role.name in self.operator_roles

    def service(self) -> Any:
        """The context service (routing, evidence, answers, the answer cache) of the serving state."""
        return context_service(self.state)

    def snapshot(self, error: type[Exception] = ToolError) -> Snapshot:
        """The served snapshot; nothing published (or nothing readable) is ``error`` saying so (without server
        paths, as HTTP's 503 says it)."""
        try:
            return self.state.reader.snapshot()
        except LivingMemoryError as exc:
            raise error(without_server_paths(str(exc))) from None

    def snapshot_at(self, version: str | None, as_of: str | None) -> tuple[Snapshot, dict | None]:
        """The snapshot a ``context`` / ``chat`` call answers from: CURRENT, or the kept version ``version`` /
        ``as_of`` names (``serving.services.versions.snapshot_for``, as HTTP), with which one answered."""
        current = self.snapshot()
        with tool_errors():
            return snapshot_for(self.state, self.role, version, as_of, current)

    def require_operator(self, what: str) -> None:
        if not self.is_operator:
            allowed = ", ".join(self.operator_roles) or "none configured (LIVEMEM_MCP_OPERATOR_ROLES)"
            raise ToolError(f"role {self.role.name!r} may not {what}; roles that may: {allowed}")

    def as_persona(self, snap: Snapshot, request: ContextRequest, persona: str | None) -> tuple[ContextRequest, Any]:
        """``serving.deps.with_persona``, as HTTP: a persona narrows the role's access and collections; an unknown
        one or one needing more access is a tool error with HTTP's message."""
        with tool_errors():
            return with_persona(request, persona, self.role, self.state, snap)

    def write_traces(self, events: list[dict[str, Any]], kind: str | None = None) -> None:
        for event in events:
            event["agent"] = "mcp"
            if kind:
                event["context"]["kind"] = kind
        self.state.traces.submit(events)  # queued, as the HTTP routes do: the answer does not wait for the file

    def used(self, tool: str, text: str, version: str | None) -> None:
        """A usage trace for a tool that answers with no chunk (registry, facts, SPARQL, stats, cache, reindex):
        one ``retrieval`` event with ``chunk_id`` null and ``context.kind`` naming the tool, so every call is
        counted while the attention rollup (which counts chunks) is unaffected."""
        self.state.traces.submit(
            [
                {
                    "timestamp": utc_timestamp(), "event": "retrieval", "trace_id": str(uuid.uuid4()),
                    "chunk_id": None, "query": text[:QUERY_CHARS], "breath_phase": None, "agent": "mcp",
                    "role": self.role.name, "useful": None, "index_version": version or "none",
                    "context": {"related_chunks": [], "kind": tool},
                }
            ]
        )  # fmt: skip


@contextmanager
def tool_errors() -> Iterator[None]:
    """A service's ``ServiceError`` (what HTTP answers with its status) as an MCP tool error saying the same."""
    try:
        yield
    except ServiceError as exc:  # a 5xx says what failed on the server, never where it lives (as the app's handler)
        raise ToolError(without_server_paths(exc.message) if exc.status_code >= 500 else exc.message) from None
    except LivingMemoryError as exc:  # nothing published, or a version that cannot be read
        raise ToolError(without_server_paths(str(exc))) from None


# --- the tools: what each answers (their schemas, the MCP surface, are declared by the register_* functions) -------
def tool_query(
    ctx: McpContext,
    query: str,
    top_k: int,
    county: str | None,
    collections: list[str] | None,
    mode: str,
    documents: bool = False,
    consider_also: int = 3,
    version: str | None = None,
    as_of: str | None = None,
) -> QueryOutput:
    request = QueryRequest(
        query=query, top_k=top_k, collections=collections, filters=QueryFilters(county=county), mode=mode,
        return_="documents" if documents else "chunks", consider_also=consider_also, version=version, as_of=as_of,
    )  # fmt: skip
    with tool_errors():
        answer = ctx.state.query.answer(request, ctx.role, caller=f"mcp:{ctx.role.name}", agent="mcp")
    return QueryOutput.model_validate({**answer.body, "collections": answer.collections})


def tool_gis_query(ctx: McpContext, query: str, n_results: int, county: str | None) -> GisQueryResponse:
    with tool_errors():
        found = ctx.state.gis.query(GisQueryRequest(query=query, n_results=n_results, county=county), ctx.role, "mcp")
    return GisQueryResponse.model_validate(found)


def tool_resources(
    ctx: McpContext,
    zip: str | None,
    county: str | None,
    resource_type: str | None,
    include_stale: bool,
    limit: int,
    taxonomy: str | None = None,
    cursor: str | None = None,
) -> ResourcesResponse:
    snap = ctx.snapshot()
    ctx.used("resources", f"zip={zip} county={county} type={resource_type} taxonomy={taxonomy}", snap.version_id)
    filters = paging.resources_filters(zip, county, resource_type, None, taxonomy, include_stale)
    with tool_errors():  # a cursor of other filters or another version: a tool error saying so (as HTTP's 422/409)
        page = paging.page("/resources", snap.version_id, filters, cursor)
    try:
        found = resolve(snap, **filters, limit=limit, offset=page.offset)
    except RegistryQueryError as exc:
        raise ToolError(str(exc)) from None
    return ResourcesResponse.model_validate(
        {"index_version": snap.version_id, "county": found.county, "total": found.total, "results": found.rows,
         "next_cursor": page.next_cursor(len(found.rows), found.total)}
    )  # fmt: skip


def tool_context(
    ctx: McpContext,
    message: str,
    county: str | None,
    zip: str | None,
    top_k: int | None,
    persona: str | None,
    version: str | None = None,
    as_of: str | None = None,
) -> ContextResponse:
    snap, answered_from = ctx.snapshot_at(version, as_of)
    service = ctx.service()
    request, role_used = ctx.as_persona(snap, ContextRequest(message, county, zip, {}, top_k), persona)
    request = narrowed_today(request, snap, ctx.state, role_used, answered_from)
    found = service.context(snap, service.caller(role_used), request)
    return ContextResponse.model_validate({**found, "answered_from": answered_from})


def tool_chat(
    ctx: McpContext,
    message: str,
    county: str | None,
    zip: str | None,
    top_k: int | None,
    persona: str | None,
    thread_id: str | None,
    version: str | None = None,
    as_of: str | None = None,
) -> ChatResponse:
    snap, answered_from = ctx.snapshot_at(version, as_of)
    service = ctx.service()
    plain = ContextRequest(message, county, zip, {}, top_k, thread_id)
    request, role_used = ctx.as_persona(snap, plain, persona)
    request = narrowed_today(request, snap, ctx.state, role_used, answered_from)
    body = chat_body(service.chat(snap, service.caller(role_used), request))
    return ChatResponse.model_validate({**body, "answered_from": answered_from})


def tool_feedback(
    ctx: McpContext, trace_id: str, useful: bool, chunk_ids: list[str], comment: str | None
) -> FeedbackResponse:
    with tool_errors():  # one MCP server, one caller: its role's
        recorded = ctx.state.feedback.record(
            trace_id, chunk_ids, useful, ctx.role, f"mcp:{ctx.role.name}", comment, agent="mcp"
        )
    return FeedbackResponse(**recorded)


def tool_facts(ctx: McpContext, entity_id: str, predicate: str | None) -> EntityFacts:
    snap = ctx.snapshot()
    ctx.used("facts", entity_id, snap.version_id)
    with tool_errors():
        return EntityFacts.model_validate(ctx.state.facts.of_entity(entity_id, ctx.role, predicate))


def tool_sparql(ctx: McpContext, query: str, limit: int) -> SparqlOutput:
    snap = ctx.snapshot()
    ctx.used("sparql", query, snap.version_id)
    if gis_for(snap) is None:
        raise ToolError(f"index version {snap.version_id} has no GBIM export; materialize export_gbim")
    with ctx.lock:
        if not ctx.sparql_pool:
            s = ctx.state.settings
            limits = SparqlLimits(s.sparql_workers, s.sparql_timeout_s, s.sparql_memory_mb)
            ctx.sparql_pool.append(SparqlPool(limits, gbim_iri=f"{s.rdf_base_iri}gbim/"))  # the names HTTP serves
    try:
        result = ctx.sparql_pool[0].run(str(snap.path), ctx.role.access, query, limit)
    except SparqlError as exc:
        raise ToolError(str(exc)) from None
    return SparqlOutput.model_validate({**result, "index_version": snap.version_id})


def tool_verify_chunk(ctx: McpContext, chunk_id: str) -> ChunkResponse:
    snap = ctx.snapshot()
    ctx.used("verify_chunk", chunk_id, snap.version_id)
    with tool_errors():
        return ChunkResponse.model_validate(ctx.state.chunks.chunk(chunk_id, ctx.role, verify=True, snap=snap))


def stats_of(ctx: McpContext, snap: Snapshot) -> IndexStats:
    """The served version's numbers as the role may see them (the `index_stats` tool and resource)."""
    visible = snap.collections_for(ctx.role.access)
    counts = {c: int((snap.columns["collection"] == c).sum()) for c in visible}
    gis = gis_for(snap)
    registry = load_registry_index(snap.path)
    return IndexStats(
        index_version=snap.version_id,
        model=snap.model_id,
        collections=counts,
        chunks=sum(counts.values()),
        gbim_entities=0 if gis is None else int(gis.mask(ctx.role.access).sum()),
        registry_rows=0 if registry is None else len(registry.rows),
    )


def tool_index_stats(ctx: McpContext) -> IndexStats:
    snap = ctx.snapshot()
    ctx.used("index_stats", "", snap.version_id)
    return stats_of(ctx, snap)


def cache_stats(ctx: McpContext) -> AnswerCacheStats:
    """The answer cache of this process (the `answer_cache_stats` tool and resource)."""
    service = ctx.service()
    cache = service.cache
    return AnswerCacheStats(
        entries=len(cache), max_entries=cache.max_entries, ttl_s=cache.ttl_s, persistent=cache.path is not None,
        hits=dict(cache.hits), misses=dict(cache.misses), persistent_hits=cache.persistent_hits,
        warmed_questions=service.warmed_questions,
    )  # fmt: skip


def tool_answer_cache_stats(ctx: McpContext) -> AnswerCacheStats:
    ctx.used("answer_cache_stats", "", None)
    return cache_stats(ctx)


def tool_answer_cache_warm_up(ctx: McpContext, questions: list[str] | None) -> WarmUpResult:
    ctx.used("answer_cache_warm_up", "", None)
    ctx.require_operator("warm up the answer cache")
    snap = ctx.snapshot()
    service = ctx.service()
    chosen = questions or list(service.settings.warm_up_questions)
    if not chosen:
        raise ToolError("no questions given and none configured (LIVEMEM_WARM_UP_QUESTIONS names a file of them)")
    public = service.caller(ctx.state.role(ctx.state.settings.public_role))
    for question in chosen:
        service.chat(snap, public, ContextRequest(question), audit=False)
        service.context(snap, public, ContextRequest(question), audit=False)
    service.warmed_questions += len(chosen)
    return WarmUpResult(index_version=snap.version_id, answered=chosen, entries=len(service.cache))


def tool_answer_cache_invalidate(ctx: McpContext) -> InvalidateResult:
    ctx.used("answer_cache_invalidate", "", None)
    ctx.require_operator("invalidate the answer cache")
    return InvalidateResult(dropped=ctx.service().cache.clear())


def tool_reindex(ctx: McpContext, job: str) -> ReindexStarted:
    ctx.used("reindex", "", None)
    ctx.require_operator("start a reindex")
    dagster_home = ctx.dagster_home
    if dagster_home is None:
        raise ToolError("DAGSTER_HOME is not set: a run must be recorded on an instance to be followed")
    run_id = str(uuid.uuid4())
    log_dir = dagster_home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAG_INDEX_DIR": str(ctx.state.settings.index_dir), "DAGSTER_HOME": str(dagster_home)}
    command = [sys.executable, "-m", "orchestration.cli", "materialize", "--job", job, "--run-id", run_id]
    with open(log_dir / f"reindex-{run_id}.log", "wb") as log:
        # Its own session: the run goes on when this server stops, and a signal to the server is not the run's.
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    with ctx.lock:
        ctx.launched[run_id] = (process, job)
    return ReindexStarted(run_id=run_id, job=job, pid=process.pid, dagster_home=str(dagster_home))


def tool_reindex_status(ctx: McpContext, run_id: str) -> ReindexStatus:
    ctx.used("reindex_status", run_id, None)
    from orchestration.instance import open_instance  # the instance opened as `livemem materialize` opens it

    if ctx.dagster_home is None:
        raise ToolError("DAGSTER_HOME is not set")
    with ctx.lock:
        process, job = ctx.launched.get(run_id, (None, ""))
    running = None if process is None else process.poll() is None  # poll() also reaps an ended launcher
    run = open_instance(ctx.dagster_home).get_run_by_id(run_id)
    if run is None:
        if running:  # still importing Dagster and loading the definitions
            return ReindexStatus(run_id=run_id, job=job, status="LAUNCHING", finished=False, launcher_running=running)
        raise ToolError(f"no run {run_id} on the Dagster instance in $DAGSTER_HOME")
    return ReindexStatus(
        run_id=run_id, job=run.job_name, status=run.status.value, finished=run.is_finished, launcher_running=running
    )


# --- the resources ---------------------------------------------------------------------------------------------------
def resource_index_manifest(ctx: McpContext) -> str:
    snap = ctx.snapshot(ResourceError)
    ctx.used("resource", "livemem://index/manifest", snap.version_id)
    visible = visible_manifest(snap, ctx.role)
    body = version_summary(ctx.state.reader.home, snap.version_id, visible, snap.version_id)
    counts = body["counts"]
    for key, field_name in (("total_parents", "files"), ("sealed_chunks", "sealed_chunks")):
        if key not in visible:  # left out of the role's manifest: it would count hidden chunks
            counts[field_name] = None
    collections = {c: int(v.get("chunks", 0)) for c, v in sorted(visible.get("collections", {}).items())}
    return IndexManifest.model_validate(
        {**body, "model": snap.model_id, "collections": collections, "breath_phase": snap.breath_phase}
    ).model_dump_json()


def resource_chunk(ctx: McpContext, chunk_id: str) -> str:
    snap = ctx.snapshot(ResourceError)
    ctx.used("resource", f"livemem://chunks/{chunk_id}", snap.version_id)
    try:
        body = ctx.state.chunks.chunk(chunk_id, ctx.role, snap=snap)
    except ServiceError as exc:
        raise (ResourceNotFoundError if exc.status_code == 404 else ResourceError)(exc.message) from None
    return ChunkResponse.model_validate({**body, "verification": None}).model_dump_json()


def resource_index_stats(ctx: McpContext) -> str:
    snap = ctx.snapshot(ResourceError)
    ctx.used("resource", "livemem://index/stats", snap.version_id)
    return stats_of(ctx, snap).model_dump_json()


def resource_answer_cache_stats(ctx: McpContext) -> str:
    ctx.used("resource", "livemem://answer-cache/stats", None)
    return cache_stats(ctx).model_dump_json()


# --- the prompts -----------------------------------------------------------------------------------------------------
CITE_INSTRUCTIONS = (
    "Answer the question below from these numbered sources of the living memory only. After each claim, put the "
    "numbers of the sources that support it in brackets, e.g. [1] or [2][3]. If the sources do not answer the "
    "question, say so rather than answering from elsewhere. End with a list headed Sources: each number used, its "
    "file, commit and date."
)


def _feedback_note(index_version: str, trace_id: str) -> str:
    return (
        f"(Living Memory index version {index_version}. Afterwards, send trace_id {trace_id} to the `feedback` tool "
        "to say whether this evidence helped.)"
    )


def prompt_answer_about_my_place(
    ctx: McpContext, question: str, county: str | None, zip: str | None, place: str | None
) -> list[UserMessage]:
    message = question if place is None else f"{question}\n(My place: {place}.)"
    found = tool_context(ctx, message, county, zip, None, None)  # routed as `context` routes it, with its traces
    return [UserMessage(f"{found.prompt.text}\n\n{_feedback_note(found.index_version, found.trace_id)}")]


def prompt_cite_sources(ctx: McpContext, question: str, top_k: int, collection: str | None) -> list[UserMessage]:
    found = tool_query(ctx, question, top_k, None, None if collection is None else [collection], "hybrid")
    lines = [CITE_INSTRUCTIONS, "", f"Question: {question}", ""]
    for n, hit in enumerate(found.results, 1):
        where = hit.provenance
        lines += [
            f"[{n}] {hit.collection} · {where.path} · commit {where.commit[:12]} ({where.timestamp[:10]}) · "
            f"livemem://chunks/{hit.chunk_id}",
            hit.content.strip(),
            "",
        ]
    if not found.results:
        lines += ["(No indexed source matches this question: say so instead of answering from elsewhere.)", ""]
    lines.append(_feedback_note(found.index_version, found.trace_id))
    return [UserMessage("\n".join(lines))]


# --- the server ------------------------------------------------------------------------------------------------------
def build_server(
    state: Any = None,
    role: str | None = None,
    operator_roles: tuple[str, ...] | None = None,
    settings: LivingMemorySettings | None = None,
) -> MCPServer:
    """The server over a serving state (default: one built from the settings, like ``make serve``), answering
    as ``role`` (default ``LIVEMEM_MCP_ROLE``); ``operator_roles`` (default ``LIVEMEM_MCP_OPERATOR_ROLES``) may
    warm up and clear the answer cache and start a reindex. ``settings``: the tree, read from the environment
    when not given. The ``register_*`` functions below hold the tools', resources' and prompts' schemas (the SDK
    reads them from the signatures, some enums being this deployment's: ``argument_types``); what each answers is
    the function of the same name above."""
    from serving.state import ServingState

    settings = settings or LivingMemorySettings.from_env()
    state = state or ServingState.from_settings(
        settings.serving, personal=settings.personal, persona_settings=settings.personas, engine=settings.engine
    )
    caller_role = state.role(role or settings.mcp.role or state.settings.public_role)
    if operator_roles is None:
        operator_roles = tuple(settings.mcp.operator_roles)
    ctx = McpContext(state, caller_role, tuple(operator_roles), settings.paths.dagster_home)
    # Enums of this deployment, advertised in the tools' input schemas; the home states (docs/home.md) of the
    # version served at start-up name its counties.
    try:
        current = state.reader.snapshot()
        known_collections, home = current.collections_for(caller_role.access), current.home
    except LivingMemoryError:  # nothing published yet: any name, checked at call time
        known_collections, home = [], WEST_VIRGINIA
    server = LivingMemoryServer(
        "living-memory",
        version=server_version(),
        instructions=f"Place-aware retrieval memory for {home.state_names} benefits.",
    )
    types = argument_types(state, known_collections, home)
    register_search_tools(server, ctx, types)
    register_registry_tool(server, ctx, types)
    register_answer_tools(server, ctx, types)
    register_fact_tools(server, ctx)
    register_operating_tools(server, ctx)
    register_resources(server, ctx)
    register_prompts(server, ctx, types)
    register_completion(server, types)
    return server


@dataclass(frozen=True)
class ArgumentTypes:
    """The argument types of one server's tools and prompts (``Annotated`` with their descriptions and bounds),
    the enums among them being this deployment's: the collections the role may read, the home's counties, the
    personas; ``counties`` and ``known_collections`` are what the prompts' completions offer."""

    collection: Any  # one collection: an enum of the served version's, or any name when none is published
    collections: Any
    county: Any
    zip: Any
    persona: Any
    message: Any
    top_k: Any
    question: Any
    place: Any
    counties: list[str]
    known_collections: list[str]


def argument_types(state: Any, known_collections: list[str], home: Any) -> ArgumentTypes:
    """The argument types of a server over ``state`` whose role reads ``known_collections``, at ``home``."""
    collection_type: Any = Literal[tuple(known_collections)] if known_collections else str
    Collections = Annotated[
        list[collection_type] | None,
        Field(
            min_length=1,
            max_length=50,
            description="search only these collections (default: every collection this role may read)",
        ),
    ]
    counties = sorted({c for s in home.states for c in state_counties(s).values()})
    county_type: Any = Literal[tuple(counties)]
    example = "Fayette" if "Fayette" in counties and "WV" in home.states else counties[0]
    County = Annotated[county_type | None, Field(description=f"a county of {home.label}, e.g. {example}")]
    Zip = Annotated[str | None, Field(pattern=ZIP_PATTERN, description="a 5-digit ZIP code, e.g. 25901")]
    persona_type: Any = Literal[tuple(sorted({*state.personas, *state.settings.roles}))]
    Persona = Annotated[
        persona_type | None,
        Field(
            description="who the answer is for (community, researcher, ...): narrows the collections searched and "
            "frames the answer; a persona needing more access than this server's role is refused"
        ),
    ]
    Message = Annotated[str, Field(min_length=1, max_length=4000, description="the person's message, as written")]
    TopK = Annotated[int | None, Field(ge=1, le=50, description="text passages (default 6)")]
    Question = Annotated[str, Field(min_length=1, max_length=4000, description="the question, as the person asks it")]
    Place = Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            description=f"a town or place of {home.state_names}"
            + (", e.g. Oak Hill" if home.states == ("WV",) else ""),
        ),
    ]
    return ArgumentTypes(
        collection_type, Collections, County, Zip, Persona, Message, TopK, Question, Place, counties, known_collections
    )


def register_search_tools(server: MCPServer, ctx: McpContext, types: ArgumentTypes) -> None:
    """The search tools: ``query`` (the chunks) and ``gis_query`` (the places)."""
    if not TYPE_CHECKING:  # the checker sees the module's aliases of these
        County, Collections = types.county, types.collections

    @server.tool(annotations=READ_ONLY)
    def query(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="what to search for")],
        top_k: Annotated[int, Field(ge=1, le=50, description="how many chunks to return")] = 5,
        county: County = None,
        collections: Collections = None,
        mode: Annotated[
            Literal["hybrid", "dense", "sparse"],
            Field(description="hybrid: dense and BM25 fused; dense: embeddings only; sparse: BM25 only"),
        ] = "hybrid",
        documents: Annotated[
            bool, Field(description="true: each parent document once, its whole text, ranked by its best chunk")
        ] = False,
        consider_also: Annotated[
            int, Field(ge=0, le=10, description="related high-attention chunks to suggest beside the results")
        ] = 3,
        version: VersionId = None,
        as_of: AsOf = None,
    ) -> QueryOutput:
        """Search the chunks of the indexed repositories this role may read; returns chunks (or whole documents)
        with provenance (file, commit, time), scores (also on one 0..1 scale: score_normalized), suggestions
        (consider_also) and a trace_id for `feedback`: the answer POST /query gives."""
        return tool_query(ctx, query, top_k, county, collections, mode, documents, consider_also, version, as_of)

    @server.tool(annotations=READ_ONLY)
    def gis_query(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="the kind of place to find")],
        n_results: Annotated[int, Field(ge=1, le=50, description="how many places to return")] = 5,
        county: County = None,
    ) -> GisQueryResponse:
        """Semantic search over GBIM entities (places: offices, clinics, service areas) with an optional county;
        returns each place's coordinates (EPSG:4326) and a trace_id for `feedback`."""
        return tool_gis_query(ctx, query, n_results, county)


def register_registry_tool(server: MCPServer, ctx: McpContext, types: ArgumentTypes) -> None:
    """The ``resources`` tool: the programs of the registry, a page at a time."""
    if not TYPE_CHECKING:  # the checker sees the module's aliases of these
        County, Zip = types.county, types.zip

    @server.tool(annotations=READ_ONLY)
    def resources(
        zip: Zip = None,
        county: County = None,
        resource_type: Annotated[
            ResourceType | None, Field(description="the kind of program (registry vocabulary)")
        ] = None,
        include_stale: Annotated[bool, Field(description="also return stale and unverified programs")] = False,
        limit: Annotated[int, Field(ge=1, le=500, description="at most this many programs")] = 10,
        taxonomy: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="a taxonomy term of the source: code or code prefix (BD-1800), or words of its name",
            ),
        ] = None,
        cursor: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=paging.CURSOR_MAX_CHARS,
                description="the `next_cursor` of the previous call, with the same arguments: the programs after it",
            ),
        ] = None,
    ) -> ResourcesResponse:
        """Verified programs of the local_resources registry: those whose ZIP or coverage includes `zip`, then the
        rest of its county (or of `county`), optionally of one type (any of a program's types) or taxonomy term.
        More than `limit`: `next_cursor` continues (pass it as `cursor`); null on the last page."""
        return tool_resources(ctx, zip, county, resource_type, include_stale, limit, taxonomy, cursor)


def register_answer_tools(server: MCPServer, ctx: McpContext, types: ArgumentTypes) -> None:
    """The answering tools: ``context`` (the evidence), ``chat`` (an answer) and ``feedback`` on either."""
    if not TYPE_CHECKING:  # the checker sees the module's aliases of these
        County, Zip, Persona = types.county, types.zip, types.persona
        Message, TopK = types.message, types.top_k

    @server.tool(annotations=READ_ONLY)
    def context(
        message: Message,
        county: County = None,
        zip: Zip = None,
        top_k: TopK = None,
        persona: Persona = None,
        version: VersionId = None,
        as_of: AsOf = None,
    ) -> ContextResponse:
        """Route a message (intents, place, eligibility) and return its evidence by source (text passages, facts,
        places, registry programs), the prompt built from it, and a trace_id for `feedback`."""
        return tool_context(ctx, message, county, zip, top_k, persona, version, as_of)

    @server.tool(annotations=READ_ONLY)
    def chat(
        message: Message,
        county: County = None,
        zip: Zip = None,
        top_k: TopK = None,
        persona: Persona = None,
        thread_id: Annotated[str | None, Field(max_length=128, description="the conversation, audited")] = None,
        version: VersionId = None,
        as_of: AsOf = None,
    ) -> ChatResponse:
        """Answer a message from the living memory: `context`, then an answer from the configured model (or quoted
        from the evidence) with numbered citations of chunks, facts, places and programs."""
        return tool_chat(ctx, message, county, zip, top_k, persona, thread_id, version, as_of)

    @server.tool()
    def feedback(
        trace_id: Annotated[
            str, Field(pattern=TRACE_ID_PATTERN, max_length=4096, description="the trace_id of an answer")
        ],
        useful: Annotated[bool, Field(description="whether the answer (or the chunks named) helped")],
        chunk_ids: Annotated[
            list[Annotated[str, Field(pattern=UUID_PATTERN)]],
            Field(max_length=200, description="some of the answer's chunk ids (default: the answer as a whole)"),
        ] = [],  # noqa: B006 - the SDK copies defaults into a pydantic model
        comment: Annotated[str | None, Field(max_length=2000, description="what was (not) useful")] = None,
    ) -> FeedbackResponse:
        """Say whether the answer behind a trace_id of `query`, `gis_query`, `context` or `chat` (or some of its
        chunks) was useful: confirmed usefulness is what raises a chunk in later rankings."""
        return tool_feedback(ctx, trace_id, useful, chunk_ids, comment)


def register_fact_tools(server: MCPServer, ctx: McpContext) -> None:
    """The GBIM and provenance tools: ``facts``, ``sparql`` and ``verify_chunk``."""

    @server.tool(annotations=READ_ONLY)
    def facts(
        entity_id: Annotated[str, Field(pattern=UUID_PATTERN, description="a GBIM entity id (from gis_query)")],
        predicate: Annotated[
            Literal["located_in", "serves_zip", "part_of"] | None, Field(description="only this relation")
        ] = None,
    ) -> EntityFacts:
        """The relation triples of one GBIM entity: the county it is located in, the ZIP codes it serves, the
        worldview it is part of."""
        return tool_facts(ctx, entity_id, predicate)

    @server.tool(annotations=READ_ONLY)
    def sparql(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=5000,
                description="a SPARQL SELECT or ASK query over the GBIM facts (prefixes gbim:, geo:, rdfs:, rdf:)",
            ),
        ],
        limit: Annotated[int, Field(ge=1, le=1000, description="rows returned at most")] = 100,
    ) -> SparqlOutput:
        """Read-only SPARQL over the entities and relations this role may read, in a sandboxed worker process
        (time and memory limits; no SERVICE, FROM, GRAPH, updates, CONSTRUCT or DESCRIBE)."""
        return tool_sparql(ctx, query, limit)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True))
    def verify_chunk(
        chunk_id: Annotated[str, Field(pattern=UUID_PATTERN, description="a chunk id (from query or context)")],
    ) -> ChunkResponse:
        """Is this chunk still current? Reads its source repository now: `current` (the file still holds the text),
        `changed` (the file no longer holds it) or `missing` (file or repository gone)."""
        return tool_verify_chunk(ctx, chunk_id)


def register_operating_tools(server: MCPServer, ctx: McpContext) -> None:
    """The tools about the server itself: index and cache statistics, the cache's warm-up and invalidation
    (operators), ``reindex`` (operators) and ``reindex_status``."""

    @server.tool(annotations=READ_ONLY)
    def index_stats() -> IndexStats:
        """The served version: id, model, chunks per collection this role may read, GBIM entities, registry rows."""
        return tool_index_stats(ctx)

    @server.tool(annotations=READ_ONLY)
    def answer_cache_stats() -> AnswerCacheStats:
        """The answer cache of `context` and `chat` in this server process: entries, hits and misses per kind."""
        return tool_answer_cache_stats(ctx)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False))
    def answer_cache_warm_up(
        questions: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=4000)]] | None,
            Field(max_length=50, description="questions to answer now (default: the configured warm-up questions)"),
        ] = None,
    ) -> WarmUpResult:
        """Answer questions now (as the public role, chat and context) so later askers get cached answers.
        Operator roles only."""
        return tool_answer_cache_warm_up(ctx, questions)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False))
    def answer_cache_invalidate() -> InvalidateResult:
        """Drop every cached answer (this process's memory and the persistent tier shared by this machine's
        processes), e.g. after changing the LLM or the prompts. Operator roles only."""
        return tool_answer_cache_invalidate(ctx)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=True))
    def reindex(
        job: Annotated[
            ReindexJob,
            Field(description="build_index: chunks of the git sources; export_gbim: places; verify_registry"),
        ] = "build_index",
    ) -> ReindexStarted:
        """Start a (re)index: `livemem materialize --job JOB` in a process of its own, recorded on the Dagster
        instance in $DAGSTER_HOME; returns at once with the run id (follow it with `reindex_status`). The new
        version is served once its blocking checks pass. Operator roles only."""
        return tool_reindex(ctx, job)

    @server.tool(annotations=READ_ONLY)
    def reindex_status(
        run_id: Annotated[str, Field(pattern=UUID_PATTERN, description="the run id `reindex` returned")],
    ) -> ReindexStatus:
        """The Dagster status of a run started by `reindex`."""
        return tool_reindex_status(ctx, run_id)


# --- resources: what an assistant may read (and a person attach) without calling a tool ----------------------------
def register_resources(server: MCPServer, ctx: McpContext) -> None:
    """The resources: the served version's manifest and statistics, a chunk, the answer cache's statistics."""

    @server.resource(
        "livemem://index/manifest",
        name="index_manifest",
        title="The served index version",
        description="The version CURRENT names: id, when it was published, each source's commit, chunks per "
        "collection this role may read, GBIM and registry counts (GET /manifest has the whole manifest).",
        mime_type=JSON,
    )
    def index_manifest() -> str:
        return resource_index_manifest(ctx)

    @server.resource(
        "livemem://chunks/{chunk_id}",
        name="chunk",
        title="A chunk and its provenance",
        description="One chunk of the served version, as GET /chunks/{chunk_id} gives it: its text, source, file, "
        "commit and time, seal state and metadata. A chunk this role may not read is not found, like an unknown id.",
        mime_type=JSON,
    )
    def chunk(chunk_id: str) -> str:
        return resource_chunk(ctx, chunk_id)

    @server.resource(
        "livemem://index/stats",
        name="index_stats",
        title="Index statistics",
        description="What the `index_stats` tool answers: the served version, its model, chunks per collection this "
        "role may read, GBIM entities and registry rows.",
        mime_type=JSON,
    )
    def index_stats_resource() -> str:
        return resource_index_stats(ctx)

    @server.resource(
        "livemem://answer-cache/stats",
        name="answer_cache_stats",
        title="Answer cache statistics",
        description="What the `answer_cache_stats` tool answers: the answer cache of `context` and `chat` in this "
        "server process (entries, hits and misses per kind, warm-up questions answered).",
        mime_type=JSON,
    )
    def answer_cache_stats_resource() -> str:
        return resource_answer_cache_stats(ctx)


# --- prompts: ready-made requests a person picks in the assistant ----------------------------------------------------
def register_prompts(server: MCPServer, ctx: McpContext, types: ArgumentTypes) -> None:
    """The prompts: ``answer_about_my_place`` and ``cite_sources``. Their arguments arrive as strings and are
    checked like tool arguments (``LivingMemoryServer.get_prompt`` words the error)."""
    if not TYPE_CHECKING:  # the checker sees the module's aliases of these
        Question, Place, County, Zip = types.question, types.place, types.county, types.zip
        Collection = types.collection

    @server.prompt(title="Answer about my place")
    def answer_about_my_place(
        question: Question, county: County = None, zip: Zip = None, place: Place = None
    ) -> list[UserMessage]:
        """Answer a question about programs and places where the person lives: the evidence of the living memory
        for that county, ZIP code or town, numbered for citation, with the grounding instructions."""
        return prompt_answer_about_my_place(ctx, question, county, zip, place)

    @server.prompt(title="Cite sources")
    def cite_sources(
        question: Question,
        top_k: Annotated[int, Field(ge=1, le=20, description="how many sources, 1-20 (default 6)")] = 6,
        collection: Annotated[
            Collection | None, Field(description="only this collection (default: every one this role may read)")
        ] = None,
    ) -> list[UserMessage]:
        """Answer from the indexed sources only and cite each claim: the best-matching chunks, numbered, each with
        its file, commit and date and its livemem://chunks/ URI, and how to cite them."""
        return prompt_cite_sources(ctx, question, top_k, collection)


def register_completion(server: MCPServer, types: ArgumentTypes) -> None:
    """The completions of the prompts' ``county`` and ``collection`` arguments."""
    counties, known_collections = types.counties, types.known_collections

    @server.completion()
    async def complete(ref: Any, argument: Any, resolved: Any) -> Completion | None:
        """Completions of the prompts' `county` and `collection` arguments from what the person has typed."""
        if not isinstance(ref, PromptReference):
            return None
        choices = {"county": counties, "collection": known_collections}.get(argument.name)
        if choices is None:
            return None
        typed = argument.value.strip().lower()
        values = [c for c in choices if c.lower().startswith(typed)]
        return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)


def http_app(server: MCPServer, host: str = "127.0.0.1") -> Any:
    """The streamable HTTP app (``/mcp``) behind the request log: ``X-Request-ID`` echoed, one JSON line a request."""
    from serving.logs import RequestLogMiddleware, install_access_log

    install_access_log()
    return RequestLogMiddleware(server.streamable_http_app(host=host))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = build_server()
    if args.http:  # as MCPServer.run("streamable-http") does, with the access log of every door (serving/logs.py)
        import uvicorn

        asgi = http_app(server, args.host)
        uvicorn.run(asgi, host=args.host, port=args.port, log_level=server.settings.log_level.lower(), access_log=False)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
